"""Protection that holds when gpu-guard is down, on a real kube-apiserver v1.36.2: the enforce
overlay installed as rendered (its record, the Role that lets only the guard write it, the
record policy), the home lab loaded, and ``gpu-guard serve`` on the guard's own ServiceAccount
token keeping the record. The record policy runs under failurePolicy Fail here, so a CEL type
error (a bare API server writes no status.typeChecking) would deny and fail the test.

With the guard killed and its webhook configurations still registered: the seed's switch (omen1
to vm-passthrough under two CUDA pods) is denied by the API server itself, naming the pods and
the record's time; the same switch on a node with no GPU users passes; nothing was deleted. The
denial survives an API server restart; an override in the same request goes through; the guard
back, the record follows a GPU user leaving; with the record deleted nothing is denied; uninstalled,
nothing of it is left.
"""

from __future__ import annotations

import json
import signal
from functools import partial
from pathlib import Path

import yaml

from tests.e2e.conftest import ServeGuard
from tests.e2e.controlplane import ControlPlane
from tests.e2e.guard import by_url
from tests.e2e.record import (
    BUSY,
    IDLE,
    NAMESPACE,
    POLICY,
    RECORD,
    WORKLOAD,
    installed,
    record,
    switch,
)
from tests.waits import until

STATELESS = tuple(
    f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/gpu-guard-{name}"
    for name in ("extended-resource-claim-forged", "dra-driver-gates-exclusive")
)
SAMPLES = Path(__file__).resolve().parents[2] / "policies" / "samples"


def warned(plane: ControlPlane, sample: str, warning: str) -> bool:
    """A server-side dry run of the sample draws the stateless policy's warning (a type error
    under Fail would refuse it instead)."""
    done = plane.kubectl("create", "--dry-run=server", "-f", str(SAMPLES / sample))
    return "Warning:" in done.stderr and warning in done.stderr


async def test_with_the_guard_down_the_api_server_denies_the_switch_the_record_lists(
    own_control_plane: ControlPlane, serve: ServeGuard, tmp_path: Path
) -> None:
    plane = own_control_plane
    rendered, config, kubeconfig = installed(plane, tmp_path, under_fail=(POLICY, *STATELESS))
    assert record(plane) == {}  # declared empty: the guard only updates it
    # The stateless policies warn, from the API server itself (no guard is running yet).
    for sample, warning in (
        (
            "dra-driver-gates-exclusive/disallowed/passthrough-beside-dynamic-mig.yaml",
            "DynamicMIG with PassthroughSupport",
        ),
        (
            "extended-resource-claim-forged/disallowed/claim-with-the-schedulers-annotation.yaml",
            "not the scheduler",
        ),
    ):
        # Until the API server's policy informer has them (a second or so after they are made).
        await until(partial(warned, plane, sample, warning), timeout=30, every=0.2)
    args = ("--config", str(config), "--audit-interval", "1", "--no-reports")
    guard = await serve(plane, *args, kubeconfig=kubeconfig, env={"POD_NAMESPACE": NAMESPACE})
    await guard.wait_ready()
    await until(lambda: f"pods.{BUSY}" in record(plane), timeout=60, every=0.1)
    written = record(plane)
    assert written[f"pods.{BUSY}"].startswith("2: ml/jupyter-alice, ml/train-llama-0")
    assert f"pods.{IDLE}" not in written
    for configuration in by_url(rendered, guard.base, guard.ca_pem):
        plane.create(configuration)

    # The guard down hard (its pods gone with a node): the webhooks stay registered.
    await guard.stop(signal.SIGKILL)
    code, said = switch(plane, BUSY)
    assert code == 1, said
    assert "ValidatingAdmissionPolicy 'gpu-guard-record'" in said, said
    assert "workload-switch-with-gpu-pods" in said and "ml/jupyter-alice" in said, said
    assert f"as of {written['asOf']}" in said, said
    assert "Forbidden" in said or "forbidden" in said, said
    labels = plane.call("GET", f"/api/v1/nodes/{BUSY}")["metadata"]["labels"]
    assert labels[WORKLOAD] == "container"

    code, said = switch(plane, IDLE)
    assert code == 0, said
    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        plane.call("GET", f"/apis/admissionregistration.k8s.io/v1/{kind}/gpu-guard")

    # The API server restarted: the policy and the record are in etcd, the denial holds.
    plane.restart_api_server()
    code, said = switch(plane, BUSY, "--dry-run=server")
    assert code == 1 and "ValidatingAdmissionPolicy 'gpu-guard-record'" in said, said

    # The way through a record that lags: an override set in the same request, with a reason.
    code, said = overridden_switch(plane, BUSY)
    assert code == 0, said

    # The guard back: the record follows a GPU user leaving within seconds.
    guard = await serve(plane, *args, kubeconfig=kubeconfig, env={"POD_NAMESPACE": NAMESPACE})
    plane.kubectl(
        "delete", "pod", "train-llama-0", "-n", "ml", "--grace-period=0", "--force", "--wait=false"
    )
    await until(
        lambda: record(plane).get(f"pods.{BUSY}") == "1: ml/jupyter-alice", timeout=60, every=0.1
    )

    # The record deleted: the API server's policy allows (parameterNotFoundAction Allow).
    plane.call("DELETE", RECORD)
    await until(lambda: switch(plane, BUSY, "--dry-run=server")[0] == 0, timeout=30, every=0.2)

    # Uninstalled as `kubectl delete -k` does (the Namespace aside: no namespace controller here
    # would finish deleting it): no policy, binding or record is left behind.
    uninstalled = [o for o in rendered if o["kind"] != "Namespace"]
    plane.kubectl("delete", "--ignore-not-found", "-f", "-", stdin=yaml.safe_dump_all(uninstalled))
    for left in (RECORD, POLICY, POLICY.replace("policies/", "policybindings/")):
        assert plane.request("GET", left)[0] == 404, left


def overridden_switch(plane: ControlPlane, node: str) -> tuple[int, str]:
    patch = {
        "metadata": {
            "labels": {WORKLOAD: "vm-passthrough"},
            "annotations": {
                "gpu-guard.io/override": "workload-switch-with-gpu-pods",
                "gpu-guard.io/override-reason": "INC-7: jobs checkpointed",
            },
        }
    }
    done = plane.kubectl(
        "patch",
        "node",
        node,
        "--type=merge",
        "-p",
        json.dumps(patch),
        "--dry-run=server",
        check=False,
    )
    return done.returncode, done.stdout + done.stderr

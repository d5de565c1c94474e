"""Status writes that change what the guard judges, replayed on a real kube-apiserver (issue 33).

A bare API server has no virt-api, virt-controller, kubelet or pod GC: the test writes what each
of them writes, as each of them (impersonated), with the enforce overlay's webhook
configurations registered as rendered (only ``clientConfig`` becomes a url).

- ``virtctl start`` of a Manual VM: virt-api's JSON patch of ``virtualmachines/status`` adding a
  Start entry (kubevirt pkg/virt-api/rest/lifecycle.go, ``getChangeRequestJson``) is judged like
  a VM asked to run; virt-controller's own status traffic never reaches the guard.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.builders import node, vm
from tests.e2e.conftest import ServeGuard
from tests.e2e.controlplane import ControlPlane
from tests.e2e.guard import Guard, by_url, guard_configuration, render
from tests.e2e.objects import load
from tests.e2e.rest import MERGE_PATCH

Obj = dict[str, Any]
JSON_PATCH = "application/json-patch+json"
A10 = "nvidia.com/GA102GL_A10"
NAMESPACE = "vms"
VIRT_API = "system:serviceaccount:kubevirt:kubevirt-apiserver"
VIRT_CONTROLLER = "system:serviceaccount:kubevirt:kubevirt-controller"
KUBEVIRT_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:kubevirt")
NO_PROVIDER = "Warning: [passthrough-without-ready-provider]"
#: virt-controller's status writes over a VM's life, each as a merge patch of status.
CONTROLLER_WRITES = (
    {"printableStatus": "Starting", "stateChangeRequests": None},
    {"printableStatus": "Running", "ready": True, "created": True},
    {"conditions": [{"type": "Ready", "status": "True"}]},
    {"printableStatus": "Stopping"},
    {"printableStatus": "Stopped", "ready": False, "created": False, "conditions": []},
)


def status_path(name: str) -> str:
    return f"/apis/kubevirt.io/v1/namespaces/{NAMESPACE}/virtualmachines/{name}/status"


def virt_api_start(plane: ControlPlane, name: str, *, dry_run: bool = False) -> str:
    """What virt-api writes for ``virtctl start`` of a Manual VM with a status: a test of the
    current (empty) requests, then the Start entry; returns what kubectl printed."""
    start = json.dumps([
        {"op": "test", "path": "/status/stateChangeRequests", "value": None},
        {"op": "add", "path": "/status/stateChangeRequests", "value": [{"action": "Start"}]},
    ])  # fmt: skip
    done = plane.kubectl(
        "patch", "virtualmachine", name, "-n", NAMESPACE, "--subresource=status",
        "--type=json", "-p", start, *(["--dry-run=server"] if dry_run else []),
        as_user=VIRT_API, as_groups=KUBEVIRT_GROUPS,
    )  # fmt: skip
    return done.stdout + done.stderr


def grant_kubevirt(plane: ControlPlane) -> None:
    """virt-api's and virt-controller's rights on VMs and their status (kubevirt's RBAC)."""
    plane.create_namespace("kubevirt")
    resources = "virtualmachines.kubevirt.io,virtualmachines.kubevirt.io/status"
    plane.kubectl("create", "clusterrole", "kubevirt-vm-status",
                  "--verb=get,list,watch,update,patch", f"--resource={resources}")  # fmt: skip
    for account in ("kubevirt-apiserver", "kubevirt-controller"):
        plane.ensure_service_account("kubevirt", account)
        plane.kubectl("create", "clusterrolebinding", account, "--clusterrole=kubevirt-vm-status",
                      f"--serviceaccount=kubevirt:{account}")  # fmt: skip


async def enforcing(plane: ControlPlane, serve: ServeGuard, tmp_path: Path, probe: str) -> Guard:
    """The enforce overlay registered by url against a running guard, once the guard's live
    state holds VM ``probe`` (a server-side dry run of its start warns)."""
    rendered = render("enforce")
    config = tmp_path / "guard.yaml"
    config.write_text(guard_configuration(rendered))
    guard = await serve(plane, "--config", str(config), "--audit-interval", "0")
    await guard.wait_ready()
    for configuration in by_url(rendered, guard.base, guard.ca_pem):
        plane.create(configuration)
    for _ in range(300):
        if NO_PROVIDER in virt_api_start(plane, probe, dry_run=True):
            return guard
        await asyncio.sleep(0.05)
    raise AssertionError("the API server never had the guard judge a VM's start")


async def test_virtctl_start_of_a_manual_vm_is_judged_and_virt_controller_status_is_not_sent(
    own_control_plane: ControlPlane, serve: ServeGuard, tmp_path: Path
) -> None:
    plane = own_control_plane
    grant_kubevirt(plane)
    # No node provides the A10 the VMs ask for: a start is warned by
    # passthrough-without-ready-provider.
    load(plane, [node("gpu-1"),
                 vm("manual", gpus=[A10], run_strategy="Manual", namespace=NAMESPACE),
                 vm("probe", gpus=[A10], run_strategy="Manual", namespace=NAMESPACE)])  # fmt: skip
    for name in ("manual", "probe"):  # virt-controller's first status
        plane.call("PATCH", status_path(name), {"status": {"printableStatus": "Stopped"}},
                   MERGE_PATCH, as_user=VIRT_CONTROLLER, as_groups=KUBEVIRT_GROUPS)  # fmt: skip
    guard = await enforcing(plane, serve, tmp_path, "probe")

    # virt-controller's status traffic over a start and a stop: none of it is sent.
    sent = await guard.reviews()
    for status in CONTROLLER_WRITES:
        plane.call("PATCH", status_path("manual"), {"status": status}, MERGE_PATCH,
                   as_user=VIRT_CONTROLLER, as_groups=KUBEVIRT_GROUPS)  # fmt: skip
    assert await guard.reviews() == sent

    # virtctl start: virt-api's write is sent once and warned; the Start entry is written
    # (the warnings only warn).
    said = virt_api_start(plane, "manual")
    assert f"{NO_PROVIDER} {A10}" in said, said
    assert await guard.reviews(kind="VirtualMachine") == sent + 1
    requests = plane.call("GET", status_path("manual"))["status"]["stateChangeRequests"]
    assert requests == [{"action": "Start"}]

    # virt-controller acting on it (the entry removed) is not sent.
    plane.call("PATCH", status_path("manual"), {"status": {"stateChangeRequests": None}},
               MERGE_PATCH, as_user=VIRT_CONTROLLER, as_groups=KUBEVIRT_GROUPS)  # fmt: skip
    assert await guard.reviews() == sent + 1
    assert await guard.stop() == 0

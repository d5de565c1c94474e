"""The audit overlay's policies on a real kube-apiserver v1.36.2 only record, and moving to
enforce makes the same switch a denial: the audit overlay installed as rendered (its record
policy under failurePolicy Fail, so a CEL type error would deny), the home lab loaded, and
``gpu-guard serve`` on the guard's own ServiceAccount token keeping the record under the
overlay's guard.yaml (every policy audit). No webhook is registered: the API server's policy
alone judges the seed's switch (omen1 to vm-passthrough under two CUDA pods).

Under audit the switch passes with no warning, and the API server's audit log holds what
enforce would have denied (validationActions [Audit], as the guard's audit action: recorded,
neither denied nor warned about). Then the enforce overlay applied over it and its guard.yaml
written over the guard's (a configuration reload, no restart): the record follows the reload
and the API server denies the same switch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e.conftest import ServeGuard
from tests.e2e.controlplane import ControlPlane
from tests.e2e.record import (
    BUSY,
    NAMESPACE,
    RECORD,
    installed,
    record,
    serve_args,
    switch,
)
from tests.waits import until

VALIDATION_FAILURE = "validation.policy.admission.k8s.io/validation_failure"
SWITCH = "workload-switch-with-gpu-pods"


def recorded_failures(plane: ControlPlane, node: str) -> list[dict[str, Any]]:
    """The record policy's failures the audit log holds for writes to ``node``."""
    failures: list[dict[str, Any]] = []
    for event in plane.audit_events():
        ref = event.get("objectRef") or {}
        if ref.get("resource") == "nodes" and ref.get("name") == node:
            text = (event.get("annotations") or {}).get(VALIDATION_FAILURE)
            failures += json.loads(text) if text else []
    return [f for f in failures if f.get("policy") == "gpu-guard-record"]


async def test_the_audit_overlay_records_the_switch_the_record_lists_and_enforce_denies_it(
    own_control_plane: ControlPlane, serve: ServeGuard, tmp_path: Path
) -> None:
    plane = own_control_plane
    _, config, kubeconfig = installed(plane, tmp_path, "audit")
    guard = await serve(
        plane, *serve_args(config), kubeconfig=kubeconfig, env={"POD_NAMESPACE": NAMESPACE}
    )
    await until(lambda: f"pods.{BUSY}" in record(plane), timeout=60, every=0.1)
    written = record(plane)
    assert written["deny"] == "" and SWITCH in written["judged"].split(",")

    # Until the API server's policy informer has the policy: then each try is recorded.
    def tried() -> bool:
        code, said = switch(plane, BUSY, "--dry-run=server")
        assert code == 0 and "Warning" not in said, said
        return bool(recorded_failures(plane, BUSY))

    await until(tried, timeout=30, every=0.2)
    (failure, *_) = recorded_failures(plane, BUSY)
    assert failure["validationActions"] == ["Audit"], failure
    assert failure["message"].startswith(f"{SWITCH}: node {BUSY} "), failure
    assert "ml/jupyter-alice" in failure["message"], failure

    # To enforce: the overlay applied over the audit one, its guard.yaml reloaded by the guard.
    _, enforce, _ = installed(plane, tmp_path, "enforce", home_lab=False)
    config.write_text(enforce.read_text())
    await until(lambda: SWITCH in record(plane)["deny"].split(","), timeout=60, every=0.2)

    def denied() -> bool:
        code, said = switch(plane, BUSY, "--dry-run=server")
        return code == 1 and "ValidatingAdmissionPolicy 'gpu-guard-record'" in said

    await until(denied, timeout=30, every=0.2)
    assert plane.call("GET", RECORD)["data"][f"pods.{BUSY}"].startswith("2: ")
    await guard.stop()

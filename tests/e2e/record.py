"""The record and its policy on a real kube-apiserver: an overlay installed as rendered but its
Deployment and webhooks, the home lab loaded, the record read, the seed's switch tried. Shared
by tests/e2e/test_guard_down.py, tests/e2e/test_audit_overlay.py and bench/bench_record_lag.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.e2e.controlplane import ControlPlane
from tests.e2e.guard import WEBHOOK_KINDS, guard_configuration, render
from tests.e2e.objects import as_a_kubelet_writes_them, load
from tests.test_cli import STATE

NAMESPACE = "gpu-guard"
RECORD = f"/api/v1/namespaces/{NAMESPACE}/configmaps/gpu-guard-record"
POLICY = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/gpu-guard-record"
WORKLOAD = "nvidia.com/gpu.workload.config"
BUSY, IDLE = "omen1", "omen3"
"""omen1 runs ml/train-llama-0 and ml/jupyter-alice; omen3 no GPU user."""


def record(plane: ControlPlane) -> dict[str, str]:
    data: dict[str, str] = plane.call("GET", RECORD).get("data") or {}
    return data


def switch(plane: ControlPlane, node: str, *flags: str) -> tuple[int, str]:
    """The seed's switch (to vm-passthrough) through kubectl: its exit code and output."""
    done = plane.kubectl(
        "label", "node", node, f"{WORKLOAD}=vm-passthrough", "--overwrite", *flags, check=False
    )
    return done.returncode, done.stdout + done.stderr


def installed(
    plane: ControlPlane,
    tmp_path: Path,
    overlay: str = "enforce",
    under_fail: tuple[str, ...] = (POLICY,),
    home_lab: bool = True,
) -> tuple[list[dict[str, Any]], Path, Path]:
    """The home lab, the overlay but its Deployment and webhooks, the policies at ``under_fail``
    under failurePolicy Fail (a CEL type error then denies: a bare API server writes no
    status.typeChecking); the guard's configuration file and a kubeconfig on its
    ServiceAccount's token."""
    if home_lab:
        load(plane, as_a_kubelet_writes_them(yaml.safe_load(Path(STATE).read_text())["items"]))
    rendered = render(overlay)
    objects = [o for o in rendered if o["kind"] not in (*WEBHOOK_KINDS, "Deployment")]
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    for path in under_fail:
        policy = plane.call("GET", path)
        policy["spec"]["failurePolicy"] = "Fail"
        plane.call("PUT", path, policy)
    config = tmp_path / f"guard-{overlay}.yaml"
    config.write_text(guard_configuration(rendered))
    token = plane.token(NAMESPACE, "gpu-guard")
    return rendered, config, plane.kubeconfig_for(token, tmp_path / "guard.kubeconfig")


def serve_args(config: Path) -> tuple[str, ...]:
    """The guard as the leader that keeps the record, its audit and reports off."""
    return ("--config", str(config), "--audit-interval", "0", "--no-reports")

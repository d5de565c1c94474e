"""OpenReports against the real API server with each project's own CRDs (issue 40): ``serve``
on its ServiceAccount, with the RBAC of the rendered manifests only, writes wgpolicyk8s.io
PolicyReports while only those CRDs are served; once OpenReports' CRDs are installed the next
audit writes openreports.io Reports and a ClusterReport with the same results, and deletes its
PolicyReports; the API server refuses none of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.e2e.conftest import ServeGuard
from tests.e2e.controlplane import ControlPlane
from tests.e2e.crds import install, openreports_crds
from tests.e2e.guard import render
from tests.e2e.objects import load
from tests.e2e.test_policy_reports import results
from tests.test_cli import STATE
from tests.waits import until
from webhook.audit.policyreport import MANAGED_BY_LABEL, MANAGER

NAMESPACE = ACCOUNT = "gpu-guard"
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
RBAC_KINDS = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
)
FORMATS = {
    "wgpolicyk8s.io": ("/apis/wgpolicyk8s.io/v1alpha2", "clusterpolicyreports", "policyreports"),
    "openreports.io": ("/apis/openreports.io/v1alpha1", "clusterreports", "reports"),
}


def ours(plane: ControlPlane, group: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Our reports of one group by (kind, namespace); none when the group is not served."""
    base, *plurals = FORMATS[group]
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for plural in plurals:
        status, listing = plane.request(
            "GET", f"{base}/{plural}?labelSelector={MANAGED_BY_LABEL}%3D{MANAGER}"
        )
        for item in listing["items"] if status == 200 else []:
            found[(item["kind"], item["metadata"].get("namespace", ""))] = item
    return found


async def test_auto_moves_the_reports_to_openreports_when_its_crds_come_on_its_own_rbac(
    own_control_plane: ControlPlane, serve: ServeGuard, tmp_path: Path
) -> None:
    plane = own_control_plane
    load(plane, yaml.safe_load(Path(STATE).read_text())["items"])
    rbac = [obj for obj in render("audit") if obj["kind"] in RBAC_KINDS]
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(rbac))
    token = plane.kubeconfig_for(
        plane.token(NAMESPACE, ACCOUNT), tmp_path / "token-kubeconfig", NAMESPACE
    )
    guard = await serve(
        plane, "--audit-interval", "0.3", "--report-format", "auto", kubeconfig=token
    )
    await guard.wait_ready()

    await until(lambda: ("PolicyReport", "vms") in ours(plane, "wgpolicyk8s.io"), timeout=60)
    before = {key[1]: results(r) for key, r in ours(plane, "wgpolicyk8s.io").items()}

    install(plane, openreports_crds())
    await until(lambda: not ours(plane, "wgpolicyk8s.io"), timeout=60)  # the switch: deleted
    await until(lambda: ("Report", "vms") in ours(plane, "openreports.io"), timeout=60)
    after = ours(plane, "openreports.io")
    assert {key[0] for key in after} == {"ClusterReport", "Report"}
    assert {key[1]: results(r) for key, r in after.items()} == before  # the same findings

    assert await guard.stop() == 0
    writes = [
        (e["objectRef"]["apiGroup"], e["verb"], e["responseStatus"]["code"])
        for e in plane.audit_events(USER)
        if (e.get("objectRef") or {}).get("apiGroup") in FORMATS
        and e["verb"] in ("create", "update", "delete")
    ]
    assert {(group, verb) for group, verb, _ in writes} >= {
        ("wgpolicyk8s.io", "create"),
        ("wgpolicyk8s.io", "delete"),
        ("openreports.io", "create"),
    }
    assert [w for w in writes if not 200 <= w[2] < 300] == []  # RBAC refused nothing
    log = guard.log_text()
    assert "publishing the audit as openreports.io/v1alpha1 reports" in log, log
    assert "Traceback" not in log and "could not write" not in log, log

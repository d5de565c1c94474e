"""The audit's reports as OpenReports or PolicyReports (issue 40): ``--report-format auto`` takes
openreports.io while the API server serves its Report, else wgpolicyk8s.io, at each publish;
either way our reports in the other format are deleted, and nobody else's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kubeapi import OPENREPORTS, SERVED, WRITTEN, KubeApiDouble
from tests.test_cli import NOW, STATE, run
from webhook.audit.policyreport import MANAGED_BY_LABEL, MANAGER, policy_reports
from webhook.audit.publish import ReportPublisher
from webhook.audit.report import parse_now, run_audit
from webhook.engine import Engine
from webhook.state.client import connect
from webhook.state.files import load_state

OURS = {MANAGED_BY_LABEL: MANAGER}


def reports() -> list[dict[str, Any]]:
    """What the background audit hands the publisher for the home lab."""
    report = run_audit(Engine(), load_state([STATE]), parse_now(NOW))
    return policy_reports(report, include_clean=False)


def stale(kind: str, namespace: str = "", labels: dict[str, str] = OURS) -> dict[str, Any]:
    group = {"Report": "openreports.io/v1alpha1", "ClusterReport": "openreports.io/v1alpha1"}
    meta: dict[str, Any] = {"name": "gpu-guard", "labels": dict(labels)}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": group.get(kind, "wgpolicyk8s.io/v1alpha2"),
        "kind": kind,
        "metadata": meta,
        "results": [],
    }


def held(api: KubeApiDouble) -> set[tuple[str, str, str]]:
    kinds = ("PolicyReport", "ClusterPolicyReport", "Report", "ClusterReport")
    return {
        (kind, o["metadata"].get("namespace", ""), o["metadata"]["name"])
        for kind in kinds
        if api.installed(api.resource(kind).group)
        for o in api.objects(kind)
    }


@pytest.mark.parametrize(
    ("openreports_served", "report_format", "written", "removed"),
    [
        (False, "auto", "PolicyReport", "Report"),
        (True, "auto", "Report", "PolicyReport"),
        (True, "wgpolicyk8s", "PolicyReport", "Report"),
        (True, "openreports", "Report", "PolicyReport"),
    ],
    ids=[
        "auto without the OpenReports CRDs: PolicyReports",
        "auto with them: Reports, the PolicyReports of ours deleted",
        "wgpolicyk8s: PolicyReports, the Reports of ours deleted",
        "openreports: Reports",
    ],
)
async def test_the_format_decides_the_kinds_written_and_the_other_formats_are_removed(
    tmp_path: Path, openreports_served: bool, report_format: str, written: str, removed: str
) -> None:
    async with KubeApiDouble(resources=SERVED + WRITTEN + OPENREPORTS) as api:
        for report in (
            stale("Report", "retired"),
            stale("ClusterReport"),
            stale("PolicyReport", "retired"),
            stale("ClusterPolicyReport"),
            stale("PolicyReport", "theirs", labels={"owner": "kyverno"}),
        ):
            api.create(report)
        if not openreports_served:
            api.uninstall("openreports.io")
        client = await connect(str(api.kubeconfig(tmp_path / "kubeconfig")))
        try:
            publisher = ReportPublisher(client, report_format=report_format)
            await publisher.publish(reports())
            await publisher.publish(reports())  # again: in place, nothing more deleted
        finally:
            await client.close()
        found = held(api)
    cluster = f"Cluster{'Policy' if written == 'PolicyReport' else ''}Report"
    assert (cluster, "", "gpu-guard") in found
    assert (written, "vms", "gpu-guard") in found
    ours = {(kind, namespace) for kind, namespace, _ in found if namespace != "theirs"}
    other = {"Report": ("Report", "ClusterReport")}.get(
        removed, ("PolicyReport", "ClusterPolicyReport")
    )
    assert not any(kind in other for kind, _ in ours), ours
    assert (written, "retired", "gpu-guard") not in found  # nothing audited there any more
    assert ("PolicyReport", "theirs", "gpu-guard") in found  # not ours: left alone


def test_audit_prints_openreports_with_the_same_results_as_policyreports(
    capsys: pytest.CaptureFixture[str],
) -> None:
    outputs = {}
    for output in ("policyreport", "openreports"):
        code, out, _ = run(capsys, "audit", "--state", STATE, "--now", NOW, "-o", output)
        assert code == 1
        outputs[output] = [d for d in yaml.safe_load_all(out) if d]
    for old, new in zip(outputs["policyreport"], outputs["openreports"], strict=True):
        assert new["apiVersion"] == "openreports.io/v1alpha1"
        assert new["kind"] == old["kind"].replace("Policy", "")
        assert {k: v for k, v in new.items() if k not in ("apiVersion", "kind")} == {
            k: v for k, v in old.items() if k not in ("apiVersion", "kind")
        }

"""``gpu-guard audit -o policyreport``: the audit as wgpolicyk8s.io/v1alpha2 PolicyReports, or
(``-o openreports``) as OpenReports' openreports.io/v1alpha1 Reports and ClusterReports, the
same results under the successor's group (its CRDs keep the v1alpha2 result schema).

One ClusterPolicyReport (``gpu-guard``) holds the cluster-scoped findings (nodes, the
ClusterPolicy, the cluster as a whole) and one PolicyReport per namespace (``gpu-guard`` in
that namespace) holds the namespaced ones (VMs, VMIs, the KubeVirt CR, pods). The names are fixed,
so a background audit piped into ``kubectl apply -f -`` updates the same objects in place; every
namespace the audit looked at gets a report, an empty one when it is clean, so fixed problems
disappear. (The in-cluster background audit deletes its report from a namespace where nothing is
audited any more; piped into ``kubectl apply``,
``--prune -l app.kubernetes.io/managed-by=gpu-guard`` does the same.)

Reports never flood etcd (kyverno#8974): each keeps at most ``max_results`` results, the most
severe first; ``summary`` still counts every finding, and the annotations
``gpu-guard.io/results-total`` and ``gpu-guard.io/results-omitted`` say how many were left out.
(The CRD's structural schema would prune any field it does not know, so the count cannot live
inside ``summary`` itself.)

Mapping: action deny -> result ``fail``, warn -> ``warn``, audit -> ``warn`` (the CRD has no
"info" result; severity says how little it matters); a policy that could not be evaluated ->
``error``. Severity comes from the finding (critical/high/medium/low/info, the CRD's enum).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC
from typing import Any

import yaml

from policies.cluster.kinds import (
    CLUSTER_POLICY_REPORT,
    CLUSTER_REPORT,
    POLICY_REPORT,
    REPORT,
    RESOURCE_OF,
    ApiResource,
)
from policies.cluster.kinds import MANAGED_BY_LABEL as MANAGED_BY_LABEL
from policies.registry import DIAGNOSES_BY_ID
from policies.vocabulary.requests import CLUSTER, ObjectRef
from policies.vocabulary.text import format_duration, rfc3339
from policies.vocabulary.verdicts import Action
from webhook.audit.report import AuditFinding, AuditReport
from webhook.config import EXEMPTION_EXPIRED
from webhook.defaults import OPENREPORTS, WGPOLICYK8S

SOURCE = "gpu-guard"
REPORT_NAME = "gpu-guard"
DEFAULT_MAX_RESULTS = 100
MANAGER = "gpu-guard"
MANAGED_BY = {MANAGED_BY_LABEL: MANAGER}
ANNOTATION_PREFIX = "gpu-guard.io/"
RESULTS = ("pass", "fail", "warn", "error", "skip")
_RESULT_OF = {Action.DENY: "fail", Action.WARN: "warn", Action.AUDIT: "warn", Action.OFF: "skip"}
#: Each report format's kinds: (the cluster-scoped one, the namespaced one).
FORMATS: dict[str, tuple[ApiResource, ApiResource]] = {
    WGPOLICYK8S: (RESOURCE_OF[CLUSTER_POLICY_REPORT], RESOURCE_OF[POLICY_REPORT]),
    OPENREPORTS: (RESOURCE_OF[CLUSTER_REPORT], RESOURCE_OF[REPORT]),
}


def result_of(finding: AuditFinding) -> str:
    if not finding.verdict.evaluated:
        return "error"
    return _RESULT_OF[finding.verdict.action]


def object_reference(ref: ObjectRef) -> dict[str, str]:
    out = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}
    if ref.namespace:
        out["namespace"] = ref.namespace
    return out


def _category(policy_id: str) -> str:
    if policy_id == EXEMPTION_EXPIRED:
        return "configuration"
    return "diagnosis" if policy_id in DIAGNOSES_BY_ID else "admission policy"


def _timestamp(report: AuditReport) -> dict[str, int]:
    now = report.now.astimezone(UTC)
    return {"seconds": int(now.timestamp()), "nanos": now.microsecond * 1000}


def _result(finding: AuditFinding, report: AuditReport) -> dict[str, Any]:
    v = finding.verdict
    properties = {"action": v.action.label}
    if v.since is not None:
        properties["since"] = rfc3339(v.since)
        properties["duration"] = format_duration(report.now - v.since)
        properties["durationSeconds"] = str(max(0, int((report.now - v.since).total_seconds())))
    if v.chain:
        properties["chain"] = " -> ".join(v.chain)
    if v.remediation:
        properties["remediation"] = " ".join(
            f"({n}) {step}" for n, step in enumerate(v.remediation, start=1)
        )
    out: dict[str, Any] = {
        "source": SOURCE,
        "policy": v.policy,
        "category": _category(v.policy),
        "result": result_of(finding),
        "severity": finding.severity.label,
        "scored": True,
        "message": v.message,
    }
    if v.resource != CLUSTER:
        out["resources"] = [object_reference(v.resource)]
    out["properties"] = properties
    out["timestamp"] = _timestamp(report)
    return out


def _skipped(report: AuditReport) -> list[dict[str, Any]]:
    """A ``skip`` result per policy or diagnosis left out for a kind the state never saw."""
    return [
        {
            "source": SOURCE,
            "policy": policy,
            "category": "diagnosis" if policy in DIAGNOSES_BY_ID else "admission policy",
            "result": "skip",
            "scored": False,
            "message": line,
            "properties": {"unseenKind": str(kind)},
            "timestamp": _timestamp(report),
        }
        for (kind, ids), line in zip(report.unseen, report.not_judged(), strict=True)
        for policy in ids
    ]


def _report(
    resource: ApiResource,
    namespace: str,
    findings: Sequence[AuditFinding],
    report: AuditReport,
    max_results: int,
) -> dict[str, Any]:
    kept = findings[:max_results]
    summary = dict.fromkeys(RESULTS, 0)
    for finding in findings:
        summary[result_of(finding)] += 1
    metadata: dict[str, Any] = {"name": REPORT_NAME}
    if namespace:
        metadata["namespace"] = namespace
    metadata["labels"] = dict(MANAGED_BY)
    metadata["annotations"] = {
        f"{ANNOTATION_PREFIX}audit-time": rfc3339(report.now),
        f"{ANNOTATION_PREFIX}results-total": str(len(findings)),
        f"{ANNOTATION_PREFIX}results-omitted": str(len(findings) - len(kept)),
    }
    return {
        "apiVersion": resource.api_version,
        "kind": resource.kind.kind,
        "metadata": metadata,
        "summary": summary,
        "results": [_result(f, report) for f in kept],
    }


def policy_reports(
    report: AuditReport,
    max_results: int = DEFAULT_MAX_RESULTS,
    include_clean: bool = True,
    report_format: str = WGPOLICYK8S,
) -> list[dict[str, Any]]:
    """The ClusterPolicyReport first, then one PolicyReport per namespace, by name (the
    ClusterReport and Reports for ``report_format`` openreports).

    ``include_clean``: also an empty report for each audited namespace without findings, so
    ``kubectl apply`` replaces an old one. A publisher that deletes our reports it did not
    write (``webhook.audit.publish``) can leave them out.
    """
    if max_results < 0:
        raise ValueError("max_results must not be negative")
    clean = report.namespaces if include_clean else ()
    by_namespace: dict[str, list[AuditFinding]] = {ns: [] for ns in clean}
    cluster: list[AuditFinding] = []
    for finding in report.findings:
        namespace = finding.verdict.resource.namespace
        if namespace:
            by_namespace.setdefault(namespace, []).append(finding)
        else:
            cluster.append(finding)
    # Most severe first, so the cap keeps what matters; the audit's order breaks ties.
    order = {id(f): i for i, f in enumerate(report.findings)}

    def ranked(items: list[AuditFinding]) -> list[AuditFinding]:
        return sorted(items, key=lambda f: (-f.verdict.action, -f.severity, order[id(f)]))

    cluster_kind, namespaced_kind = FORMATS[report_format]
    out = [_report(cluster_kind, "", ranked(cluster), report, max_results)]
    skipped = _skipped(report)  # first: what the audit could not judge, for want of a kind
    if skipped:
        out[0]["summary"]["skip"] += len(skipped)
        out[0]["results"][:0] = skipped
    for namespace in sorted(by_namespace):
        out.append(
            _report(
                namespaced_kind,
                namespace,
                ranked(by_namespace[namespace]),
                report,
                max_results,
            )
        )
    return out


def render_policy_reports(
    report: AuditReport, max_results: int = DEFAULT_MAX_RESULTS, report_format: str = WGPOLICYK8S
) -> str:
    """A YAML stream of the reports, what ``kubectl apply -f -`` takes."""
    reports = policy_reports(report, max_results, report_format=report_format)
    return yaml.safe_dump_all(reports, sort_keys=False, width=100, explicit_start=True)

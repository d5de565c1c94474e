"""The audit: every policy's ``audit`` and every diagnosis over one snapshot, configuration
applied once, each problem reported once.

A diagnosis finding that ``explains`` a policy's verdict on the same resource and device gives
that verdict its chain, remediation and (when it had none) since, instead of a second finding.
A policy or diagnosis that raises is logged and reported as such; the others' findings stand.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from policies.cluster.view import AuditView, ClusterView
from policies.vocabulary.audit import AuditFinding, Diagnosis, DiagnosisFinding, Link, Track
from policies.vocabulary.requests import CLUSTER, GroupKind
from policies.vocabulary.verdicts import Action, Policy, Severity, Verdict
from webhook.config import GuardConfig
from webhook.coverage import Freshness, left_out
from webhook.engine.verdicts import failure, verdict

log = logging.getLogger("gpu-guard.engine")
#: The id under which a diagnosis that raised is reported (the policies' audits still count).
DIAGNOSIS_FAILED = "audit-diagnosis"
_DIAGNOSIS_FAILED_VERDICT = Verdict(
    DIAGNOSIS_FAILED,
    Action.WARN,
    CLUSTER,
    "gpu-guard could not evaluate this policy: the diagnosis raised, see the log; the policies' "
    "findings are complete",
    evaluated=False,
)
_Found = list[tuple[Diagnosis[AuditView], DiagnosisFinding]]


@dataclass(frozen=True)
class Audit:
    findings: list[AuditFinding]
    """Each problem once: a policy's verdict (explained by a diagnosis when one does), or a
    diagnosis' own finding; in evaluation order."""
    view: AuditView
    """The snapshot with what the diagnoses computed of it: the report's tables read the same
    facts instead of scanning again."""
    unseen: Mapping[GroupKind, tuple[str, ...]] = field(default_factory=dict)
    """Each kind the state never saw, with the policies and diagnoses left out for need of it."""


def audit(
    config: GuardConfig,
    policies: Sequence[Policy[ClusterView]],
    diagnoses: Sequence[Diagnosis[AuditView]],
    view: ClusterView,
    now: datetime,
    track: Track,
    coverage: Freshness | None,
) -> Audit:
    """The audit of ``view`` (see ``Engine.audit``)."""
    audit_view = AuditView(view, track)
    unseen = left_out((*policies, *diagnoses), coverage)
    skipped = {name for names in unseen.values() for name in names}
    verdicts: list[Verdict] = []
    for _ in track(["policies"], "policies"):
        verdicts.extend(_audit_policies(config, policies, view, skipped))
    found, failed = _diagnose(diagnoses, audit_view, now, skipped)
    if failed:
        verdicts.append(_DIAGNOSIS_FAILED_VERDICT)
    explaining = {f.explained: f for _, f in found if f.explains}
    explained = {v.subject for v in verdicts if v.subject in explaining}
    severity = {policy.id: policy.audit_severity for policy in policies}
    findings = [
        _policy_finding(v, severity.get(v.policy), explaining.get(v.subject)) for v in verdicts
    ]
    for diagnosis, finding in found:
        if finding.explains and finding.explained in explained:
            continue  # reported as the verdict it explains
        action = config.action_for(diagnosis)
        exempt = finding.resource.namespace in config.exempt_namespaces
        if action != Action.OFF and not exempt:
            findings.append(_diagnosis_finding(diagnosis, action, finding))
    return Audit(findings, audit_view, unseen)


def _audit_policies(
    config: GuardConfig,
    policies: Sequence[Policy[ClusterView]],
    view: ClusterView,
    skipped: set[str],
) -> list[Verdict]:
    """Every policy that can judge existing objects, over the whole snapshot."""
    verdicts: list[Verdict] = []
    for policy in policies:
        action = config.action_for(policy)
        if policy.audit is None or action == Action.OFF or policy.id in skipped:
            continue
        try:
            for ref, finding in policy.audit(view):
                if ref.namespace not in config.exempt_namespaces:
                    verdicts.append(verdict(policy, action, ref, finding))
        except Exception:
            log.exception("policy %s raised during the audit", policy.id)
            verdicts.append(failure(policy, action, CLUSTER, "internal error, see the log"))
    return verdicts


def _diagnose(
    diagnoses: Sequence[Diagnosis[AuditView]], view: AuditView, now: datetime, skipped: set[str]
) -> tuple[_Found, bool]:
    """Every diagnosis' findings, and whether one raised (the others' still count). Off ones
    run too: an explanation still explains a policy's verdict when the diagnosis' own findings
    are off."""
    found: _Found = []
    failed = False
    for diagnosis in (d for d in diagnoses if d.id not in skipped):
        try:
            findings = list(diagnosis.diagnose(view, now))
        except Exception:
            log.exception("diagnosis %s raised during the audit", diagnosis.id)
            failed = True
            continue
        found.extend((diagnosis, finding) for finding in findings)
    return found, failed


def _policy_finding(
    judged: Verdict, declared: Severity | None, explanation: DiagnosisFinding | None
) -> AuditFinding:
    """A policy's verdict as a finding, at its declared severity (else its action's), with the
    chain and repair steps of the diagnosis that explains it, if one does."""
    severity = declared if declared is not None else Severity.of_action(judged.action)
    if explanation is None:
        root = f"{judged.resource.kind} {judged.resource}"
        return AuditFinding(judged, severity, Link.linear(root, judged.chain))
    explained = replace(
        judged,
        chain=explanation.chain.flatten(),
        remediation=explanation.remediation,
        since=judged.since if judged.since is not None else explanation.since,
    )
    return AuditFinding(explained, severity, explanation.chain)


def _diagnosis_finding(
    diagnosis: Diagnosis[AuditView], action: Action, finding: DiagnosisFinding
) -> AuditFinding:
    verdict = Verdict(
        policy=diagnosis.id,
        action=action,
        resource=finding.resource,
        message=finding.message,
        since=finding.since,
        chain=finding.chain.flatten(),
        remediation=finding.remediation,
        device=finding.device,
        workloads=finding.workloads,
    )
    severity = finding.severity if finding.severity is not None else diagnosis.default_severity
    return AuditFinding(verdict, severity, finding.chain)

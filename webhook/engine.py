"""The one evaluator: policies on a request, and policies' audits with diagnoses on a snapshot.

The engine applies the configured action per policy and diagnosis, caps what a finding asks to
be capped, skips exempt namespaces, and isolates a check that raises: a request gets that policy's
failure mode, never a 500; an audit reports what still worked. Admission, check and audit use it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol, TypeVar

from policies.cluster.identities import own_write
from policies.cluster.kinds import JUDGED_SUBRESOURCES as SUBRESOURCES
from policies.cluster.kubevirt_config import cap_hco_owned
from policies.cluster.view import AuditView, ClusterView
from policies.registry import ALL_DIAGNOSES, ALL_MUTATIONS, ALL_POLICIES
from policies.vocabulary.audit import (
    AuditFinding,
    Diagnosis,
    DiagnosisFinding,
    Link,
    Track,
    untracked,
)
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.mutation import Mutation, PatchOp
from policies.vocabulary.requests import CLUSTER, AdmissionRequest, GroupKind, ObjectRef
from policies.vocabulary.verdicts import Action, Finding, Policy, Severity, Verdict
from webhook.config import GuardConfig
from webhook.coverage import Freshness as Freshness  # where the pipeline imports it
from webhook.coverage import downgrade, judged_with_gaps, left_out
from webhook.overrides import OverrideUse, apply_overrides

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


@dataclass
class Decision:
    verdicts: list[Verdict] = field(default_factory=list)
    overrides: list[OverrideUse] = field(default_factory=list)
    exempt: str = ""
    """Why the whole request was exempt ('' when it was judged)."""
    judged: list[str] = field(default_factory=list)
    """The policies that judged it (ran, verdict or not): what ``check`` accounts for."""
    exempted: list[str] = field(default_factory=list)
    """Each policy the configuration exempts this request from, and why ("<id>: <reason>")."""

    @property
    def allowed(self) -> bool:
        return not self.denials

    @property
    def denials(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.action == Action.DENY]

    @property
    def warnings(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.action == Action.WARN]

    @property
    def deny_message(self) -> str:
        return "; ".join(v.text for v in self.denials)

    def nodes_to_confirm(self) -> list[str]:
        return sorted({v.confirm_pods_on for v in self.denials if v.confirm_pods_on})

    def annotate_denials(self, note: str) -> None:
        """Puts ``note`` first, where a warning cut at 256 characters still shows it."""
        self.verdicts = [
            replace(v, message=f"{note}: {v.message}") if v.action == Action.DENY else v
            for v in self.verdicts
        ]


@dataclass
class MutationResult:
    patch: list[PatchOp] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)


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


class Engine:
    def __init__(
        self,
        config: GuardConfig | None = None,
        policies: Sequence[Policy[ClusterView]] = ALL_POLICIES,
        mutations: Sequence[Mutation[ClusterView]] = ALL_MUTATIONS,
        diagnoses: Sequence[Diagnosis[AuditView]] = ALL_DIAGNOSES,
    ):
        self.config = config if config is not None else GuardConfig()
        """Replaced whole when the configuration file changes: one request sees one config."""
        self.policies = tuple(policies)
        self.mutations = tuple(mutations)
        self.diagnoses = tuple(diagnoses)
        self._policy_by_id = {policy.id: policy for policy in self.policies}
        # Which policies judge (mutations change) a kind and operation: one dict hit per request.
        # The one place that decides what applies to a request.
        self._policies_by_target = _by_target(self.policies)
        self._mutations_by_target = _by_target(self.mutations)

    def policies_for(self, request: AdmissionRequest) -> tuple[Policy[ClusterView], ...]:
        """The policies that judge this request, in registry order (see ``_targeted``)."""
        return _targeted(self._policies_by_target, request)

    def mutations_for(self, request: AdmissionRequest) -> tuple[Mutation[ClusterView], ...]:
        """The mutations that may change this request's object (none without an object, nor
        through a subresource: its write keeps only its own part, never the spec they patch)."""
        if request.obj is None or request.sub_resource:
            return ()
        return _targeted(self._mutations_by_target, request)

    def evaluate(
        self, request: AdmissionRequest, view: ClusterView, freshness: Freshness | None = None
    ) -> Decision:
        """Every applicable policy on one request. A deny that rests on stale knowledge
        (``freshness``) is downgraded to a warning that says how stale it is; a deny the object
        overrides (with a reason) becomes a warning naming who and why."""
        decision = Decision()
        exempt = self.config.exemptions.reason(request) or own_write(request)
        if exempt is not None:
            decision.exempt = exempt
            return decision
        for policy in self.policies_for(request):
            action = self.config.action_for(policy)
            if action == Action.OFF:
                continue
            if (exempt_from := self.config.exempt_from(policy.id, request)) is not None:
                decision.exempted.append(f"{policy.id}: {exempt_from}")
                continue
            decision.judged.append(policy.id)
            verdicts = judged_with_gaps(policy, action, request, view, freshness, self._run)
            verdicts = cap_hco_owned(verdicts, request, view)
            if freshness is not None and any(v.action == Action.DENY for v in verdicts):
                reasons = freshness.stale_reasons(policy.reads)
                if reasons:
                    verdicts = [downgrade(v, reasons) for v in verdicts]
            decision.verdicts.extend(verdicts)
        decision.verdicts, decision.overrides = apply_overrides(
            self.policies, self.config, request, decision.verdicts
        )
        return decision

    def unevaluated(self, request: AdmissionRequest, why: str) -> Decision:
        """The answer when there is no time to judge ``request``: each policy that would have
        judged it answers by its failure mode (fail-open policies allow with a warning)."""
        decision = Decision()
        if (self.config.exemptions.reason(request) or own_write(request)) is not None:
            return decision
        for policy in self.policies_for(request):
            action = self.config.action_for(policy)
            if action != Action.OFF and self.config.exempt_from(policy.id, request) is None:
                decision.verdicts.append(_failure(policy, action, request.ref, why))
        return decision

    def _enabled_mutations(self, request: AdmissionRequest) -> Iterator[Mutation[ClusterView]]:
        """The mutations the configuration turns on that may change this request (none for an
        exempt request)."""
        if self.config.exemptions.reason(request) is not None:
            return
        for mutation in self.mutations_for(request):
            if mutation.id in self.config.mutations:
                yield mutation

    def unmutated(self, request: AdmissionRequest, why: str) -> MutationResult:
        """The answer when there is no time to mutate ``request``: no patch, and a warning from
        each mutation that would have run saying it was not applied and why (a mutation never
        denies, so there is no failure mode to choose)."""
        return MutationResult(
            warnings=[f"[{m.id}] not applied: {why}" for m in self._enabled_mutations(request)]
        )

    def mutate(self, request: AdmissionRequest, view: ClusterView) -> MutationResult:
        """The enabled mutations' patch and the warnings that explain it; never a denial."""
        result = MutationResult()
        for mutation in self._enabled_mutations(request):
            try:
                changes = mutation.mutate(request, view)
            except ObjectError as exc:
                result.warnings.append(
                    f"[{mutation.id}] not applied: cannot read {request.kind} {exc}"
                )
                continue
            except Exception:
                log.exception(
                    "mutation %s raised on %s %s (uid %s)",
                    mutation.id,
                    request.operation,
                    request.kind,
                    request.uid,
                )
                result.warnings.append(f"[{mutation.id}] not applied: internal error")
                continue
            for change in changes:
                result.patch.extend(change.patch)
                result.warnings.append(f"[{mutation.id}] {change.message}")
                result.applied.append(mutation.id)
        return result

    def _run(
        self,
        policy: Policy[ClusterView],
        action: Action,
        request: AdmissionRequest,
        view: ClusterView,
    ) -> list[Verdict]:
        try:
            findings = policy.check(request, view)
        except ObjectError as exc:
            # A malformed field the API server let through (open CRD schemas): say which.
            return [_failure(policy, action, request.ref, f"cannot read {request.kind} {exc}")]
        except Exception:
            log.exception(
                "policy %s raised on %s %s (uid %s)",
                policy.id,
                request.operation,
                request.kind,
                request.uid,
            )
            return [_failure(policy, action, request.ref, "internal error, see the server log")]
        return [_verdict(policy, action, request.ref, finding) for finding in findings]

    def audit(
        self,
        view: ClusterView,
        now: datetime,
        track: Track = untracked,
        coverage: Freshness | None = None,
    ) -> Audit:
        """Every policy's audit and every diagnosis over one snapshot, configuration applied
        once: actions (``off`` drops a finding), exempt namespaces, and enrichment: a diagnosis
        finding that ``explains`` a policy's verdict on the same resource and device gives that
        verdict its chain, remediation and (when it had none) since, instead of a second
        finding. Durations are measured to ``now``; ``track`` shows progress. What needs a kind
        ``coverage`` never saw is left out (``Audit.unseen``)."""
        audit_view = AuditView(view, track)
        unseen = left_out((*self.policies, *self.diagnoses), coverage)
        skipped = {name for names in unseen.values() for name in names}
        verdicts: list[Verdict] = []
        for _ in track(["policies"], "policies"):
            verdicts.extend(self._audit_policies(view, skipped))
        found, failed = self._diagnose(audit_view, now, skipped)
        if failed:
            verdicts.append(_DIAGNOSIS_FAILED_VERDICT)
        explaining = {f.explained: f for _, f in found if f.explains}
        explained = {v.subject for v in verdicts if v.subject in explaining}
        findings = [self._policy_finding(v, explaining.get(v.subject)) for v in verdicts]
        for diagnosis, finding in found:
            if finding.explains and finding.explained in explained:
                continue  # reported as the verdict it explains
            action = self.config.action_for(diagnosis)
            exempt = finding.resource.namespace in self.config.exempt_namespaces
            if action != Action.OFF and not exempt:
                findings.append(_diagnosis_finding(diagnosis, action, finding))
        return Audit(findings, audit_view, unseen)

    def _audit_policies(self, view: ClusterView, skipped: set[str]) -> list[Verdict]:
        """Every policy that can judge existing objects, over the whole snapshot."""
        verdicts: list[Verdict] = []
        for policy in self.policies:
            action = self.config.action_for(policy)
            if policy.audit is None or action == Action.OFF or policy.id in skipped:
                continue
            try:
                for ref, finding in policy.audit(view):
                    if ref.namespace not in self.config.exempt_namespaces:
                        verdicts.append(_verdict(policy, action, ref, finding))
            except Exception:
                log.exception("policy %s raised during the audit", policy.id)
                verdicts.append(_failure(policy, action, CLUSTER, "internal error, see the log"))
        return verdicts

    def _diagnose(
        self, view: AuditView, now: datetime, skipped: set[str]
    ) -> tuple[list[tuple[Diagnosis[AuditView], DiagnosisFinding]], bool]:
        """Every diagnosis' findings, and whether one raised (the others' still count). Off
        ones run too: an explanation still explains a policy's verdict when the diagnosis' own
        findings are off."""
        found: list[tuple[Diagnosis[AuditView], DiagnosisFinding]] = []
        failed = False
        for diagnosis in (d for d in self.diagnoses if d.id not in skipped):
            try:
                findings = list(diagnosis.diagnose(view, now))
            except Exception:
                log.exception("diagnosis %s raised during the audit", diagnosis.id)
                failed = True
                continue
            found.extend((diagnosis, finding) for finding in findings)
        return found, failed

    def _policy_finding(
        self, verdict: Verdict, explanation: DiagnosisFinding | None
    ) -> AuditFinding:
        policy = self._policy_by_id.get(verdict.policy)
        declared = policy.audit_severity if policy is not None else None
        severity = declared if declared is not None else Severity.of_action(verdict.action)
        if explanation is None:
            root = f"{verdict.resource.kind} {verdict.resource}"
            return AuditFinding(verdict, severity, Link.linear(root, verdict.chain))
        verdict = replace(
            verdict,
            chain=explanation.chain.flatten(),
            remediation=explanation.remediation,
            since=verdict.since if verdict.since is not None else explanation.since,
        )
        return AuditFinding(verdict, severity, explanation.chain)


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


def _verdict(
    policy: Policy[ClusterView], action: Action, ref: ObjectRef, finding: Finding
) -> Verdict:
    capped = action if finding.max_action is None else min(action, finding.max_action)
    return Verdict(
        policy=policy.id,
        action=capped,
        resource=ref,
        message=finding.message,
        since=finding.since,
        chain=finding.chain,
        remediation=finding.remediation,
        confirm_pods_on=finding.confirm_pods_on,
        device=finding.device,
    )


def _failure(policy: Policy[ClusterView], action: Action, ref: ObjectRef, why: str) -> Verdict:
    outcome = min(action, policy.failure_action)
    result = "denied: this policy fails closed" if outcome == Action.DENY else "not checked"
    return Verdict(
        policy=policy.id,
        action=outcome,
        resource=ref,
        message=f"gpu-guard could not evaluate this policy: {why}; {result}",
        evaluated=False,
    )


class _Scoped(Protocol):
    @property
    def scope(self) -> Mapping[GroupKind, frozenset[str]]: ...


_S = TypeVar("_S", bound=_Scoped)


def _by_target(items: Sequence[_S]) -> dict[tuple[GroupKind, str], tuple[_S, ...]]:
    """Each (kind, operation) with the items whose scope names it, in their order."""
    index: dict[tuple[GroupKind, str], tuple[_S, ...]] = {}
    for item in items:
        for kind, operations in item.scope.items():
            for operation in operations:
                index[(kind, operation)] = (*index.get((kind, operation), ()), item)
    return index


def _targeted(
    index: Mapping[tuple[GroupKind, str], tuple[_S, ...]], request: AdmissionRequest
) -> tuple[_S, ...]:
    """What ``index`` holds for the request's kind and operation; a subresource only if writes
    through it change what the kind's policies read (``JUDGED_SUBRESOURCES``: nodes/status)."""
    if request.sub_resource and (request.group_kind, request.sub_resource) not in SUBRESOURCES:
        return ()
    return index.get((request.group_kind, request.operation), ())

"""Validation: the policies a request reaches, each at its configured action, into a Decision.

What a decision takes into account, in order: the configuration's exemptions and the owners'
own writes (the whole request), a policy turned off or exempting the request, the policy's
``check`` (one that raises answers by its failure mode, never a 500), the kinds the state has not
seen (``webhook.coverage``), a deny of an edit the object's owner reverts, a deny resting on a
stale view, and the override annotations (``webhook.overrides``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from policies.cluster.view import ClusterView
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action, Policy, Verdict
from webhook.config import GuardConfig
from webhook.coverage import Freshness, downgrade, judged_with_gaps
from webhook.engine.scope import Scope
from webhook.engine.verdicts import failure, verdict
from webhook.overrides import OverrideUse, apply_overrides

log = logging.getLogger("gpu-guard.engine")


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


def evaluate(
    config: GuardConfig,
    scope: Scope,
    request: AdmissionRequest,
    view: ClusterView,
    freshness: Freshness | None = None,
) -> Decision:
    """Every policy ``scope`` gives the request (see ``Engine.evaluate``)."""
    decision = Decision()
    exempt = config.exemptions.reason(request) or scope.own_write(request)
    if exempt is not None:
        decision.exempt = exempt
        return decision
    for policy in scope.policies_for(request):
        action = config.action_for(policy)
        if action == Action.OFF:
            continue
        if (exempt_from := config.exempt_from(policy.id, request)) is not None:
            decision.exempted.append(f"{policy.id}: {exempt_from}")
            continue
        decision.judged.append(policy.id)
        verdicts = judged_with_gaps(policy, action, request, view, freshness, _judge)
        verdicts = _reverted(policy, verdicts, request, view)
        if freshness is not None and any(v.action == Action.DENY for v in verdicts):
            reasons = freshness.stale_reasons(policy.reads)
            if reasons:
                verdicts = [downgrade(v, reasons) for v in verdicts]
        decision.verdicts.extend(verdicts)
    decision.verdicts, decision.overrides = apply_overrides(
        scope.policies, config, request, decision.verdicts
    )
    return decision


def unevaluated(config: GuardConfig, scope: Scope, request: AdmissionRequest, why: str) -> Decision:
    """Each policy that would have judged ``request`` by its failure mode (see
    ``Engine.unevaluated``)."""
    decision = Decision()
    if (config.exemptions.reason(request) or scope.own_write(request)) is not None:
        return decision
    for policy in scope.policies_for(request):
        action = config.action_for(policy)
        if action != Action.OFF and config.exempt_from(policy.id, request) is None:
            decision.verdicts.append(failure(policy, action, request.ref, why))
    return decision


def _judge(
    policy: Policy[ClusterView],
    action: Action,
    request: AdmissionRequest,
    view: ClusterView,
) -> list[Verdict]:
    """``policy.check`` on the request, its findings as verdicts; a check that raises gets the
    policy's failure mode."""
    try:
        findings = policy.check(request, view)
    except ObjectError as exc:
        # A malformed field the API server let through (open CRD schemas): say which.
        return [failure(policy, action, request.ref, f"cannot read {request.kind} {exc}")]
    except Exception:
        log.exception(
            "policy %s raised on %s %s (uid %s)",
            policy.id,
            request.operation,
            request.kind,
            request.uid,
        )
        return [failure(policy, action, request.ref, "internal error, see the server log")]
    return [verdict(policy, action, request.ref, finding) for finding in findings]


def _reverted(
    policy: Policy[ClusterView],
    verdicts: list[Verdict],
    request: AdmissionRequest,
    view: ClusterView,
) -> list[Verdict]:
    """The verdicts with each deny a warning saying why, when an owner the policy declares
    reverts this edit anyway (a deny would only stand in the way)."""
    if not any(v.action == Action.DENY for v in verdicts):
        return verdicts
    for owner in policy.owners:
        if owner.kind != request.group_kind or owner.reverts is None:
            continue
        if (why := owner.reverts(request, view)) is not None:
            return [
                replace(v, action=Action.WARN, message=f"{v.message} ({why})")
                if v.action == Action.DENY
                else v
                for v in verdicts
            ]
    return verdicts

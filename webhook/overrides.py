"""Overrides applied to a decision: who set a deny aside, why, and only in the request that says so.

An override (``gpu-guard.io/override: <policy ids>`` with ``gpu-guard.io/override-reason``,
``policies.vocabulary.overrides``) counts only in a request that adds or changes the annotation
or its reason: it is credited to the user who sends that request, the one the API server
authenticated. An annotation left on the object from an earlier request (an UPDATE whose
oldObject carries the same ids and reason) overrides nothing: otherwise an override planted once,
by anyone who could annotate the object, would be credited to whoever later sends an unrelated
change (a label, say), and every later deny on that object would be waved through in their name.
To override again, change the reason (a new ticket, say) in the request that needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from policies.cluster.view import ClusterView
from policies.vocabulary.overrides import (
    OVERRIDE_ANNOTATION,
    OVERRIDE_POLICY_ID,
    OVERRIDE_REASON_ANNOTATION,
    overrides_of,
)
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action, Policy, Verdict
from webhook.config import GuardConfig


@dataclass(frozen=True)
class OverrideUse:
    policy: str
    user: str
    reason: str


LEFT_FROM_EARLIER = (
    f"not overridden: {OVERRIDE_ANNOTATION} was set by an earlier request, and an override "
    f"counts only in the request that sets it; change {OVERRIDE_REASON_ANNOTATION} in this one "
    "to override"
)


def _left_from_earlier(request: AdmissionRequest, ids: tuple[str, ...], reason: str) -> bool:
    """The object carried the same override and reason before this request."""
    return request.old is not None and overrides_of(request.old) == (ids, reason)


def apply_overrides(
    policies: Sequence[Policy[ClusterView]],
    config: GuardConfig,
    request: AdmissionRequest,
    verdicts: list[Verdict],
) -> tuple[list[Verdict], list[OverrideUse]]:
    """The verdicts with each deny the request overrides turned into a warning naming who and
    why, and the overrides used; a bad override (unknown policy, no reason) adds a verdict."""
    if request.operation == "DELETE":
        return verdicts, []
    ids, reason = overrides_of(request.obj)
    if not ids:
        return verdicts, []
    if _left_from_earlier(request, ids, reason):
        return [
            replace(v, message=f"{LEFT_FROM_EARLIER}: {v.message}")
            if v.action == Action.DENY and v.policy in ids
            else v
            for v in verdicts
        ], []
    unknown = [i for i in ids if i not in {p.id for p in policies}]
    problem = ""
    if unknown:
        problem = f"{OVERRIDE_ANNOTATION} names unknown policies: {', '.join(unknown)}"
    elif not reason:
        problem = (
            f"{OVERRIDE_ANNOTATION} names {', '.join(ids)} but {OVERRIDE_REASON_ANNOTATION} "
            "is empty: an override needs a reason"
        )
    if problem:
        # As strong as the policies it would override can be: under an all-audit
        # configuration (the audit overlay) a bad override blocks nothing either.
        named = [p for p in policies if p.id in ids] or list(policies)
        action = max((config.action_for(p) for p in named), default=Action.OFF)
        if action == Action.OFF:
            return verdicts, []
        return [*verdicts, Verdict(OVERRIDE_POLICY_ID, action, request.ref, problem)], []
    who = request.user.username or "an unknown user"
    used: list[OverrideUse] = []
    out: list[Verdict] = []
    for verdict in verdicts:
        if verdict.action == Action.DENY and verdict.policy in ids:
            used.append(OverrideUse(verdict.policy, who, reason))
            verdict = replace(
                verdict,
                action=Action.WARN,
                message=f"overridden by {who} ({reason}): {verdict.message}",
            )
        out.append(verdict)
    return out, used

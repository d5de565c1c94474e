"""A finding as a verdict at its action, and a policy's failure mode: what validation and the
audit both say of a policy, in one place so that a verdict reads the same from either."""

from __future__ import annotations

from policies.cluster.view import ClusterView
from policies.vocabulary.requests import ObjectRef
from policies.vocabulary.verdicts import Action, Finding, Policy, Verdict


def verdict(
    policy: Policy[ClusterView], action: Action, ref: ObjectRef, finding: Finding
) -> Verdict:
    """``finding`` at the configured ``action``, or below it where the finding caps it."""
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


def failure(policy: Policy[ClusterView], action: Action, ref: ObjectRef, why: str) -> Verdict:
    """What ``policy`` answers when it could not judge: its failure action, never above
    ``action``, saying why."""
    outcome = min(action, policy.failure_action)
    result = "denied: this policy fails closed" if outcome == Action.DENY else "not checked"
    return Verdict(
        policy=policy.id,
        action=outcome,
        resource=ref,
        message=f"gpu-guard could not evaluate this policy: {why}; {result}",
        evaluated=False,
    )

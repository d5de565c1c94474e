"""Judging by the ClusterPolicy in force when there may be several candidates.

Which ClusterPolicy the GPU Operator acts on is picked in one place
(``gpu_operator.cluster_policies_in_force``, asked through ``ClusterView``): one from v26.7.0,
every one where the choice lives only in the operator's memory (v26.3.x and earlier, or a
version the configuration does not give). A check whose answer depends on the ClusterPolicy
(the default workload mode, sandbox workloads, the vGPU default) runs under each candidate, and
the strictest answer stands: a change that would kill GPU users under any of them is judged as
if that one were in force, and says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from policies.cluster.gpu_operator import ClusterPolicyInfo
from policies.cluster.view import ClusterView
from policies.vocabulary.verdicts import Action, Finding

Judge = Callable[[ClusterPolicyInfo | None], Sequence[Finding]]


def _strength(findings: Sequence[Finding]) -> Action:
    """The strongest action these findings allow (uncapped: deny)."""
    return max((f.max_action or Action.DENY for f in findings), default=Action.OFF)


def under_each_policy_in_force(view: ClusterView, judge: Judge) -> Sequence[Finding]:
    """``judge``'s findings under the ClusterPolicy in force, or, with several candidates, under
    the first one (oldest first) whose findings are the strictest, each message saying which
    ClusterPolicy was assumed and why."""
    in_force = view.cluster_policies_in_force()
    if len(in_force) <= 1:
        return judge(in_force[0] if in_force else None)
    found: Sequence[Finding] = ()
    assumed = in_force[0]
    for policy in in_force:
        these = judge(policy)
        if _strength(these) > _strength(found):
            found, assumed = these, policy
    note = (
        f" (judged under ClusterPolicy {assumed.name}: the GPU Operator may act on any of "
        f"{len(in_force)}, {assumed_because(view)})"
    )
    return tuple(replace(f, message=f.message + note) for f in found)


def assumed_because(view: ClusterView) -> str:
    """Why several ClusterPolicies are candidates, in words."""
    version = view.gpu_operator_version()
    if version:
        return f"GPU Operator {version} keeps its choice in memory"
    return "gpuOperator.version is not configured"


def may_be_in_force(name: str, view: ClusterView) -> bool:
    """Whether the GPU Operator may be acting on the ClusterPolicy ``name``: from v26.7.0 only
    the oldest counts; where the choice is in the operator's memory, each may (and with none
    known yet, this one is judged). A change to any other moves nothing."""
    in_force = [p.name for p in view.cluster_policies_in_force()]
    return not in_force or name in in_force

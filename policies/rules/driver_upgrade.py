"""driver-upgrade-waves: what a new driver version will do, node by node, before it starts.

A new ``spec.driver.version`` in the ClusterPolicy starts the GPU Operator's upgrade controller
(docs/driver-upgrades.md): it cordons each node that runs the operator's driver, waits for the
jobs it is told to, deletes the pods with allocated GPUs (and, with ``drain.enable``, drains the
node), restarts the driver and uncordons. It walks the nodes in no order, at most
``maxParallelUpgrades`` and ``maxUnavailable`` allow at a time, so the warning says how many go
together, not an order; per node, the GPU users it will delete and those it cannot free, which
keep the driver from unloading (NVIDIA/gpu-operator#2570: pods without a GPU request, and
DaemonSets', are not freed); and the nodes labelled to be skipped. A warning, on a failurePolicy
Ignore webhook: an upgrade is never blocked by the guard, nor by a guard that is down.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.cluster.driver_upgrade import UPGRADE_SKIP_LABEL, NodePlan, plan_upgrade
from policies.cluster.gpu_operator import project_cluster_policy
from policies.cluster.gpu_users import GpuUser
from policies.cluster.kinds import CLUSTER_POLICY, NODE, POD, RESOURCE_CLAIM, RESOURCE_SLICE
from policies.cluster.policy_in_force import may_be_in_force
from policies.cluster.view import ClusterView
from policies.vocabulary.requests import UPDATE, AdmissionRequest
from policies.vocabulary.text import few, plural
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "driver-upgrade-waves"


def _why_stuck(user: GpuUser) -> str:
    return f"{user.key} ({'DaemonSet' if user.pod.daemonset else 'no GPU request'})"


def _node_text(plan: NodePlan) -> str:
    parts = []
    if plan.deleted:
        parts.append(f"deletes {few([u.key for u in plan.deleted])}")
    if plan.blocking:
        parts.append(f"cannot free {few([_why_stuck(u) for u in plan.blocking])}")
    return f"{plan.node} ({'; '.join(parts)})" if parts else plan.node


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    if request.obj is None or request.old is None:
        return ()
    before, after = project_cluster_policy(request.old), project_cluster_policy(request.obj)
    if before.driver_version == after.driver_version or not after.driver_enabled:
        return ()
    if not after.upgrade.auto:
        return ()  # the controller is off: nothing moves until someone deletes driver pods
    if not may_be_in_force(before.name, view):
        return ()  # the GPU Operator acts on another ClusterPolicy
    plan = plan_upgrade(view, after)
    if not plan.nodes and not plan.skipped:
        return ()
    change = f"driver.version {before.driver_version or 'unset'} -> {after.driver_version}"
    busy = [p for p in plan.nodes if p.deleted or p.blocking]
    idle = len(plan.nodes) - len(busy)
    pace = (
        f"up to {plan.at_once} at a time in no order"
        if plan.at_once
        else "for now only those already cordoned (maxUnavailable is used up)"
    )
    waves = f"{plural(len(plan.nodes), 'node')}, {pace}"
    message = f"{change} upgrades {waves}"
    if busy:
        message += f": {few([_node_text(p) for p in busy])}"
    if idle:
        message += f"; {idle} idle"
    if plan.skipped:
        message += f"; skipped: {few(list(plan.skipped))}"
    remediation = [
        f"free {p.node} first: stop {', '.join(u.key for u in p.blocking)} (the upgrade "
        "controller cannot, and the driver cannot unload under them)"
        for p in plan.nodes
        if p.blocking
    ]
    remediation.append(
        f"to hold a node back: kubectl label node NODE {UPGRADE_SKIP_LABEL}=true; watch "
        "nvidia.com/gpu-driver-upgrade-state on each node"
    )
    return (Finding(message, remediation=tuple(remediation)),)


POLICY = Policy(
    id=ID,
    summary=(
        "A ClusterPolicy update changes spec.driver.version with the upgrade controller on: the "
        "nodes it will upgrade, how many at a time (maxParallelUpgrades, maxUnavailable), per node "
        "the GPU users it deletes and those it cannot free (no GPU request, DaemonSets), and the "
        "nodes labelled to skip."
    ),
    scope={CLUSTER_POLICY: frozenset({UPDATE})},
    default_action=Action.WARN,
    default_reason=(
        "A driver upgrade is planned work the controller carries out safely by design: say what "
        "it will do and what will hold it up, never block it."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=frozenset({CLUSTER_POLICY, NODE, POD, RESOURCE_CLAIM, RESOURCE_SLICE}),
)

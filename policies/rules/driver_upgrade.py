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

With ``driver.useNvidiaDriverCRD`` (or no ClusterPolicy) NVIDIADriver CRs run the driver
instead: the ClusterPolicy's version is then not read, and the warning says so; an NVIDIADriver
whose image changes is foreseen the same way over the nodes it drives under its own
``upgradePolicy``, and one created or reselecting nodes names the nodes that change NVIDIADriver,
whose driver pod is replaced at once, outside the waves (docs/driver-upgrades.md section 3).
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.cluster.driver_upgrade import (
    UPGRADE_SKIP_LABEL,
    Handover,
    NodePlan,
    UpgradePlan,
    nvidia_drivers_in_charge,
    plan_nvidia_driver,
    plan_upgrade,
)
from policies.cluster.gpu_operator import project_cluster_policy
from policies.cluster.gpu_users import GpuUser
from policies.cluster.kinds import (
    CLUSTER_POLICY,
    GPU_CLUSTER,
    NODE,
    NVIDIA_DRIVER,
    POD,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
)
from policies.cluster.nvidia_driver import project_nvidia_driver
from policies.cluster.policy_in_force import may_be_in_force
from policies.cluster.view import ClusterView
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest
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


def _waves(plan: UpgradePlan) -> str:
    """ "upgrades 3 nodes, up to 1 at a time in no order: a (deletes x); 2 idle; skipped: b"."""
    busy = [p for p in plan.nodes if p.deleted or p.blocking]
    idle = len(plan.nodes) - len(busy)
    pace = (
        f"up to {plan.at_once} at a time in no order"
        if plan.at_once
        else "for now only those already cordoned (maxUnavailable is used up)"
    )
    text = f"upgrades {plural(len(plan.nodes), 'node')}, {pace}"
    if busy:
        text += f": {few([_node_text(p) for p in busy])}"
    if idle:
        text += f"; {idle} idle"
    if plan.skipped:
        text += f"; skipped: {few(list(plan.skipped))}"
    return text


def _finding(message: str, plans: Sequence[NodePlan]) -> Finding:
    remediation = [
        f"free {p.node} first: stop {', '.join(u.key for u in p.blocking)} (the upgrade "
        "controller cannot, and the driver cannot unload under them)"
        for p in plans
        if p.blocking
    ]
    remediation.append(
        f"to hold a node back: kubectl label node NODE {UPGRADE_SKIP_LABEL}=true; watch "
        "nvidia.com/gpu-driver-upgrade-state on each node"
    )
    return Finding(message, remediation=tuple(remediation))


def _cluster_policy(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    assert request.obj is not None
    if request.old is None:
        return ()
    before, after = project_cluster_policy(request.old), project_cluster_policy(request.obj)
    if before.driver_version == after.driver_version or not after.driver_enabled:
        return ()
    if not may_be_in_force(before.name, view):
        return ()  # the GPU Operator acts on another ClusterPolicy
    change = f"driver.version {before.driver_version or 'unset'} -> {after.driver_version}"
    if after.use_nvidia_driver_crd:
        names = few([d.name for d in view.nvidia_drivers()]) or "none yet"
        return (
            Finding(
                f"{change} upgrades nothing: NVIDIADriver CRs ({names}) run the driver "
                "(driver.useNvidiaDriverCRD). Change an NVIDIADriver's spec.version to upgrade.",
                remediation=("kubectl edit nvidiadriver NAME: set spec.version",),
            ),
        )
    if not after.upgrade.auto or after.sandbox_enabled:
        # The controller is off (sandbox workloads turn it off too: upgrade_controller.go
        # Reconcile): the driver DaemonSet is OnDelete, so nothing moves until someone
        # deletes driver pods.
        return ()
    plan = plan_upgrade(view, after)
    if not plan.nodes and not plan.skipped:
        return ()
    return (_finding(f"{change} {_waves(plan)}", plan.nodes),)


def _handovers(verb: str, handovers: Sequence[Handover]) -> str:
    """ "takes a (deletes x) from NVIDIADriver default"; one clause per other NVIDIADriver."""
    clauses = []
    for other in sorted({h.other for h in handovers}):
        nodes = few([_node_text(h.plan) for h in handovers if h.other == other])
        whom = f"NVIDIADriver {other}" if other else "no NVIDIADriver (their driver is removed)"
        clauses.append(f"{verb} {'from' if verb == 'takes' else 'to'} {whom} {nodes}")
    return "; ".join(clauses)


def _nvidia_driver(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    assert request.obj is not None
    before = None if request.old is None else project_nvidia_driver(request.old)
    after = project_nvidia_driver(request.obj)
    if after.deleting or not nvidia_drivers_in_charge(view):
        return ()  # a ClusterPolicy without useNvidiaDriverCRD runs the driver: this moves nothing
    plan = plan_nvidia_driver(view, before, after)
    moved = (*plan.taken, *plan.released)
    if not plan.waves.nodes and not plan.waves.skipped and not moved:
        return ()
    if before is None:
        change = f"new NVIDIADriver {after.name} ({after.image})"
    elif before.image == after.image:
        change = f"NVIDIADriver {after.name}'s new nodeSelector or default"
    elif before.repository_image == after.repository_image:
        change = f"NVIDIADriver {after.name} version {before.version or 'unset'} -> {after.version}"
    else:
        change = f"NVIDIADriver {after.name} {before.image} -> {after.image}"
    parts = [_waves(plan.waves)] if plan.waves.nodes or plan.waves.skipped else []
    if plan.taken:
        parts.append(_handovers("takes", plan.taken))
    if plan.released:
        parts.append(_handovers("hands", plan.released))
    message = f"{change} {'; '.join(parts)}"
    if moved:
        message += (
            ". A node changing NVIDIADriver has its driver replaced at once, outside the "
            "upgrade waves: free it first"
        )
    return (_finding(message, (*plan.waves.nodes, *(h.plan for h in moved))),)


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    if request.obj is None:
        return ()
    if request.group_kind == NVIDIA_DRIVER:
        return _nvidia_driver(request, view)
    return _cluster_policy(request, view)


POLICY = Policy(
    id=ID,
    summary=(
        "A driver version change (a ClusterPolicy's spec.driver.version, an NVIDIADriver's image, "
        "a new NVIDIADriver or one selecting other nodes) with the upgrade controller on: the "
        "nodes it will upgrade, how many at a time (maxParallelUpgrades, maxUnavailable), per node "
        "the GPU users it deletes and those it cannot free (no GPU request, DaemonSets), the "
        "nodes labelled to skip, and the nodes changing NVIDIADriver."
    ),
    scope={CLUSTER_POLICY: frozenset({UPDATE}), NVIDIA_DRIVER: frozenset({CREATE, UPDATE})},
    default_action=Action.WARN,
    default_reason=(
        "A driver upgrade is planned work the controller carries out safely by design: say what "
        "it will do and what will hold it up, never block it."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=frozenset(
        {CLUSTER_POLICY, GPU_CLUSTER, NVIDIA_DRIVER, NODE, POD, RESOURCE_CLAIM, RESOURCE_SLICE}
    ),
)

"""The GPU Operator's driver upgrade controller: which nodes a new driver version walks through,
how many at a time, and what each node's GPU users become (docs/driver-upgrades.md).

The controller (NVIDIA k8s-operator-libs ``pkg/upgrade``, vendored by the GPU Operator) takes the
nodes that run the operator's driver one by one through ``nvidia.com/gpu-driver-upgrade-state``:
upgrade-required, cordon-required, wait-for-jobs-required, pod-deletion-required (the pods with
allocated GPUs are deleted), drain-required (only with ``drain.enable``; it evicts every pod but
DaemonSets'), pod-restart-required, validation-required, uncordon-required, upgrade-done, or
upgrade-failed. It starts at most ``maxParallelUpgrades`` (0: all) at once, fewer when
``maxUnavailable`` (of the driver nodes, rounded up) minus the nodes already unavailable leaves
fewer, and picks them in no order; a node labelled ``nvidia.com/gpu-driver-upgrade.skip=true``
is skipped (``ProcessUpgradeRequiredNodes``, ``GetUpgradesAvailable``).

With NVIDIADriver CRs in charge (``driver.useNvidiaDriverCRD``, or no ClusterPolicy) the same
controller walks each NVIDIADriver's own nodes under its own ``upgradePolicy``, and a node that
changes NVIDIADriver has its driver replaced at once (``plan_nvidia_driver``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from policies.cluster.gpu_operator import (
    ClusterPolicyInfo,
    DriverUpgradePolicy,
    workload_label_ignored,
)
from policies.cluster.gpu_users import GpuUser, gpu_users_on
from policies.cluster.health import node_health
from policies.cluster.nodes import NodeInfo
from policies.cluster.nvidia_driver import OWNER_LABEL, NVIDIADriverInfo, owners
from policies.cluster.view import ClusterView
from policies.cluster.workload import (
    CONTAINER,
    DEPLOY_LABEL_PREFIX,
    GPU_PRESENT_LABEL,
    OPERANDS_DEPLOY_LABEL,
    WORKLOAD_LABEL,
    effective_mode,
    is_gpu_node,
)

UPGRADE_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
UPGRADE_SKIP_LABEL = "nvidia.com/gpu-driver-upgrade.skip"
DRIVER_DEPLOY_LABEL = f"{DEPLOY_LABEL_PREFIX}driver"
UPGRADE_FAILED = "upgrade-failed"
#: The states a node waits in on its workloads: jobs to finish, GPU pods to go, the drain.
WAITING_STATES = ("wait-for-jobs-required", "pod-deletion-required", "drain-required")


def _may_run_driver(node: NodeInfo, policy: ClusterPolicyInfo | None, any_mode: bool) -> bool:
    """A GPU node in container mode (the driver's deploy label is set only there; ``any_mode``
    where the operator ignores the mode label) whose driver and operands are not pinned off."""
    labels = node.labels
    return (
        is_gpu_node(node)
        and (any_mode or effective_mode(labels, policy) == CONTAINER)
        and labels.get(DRIVER_DEPLOY_LABEL) != "false"
        and labels.get(OPERANDS_DEPLOY_LABEL) != "false"
    )


def runs_driver(node: NodeInfo, policy: ClusterPolicyInfo) -> bool:
    """The ClusterPolicy's driver runs on the node."""
    return policy.driver_enabled and _may_run_driver(node, policy, False)


def driver_nodes(view: ClusterView, policy: ClusterPolicyInfo) -> list[NodeInfo]:
    """The nodes the controller manages, by name, from the indexes."""
    names = set(view.nodes_labelled(WORKLOAD_LABEL, CONTAINER))
    names.update(view.gpu_nodes_without_workload_label())
    nodes = [view.node(name) for name in sorted(names)]
    return [n for n in nodes if n is not None and runs_driver(n, policy)]


def max_unavailable(upgrade: DriverUpgradePolicy, total: int) -> int:
    """``maxUnavailable`` as a count of ``total`` nodes (a percentage rounds up)."""
    text = upgrade.max_unavailable.strip()
    if text.endswith("%"):
        return math.ceil(total * float(text[:-1] or 0) / 100)
    return int(text)


def unavailable(node: NodeInfo) -> bool:
    """Cordoned, NotReady or tainted so: what the controller counts against maxUnavailable."""
    return not node_health(node).healthy


@dataclass(frozen=True, slots=True)
class NodePlan:
    node: str
    deleted: tuple[GpuUser, ...]
    """Users the controller deletes (pods with allocated GPUs) or, with drain, evicts."""
    blocking: tuple[GpuUser, ...]
    """Users it cannot free: no GPU request (pod deletion passes them over), DaemonSet pods
    (drain leaves them). The driver cannot unload under them: the node waits or fails."""


@dataclass(frozen=True, slots=True)
class UpgradePlan:
    nodes: tuple[NodePlan, ...]
    skipped: tuple[str, ...]
    at_once: int
    """How many nodes can be upgrading together now (already cordoned ones proceed besides)."""


def node_plan(view: ClusterView, node: NodeInfo, drain: bool) -> NodePlan:
    """What replacing the node's driver does to its GPU users: those with a GPU request or claim
    are deleted (and, with ``drain``, every other pod but DaemonSets'); the rest hold it up."""
    deleted: list[GpuUser] = []
    blocking: list[GpuUser] = []
    for user in gpu_users_on(node.name, view):
        asked = bool(user.pod.gpu or user.claims)
        freed = asked or (drain and not user.pod.daemonset)
        (deleted if freed else blocking).append(user)
    return NodePlan(node.name, tuple(deleted), tuple(blocking))


def plan_waves(
    view: ClusterView,
    managed: Sequence[NodeInfo],
    walked: Sequence[NodeInfo],
    upgrade: DriverUpgradePolicy,
) -> UpgradePlan:
    """The controller walking ``walked`` of the ``managed`` nodes (maxUnavailable counts those)."""
    skipped = tuple(n.name for n in walked if n.labels.get(UPGRADE_SKIP_LABEL) == "true")
    moving = [n for n in walked if n.name not in skipped]
    limit = max_unavailable(upgrade, len(managed))
    parallel = upgrade.max_parallel or len(moving)
    at_once = max(0, min(parallel, limit) - sum(1 for n in managed if unavailable(n)))
    plans = tuple(node_plan(view, n, upgrade.drain) for n in moving)
    return UpgradePlan(plans, skipped, at_once)


def plan_upgrade(view: ClusterView, policy: ClusterPolicyInfo) -> UpgradePlan:
    managed = driver_nodes(view, policy)
    return plan_waves(view, managed, managed, policy.upgrade)


# --- NVIDIADriver CRs (docs/driver-upgrades.md section 3) ---------------------------------------


def nvidia_drivers_in_charge(view: ClusterView) -> bool:
    """NVIDIADriver CRs run the driver: no ClusterPolicy is in force, or one that may be sets
    ``driver.useNvidiaDriverCRD`` (gpu-operator controllers/nvidiadriver_controller.go: any
    other ClusterPolicy disables them; upgrade_controller.go ``Reconcile`` then reconciles the
    upgrades per NVIDIADriver)."""
    in_force = view.cluster_policies_in_force()
    return not in_force or any(p.use_nvidia_driver_crd for p in in_force)


@dataclass(frozen=True, slots=True)
class Handover:
    """A node changing NVIDIADriver: the former owner's DaemonSet no longer selects it, so its
    driver pod goes at once and the new owner's starts, outside the upgrade waves; the new pod's
    k8s-driver-manager deletes the GPU pods, without a drain (gpu-operator
    manifests/state-driver/0500_daemonset.yaml: ENABLE_GPU_POD_EVICTION true, ENABLE_AUTO_DRAIN
    false). (inferred from the DaemonSets' nodeSelectors, internal/state/nodepool.go)"""

    plan: NodePlan
    other: str
    """The NVIDIADriver it comes from or goes to; '' for none (no driver)."""


@dataclass(frozen=True, slots=True)
class NVIDIADriverPlan:
    waves: UpgradePlan
    """Its nodes whose driver image changes, walked by the upgrade controller."""
    taken: tuple[Handover, ...]
    """Nodes it takes from another NVIDIADriver."""
    released: tuple[Handover, ...]
    """Nodes it gives up."""


def plan_nvidia_driver(
    view: ClusterView, before: NVIDIADriverInfo | None, after: NVIDIADriverInfo
) -> NVIDIADriverPlan:
    """What creating or updating an NVIDIADriver to ``after`` does to the driver nodes. Today's
    owners are the nodes' owner labels; tomorrow's are ``owners`` with ``after`` in place of its
    stored self (the labels stay where the operator would refuse)."""
    named = (view.node(name) for name in view.nodes_labelled(GPU_PRESENT_LABEL, "true"))
    gpu = [n for n in named if n is not None]
    in_force = view.cluster_policies_in_force()
    policy = in_force[0] if in_force else None
    any_mode = workload_label_ignored(policy, view.gpu_clusters())
    driven = [n for n in gpu if _may_run_driver(n, policy, any_mode)]
    drivers = {d.name: d for d in view.nvidia_drivers()} | {after.name: after}
    now = {n.name: n.labels.get(OWNER_LABEL, "") for n in driven}
    assigned = owners(drivers.values(), gpu)
    nxt = now if assigned is None else assigned
    mine = [n for n in driven if nxt[n.name] == after.name]
    changed = before is None or before.image != after.image
    taken = [n for n in mine if now[n.name] not in ("", after.name)]
    walked = [
        n
        for n in mine
        if n not in taken and (changed or now[n.name] != after.name) and after.upgrade.auto
    ]
    return NVIDIADriverPlan(
        plan_waves(view, mine, walked, after.upgrade),
        tuple(Handover(node_plan(view, n, False), now[n.name]) for n in taken),
        tuple(
            Handover(node_plan(view, n, False), nxt[n.name])
            for n in driven
            if now[n.name] == after.name and nxt[n.name] != after.name
        ),
    )

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from policies.cluster.gpu_operator import ClusterPolicyInfo, DriverUpgradePolicy
from policies.cluster.gpu_users import GpuUser, gpu_users_on
from policies.cluster.health import node_health
from policies.cluster.nodes import NodeInfo
from policies.cluster.view import ClusterView
from policies.cluster.workload import (
    CONTAINER,
    DEPLOY_LABEL_PREFIX,
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


def runs_driver(node: NodeInfo, policy: ClusterPolicyInfo) -> bool:
    """The operator's driver runs on the node: a GPU node in container mode (the driver's deploy
    label is set only there) whose driver and operands are not pinned off."""
    labels = node.labels
    return (
        policy.driver_enabled
        and is_gpu_node(node)
        and effective_mode(labels, policy) == CONTAINER
        and labels.get(DRIVER_DEPLOY_LABEL) != "false"
        and labels.get(OPERANDS_DEPLOY_LABEL) != "false"
    )


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


def plan_upgrade(view: ClusterView, policy: ClusterPolicyInfo) -> UpgradePlan:
    managed = driver_nodes(view, policy)
    skipped = tuple(n.name for n in managed if n.labels.get(UPGRADE_SKIP_LABEL) == "true")
    walked = [n for n in managed if n.name not in skipped]
    upgrade = policy.upgrade
    limit = max_unavailable(upgrade, len(managed))
    parallel = upgrade.max_parallel or len(walked)
    at_once = max(0, min(parallel, limit) - sum(1 for n in managed if unavailable(n)))
    plans = []
    for node in walked:
        deleted: list[GpuUser] = []
        blocking: list[GpuUser] = []
        for user in gpu_users_on(node.name, view):
            asked = bool(user.pod.gpu or user.claims)
            freed = asked or (upgrade.drain and not user.pod.daemonset)
            (deleted if freed else blocking).append(user)
        plans.append(NodePlan(node.name, tuple(deleted), tuple(blocking)))
    return UpgradePlan(tuple(plans), skipped, at_once)

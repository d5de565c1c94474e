"""Node health: the one definition of "this node can run a workload now", with why and since when.

A provider is a node that advertises a resource AND is Ready AND is schedulable AND lacks the
not-ready/unreachable taints: status.allocatable keeps its last values on a dead node, so
advertising alone proves nothing (docs/field-guide.md section 2, node health).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from policies.objects import NodeInfo

if TYPE_CHECKING:
    from policies.view import ClusterView

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
UNHEALTHY_TAINTS = frozenset({NOT_READY_TAINT, UNREACHABLE_TAINT})
NOT_READY = "NotReady"
"""The problem of a node whose Ready condition is not True (or absent); always listed first."""


@dataclass(frozen=True, slots=True)
class NodeHealth:
    healthy: bool
    problems: tuple[str, ...]
    """Short labels: "NotReady", "cordoned", "tainted node.kubernetes.io/unreachable:NoExecute"."""
    since: datetime | None
    reason: str
    message: str

    def describe(self) -> str:
        """ "NotReady since 2026-07-10 (Kubelet stopped posting node status.)" and the rest."""
        if self.healthy:
            return "Ready"
        head = self.problems[0]
        if self.since is not None:
            head += f" since {self.since.date().isoformat()}"
        detail = self.message or self.reason
        if detail:
            head += f" ({detail})"
        rest = [p for p in self.problems[1:] if not p.startswith("tainted node.kubernetes.io/")]
        return ", ".join([head, *rest])


def node_health(node: NodeInfo) -> NodeHealth:
    problems: list[str] = []
    since: datetime | None = None
    reason = message = ""
    ready = node.condition("Ready")
    if ready is None:
        problems.append(NOT_READY)
        reason = "no Ready condition reported"
    elif ready.status != "True":
        problems.append(NOT_READY)
        since, reason, message = ready.last_transition, ready.reason, ready.message
    if node.unschedulable:
        problems.append("cordoned")
    for taint in node.taints:
        if taint.key in UNHEALTHY_TAINTS:
            problems.append(f"tainted {taint.key}:{taint.effect}")
    return NodeHealth(not problems, tuple(problems), since, reason, message)


def healthy_node(view: ClusterView, name: str) -> bool:
    """Whether the node of that name is in the view and healthy (a node not there is not)."""
    node = view.node(name)
    return node is not None and node_health(node).healthy


def sole_healthy_provider(view: ClusterView, resource: str) -> str:
    """The one healthy node that provides ``resource`` (device plugin or DRA), '' when none or
    several do: what a single failure would take away."""
    if view.healthy_provider_count(resource) != 1:
        return ""
    return next((n for n in view.providers_of(resource) if healthy_node(view, n)), "")

"""The Node projection: labels, scheduling (cordon, taints), conditions, extended allocatable,
kubelet version and swap: what node health, hardware and the node policies read.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from policies.cluster.conditions import Condition, conditions_of, find_condition
from policies.cluster.resources import is_extended_resource
from policies.vocabulary.fields import (
    as_maps,
    get_bool,
    get_counts,
    get_list,
    get_map,
    get_str,
    get_string_map,
    parse_count,
)
from policies.vocabulary.requests import JSONObject

#: k8s-operator-libs ``UpgradeWaitForPodCompletionStartTimeAnnotationKeyFmt`` for the GPU driver
#: (docs/driver-upgrades.md).
UPGRADE_WAIT_START_ANNOTATION = "nvidia.com/gpu-driver-upgrade-wait-for-pod-completion-start-time"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    unschedulable: bool
    taints: tuple[Taint, ...]
    conditions: tuple[Condition, ...]
    allocatable: Mapping[str, int]
    """Extended resources only (names with a domain), as last reported."""
    kubelet_version: str
    swap_capacity: int | None
    upgrade_wait_since: datetime | None = None
    """When the GPU Operator's driver upgrade began waiting for the node's jobs (the annotation
    ``UPGRADE_WAIT_START_ANNOTATION``, Unix seconds, set in wait-for-jobs-required)."""

    def condition(self, type_: str) -> Condition | None:
        return find_condition(self.conditions, type_)


def project_scheduling(obj: JSONObject) -> tuple[bool, tuple[Taint, ...]]:
    """A node's spec.unschedulable and spec.taints alone: what cordons and taints change,
    read without the cost of the whole node (status is most of an 18 KB Node)."""
    spec = get_map(obj, "spec", "")
    taints = tuple(
        Taint(get_str(t, "key", w), get_str(t, "value", w), get_str(t, "effect", w))
        for w, t in as_maps(get_list(spec, "taints", "spec"), "spec.taints")
    )
    return get_bool(spec, "unschedulable", "spec"), taints


def _shared_strings(labels: dict[str, str]) -> dict[str, str]:
    """Node labels with one string per distinct key and value: thousands of nodes repeat the
    same few dozen keys and a few thousand values, each decoded as a fresh string."""
    return {sys.intern(k): sys.intern(v) for k, v in labels.items()}


def _wait_since(meta: JSONObject) -> datetime | None:
    """The upgrade's wait start; None without it, or when it is not Unix seconds (the operator's
    bookkeeping: a bad value must not make the whole node unreadable)."""
    text = get_map(meta, "annotations", "metadata").get(UPGRADE_WAIT_START_ANNOTATION)
    if not isinstance(text, str) or not text.isdigit():
        return None
    return datetime.fromtimestamp(int(text), UTC)


def project_node(obj: JSONObject) -> NodeInfo:
    meta = get_map(obj, "metadata", "")
    status = get_map(obj, "status", "")
    node_info = get_map(status, "nodeInfo", "status")
    swap = get_map(node_info, "swap", "status.nodeInfo")
    unschedulable, taints = project_scheduling(obj)
    swap_capacity = swap.get("capacity")
    return NodeInfo(
        name=get_str(meta, "name", "metadata"),
        labels=_shared_strings(get_string_map(meta, "labels", "metadata")),
        unschedulable=unschedulable,
        taints=taints,
        conditions=conditions_of(status, "status"),
        allocatable=get_counts(status, "allocatable", "status", is_extended_resource),
        kubelet_version=get_str(node_info, "kubeletVersion", "status.nodeInfo"),
        swap_capacity=(
            None
            if swap_capacity is None
            else parse_count(swap_capacity, "status.nodeInfo.swap.capacity")
        ),
        upgrade_wait_since=_wait_since(meta),
    )

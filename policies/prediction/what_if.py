"""What-if events: a hypothetical change applied to copies of the raw objects of a snapshot.

Pure: the objects given are never modified (each event edits deep copies), nothing is written
anywhere; the caller builds a second state from the result and audits both.

A node that goes down loses its pods and VMIs in the copy: the node-lifecycle controller's
NoExecute taint evicts them (after the default 300 s toleration) and KubeVirt's VM controller
then recreates each VMI of a VM that should run, elsewhere or nowhere. Keeping them as
Terminating would describe the first five minutes; the audit is about what stays broken, so the
copy holds the state that follows: the VM without a VMI, judged by whether it can start again.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from policies.cluster.gpu_operator import cluster_policies_in_force, project_cluster_policy
from policies.cluster.health import NOT_READY_TAINT, UNREACHABLE_TAINT
from policies.cluster.kinds import (
    CLUSTER_POLICY,
    KUBEVIRT,
    NODE,
    NVIDIA_DRIVER,
    POD,
    VIRTUAL_MACHINE_INSTANCE,
    group_kind_of,
)
from policies.cluster.kubevirt import (
    LIVE_MIGRATE,
    effective_eviction_strategy,
    project_kubevirt,
    project_vmi,
)
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.requests import GroupKind, JSONObject
from policies.vocabulary.text import rfc3339

NODE_DOWN = "node-down"
CORDON = "cordon"
DRAIN = "drain"
LABEL = "label"
DRIVER_UPGRADE = "driver-upgrade"
KINDS = (NODE_DOWN, CORDON, DRAIN, LABEL, DRIVER_UPGRADE)

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NODE_STATUS_UNKNOWN = "NodeStatusUnknown"
KUBELET_STOPPED = "Kubelet stopped posting node status."
EXTERNAL = "External"


class WhatIfError(ValueError):
    """An event that cannot be applied; the text is the one line the command prints."""


@dataclass(frozen=True, slots=True)
class WhatIfEvent:
    kind: str
    node: str
    key: str = ""
    value: str | None = ""
    """The label's new value; None removes it (``label=NODE:KEY-``, as kubectl writes it)."""

    def __str__(self) -> str:
        if self.kind == DRIVER_UPGRADE:
            return f"{DRIVER_UPGRADE}={self.value}"
        if self.kind == LABEL:
            change = f"{self.key}-" if self.value is None else f"{self.key}={self.value}"
            return f"{LABEL}={self.node}:{change}"
        return f"{self.kind}={self.node}"


def parse_event(text: str) -> WhatIfEvent:
    """``KIND=NODE``, ``label=NODE:KEY=VALUE`` or ``label=NODE:KEY-`` (the label removed); a
    WhatIfError names what is wrong."""
    kind, sep, rest = text.partition("=")
    if not sep or not rest:
        raise WhatIfError(f"what-if {text!r}: expected KIND=NODE (kinds: {', '.join(KINDS)})")
    if kind not in KINDS:
        raise WhatIfError(f"what-if {text!r}: unknown event {kind!r} (kinds: {', '.join(KINDS)})")
    if kind == DRIVER_UPGRADE:
        return WhatIfEvent(kind, "", value=rest)
    if kind != LABEL:
        return WhatIfEvent(kind, rest)
    node, colon, label = rest.partition(":")
    key, equals, value = label.partition("=")
    if node and colon and not equals and len(key) > 1 and key.endswith("-"):
        return WhatIfEvent(kind, node, key[:-1], None)
    if not node or not colon or not key or not equals:
        raise WhatIfError(f"what-if {text!r}: expected label=NODE:KEY=VALUE or label=NODE:KEY-")
    return WhatIfEvent(kind, node, key, value)


@dataclass(frozen=True, slots=True)
class NodeUpdate:
    """The UPDATE an event would send, for admission to judge: a label event's Node, or a
    driver upgrade's ClusterPolicy (its new ``spec.driver.version``) or NVIDIADriver (its new
    ``spec.version``)."""

    event: WhatIfEvent
    old: JSONObject
    new: JSONObject


@dataclass
class Outcome:
    """The edited copies, the notes a person must read (a drain that hangs, a VM that stops),
    and the Node UPDATEs the label events would send."""

    objects: list[JSONObject]
    notes: list[str] = field(default_factory=list)
    updates: list[NodeUpdate] = field(default_factory=list)


def apply_events(
    objects: Sequence[JSONObject], events: Sequence[WhatIfEvent], now: datetime
) -> Outcome:
    """Every event in order, on a deep copy of ``objects``."""
    outcome = Outcome([copy.deepcopy(obj) for obj in objects])
    for event in events:
        if event.kind == DRIVER_UPGRADE:
            _driver_upgrade(outcome, event)
            continue
        node = _node(outcome.objects, event)
        if event.kind == NODE_DOWN:
            _node_down(outcome, node, now)
        elif event.kind == CORDON:
            _cordon(node, now)
        elif event.kind == DRAIN:
            _cordon(node, now)
            _drain(outcome, event.node)
        else:
            old = copy.deepcopy(node)
            labels = node.setdefault("metadata", {}).setdefault("labels", {})
            if event.value is None:
                labels.pop(event.key, None)
            else:
                labels[event.key] = event.value
            outcome.updates.append(NodeUpdate(event, old, copy.deepcopy(node)))
    return outcome


def _driver_upgrade(outcome: Outcome, event: WhatIfEvent) -> None:
    """The new version given to what runs the driver (docs/driver-upgrades.md section 4):
    ``NAME:VERSION`` the NVIDIADriver NAME; ``VERSION`` the oldest ClusterPolicy, or, where
    NVIDIADriver CRs run the driver (it sets ``driver.useNvidiaDriverCRD``, or there is none),
    the one NVIDIADriver. A digest (``sha256:...``) is a version, not a name."""
    assert event.value is not None
    name, colon, version = event.value.partition(":")
    drivers = _mutable(outcome, NVIDIA_DRIVER)
    if colon and name != "sha256":
        named = [o for o in drivers if o["metadata"].get("name") == name]
        if not named:
            raise WhatIfError(f"what-if {event}: no NVIDIADriver {name!r} in the state")
        _new_version(outcome, event, named[0], ("spec",), version)
        return
    policies = _mutable(outcome, CLUSTER_POLICY)
    try:
        # The oldest: the one v26.7.0 acts on, and the first candidate of earlier releases.
        in_force = cluster_policies_in_force((project_cluster_policy(o) for o in policies), "")
    except ObjectError as exc:
        raise WhatIfError(f"what-if {event}: the ClusterPolicy's {exc}") from None
    if in_force and not in_force[0].use_nvidia_driver_crd:
        obj = next(o for o in policies if o["metadata"].get("name") == in_force[0].name)
        _new_version(outcome, event, obj, ("spec", "driver"), event.value)
        return
    if len(drivers) == 1:
        _new_version(outcome, event, drivers[0], ("spec",), event.value)
        return
    if not drivers:
        where = "ClusterPolicy nor NVIDIADriver" if not in_force else "NVIDIADriver"
        raise WhatIfError(f"what-if {event}: no {where} in the state")
    names = ", ".join(sorted(str(o["metadata"].get("name")) for o in drivers))
    raise WhatIfError(
        f"what-if {event}: NVIDIADrivers run the driver ({names}): name one, "
        f"{DRIVER_UPGRADE}=NAME:VERSION"
    )


def _mutable(outcome: Outcome, kind: GroupKind) -> list[dict[str, Any]]:
    return [
        o  # type: ignore[misc]  # our own deep copies: mutable
        for o in outcome.objects
        if group_kind_of(o) == kind
    ]


def _new_version(
    outcome: Outcome, event: WhatIfEvent, obj: dict[str, Any], path: tuple[str, ...], version: str
) -> None:
    """``obj`` with ``version`` at ``path``.version, as the UPDATE admission judges."""
    old = copy.deepcopy(obj)
    parent = obj
    for key in path:
        child = parent.get(key)
        parent[key] = child = dict(child) if isinstance(child, dict) else {}
        parent = child
    parent["version"] = version
    outcome.updates.append(NodeUpdate(event, old, copy.deepcopy(obj)))


def _node(objects: list[JSONObject], event: WhatIfEvent) -> dict[str, Any]:
    for obj in objects:
        if group_kind_of(obj) == NODE and obj["metadata"].get("name") == event.node:
            return obj  # type: ignore[return-value]  # our own deep copy: mutable
    raise WhatIfError(f"what-if {event}: no Node {event.node!r} in the state")


def _set_taint(node: dict[str, Any], key: str, effect: str, now: datetime) -> None:
    taints = node.setdefault("spec", {}).setdefault("taints", [])
    if any(t.get("key") == key and t.get("effect") == effect for t in taints):
        return
    taint: dict[str, Any] = {"key": key, "effect": effect}
    if effect == "NoExecute":
        taint["timeAdded"] = rfc3339(now)
    taints.append(taint)


def _node_down(outcome: Outcome, node: dict[str, Any], now: datetime) -> None:
    """Ready=Unknown as the node-lifecycle controller writes it, its unreachable taints (in
    place of not-ready ones), and its pods and VMIs gone (see the module docstring)."""
    status = node.setdefault("status", {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
    conditions.append(
        {
            "type": "Ready",
            "status": "Unknown",
            "reason": NODE_STATUS_UNKNOWN,
            "message": KUBELET_STOPPED,
            "lastTransitionTime": rfc3339(now),
            "lastHeartbeatTime": rfc3339(now),
        }
    )
    status["conditions"] = conditions
    spec = node.setdefault("spec", {})
    spec["taints"] = [t for t in spec.get("taints") or [] if t.get("key") != NOT_READY_TAINT]
    for effect in ("NoSchedule", "NoExecute"):
        _set_taint(node, UNREACHABLE_TAINT, effect, now)
    name = node["metadata"]["name"]
    outcome.objects = [obj for obj in outcome.objects if not _runs_on(obj, name)]


def _cordon(node: dict[str, Any], now: datetime) -> None:
    """``kubectl cordon``: spec.unschedulable, and the taint the controller adds for it."""
    node.setdefault("spec", {})["unschedulable"] = True
    _set_taint(node, UNSCHEDULABLE_TAINT, "NoSchedule", now)


def _runs_on(obj: JSONObject, node: str) -> bool:
    kind = group_kind_of(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if kind == POD:
        return bool(spec.get("nodeName") == node)
    if kind == VIRTUAL_MACHINE_INSTANCE:
        return bool(status.get("nodeName") == node)
    return False


def _daemon_pod(obj: JSONObject) -> bool:
    """``kubectl drain --ignore-daemonsets`` leaves DaemonSet and mirror (static) pods."""
    meta = obj.get("metadata") or {}
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return True
    return any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or [])


def _launcher_of(obj: JSONObject) -> str:
    """ "namespace/vmi" for a virt-launcher pod, else ''."""
    meta = obj.get("metadata") or {}
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") == "VirtualMachineInstance":
            return f"{meta.get('namespace', '')}/{owner.get('name', '')}"
    return ""


def _drain(outcome: Outcome, node: str) -> None:
    """``kubectl drain --ignore-daemonsets``: pods evicted; each VMI as its eviction strategy
    and its host devices decide. A VMI with host devices cannot live-migrate: under LiveMigrate
    (or External) the eviction is refused and the drain hangs, the VMI stays; under None or
    LiveMigrateIfPossible the VMI is stopped and must start elsewhere."""
    kubevirt = next(
        (project_kubevirt(o) for o in outcome.objects if group_kind_of(o) == KUBEVIRT), None
    )
    staying: set[str] = set()
    for obj in outcome.objects:
        if group_kind_of(obj) != VIRTUAL_MACHINE_INSTANCE or not _runs_on(obj, node):
            continue
        vmi = project_vmi(obj)
        strategy = effective_eviction_strategy(vmi.eviction_strategy, kubevirt) or "None"
        devices = sorted({d.label for d in vmi.devices})
        if not devices:
            continue
        held = ", ".join(devices)
        if strategy in (LIVE_MIGRATE, EXTERNAL):
            staying.add(vmi.key)
            outcome.notes.append(
                f"drain of {node} hangs: VirtualMachineInstance {vmi.key} has evictionStrategy "
                f"{strategy} but cannot live-migrate ({held}): its eviction is refused forever"
            )
        else:
            outcome.notes.append(
                f"drain of {node} stops VirtualMachineInstance {vmi.key} (evictionStrategy "
                f"{strategy}, {held} cannot live-migrate): it must start elsewhere"
            )

    def evicted(obj: JSONObject) -> bool:
        if not _runs_on(obj, node):
            return False
        kind = group_kind_of(obj)
        if kind == VIRTUAL_MACHINE_INSTANCE:
            meta = obj.get("metadata") or {}
            return f"{meta.get('namespace', '')}/{meta.get('name', '')}" not in staying
        return not _daemon_pod(obj) and _launcher_of(obj) not in staying

    outcome.objects = [obj for obj in outcome.objects if not evicted(obj)]

"""``gpu-guard inventory``: one row per GPU node, the view people open first.

Pure: (view, now) -> rows. Every fact comes from where the audit already has it (node facts,
the hardware index, GPU users, the provider counts, a vGPU node's profile labels and mdev
resources); this module only puts them side by side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from policies.cluster.counter_fit import counters_on
from policies.cluster.dra import IMPLICIT_EXTENDED_PREFIX
from policies.cluster.gpu_users import device_label, vm_users_on
from policies.cluster.health import healthy_node, sole_healthy_provider
from policies.cluster.pciids import PciId
from policies.cluster.taint_fit import serving_count
from policies.cluster.vgpu import mdev_resources, permitted_mdevs
from policies.cluster.view import AuditView, ClusterView
from policies.cluster.workload import (
    VGPU_CONFIG_LABEL,
    VGPU_CONFIG_STATE_LABEL,
    VM_VGPU,
    effective_mode,
)
from policies.diagnoses.facts import (
    NodeFacts,
    describe_device,
    gpu_nodes_of,
    nvidia_gpus_by_node,
)
from policies.diagnoses.workloads import waiting_vms
from policies.vocabulary.text import format_duration, rfc3339

#: How a DeviceClass is named among the resources a node alone provides.
DEVICE_CLASS_PREFIX = "DeviceClass "


@dataclass(frozen=True, slots=True)
class GpuModel:
    """One GPU model seen on the node, with every source that shows it."""

    pci: str
    """ "10de:2b85" """
    name: str
    """ "GB202 [GeForce RTX 5090]", '' when pci.ids does not know it."""
    sources: tuple[str, ...]

    def describe(self) -> str:
        return " ".join(p for p in (self.pci, self.name) if p)


@dataclass(frozen=True, slots=True)
class VmiUse:
    """A VMI on the node and the devices it asks for (deviceNames, or its claims)."""

    vmi: str
    phase: str
    devices: tuple[str, ...]

    def describe(self) -> str:
        return f"vmi {self.vmi} ({', '.join(self.devices) or 'no devices'})"


@dataclass(frozen=True, slots=True)
class ClaimUse:
    """A ResourceClaim allocated on the node: its devices and the pods it is reserved for."""

    claim: str
    devices: tuple[str, ...]
    pods: tuple[str, ...]

    def describe(self) -> str:
        held = f"claim {self.claim}: {', '.join(self.devices)}"
        return held + (f" -> {', '.join(self.pods)}" if self.pods else " (no pod)")


@dataclass(frozen=True, slots=True)
class VgpuProfile:
    """A vGPU node's profile: ``nvidia.com/vgpu.config`` (None: unset, the device manager's
    default applies), ``nvidia.com/vgpu.config.state`` ('' when unset) and the mdev resources
    it advertises, free or not (docs/vgpu.md section 5)."""

    config: str | None
    state: str
    mdevs: tuple[tuple[str, int], ...]

    def describe(self) -> list[str]:
        """ "profile A10-12Q (success)", then one line an mdev resource."""
        state = f" ({self.state})" if self.state else " (no state label)"
        head = f"profile {self.config}{state}" if self.config else f"profile unset{state}"
        return [head, *(f"{r}: {n}" for r, n in self.mdevs)] if self.mdevs else [head, "no mdevs"]

    def to_json(self) -> dict[str, Any]:
        return {"config": self.config, "state": self.state, "mdevs": dict(self.mdevs)}


@dataclass(frozen=True, slots=True)
class InventoryRow:
    node: str
    health: str
    """ "Ready", else the first problem ("NotReady", "cordoned", "tainted ...")."""
    problems: tuple[str, ...]
    since: datetime | None
    reason: str
    mode: str
    gpus: tuple[GpuModel, ...]
    allocatable: tuple[tuple[str, int], ...]
    """NVIDIA device-plugin resources with units > 0 (a dead node's stale values included)."""
    dra_devices: tuple[str, ...]
    pods: tuple[str, ...]
    """Pods holding its NVIDIA GPUs (Kata pods last), with what they hold."""
    vmis: tuple[VmiUse, ...]
    claims: tuple[ClaimUse, ...]
    claims_of_pods: frozenset[str]
    """Claims ``pods`` already name with their devices: said once in ``in_use``."""
    vms_waiting: tuple[str, ...]
    """VMs that run again only when this node provides their device again."""
    sole_provider: tuple[str, ...]
    """Resources (and DeviceClasses) no other healthy node provides; none while it is not
    healthy itself."""
    vgpu: VgpuProfile | None = None
    """On a vGPU node (vm-vgpu, a profile label, or mdevs advertised): its profile."""
    counters: tuple[str, ...] = ()
    """Each shared counter set its devices draw on, and how much allocated claims hold."""

    @property
    def in_use(self) -> tuple[str, ...]:
        """Who uses the node, one phrase each: pods, VMIs, claims."""
        return (
            self.pods
            + tuple(v.describe() for v in self.vmis)
            + tuple(c.describe() for c in self.claims if c.claim not in self.claims_of_pods)
        )

    def to_json(self, now: datetime) -> dict[str, Any]:
        out: dict[str, Any] = {"node": self.node, "health": self.health}
        if self.problems:
            out["problems"] = list(self.problems)
        if self.since is not None:
            out["since"] = rfc3339(self.since)
            out["duration"] = format_duration(now - self.since)
        if self.reason:
            out["reason"] = self.reason
        out["mode"] = self.mode
        out["gpus"] = [
            {"pci": g.pci, "model": g.name, "sources": list(g.sources)} for g in self.gpus
        ]
        out["allocatable"] = dict(self.allocatable)
        out["draDevices"] = list(self.dra_devices)
        out["inUse"] = {
            "pods": list(self.pods),
            "vmis": [
                {"name": v.vmi, "phase": v.phase, "devices": list(v.devices)} for v in self.vmis
            ],
            "claims": [
                {"name": c.claim, "devices": list(c.devices), "pods": list(c.pods)}
                for c in self.claims
            ],
        }
        out["vmsWaiting"] = list(self.vms_waiting)
        out["soleProvider"] = list(self.sole_provider)
        if self.vgpu is not None:
            out["vgpu"] = self.vgpu.to_json()
        if self.counters:
            out["draCounters"] = list(self.counters)
        return out


def _models(hardware: Mapping[PciId, frozenset[str]], view: ClusterView) -> tuple[GpuModel, ...]:
    db = view.pci_database
    return tuple(
        GpuModel(str(pci), db.device_name(pci) or "", tuple(sorted(sources)))
        for pci, sources in sorted(hardware.items())
    )


def _vmis(node: str, view: ClusterView) -> tuple[VmiUse, ...]:
    return tuple(
        VmiUse(vmi.key, vmi.phase, tuple(d.label for d in vmi.devices))
        for vmi in view.vmis_on(node)
        if vmi.live
    )


def _claims(node: str, view: ClusterView) -> tuple[ClaimUse, ...]:
    return tuple(
        ClaimUse(
            held.claim.key,
            tuple(device_label(result, published) for result, published in held.devices),
            tuple(p.key for p in held.pods),
        )
        for held in view.claims_allocated_on(node)
    )


def _vgpu(name: str, view: ClusterView) -> VgpuProfile | None:
    node = view.node(name)
    if node is None:
        return None
    labels = node.labels
    vgpu_node = effective_mode(labels, view.cluster_policy()) == VM_VGPU
    mdevs = permitted_mdevs(view.kubevirt())
    held = mdev_resources(node, mdevs, vgpu_node)
    config, state = labels.get(VGPU_CONFIG_LABEL), labels.get(VGPU_CONFIG_STATE_LABEL, "")
    if not (vgpu_node or held or config is not None or state):
        return None
    return VgpuProfile(config, state, held)


def _sole_classes(view: ClusterView) -> dict[str, list[str]]:
    """Node -> the DeviceClasses whose devices, of all healthy nodes, only it publishes untainted
    (NoSchedule or NoExecute keep requests off); once per inventory (a scan of each class's
    per-node counts, not one per node)."""
    out: dict[str, list[str]] = {}
    for device_class in view.device_classes():
        counts = view.class_device_counts(device_class.name)
        if counts.get("", 0) > 0:  # devices usable from any node: no one node holds them
            continue
        healthy = [
            n
            for n, c in counts.items()
            if c > 0 and healthy_node(view, n) and serving_count(view, device_class.name, n, c)
        ]
        if len(healthy) == 1:
            out.setdefault(healthy[0], []).append(DEVICE_CLASS_PREFIX + device_class.name)
    return out


def _sole_provider(
    facts: NodeFacts, view: ClusterView, classes: Mapping[str, Sequence[str]]
) -> tuple[str, ...]:
    if not facts.health.healthy:
        return ()
    resources = [
        resource
        for resource in sorted(view.resources_provided_on(facts.name))
        if not resource.startswith(IMPLICIT_EXTENDED_PREFIX)  # said as its DeviceClass
        and sole_healthy_provider(view, resource) == facts.name
    ]
    return (*resources, *classes.get(facts.name, ()))


def _row(
    facts: NodeFacts,
    view: AuditView,
    hardware: Mapping[PciId, frozenset[str]],
    waiting: Mapping[str, Sequence[str]],
    classes: Mapping[str, Sequence[str]],
) -> InventoryRow:
    cluster = view.cluster
    health = facts.health
    return InventoryRow(
        node=facts.name,
        health=health.problems[0] if health.problems else "Ready",
        problems=health.problems,
        since=health.since,
        reason=health.message or health.reason,
        mode=facts.mode_text,
        gpus=_models(hardware, cluster),
        allocatable=facts.nvidia_allocatable,
        dra_devices=tuple(describe_device(d) for d in facts.dra_devices),
        pods=tuple(user.describe() for user in facts.gpu_pods)
        + tuple(u.describe() for u in vm_users_on(facts.name, cluster) if u.kata),
        vmis=_vmis(facts.name, cluster),
        claims=_claims(facts.name, cluster),
        claims_of_pods=frozenset(c.claim for user in facts.gpu_pods for c in user.claims),
        vms_waiting=tuple(waiting.get(facts.name, ())),
        sole_provider=_sole_provider(facts, cluster, classes),
        vgpu=_vgpu(facts.name, cluster),
        counters=counters_on(facts.name, cluster) if facts.dra_devices else (),
    )


@dataclass(frozen=True, slots=True)
class Inventory:
    """The GPU nodes at one moment: durations are measured to ``now``."""

    now: datetime
    nodes: tuple[InventoryRow, ...]

    def to_json(self) -> dict[str, Any]:
        """``-o json``: the contract scripts read."""
        return {"now": rfc3339(self.now), "nodes": [n.to_json(self.now) for n in self.nodes]}


def inventory(view: ClusterView | AuditView, now: datetime) -> Inventory:
    """Every GPU node (as the audit's overview calls one), by name."""
    audit = view if isinstance(view, AuditView) else AuditView(view)
    hardware = nvidia_gpus_by_node(audit.cluster)
    waiting = waiting_vms(audit)
    classes = _sole_classes(audit.cluster)
    rows = tuple(
        _row(facts, audit, hardware.get(facts.name, {}), waiting, classes)
        for facts in gpu_nodes_of(audit)
    )
    return Inventory(now, rows)

"""NVIDIA vGPU on KubeVirt: which devices of a VMI are vGPUs (mdevs), and the profiles nodes offer.

The facts, with their sources, are docs/vgpu.md: the vGPU Device Manager applies the config
named by ``nvidia.com/vgpu.config`` (section 1) by deleting every mdev of each GPU whose layout
differs, whoever holds them (section 3); the sandbox device plugin advertises each mdev type as
``nvidia.com/<sysfs name, spaces to _>`` (``nvidia.com/NVIDIA_A10-12Q``), whose profile is the
text after the last ``_`` (section 4).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from policies.cluster.gpu_operator import ClusterPolicyInfo
from policies.cluster.kubevirt import KubeVirtInfo, VMIInfo
from policies.cluster.nodes import NodeInfo
from policies.cluster.resources import NVIDIA_DOMAIN, is_container_gpu_resource, is_nvidia_resource
from policies.cluster.view import ClusterView
from policies.cluster.workload import (
    VGPU_CONFIG_LABEL,
    VM_VGPU,
    WORKLOAD_LABEL,
    effective_mode,
)
from policies.vocabulary.text import few


def profile_of(resource: str) -> str:
    """``nvidia.com/NVIDIA_A10-12Q`` -> ``A10-12Q``; a vGPU type name holds no ``_`` or space,
    so it is what follows the last ``_`` of the sysfs name (docs/vgpu.md section 4)."""
    name = resource.removeprefix(NVIDIA_DOMAIN)
    return name.rpartition("_")[2].rpartition(" ")[2]


def permitted_mdevs(kubevirt: KubeVirtInfo | None) -> frozenset[str]:
    """The resourceNames the KubeVirt CR permits as mediated devices."""
    if kubevirt is None:
        return frozenset()
    return frozenset(m.resource_name for m in kubevirt.mediated_devices)


def is_vgpu_resource(resource: str, mdevs: frozenset[str], vgpu_node: bool) -> bool:
    """A vGPU: permitted as a mediated device, or an NVIDIA VM device on a vm-vgpu node (the
    sandbox plugin serves nothing else there)."""
    if resource in mdevs:
        return True
    return vgpu_node and is_nvidia_resource(resource) and not is_container_gpu_resource(resource)


def mdev_resources(
    node: NodeInfo, mdevs: frozenset[str], vgpu_node: bool
) -> tuple[tuple[str, int], ...]:
    """The vGPU resources ``node`` advertises with their counts (> 0: free or not), by name."""
    return tuple(
        sorted(
            (r, n)
            for r, n in node.allocatable.items()
            if n > 0 and is_vgpu_resource(r, mdevs, vgpu_node)
        )
    )


@dataclass(frozen=True, slots=True)
class VgpuHolder:
    """A live VMI on the node and the vGPU resources it holds there."""

    vmi: VMIInfo
    resources: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.vmi.key} ({', '.join(self.resources)})"


def vgpu_holders_on(
    node: str,
    labels: Mapping[str, str],
    view: ClusterView,
    policy: ClusterPolicyInfo | None,
) -> tuple[VgpuHolder, ...]:
    """Live VMIs on ``node`` holding its vGPUs; ``labels`` are the node's (as they are now),
    read under ``policy`` (its default mode for an unlabelled node)."""
    mdevs = permitted_mdevs(view.kubevirt())
    vgpu_node = effective_mode(labels, policy) == VM_VGPU
    holders = []
    for vmi in view.vmis_on(node):
        if not vmi.live:
            continue
        held = sorted(
            {
                d.device_name
                for d in vmi.devices
                if is_vgpu_resource(d.device_name, mdevs, vgpu_node)
            }
        )
        if held:
            holders.append(VgpuHolder(vmi, tuple(held)))
    return tuple(sorted(holders, key=lambda h: (h.vmi.namespace, h.vmi.name)))


# --- the profiles nodes offer, and what a name may have meant -------------------------------------

UNSET = "unset"


@dataclass(frozen=True, slots=True)
class VgpuNode:
    """A node that serves vGPUs (vm-vgpu mode, or advertising a permitted mdev): its profile
    label and the mdev resources it advertises (count > 0), by name."""

    name: str
    config: str | None
    """``nvidia.com/vgpu.config``; None when unset (the device manager applied its default)."""
    resources: tuple[str, ...]


def vgpu_nodes(view: ClusterView) -> tuple[VgpuNode, ...]:
    """Every node that serves vGPUs, by name: index hits (the vm-vgpu label, the unlabelled GPU
    nodes when the ClusterPolicy's default is vm-vgpu, the providers of permitted mdevs)."""
    policy = view.cluster_policy()
    mdevs = permitted_mdevs(view.kubevirt())
    names = set(view.nodes_labelled(WORKLOAD_LABEL, VM_VGPU))
    if policy is not None and effective_mode({}, policy) == VM_VGPU:
        names.update(view.gpu_nodes_without_workload_label())
    for resource in mdevs:
        names.update(view.providers_of(resource))
    out = []
    for name in sorted(names):
        node = view.node(name)
        if node is None:
            continue
        vgpu_node = effective_mode(node.labels, policy) == VM_VGPU
        held = tuple(r for r, _ in mdev_resources(node, mdevs, vgpu_node))
        if held or vgpu_node:
            out.append(VgpuNode(name, node.labels.get(VGPU_CONFIG_LABEL), held))
    return tuple(out)


def _short(name: str) -> str:
    """What a spelling of a profile comes down to: ``A10-12Q`` for ``nvidia.com/NVIDIA_A10-12Q``,
    ``NVIDIA A10-12Q``, ``nvidia.com/A10-12Q`` or ``a10-12q``."""
    return profile_of(name.strip()).casefold()


def profile_near_misses(name: str, nodes: tuple[VgpuNode, ...]) -> tuple[str, ...]:
    """Advertised mdev resources ``name`` may have meant: the same in another case, or the same
    profile spelt short (``A10-12Q`` for ``nvidia.com/NVIDIA_A10-12Q``: docs/vgpu.md 4)."""
    wanted = _short(name)
    offered = {r for n in nodes for r in n.resources}
    return tuple(sorted(r for r in offered if r != name and wanted and _short(r) == wanted))


@dataclass(frozen=True, slots=True)
class ProfileHint:
    """What the "no node advertises it" answers add for a vGPU: the names it may have meant and
    the profiles the nodes do offer (their mdev resources and ``nvidia.com/vgpu.config``)."""

    meant: tuple[str, ...]
    nodes: tuple[VgpuNode, ...]

    def offered(self) -> str:
        """ "vGPU profiles on offer (node: nvidia.com/vgpu.config): nvidia.com/NVIDIA_A10-12Q on
        gpu-a10-1 (A10-12Q); none on gpu-a10-2 (A10-4Q)" """
        if not self.nodes:
            return "no node offers a vGPU profile (none is in vm-vgpu mode)"
        by_resource: dict[str, list[VgpuNode]] = {}
        for node in self.nodes:
            for resource in node.resources:
                by_resource.setdefault(resource, []).append(node)
        parts = [
            f"{resource} on {few([f'{n.name} ({n.config or UNSET})' for n in nodes])}"
            for resource, nodes in sorted(by_resource.items())
        ]
        idle = [f"{n.name} ({n.config or UNSET})" for n in self.nodes if not n.resources]
        if idle:
            parts.append(f"none on {few(idle)}")
        return f"vGPU profiles on offer (node: {VGPU_CONFIG_LABEL}): " + "; ".join(parts)

    def remedy(self, name: str) -> str:
        """The step when nothing was meant: another profile, or a node that makes this one."""
        return (
            f"set deviceName to a vGPU on offer, or give a vm-vgpu node a {VGPU_CONFIG_LABEL} "
            f"that creates {profile_of(name)} (once no VM holds its vGPUs)"
        )

    def why(self, name: str) -> str:
        """Why the first name meant is the one: another case, or the profile spelt short."""
        meant = self.meant[0]
        if meant.casefold() == name.casefold():
            return "resource names are case-sensitive"
        return f"the sandbox device plugin names the {profile_of(meant)} vGPU {meant}"


#: A vGPU type name, the profile: ``A10-12Q``, ``T4-1Q``, ``A100-1-5C``, ``DC-48C`` (a product,
#: then ``-<n>`` groups and a series letter). pci.ids names end otherwise (``RTX_3090``,
#: ``80GB``, ``Tesla_T4``): what tells a vGPU name from a passthrough one no provider confirms.
VGPU_TYPE = re.compile(r"[A-Za-z0-9]+(?:-[0-9]+)+[A-Z]")


def looks_like_vgpu(name: str) -> bool:
    return is_nvidia_resource(name) and VGPU_TYPE.fullmatch(profile_of(name)) is not None


def profile_hint(name: str, view: ClusterView, is_vgpu: bool) -> ProfileHint | None:
    """The hint for ``name``, which no node advertises: for a vGPU (``is_vgpu``: KubeVirt permits
    it as a mediated device; or its name ends in a vGPU type), or any name that is a near miss
    of an advertised mdev type."""
    nodes = vgpu_nodes(view)
    meant = profile_near_misses(name, nodes)
    if not (is_vgpu or meant or looks_like_vgpu(name)):
        return None
    return ProfileHint(meant, nodes)

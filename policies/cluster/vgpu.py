"""NVIDIA vGPU on KubeVirt: which devices of a VMI are vGPUs (mdevs), and the profiles nodes offer.

The facts, with their sources, are docs/vgpu.md: the vGPU Device Manager applies the config
named by ``nvidia.com/vgpu.config`` (section 1) by deleting every mdev of each GPU whose layout
differs, whoever holds them (section 3); the sandbox device plugin advertises each mdev type as
``nvidia.com/<sysfs name, spaces to _>`` (``nvidia.com/NVIDIA_A10-12Q``), whose profile is the
text after the last ``_`` (section 4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from policies.cluster.kubevirt import KubeVirtInfo, VMIInfo
from policies.cluster.resources import NVIDIA_DOMAIN, is_container_gpu_resource, is_nvidia_resource
from policies.cluster.view import ClusterView
from policies.cluster.workload import VM_VGPU, effective_mode


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


@dataclass(frozen=True, slots=True)
class VgpuHolder:
    """A live VMI on the node and the vGPU resources it holds there."""

    vmi: VMIInfo
    resources: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.vmi.key} ({', '.join(self.resources)})"


def vgpu_holders_on(
    node: str, labels: Mapping[str, str], view: ClusterView
) -> tuple[VgpuHolder, ...]:
    """Live VMIs on ``node`` holding its vGPUs; ``labels`` are the node's (as they are now)."""
    mdevs = permitted_mdevs(view.kubevirt())
    vgpu_node = effective_mode(labels, view.cluster_policy()) == VM_VGPU
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

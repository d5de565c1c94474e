"""What kind of device a resource name stands for, so that advice fits the device.

An NVIDIA GPU reaches VMs through the GPU Operator (vm-passthrough: the sandbox device plugin;
vm-vgpu for mediated devices); any other PCI device (an Intel QAT, a NIC) through vfio-pci,
which KubeVirt's virt-handler advertises when ``externalResourceProvider`` is false, or through
its own device plugin; a USB device through the KubeVirt CR's ``permittedHostDevices.usb``
selectors. Telling someone to put a node "with that GPU in vm-passthrough mode" for a QAT sends
them the wrong way.
"""

from __future__ import annotations

import enum

from policies.cluster.hardware import is_gpu_function
from policies.cluster.kubevirt import KubeVirtInfo
from policies.cluster.pciids import NVIDIA_VENDOR, PciDatabase
from policies.cluster.resources import is_nvidia_resource
from policies.cluster.workload import VM_PASSTHROUGH, VM_VGPU


class DeviceClass(enum.Enum):
    GPU = "GPU"
    VGPU = "vGPU"
    PCI = "PCI device"
    USB = "USB device"


def device_class(resource: str, kubevirt: KubeVirtInfo | None, db: PciDatabase) -> DeviceClass:
    """By the KubeVirt CR entry that permits ``resource``; unpermitted, by its name's domain."""
    if kubevirt is not None:
        if any(u.resource_name == resource for u in kubevirt.usb_devices):
            return DeviceClass.USB
        if any(m.resource_name == resource for m in kubevirt.mediated_devices):
            return DeviceClass.VGPU
        for entry in kubevirt.pci_devices:
            if entry.resource_name == resource and entry.pci is not None:
                nvidia_gpu = entry.pci.vendor == NVIDIA_VENDOR and is_gpu_function(entry.pci, db)
                return DeviceClass.GPU if nvidia_gpu else DeviceClass.PCI
    return DeviceClass.GPU if is_nvidia_resource(resource) else DeviceClass.PCI


def unadvertised_fix(resource: str, kind: DeviceClass) -> str:
    """The repair step for a deviceName no node advertises, in words for its kind of device."""
    head = f"check the deviceName {resource}: no node advertises it"
    if kind is DeviceClass.GPU:
        return (
            f"{head} (a node with that GPU in {VM_PASSTHROUGH} mode runs the sandbox device "
            "plugin that would)"
        )
    if kind is DeviceClass.VGPU:
        return (
            f"{head} (a node with that GPU in {VM_VGPU} mode runs the sandbox device plugin "
            "that would)"
        )
    if kind is DeviceClass.USB:
        return (
            f"{head} (plug a USB device that matches its permittedHostDevices.usb selectors "
            "into a node, or enable its device plugin)"
        )
    return (
        f"{head} (bind the device to vfio-pci on a node that has it, or enable its device plugin)"
    )

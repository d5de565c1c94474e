"""Extended resource names: NVIDIA GPUs for containers versus passthrough devices for VMs.

The one place that knows the resource names of the NVIDIA device plugins; see
docs/field-guide.md section 2.
"""

from __future__ import annotations

NVIDIA_DOMAIN = "nvidia.com/"
NVIDIA_GPU = f"{NVIDIA_DOMAIN}gpu"
NVIDIA_GPU_SHARED = f"{NVIDIA_DOMAIN}gpu.shared"
NVIDIA_MIG_PREFIX = f"{NVIDIA_DOMAIN}mig-"


def is_extended_resource(name: str) -> bool:
    """Extended resources carry a domain ("vendor/name"); cpu, memory and pods do not."""
    return (
        "/" in name and not name.startswith("kubernetes.io/") and not name.startswith("hugepages-")
    )


def is_container_gpu_resource(name: str) -> bool:
    """A GPU handed to containers by NVIDIA's (non-sandbox) device plugin: CUDA runs on it."""
    return name in (NVIDIA_GPU, NVIDIA_GPU_SHARED) or name.startswith(NVIDIA_MIG_PREFIX)


#: What the GPU Operator's Kata sandbox device plugin advertises by default (kata mode, or
#: confidential containers): passthrough GPUs and, for Hopper in ``ppcie`` mode, NVSwitches
#: (NVIDIA cloud-native-docs confidential-containers/configure-workloads.rst).
KATA_RESOURCES = frozenset({f"{NVIDIA_DOMAIN}pgpu", f"{NVIDIA_DOMAIN}nvswitch"})


def is_kata_resource(name: str) -> bool:
    return name in KATA_RESOURCES


def is_nvidia_resource(name: str) -> bool:
    return name.startswith(NVIDIA_DOMAIN)


#: Devices KubeVirt's own device plugins give every virt-launcher (kvm, tun, vhost-net): not
#: hardware any policy reasons about.
KUBEVIRT_BUILTIN_DEVICES = "devices.kubevirt.io/"


def is_device_resource(name: str) -> bool:
    """An extended resource that stands for hardware a policy may care about."""
    return is_extended_resource(name) and not name.startswith(KUBEVIRT_BUILTIN_DEVICES)

"""The GPU Operator's per-node workload mode and the labels that steer it (field guide section 2,
docs/field-guide.md)."""

from __future__ import annotations

from collections.abc import Mapping

from policies.cluster.gpu_operator import ClusterPolicyInfo
from policies.cluster.nodes import NodeInfo
from policies.cluster.pciids import NFD_LABEL_PREFIX, NVIDIA_VENDOR
from policies.cluster.pods import PodInfo
from policies.cluster.resources import is_nvidia_resource

WORKLOAD_LABEL = "nvidia.com/gpu.workload.config"
DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
VFIO_MANAGER_DEPLOY_LABEL = f"{DEPLOY_LABEL_PREFIX}vfio-manager"
VGPU_MANAGER_DEPLOY_LABEL = f"{DEPLOY_LABEL_PREFIX}vgpu-manager"
OPERANDS_DEPLOY_LABEL = f"{DEPLOY_LABEL_PREFIX}operands"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: The vGPU profile: a config name in the vGPU Device Manager's file, set by users only; the
#: manager reports on it in the state label (pending, success, failed). docs/vgpu.md 1-2.
VGPU_CONFIG_LABEL = "nvidia.com/vgpu.config"
VGPU_CONFIG_STATE_LABEL = "nvidia.com/vgpu.config.state"
VGPU_CONFIG_FAILED = "failed"
#: The config the device manager applies at start-up to a node without the label, unless
#: ClusterPolicy spec.vgpuDeviceManager.config.default names another (docs/vgpu.md 1).
VGPU_DEFAULT_CONFIG = "default"

CONTAINER = "container"
VM_PASSTHROUGH = "vm-passthrough"
VM_VGPU = "vm-vgpu"
MODES = frozenset({CONTAINER, VM_PASSTHROUGH, VM_VGPU})
VM_MODES = frozenset({VM_PASSTHROUGH, VM_VGPU})


def effective_mode(labels: Mapping[str, str], policy: ClusterPolicyInfo | None) -> str:
    """The mode the operator will deploy for a node with these labels.

    Sandbox workloads off: every node is container. A missing or invalid label falls back to
    ``sandboxWorkloads.defaultWorkload``. With no ClusterPolicy known (a partial state), the label
    is taken at face value: a guard must not assume the operator away.
    """
    label = labels.get(WORKLOAD_LABEL, "")
    if policy is None:
        return label if label in MODES else CONTAINER
    if not policy.sandbox_enabled:
        return CONTAINER
    if label in MODES:
        return label
    default = policy.default_workload
    return default if default in MODES else CONTAINER


#: The NFD labels ``nvidia.com/gpu.present`` follows: the operator's own test for "has a GPU".
NFD_NVIDIA_GPU_LABELS = frozenset(
    {
        f"{NFD_LABEL_PREFIX}{NVIDIA_VENDOR}.present",
        f"{NFD_LABEL_PREFIX}0300_{NVIDIA_VENDOR}.present",  # VGA controller
        f"{NFD_LABEL_PREFIX}0302_{NVIDIA_VENDOR}.present",  # 3D controller
    }
)


def is_gpu_node(node: NodeInfo) -> bool:
    """A node the GPU Operator deploys operands to by mode: it has NVIDIA GPUs.

    ``nvidia.com/gpu.present=true``, one of the NFD labels that label follows (it may lag them),
    or an NVIDIA resource still in allocatable (a dead node keeps its last values).
    """
    labels = node.labels
    if labels.get(GPU_PRESENT_LABEL) == "true":
        return True
    if any(labels.get(label) == "true" for label in NFD_NVIDIA_GPU_LABELS):
        return True
    return any(count > 0 and is_nvidia_resource(name) for name, count in node.allocatable.items())


def describe_mode(labels: Mapping[str, str], policy: ClusterPolicyInfo | None) -> str:
    """The mode with where it comes from, for messages."""
    mode = effective_mode(labels, policy)
    label = labels.get(WORKLOAD_LABEL)
    if label == mode:
        return mode
    if policy is None:
        return f"{mode} (no valid label)"
    if not policy.sandbox_enabled:
        return f"{mode} (sandbox workloads disabled)"
    return f"{mode} (ClusterPolicy default)"


#: ``app`` labels of the GPU Operator's operand pods (daemonsets it deploys per node mode; the pod
#: templates of NVIDIA/gpu-operator assets/state-*/). The operator moves these itself: each selects
#: its node by a ``nvidia.com/gpu.deploy.<operand>=true`` label the operator takes off when the node
#: leaves the mode (docs/gpu-users.md section 2), so they are never GPU users to drain.
OPERAND_APPS = frozenset(
    {
        "nvidia-driver-daemonset",
        "gpu-feature-discovery",
        "nvidia-container-toolkit-daemonset",
        "nvidia-device-plugin-daemonset",
        "nvidia-device-plugin-mps-control-daemon",
        "nvidia-dcgm",
        "nvidia-dcgm-exporter",
        "nvidia-node-status-exporter",
        "nvidia-operator-validator",
        "nvidia-mig-manager",
        "nvidia-sandbox-device-plugin-daemonset",
        "nvidia-kata-sandbox-device-plugin-daemonset",
        "nvidia-sandbox-validator",
        "nvidia-vfio-manager",
        "nvidia-kata-manager",
        "nvidia-cc-manager",
        "nvidia-vgpu-manager-daemonset",
        "nvidia-vgpu-device-manager",
    }
)


def is_gpu_operand(pod: PodInfo) -> bool:
    """A GPU Operator operand pod: its health on a node is part of the node's GPU story."""
    return pod.app in OPERAND_APPS


def rebind_pin_label(mode: str) -> str:
    """The deploy label that keeps a VM mode's operand (vfio-manager, vGPU manager) off."""
    return VGPU_MANAGER_DEPLOY_LABEL if mode == VM_VGPU else VFIO_MANAGER_DEPLOY_LABEL


def relabel_before_return(node: str, mode: str) -> str:
    """The first step of a dead node's repair in a VM mode: before kubelet returns, so that the
    operator does not rebind every GPU there to vfio-pci (or the vGPU manager) under its users."""
    return (
        f"before kubelet returns: kubectl label node {node} {WORKLOAD_LABEL}={CONTAINER} "
        f"--overwrite (or keep the mode and block the rebind: kubectl label node {node} "
        f"{rebind_pin_label(mode)}=false --overwrite)"
    )

"""The GPU Operator's per-node workload mode and the labels that steer it (FIELD-GUIDE 2)."""

from __future__ import annotations

from collections.abc import Mapping

from policies.objects import ClusterPolicyInfo, PodInfo

WORKLOAD_LABEL = "nvidia.com/gpu.workload.config"
DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
VFIO_MANAGER_DEPLOY_LABEL = "nvidia.com/gpu.deploy.vfio-manager"
OPERANDS_DEPLOY_LABEL = "nvidia.com/gpu.deploy.operands"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

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


#: ``app`` labels of the GPU Operator's operand pods (daemonsets it deploys per node mode).
OPERAND_APPS = frozenset(
    {
        "nvidia-driver-daemonset",
        "gpu-feature-discovery",
        "nvidia-container-toolkit-daemonset",
        "nvidia-device-plugin-daemonset",
        "nvidia-dcgm",
        "nvidia-dcgm-exporter",
        "nvidia-node-status-exporter",
        "nvidia-operator-validator",
        "nvidia-mig-manager",
        "nvidia-sandbox-device-plugin-daemonset",
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

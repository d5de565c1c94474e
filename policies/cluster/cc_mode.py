"""Confidential computing (CC) mode: the node labels the GPU Operator's Confidential Computing
Manager reads and writes, and where it runs (docs/confidential-computing.md).

The manager runs on a node when the ClusterPolicy enables it (``spec.ccManager.enabled``) and the
node's mode is vm-passthrough or vm-vgpu (the operator sets ``nvidia.com/gpu.deploy.cc-manager``
only for those: gpu-operator ``controllers/state_manager.go`` ``gpuStateLabels``). It applies the
node's desired mode, ``nvidia.com/cc.mode`` or else ``ccManager.defaultMode``: it evicts the
other operands, changes the mode and resets the GPUs, and does not drain user workloads
(cloud-native-docs ``confidential-containers/configure-cc-mode.rst``). It reports the mode last
applied in ``nvidia.com/cc.mode.state`` (``failed`` when the last change failed).
"""

from __future__ import annotations

from collections.abc import Mapping

from policies.cluster.gpu_operator import ClusterPolicyInfo
from policies.cluster.workload import (
    DEPLOY_LABEL_PREFIX,
    OPERANDS_DEPLOY_LABEL,
    VM_MODES,
    effective_mode,
)

CC_MODE_LABEL = "nvidia.com/cc.mode"
CC_MODE_STATE_LABEL = "nvidia.com/cc.mode.state"
CC_READY_STATE_LABEL = "nvidia.com/cc.ready.state"
CC_MANAGER_DEPLOY_LABEL = f"{DEPLOY_LABEL_PREFIX}cc-manager"
CC_MODE_FAILED = "failed"
#: ``ccManager.defaultMode`` when the ClusterPolicy leaves it out (the docs: "The default value of
#: ``ccManager.defaultMode`` is ``on``").
DEFAULT_CC_MODE = "on"
CC_MANAGER_APP = "nvidia-cc-manager"


def default_cc_mode(policy: ClusterPolicyInfo | None) -> str:
    return (policy.cc_default_mode if policy is not None else "") or DEFAULT_CC_MODE


def desired_cc_mode(labels: Mapping[str, str], policy: ClusterPolicyInfo | None) -> str:
    """The mode the manager applies: the node's label, else the ClusterPolicy's default."""
    return labels.get(CC_MODE_LABEL) or default_cc_mode(policy)


def describe_desired(labels: Mapping[str, str], policy: ClusterPolicyInfo | None) -> str:
    """The desired mode with where it comes from, for messages."""
    mode = desired_cc_mode(labels, policy)
    return mode if labels.get(CC_MODE_LABEL) else f"{mode} (ClusterPolicy default)"


def cc_manager_runs(labels: Mapping[str, str], policy: ClusterPolicyInfo | None) -> bool:
    """Whether the manager runs on a node with these labels. With no ClusterPolicy known (a
    partial state) it is taken to be enabled: a guard must not assume the operator away."""
    if policy is not None and not policy.cc_enabled:
        return False
    if (
        labels.get(CC_MANAGER_DEPLOY_LABEL) == "false"
        or labels.get(OPERANDS_DEPLOY_LABEL) == "false"
    ):
        return False
    return effective_mode(labels, policy) in VM_MODES

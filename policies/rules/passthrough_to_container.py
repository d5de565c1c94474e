"""passthrough-to-container-with-live-vms: a node leaves its VM mode under running GPU VMs.

When a node's effective mode leaves vm-passthrough or vm-vgpu (its workload label changed or
removed, falling back to the ClusterPolicy default), or ``nvidia.com/gpu.deploy.operands=false``
strips every operand, the GPU Operator removes the sandbox device plugin and vfio-manager from
the node. vfio-manager's preStop unbinds every GPU from vfio-pci, under the VMs still using them;
a VM that restarts then finds no provider and ends ErrorUnschedulable. Under GPU Operator 26.7's
GPUCluster (and no ClusterPolicy) the operator ignores these labels and deploys neither operand.
Kata pods with passthrough GPUs are VM-like users: the Kata sandbox plugin goes the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies.cluster.gpu_operator import ClusterPolicyInfo, workload_label_ignored
from policies.cluster.gpu_users import vm_users_noun, vm_users_on
from policies.cluster.identities import KUBELET
from policies.cluster.kinds import CLUSTER_POLICY, GPU_CLUSTER, NODE, POD, VIRTUAL_MACHINE_INSTANCE
from policies.cluster.policy_in_force import change_under_each_policy_in_force
from policies.cluster.view import ClusterView
from policies.cluster.workload import OPERANDS_DEPLOY_LABEL, VM_MODES, describe_mode, effective_mode
from policies.vocabulary.fields import request_labels
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest
from policies.vocabulary.text import few
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "passthrough-to-container-with-live-vms"


def what_changes(
    old: Mapping[str, str], new: Mapping[str, str], policy: ClusterPolicyInfo | None
) -> str | None:
    """How the update takes the node out of its VM mode, or None when it does not."""
    before = effective_mode(old, policy)
    if before not in VM_MODES:
        return None
    after = effective_mode(new, policy)
    if after != before:
        return f"would leave {describe_mode(old, policy)} for {describe_mode(new, policy)}"
    if new.get(OPERANDS_DEPLOY_LABEL) == "false" and old.get(OPERANDS_DEPLOY_LABEL) != "false":
        return f"would lose every GPU operand ({OPERANDS_DEPLOY_LABEL}=false)"
    return None


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    return change_under_each_policy_in_force(request, view, _judge)


def _judge(
    request: AdmissionRequest, view: ClusterView, policy: ClusterPolicyInfo | None
) -> Sequence[Finding]:
    new = request_labels(request)
    old = request_labels(request, old=True)
    if workload_label_ignored(policy, view.gpu_clusters()):
        return ()
    change = what_changes(old, new, policy)
    if change is None:
        return ()
    node = request.name
    users = vm_users_on(node, view)
    if not users:
        return ()
    message = (
        f"node {node} {change} under {vm_users_noun(users)} {few([u.key for u in users])}: the "
        "sandbox plugin goes, vfio-manager's preStop unbinds their GPUs. Stop them first."
        if any(u.kata for u in users)
        else f"node {node} {change} under live GPU VMs {few([u.key for u in users])}: the sandbox "
        "plugin goes, vfio-manager's preStop unbinds their GPUs. Stop the VMs first."
    )
    return (
        Finding(
            message,
            remediation=(*(u.stop for u in users), "then change the node's labels"),
            confirm_pods_on=node if any(u.kata for u in users) else "",
        ),
    )


POLICY = Policy(
    id=ID,
    summary=(
        "A node's effective GPU Operator mode leaves vm-passthrough or vm-vgpu (label changed or "
        "removed, ClusterPolicy default applied), or nvidia.com/gpu.deploy.operands becomes "
        "false, while live VMIs with NVIDIA gpus/hostDevices or Kata pods with passthrough GPUs "
        "(nvidia.com/pgpu, nvidia.com/nvswitch, an NVIDIA resource under a kata runtime class) "
        "run on it."
    ),
    scope={NODE: frozenset({CREATE, UPDATE})},
    owners=(KUBELET,),
    default_action=Action.DENY,
    default_reason=(
        "The operator removes the sandbox device plugin and vfio-manager's preStop unbinds the "
        "GPUs under running VMs; a restart ends ErrorUnschedulable. Stopping the VMs first is "
        "cheap. A policy error only warns, so node updates in a recovery are never blocked."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=frozenset({CLUSTER_POLICY, GPU_CLUSTER, POD, VIRTUAL_MACHINE_INSTANCE}),
)

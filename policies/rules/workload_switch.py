"""workload-switch-with-gpu-pods: a node moving to vm-passthrough/vm-vgpu under live CUDA pods.

Switching the mode makes the GPU Operator deploy vfio-manager (or the vGPU manager), which binds
every NVIDIA GPU on the node to vfio-pci: every CUDA process using them dies and the device plugin
is removed. The pods are bound to the node, so nothing reschedules them first. Under GPU Operator
26.7's GPUCluster (and no ClusterPolicy) the operator ignores the label: nothing is rebound.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.cluster.gpu_operator import ClusterPolicyInfo, workload_label_ignored
from policies.cluster.gpu_users import gpu_users_on, held_by_daemonsets
from policies.cluster.kinds import (
    CLUSTER_POLICY,
    GPU_CLUSTER,
    NODE,
    POD,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
)
from policies.cluster.policy_in_force import under_each_policy_in_force
from policies.cluster.view import ClusterView
from policies.cluster.workload import VM_MODES, WORKLOAD_LABEL, describe_mode, effective_mode
from policies.vocabulary.fields import request_labels
from policies.vocabulary.requests import UPDATE, AdmissionRequest
from policies.vocabulary.text import drain_first, few, plural
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "workload-switch-with-gpu-pods"


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    if request.obj is None or request.old is None:
        return ()
    return under_each_policy_in_force(view, lambda policy: _judge(request, view, policy))


def _judge(
    request: AdmissionRequest, view: ClusterView, policy: ClusterPolicyInfo | None
) -> Sequence[Finding]:
    new_labels = request_labels(request)
    old_labels = request_labels(request, old=True)
    if workload_label_ignored(policy, view.gpu_clusters()):
        return ()
    before, after = effective_mode(old_labels, policy), effective_mode(new_labels, policy)
    if after not in VM_MODES or before == after:
        return ()
    pods = gpu_users_on(request.name, view)
    if not pods:
        return ()
    node = request.name
    how = "set" if WORKLOAD_LABEL in new_labels else "removed"
    verb = "uses" if len(pods) == 1 else "use"
    message = (
        f"node {node} would move from {describe_mode(old_labels, policy)} to "
        f"{describe_mode(new_labels, policy)} ({WORKLOAD_LABEL} {how}) while "
        f"{plural(len(pods), 'pod')} {verb} its NVIDIA "
        f"GPUs: {few([p.describe() for p in pods])}. vfio-manager will rebind every NVIDIA GPU "
        f"on {node} to vfio-pci and kill them. First cordon {node} (kubectl cordon {node}), "
        "drain its GPU pods or wait for them to finish, then change the label."
    )
    return (
        Finding(
            message,
            confirm_pods_on=node,
            remediation=(
                *drain_first(node, [p.key for p in pods], held_by_daemonsets(pods)),
                f"kubectl label node {node} {WORKLOAD_LABEL}={after} --overwrite",
            ),
        ),
    )


POLICY = Policy(
    id=ID,
    summary=(
        "A node's effective nvidia.com/gpu.workload.config moves to vm-passthrough or vm-vgpu "
        "while unfinished pods bound there hold NVIDIA GPUs: device-plugin resources, or gpu/mig "
        "devices of NVIDIA's DRA driver allocated there to a claim they reserve."
    ),
    scope={NODE: frozenset({UPDATE})},
    default_action=Action.DENY,
    default_reason=(
        "vfio-manager rebinds every GPU on the node: running CUDA jobs die, irreversibly. A policy"
        " error only warns, so a bug here never blocks cordons and relabels during a recovery."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=frozenset({CLUSTER_POLICY, GPU_CLUSTER, NODE, POD, RESOURCE_CLAIM, RESOURCE_SLICE}),
    optional=frozenset({CLUSTER_POLICY, GPU_CLUSTER, RESOURCE_CLAIM, RESOURCE_SLICE}),
)

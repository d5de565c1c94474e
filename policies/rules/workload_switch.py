"""workload-switch-with-gpu-pods: a node moving to vm-passthrough/vm-vgpu under live CUDA pods.

Switching the mode makes the GPU Operator deploy vfio-manager (or the vGPU manager), which binds
every NVIDIA GPU on the node to vfio-pci: every CUDA process using them dies and the device plugin
is removed. The pods are bound to the node, so nothing reschedules them first. Under GPU Operator
26.7's GPUCluster (and no ClusterPolicy) the operator ignores the label: nothing is rebound.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.cluster.coverage import GPU_USERS_READS
from policies.cluster.gpu_operator import ClusterPolicyInfo, workload_label_ignored
from policies.cluster.gpu_users import gpu_users_on, held_by_daemonsets
from policies.cluster.identities import KUBELET
from policies.cluster.kinds import (
    GPU_CLUSTER,
    NODE,
)
from policies.cluster.policy_in_force import change_under_each_policy_in_force
from policies.cluster.view import ClusterView
from policies.cluster.workload import (
    CONTAINER,
    VM_MODES,
    WORKLOAD_LABEL,
    describe_mode,
    effective_mode,
)
from policies.vocabulary.fields import request_labels
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest
from policies.vocabulary.text import drain_first, few, plural
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "workload-switch-with-gpu-pods"


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    return change_under_each_policy_in_force(request, view, _judge)


def _judge(
    request: AdmissionRequest, view: ClusterView, policy: ClusterPolicyInfo | None
) -> Sequence[Finding]:
    new_labels = request_labels(request)
    old_labels = request_labels(request, old=True)
    if workload_label_ignored(policy, view.gpu_clusters()):
        return ()
    # A new Node had no mode: whatever its name's pods hold dies under a VM mode (re-created
    # after a delete, its pods are still bound to the name).
    before = effective_mode(old_labels, policy) if request.old is not None else None
    after = effective_mode(new_labels, policy)
    if after not in VM_MODES or before == after:
        return ()
    pods = gpu_users_on(request.name, view)
    if not pods:
        return ()
    node = request.name
    keys = [p.key for p in pods]
    how = "set" if WORKLOAD_LABEL in new_labels else "removed"
    move = f"move from {describe_mode(old_labels, policy)} to"
    first = (
        f"First cordon {node} (kubectl cordon {node}), drain its GPU pods or wait for them to "
        "finish, then change the label."
    )
    steps = drain_first(node, keys, held_by_daemonsets(pods))
    if request.old is None:  # nothing to cordon yet: the node comes back in container mode
        how, move = ("set" if WORKLOAD_LABEL in new_labels else "absent"), "be created in"
        first = f"Create it labelled {CONTAINER}, wait for its GPU pods to end, then relabel it."
        steps = (f"create {node} with {WORKLOAD_LABEL}={CONTAINER}", f"wait for: {', '.join(keys)}")
    verb = "uses" if len(pods) == 1 else "use"
    message = (
        f"node {node} would {move} {describe_mode(new_labels, policy)} ({WORKLOAD_LABEL} {how}) "
        f"while {plural(len(pods), 'pod')} {verb} its NVIDIA "
        f"GPUs: {few([p.describe() for p in pods])}. vfio-manager will rebind every NVIDIA GPU "
        f"on {node} to vfio-pci and kill them. {first}"
    )
    return (
        Finding(
            message,
            confirm_pods_on=node,
            remediation=(*steps, f"kubectl label node {node} {WORKLOAD_LABEL}={after} --overwrite"),
        ),
    )


POLICY = Policy(
    id=ID,
    summary=(
        "A node's effective nvidia.com/gpu.workload.config moves to vm-passthrough or vm-vgpu "
        "while unfinished pods bound there hold NVIDIA GPUs: device-plugin resources, or gpu/mig "
        "devices of NVIDIA's DRA driver allocated there to a claim they reserve."
    ),
    scope={NODE: frozenset({CREATE, UPDATE})},
    owners=(KUBELET,),
    default_action=Action.DENY,
    default_reason=(
        "vfio-manager rebinds every GPU on the node: running CUDA jobs die, irreversibly. A policy"
        " error only warns, so a bug here never blocks cordons and relabels during a recovery."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=GPU_USERS_READS | {GPU_CLUSTER, NODE},
)

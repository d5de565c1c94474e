"""clusterpolicy-delete-with-gpu-users: the ClusterPolicy in force deleted under GPU users.

The GPU Operator makes every operand (driver, container toolkit, device plugin, sandbox device
plugin, vfio-manager, vGPU manager, MIG manager, validators) from the ClusterPolicy and sets it as
their controller owner (NVIDIA/gpu-operator controllers/object_controls.go, ``DaemonSet``:
``controllerutil.SetControllerReference(n.singleton, ...)``); once it is gone the operator only
notes that "owned objects are automatically garbage collected"
(controllers/clusterpolicy_controller.go, ``Reconcile``). So the garbage collector deletes every
operand DaemonSet: vfio-manager's preStop runs ``vfio-manage unbind --all``
(assets/state-vfio-manager/0500_daemonset.yaml) under live VMs, the device plugins go, and
nothing serves the nodes until a ClusterPolicy is created again, whose sandboxWorkloads then
decide every unlabelled GPU node's mode (judged by sandbox-disable-with-live-vms on that create).
A warning: deleting it is also how the operator is uninstalled, which must work while gpu-guard
is down.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.cluster.coverage import GPU_USERS_READS
from policies.cluster.gpu_users import gpu_users_on, gpu_vmis_on
from policies.cluster.kinds import (
    CLUSTER_POLICY,
    NODE,
    VIRTUAL_MACHINE_INSTANCE,
)
from policies.cluster.view import ClusterView
from policies.cluster.workload import MODES, WORKLOAD_LABEL
from policies.vocabulary.requests import DELETE, AdmissionRequest
from policies.vocabulary.text import few, plural
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "clusterpolicy-delete-with-gpu-users"


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    in_force = view.cluster_policy()
    if in_force is None or in_force.name != request.name:
        return ()  # the operator ignores this one: deleting it changes nothing
    nodes = [n for mode in sorted(MODES) for n in view.nodes_labelled(WORKLOAD_LABEL, mode)]
    nodes += view.gpu_nodes_without_workload_label()  # from the indexes, never a listing
    vmis = [v.key for node in nodes for v in gpu_vmis_on(node, view)]
    pods = [p.label for node in nodes for p in gpu_users_on(node, view)]
    if not vmis and not pods:
        return ()
    users = [*(f"VMI {key}" for key in vmis), *pods]
    message = (
        f"ClusterPolicy {request.name} is deleted under {plural(len(users), 'GPU user')} "
        f"({few(users)}): the garbage collector deletes every operand the GPU Operator made from "
        "it; vfio-manager's preStop unbinds the GPUs of live VMs, the device plugins go, and a "
        "new ClusterPolicy's sandboxWorkloads then set every unlabelled GPU node's mode."
    )
    return (
        Finding(
            message,
            chain=(
                f"ClusterPolicy {request.name} deleted",
                "its operand DaemonSets are garbage-collected (controller owner)",
                "vfio-manager preStop: vfio-manage unbind --all; device plugins removed",
            ),
            remediation=(
                "stop the GPU VMs and drain the GPU pods first, or keep the ClusterPolicy",
                "to change its settings, edit it instead of deleting and re-creating it",
            ),
        ),
    )


POLICY = Policy(
    id=ID,
    summary=(
        "The ClusterPolicy the GPU Operator acts on is deleted while live VMIs use NVIDIA devices "
        "or pods hold NVIDIA GPUs: every operand it owns is garbage-collected under them."
    ),
    scope={CLUSTER_POLICY: frozenset({DELETE})},
    default_action=Action.WARN,
    default_reason=(
        "Deleting the ClusterPolicy is also how the GPU Operator is uninstalled: warn, naming "
        "who loses a GPU, never block it."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=GPU_USERS_READS | {NODE, VIRTUAL_MACHINE_INSTANCE},
)

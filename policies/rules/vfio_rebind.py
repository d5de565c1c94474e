"""vfio-rebind-with-gpu-pods: vfio-manager deployed to a node whose GPUs pods are using.

The recovery trap of docs/field-guide.md section 1: a node comes back from the dead still labelled
vm-passthrough, the NFD labels return, and the GPU Operator re-adds its deploy labels, among them
``nvidia.com/gpu.deploy.vfio-manager=true``. The vfio-manager DaemonSet selects on that label alone:
it binds every NVIDIA GPU on the node to vfio-pci, and every CUDA process using them dies, in
pods and on the host. A deploy label that is already present keeps its value, so pinning it to
``false`` (or labelling the node ``container``) is the safe step.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.cluster.coverage import GPU_USERS_READS
from policies.cluster.gpu_users import label_edit_under_gpu_users
from policies.cluster.identities import KUBELET
from policies.cluster.kinds import NODE
from policies.cluster.view import ClusterView
from policies.cluster.workload import VFIO_MANAGER_DEPLOY_LABEL, WORKLOAD_LABEL
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest
from policies.vocabulary.text import few, plural
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "vfio-rebind-with-gpu-pods"


def _turned_on(before: str | None, after: str | None) -> bool:
    return after == "true" and before != "true"


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    edit = label_edit_under_gpu_users(request, view, VFIO_MANAGER_DEPLOY_LABEL, _turned_on)
    if edit is None:
        return ()
    node, pods = edit.node, edit.users
    keys = [p.key for p in pods]
    named = [p.label for p in pods]
    message = (
        f"{VFIO_MANAGER_DEPLOY_LABEL}=true: vfio-manager would bind every NVIDIA GPU on {node} "
        f"to vfio-pci, killing {plural(len(pods), 'GPU pod')} ({few(named)}) and host CUDA. "
        f"Label {node} container or pin it false first."
    )
    return (
        Finding(
            message,
            confirm_pods_on=node,
            chain=(
                f"{VFIO_MANAGER_DEPLOY_LABEL}=true on {node}",
                "vfio-manager binds every NVIDIA GPU there to vfio-pci",
                f"CUDA dies in {few(named)}",
            ),
            remediation=(
                f"kubectl label node {node} {WORKLOAD_LABEL}=container --overwrite",
                f"or: kubectl label node {node} {VFIO_MANAGER_DEPLOY_LABEL}=false --overwrite",
                f"to pass {node} to VMs later: cordon it, drain or wait for {', '.join(keys)}",
            ),
        ),
    )


POLICY = Policy(
    id=ID,
    summary=(
        "A node update sets nvidia.com/gpu.deploy.vfio-manager=true (it was absent or not true) "
        "while unfinished pods bound there hold NVIDIA GPUs (device-plugin resources or DRA "
        "gpu/mig devices): the recovery trap of a node back from the dead with a stale "
        "vm-passthrough label."
    ),
    scope={NODE: frozenset({CREATE, UPDATE})},
    owners=(KUBELET,),
    default_action=Action.DENY,
    default_reason=(
        "vfio-manager takes every GPU on the node from the running CUDA jobs, irreversibly; the "
        "GPU Operator retries the label and waits. A policy error only warns, so a bug here never "
        "blocks node updates during a recovery."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=GPU_USERS_READS,
)

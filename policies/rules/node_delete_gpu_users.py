"""node-delete-with-gpu-users: a Node deleted while pods or VMs use its GPUs.

Deleting the Node object stops nothing on the host at once, but the pod garbage collector
(kube-controller-manager's podgc, ``gcOrphaned``) deletes every pod bound to a node that no longer
exists, and with them the VMIs' virt-launcher pods: the GPU jobs and VMs there end. The Node then
comes back only when its kubelet registers it again, with the labels the kubelet is configured
with (a GPU-mode label there is the node's own configuration, docs/security.md). A warning, not a
deny: deleting a Node is also how a dead machine is retired, and the people who do it must be able
to while gpu-guard is down or wrong.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.cluster.coverage import GPU_USERS_READS
from policies.cluster.gpu_users import gpu_users_on, gpu_vmis_on, virtctl_stop
from policies.cluster.identities import KUBELET
from policies.cluster.kinds import (
    NODE,
    VIRTUAL_MACHINE_INSTANCE,
)
from policies.cluster.view import ClusterView
from policies.vocabulary.requests import DELETE, AdmissionRequest
from policies.vocabulary.text import drain_first, few, plural
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "node-delete-with-gpu-users"


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    node = request.name
    pods = gpu_users_on(node, view)
    vmis = gpu_vmis_on(node, view)
    if not pods and not vmis:
        return ()
    users = [*(p.describe() for p in pods), *(f"VMI {v.key}" for v in vmis)]
    message = (
        f"node {node} is deleted while {plural(len(users), 'GPU user')} "
        f"{'runs' if len(users) == 1 else 'run'} there: {few(users)}. The pod garbage collector "
        f"deletes every pod bound to a missing node, so they end; {node} returns only when its "
        "kubelet registers it again. Drain it first."
    )
    return (
        Finding(
            message,
            chain=(f"Node {node} deleted", "podgc deletes the pods bound to it", few(users)),
            remediation=(
                *(virtctl_stop(v) for v in vmis),
                *(drain_first(node, [p.key for p in pods]) if pods else ()),
                f"kubectl delete node {node}",
            ),
        ),
    )


POLICY = Policy(
    id=ID,
    summary=(
        "A Node is deleted while unfinished pods bound there hold its NVIDIA GPUs or live VMIs "
        "there use NVIDIA devices: the pod garbage collector ends them. The warning names them."
    ),
    scope={NODE: frozenset({DELETE})},
    owners=(KUBELET,),
    default_action=Action.WARN,
    default_reason=(
        "Deleting a Node is also how a dead machine is retired: warn, naming who loses a GPU, "
        "never block it."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=GPU_USERS_READS | {VIRTUAL_MACHINE_INSTANCE},
)

"""gpu-user-marked-finished: a GPU user's phase set to Succeeded or Failed by someone who does not
run it.

Every "not under running GPU users" deny counts the unfinished pods and live VMIs on a node
(policies.cluster.gpu_users). A pod's phase is its kubelet's record and a VMI's KubeVirt's, but
anyone with ``pods/status`` (cluster admins, node-problem-detector-like agents) or ``update`` on
VMIs (KubeVirt's ``kubevirt.io:edit``, aggregated into every namespace editor: KubeVirt's own
VMI update admitter refuses spec changes, not status ones) can write it. Marked finished, the
user drops out of the count and the mode switch it should have stopped (vm-passthrough under a
CUDA job, container under a passthrough VM) passes, while the write itself stops nothing on the
node. So a terminal phase is accepted from what runs the object or cleans up after its node
(``owners``: policies.cluster.identities, exempt in the engine and the webhook's
matchConditions), and for a node that is gone or out of service (the pod garbage collector's
cases, under any identity); anyone else is told to end the user the way that stops it.
docs/security.md, "Threat model".
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.cluster.coverage import GPU_USERS_READS, VM_USERS_READS
from policies.cluster.gpu_users import (
    gpu_users_on,
    holds_gpu_resources,
    holds_nvidia_device,
    virtctl_stop,
    vm_users_on,
)
from policies.cluster.identities import KUBEVIRT_COMPONENTS, POD_ENDERS
from policies.cluster.kinds import (
    NODE,
    POD,
    VIRTUAL_MACHINE_INSTANCE,
)
from policies.cluster.kubevirt import VMIInfo
from policies.cluster.pods import PodInfo
from policies.cluster.projections import request_projection
from policies.cluster.view import ClusterView
from policies.vocabulary.requests import UPDATE, AdmissionRequest
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "gpu-user-marked-finished"
#: The taint that declares a node shut down for good (non-graceful node shutdown, KEP-2268): the
#: pod garbage collector then marks its terminating pods Failed.
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"


def _ended(request: AdmissionRequest) -> tuple[str, str, bool, str] | None:
    """(node, new phase, whether the old object held NVIDIA devices by itself, how to end it for
    real) when the update moves a pod or VMI from unfinished to finished; None otherwise."""
    if request.obj is None or request.old is None:
        return None
    if request.group_kind == POD:
        old_pod: PodInfo = request_projection(request, old=True)
        new_pod: PodInfo = request_projection(request)
        if old_pod.finished or not new_pod.finished:
            return None
        stop = f"kubectl delete pod {old_pod.name} -n {old_pod.namespace}"
        return old_pod.node, new_pod.phase, holds_gpu_resources(old_pod), stop
    old_vmi: VMIInfo = request_projection(request, old=True)
    new_vmi: VMIInfo = request_projection(request)
    if not old_vmi.live or new_vmi.live:
        return None
    return old_vmi.node, new_vmi.phase, holds_nvidia_device(old_vmi), virtctl_stop(old_vmi)


def _node_down(node: str, view: ClusterView) -> bool:
    """Gone from the cluster, or declared out of service: nothing there to switch or protect."""
    info = view.node(node)
    return info is None or any(t.key == OUT_OF_SERVICE for t in info.taints)


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    ended = _ended(request)
    if ended is None:
        return ()
    node, phase, holds, stop = ended
    if not node or _node_down(node, view):
        return ()
    key = f"{request.namespace}/{request.name}"
    counted = {u.key for u in gpu_users_on(node, view)} | {u.key for u in vm_users_on(node, view)}
    if key not in counted and not holds:
        return ()
    vmi = request.group_kind == VIRTUAL_MACHINE_INSTANCE
    what = f"{'VMI' if vmi else 'pod'} {key}"
    who = request.user.username or "(unknown user)"
    runner = "KubeVirt (virt-handler, virt-controller)" if vmi else f"the kubelet of {node}"
    return (
        Finding(
            f"{what} uses GPUs on {node} and is marked {phase} by {who}, not by {runner}: the "
            f"write stops nothing on {node}, but gpu-guard would stop counting it, and a GPU-mode "
            f"change of {node} that it blocks would pass. End it so that it stops: {stop}",
            chain=(
                f"{what} marked {phase} by {who}",
                f"gpu-guard counts it gone from {node}",
                f"a GPU-mode switch of {node} passes while it still runs",
            ),
            remediation=(stop,),
        ),
    )


POLICY = Policy(
    id=ID,
    summary=(
        "A pod or VMI that uses a node's NVIDIA GPUs is marked Succeeded or Failed by someone "
        "other than its node's kubelet, the pod garbage collector or KubeVirt, on a node that is "
        "still in service: the guard would stop counting it while it runs."
    ),
    scope={POD: frozenset({UPDATE}), VIRTUAL_MACHINE_INSTANCE: frozenset({UPDATE})},
    default_action=Action.DENY,
    default_reason=(
        "A forged phase opens every GPU-mode deny at once; nobody who ends a workload for real "
        "writes its phase (they delete the pod or stop the VM), and those who may are exempt."
    ),
    failure_action=Action.WARN,
    check=check,
    audit=None,
    reads=GPU_USERS_READS | VM_USERS_READS | {NODE},
    owners=(POD_ENDERS, KUBEVIRT_COMPONENTS),
)

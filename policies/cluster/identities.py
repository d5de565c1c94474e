"""Who writes an object unjudged: its own controller, recognised by identity, never guessed.

A kubelet writes its own Node (registration, heartbeats through ``nodes/status``): ``KUBELET``,
the owner every Node policy declares; HCO writes the one KubeVirt CR its HyperConverged owns
(``HCO`` in policies.cluster.kubevirt_config). What ends a GPU user writes its phase: the pod's
kubelet and kube-controller-manager's pod garbage collector (which marks a pod Failed before
deleting it when its node is gone or out of service), ``POD_ENDERS``; KubeVirt's own components
a VMI's, ``KUBEVIRT_COMPONENTS``. Each is recognised
only by the identity the API server authenticated, whole: a kubelet's name for another node, the
right name without the group its authenticator gives it, or a name that only starts like one is
judged like anyone's. The webhooks' matchConditions say the same (manifests/base/webhooks.yaml);
whoever may impersonate the real identity is beyond what admission can tell apart (docs/security.md,
"Threat model").
"""

from __future__ import annotations

from policies.cluster.hyperconverged import HCO_NAMESPACES
from policies.cluster.kinds import NODE, POD, VIRTUAL_MACHINE_INSTANCE
from policies.cluster.view import ClusterView
from policies.vocabulary.fields import get_map, get_str
from policies.vocabulary.owners import Owner
from policies.vocabulary.requests import UPDATE, AdmissionRequest, UserInfo

#: How the API server names a kubelet (its client certificate's CN and O; the Node authorizer and
#: NodeRestriction read the same two).
KUBELET_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
#: Why a kubelet's write of its own Node is not judged (the decision's ``exempt``).
OWN_KUBELET = (
    "the node's own kubelet (system:node:<its name> in group system:nodes): whoever holds its "
    "credentials is root on the node already"
)


#: kube-controller-manager's pod garbage collector (pkg/controller/podgc,
#: ``markFailedAndDeletePodWithCondition``): its own ServiceAccount under
#: ``--use-service-account-credentials`` (kubeadm's default), else the controller manager's name.
POD_GC_ACCOUNT = ("kube-system", "pod-garbage-collector")
CONTROLLER_MANAGER = "system:kube-controller-manager"
#: Why its write of a pod's phase is not judged.
POD_GC = (
    "the pod garbage collector (kube-system:pod-garbage-collector or "
    "system:kube-controller-manager): it marks a pod Failed when its node is gone or out of service"
)
#: Where KubeVirt runs (upstream's namespace, and HCO's), and the components that write a VMI's
#: phase: virt-handler when its domain stops, virt-controller when its launcher pod is gone, the
#: synchronization controller of a cross-cluster migration (kubevirt
#: pkg/virt-operator/resource/generate/components/serviceaccountnames.go).
KUBEVIRT_NAMESPACES = ("kubevirt", *HCO_NAMESPACES)
KUBEVIRT_FINISHERS = (
    "kubevirt-handler",
    "kubevirt-controller",
    "kubevirt-synchronization-controller",
)
KUBEVIRT_OWN = "KubeVirt's own components (their ServiceAccounts in KubeVirt's namespace)"


def is_kubelet_of(user: UserInfo, node: str) -> bool:
    """``system:node:<node>`` in group ``system:nodes``: the identity the Node authorizer and
    NodeRestriction check (another node's name, or the name without the group, is not it)."""
    return bool(node) and user.username == f"{KUBELET_PREFIX}{node}" and NODES_GROUP in user.groups


def is_service_account(user: UserInfo, namespace: str, name: str) -> bool:
    """A ServiceAccount as the API server authenticates one: its username and its namespace's
    ServiceAccount group, both."""
    return (
        user.username == f"system:serviceaccount:{namespace}:{name}"
        and f"system:serviceaccounts:{namespace}" in user.groups
    )


def is_own_kubelet(request: AdmissionRequest) -> bool:
    """The Node's own kubelet: ``system:node:<the request's node>`` in group ``system:nodes``."""
    return request.group_kind == NODE and is_kubelet_of(request.user, request.name)


def kubelet_own_write(request: AdmissionRequest) -> str | None:
    """``OWN_KUBELET`` for a kubelet's write of its own Node, else None."""
    return OWN_KUBELET if is_own_kubelet(request) else None


#: The owner of a Node, declared by the policies that judge Nodes.
KUBELET: Owner[ClusterView] = Owner(NODE, kubelet_own_write)


def _pods_node(request: AdmissionRequest) -> str:
    """The node the pod is bound to (spec.nodeName, which no update changes once set)."""
    spec = get_map(request.old or request.obj or {}, "spec", "")
    return get_str(spec, "nodeName", "spec")


def pod_ended_by_its_own(request: AdmissionRequest) -> str | None:
    """Why this pod write is by what ends pods (its phase), else None: the pod's own kubelet, or
    the pod garbage collector (``POD_ENDERS`` asks it of updates only)."""
    if request.group_kind != POD:
        return None
    user = request.user
    if is_kubelet_of(user, _pods_node(request)):
        return OWN_KUBELET
    if user.username == CONTROLLER_MANAGER or is_service_account(user, *POD_GC_ACCOUNT):
        return POD_GC
    return None


def vmi_written_by_kubevirt(request: AdmissionRequest) -> str | None:
    """``KUBEVIRT_OWN`` for a VMI write by one of KubeVirt's own components, else None
    (``KUBEVIRT_COMPONENTS`` asks it of updates only)."""
    if request.group_kind != VIRTUAL_MACHINE_INSTANCE:
        return None
    user = request.user
    own = any(
        is_service_account(user, namespace, name)
        for namespace in KUBEVIRT_NAMESPACES
        for name in KUBEVIRT_FINISHERS
    )
    return KUBEVIRT_OWN if own else None


#: What ends pods (their phase, through ``pods/status``), declared by the policies that judge a
#: pod's end.
POD_ENDERS: Owner[ClusterView] = Owner(POD, pod_ended_by_its_own, operations=frozenset({UPDATE}))
#: KubeVirt's own components, owners of every VMI's status (its updates).
KUBEVIRT_COMPONENTS: Owner[ClusterView] = Owner(
    VIRTUAL_MACHINE_INSTANCE, vmi_written_by_kubevirt, operations=frozenset({UPDATE})
)

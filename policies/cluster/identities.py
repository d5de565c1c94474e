"""Who writes an object unjudged: its own controller, recognised by identity, never guessed.

A kubelet writes its own Node (registration, heartbeats through ``nodes/status``): ``KUBELET``,
the owner every Node policy declares; HCO writes the one KubeVirt CR its HyperConverged owns
(``HCO`` in policies.cluster.kubevirt_config). Each is recognised
only by the identity the API server authenticated, whole: a kubelet's name for another node, the
right name without the group its authenticator gives it, or a name that only starts like one is
judged like anyone's. The webhooks' matchConditions say the same (manifests/base/webhooks.yaml);
whoever may impersonate the real identity is beyond what admission can tell apart (docs/security.md,
"Threat model").
"""

from __future__ import annotations

from policies.cluster.kinds import NODE
from policies.cluster.view import ClusterView
from policies.vocabulary.owners import Owner
from policies.vocabulary.requests import AdmissionRequest

#: How the API server names a kubelet (its client certificate's CN and O; the Node authorizer and
#: NodeRestriction read the same two).
KUBELET_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
#: Why a kubelet's write of its own Node is not judged (the decision's ``exempt``).
OWN_KUBELET = (
    "the node's own kubelet (system:node:<its name> in group system:nodes): whoever holds its "
    "credentials is root on the node already"
)


def is_own_kubelet(request: AdmissionRequest) -> bool:
    """The Node's own kubelet: ``system:node:<the request's node>`` in group ``system:nodes``."""
    return (
        request.group_kind == NODE
        and bool(request.name)
        and request.user.username == f"{KUBELET_PREFIX}{request.name}"
        and NODES_GROUP in request.user.groups
    )


def kubelet_own_write(request: AdmissionRequest) -> str | None:
    """``OWN_KUBELET`` for a kubelet's write of its own Node, else None."""
    return OWN_KUBELET if is_own_kubelet(request) else None


#: The owner of a Node, declared by the policies that judge Nodes.
KUBELET: Owner[ClusterView] = Owner(NODE, kubelet_own_write)

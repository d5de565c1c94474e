"""The KubeVirt configuration a request asks for, whichever CR it is written in: the KubeVirt CR
as sent, or what HCO will write from a HyperConverged (policies.cluster.hyperconverged). The
KubeVirt-CR policies judge either through ``requested_kubevirt``, with field paths as the user
wrote them.

Apart from projections.py, hyperconverged.py and hco_translation.py because it needs them all,
and the view.
"""

from __future__ import annotations

from policies.cluster.hco_translation import Translation, translate
from policies.cluster.hyperconverged import (
    HCO_KUBEVIRT_NAME,
    HyperConvergedInfo,
    is_hco_operator,
    is_hco_owned,
    written_by_hco,
)
from policies.cluster.kinds import HYPERCONVERGED, KUBEVIRT
from policies.cluster.kubevirt import KubeVirtInfo
from policies.cluster.projections import request_projection
from policies.cluster.view import ClusterView
from policies.vocabulary.owners import Owner
from policies.vocabulary.requests import AdmissionRequest


def translation_of(hc: HyperConvergedInfo, view: ClusterView) -> Translation:
    """What HCO will write from ``hc``, on the KubeVirt CR it last wrote."""
    return translate(hc, written_by_hco(hc, view.kubevirts_in(hc.namespace)))


def request_translation(
    request: AdmissionRequest, view: ClusterView, old: bool = False
) -> Translation | None:
    """A HyperConverged request's object (or oldObject) translated, once per request."""
    if request.group_kind != HYPERCONVERGED:
        return None

    def compute() -> Translation | None:
        hc: HyperConvergedInfo | None = request_projection(request, old)
        return translation_of(hc, view) if hc is not None else None

    return request.once(("hco-translation", old), compute)


def requested_kubevirt(
    request: AdmissionRequest, view: ClusterView, old: bool = False
) -> KubeVirtInfo | None:
    """The KubeVirt configuration of the request's object (or oldObject): the KubeVirt CR's
    projection, or the HyperConverged's translation. When the translation is not known (its
    jsonpatch annotation writes what gpu-guard cannot tell: kubevirt-config-reverted-by-hco
    says so), the new object's is None and the old object's is the KubeVirt CR HCO last wrote,
    so that an update leaving such an annotation is still judged against what is in force."""
    if request.group_kind == HYPERCONVERGED:
        translation = request_translation(request, view, old)
        if translation is None or translation.known:
            return translation.kubevirt if translation is not None else None
        if not old:
            return None
        hc: HyperConvergedInfo = request_projection(request, old)
        return written_by_hco(hc, view.kubevirts_in(hc.namespace))
    info: KubeVirtInfo | None = request_projection(request, old)
    return info


def is_hco_operator_request(request: AdmissionRequest) -> bool:
    """HCO's own write (or dry run) of the KubeVirt CR its HyperConverged owns (the one HCO names,
    in HCO's namespace), as HCO's ServiceAccount: never judged, answered at once. HCO's identity
    on any other KubeVirt CR, or its username without its group, is judged like anyone's."""
    return (
        request.group_kind == KUBEVIRT
        and request.name == HCO_KUBEVIRT_NAME
        and is_hco_operator(request.user, request.namespace)
    )


def hco_owned_edit(request: AdmissionRequest, view: ClusterView) -> HyperConvergedInfo | None:
    """The HyperConverged whose KubeVirt CR this request edits directly (HCO reverts it): a
    KubeVirt request by anyone but HCO, on an HCO-labelled CR, while a HyperConverged exists."""
    if request.group_kind != KUBEVIRT or is_hco_operator_request(request):
        return None
    current: KubeVirtInfo | None = request_projection(request, old=request.obj is None)
    if current is None or not is_hco_owned(current):
        return None
    return view.hyperconverged(current.namespace)


#: Why HCO's own KubeVirt writes are not judged (the decision's ``exempt``).
HCO_OWN_WRITE = "HCO's own write of the KubeVirt CR (HyperConverged requests are judged instead)"


def hco_own_write(request: AdmissionRequest) -> str | None:
    """``HCO_OWN_WRITE`` for HCO's own KubeVirt requests, else None: the engine answers them at
    once (they come within HCO's 3 s budget for a HyperConverged update)."""
    return HCO_OWN_WRITE if is_hco_operator_request(request) else None


def hco_reverts(request: AdmissionRequest, view: ClusterView) -> str | None:
    """``NOT_DENIED`` for a direct edit of an HCO-owned KubeVirt CR, else None: HCO reverts the
    edit anyway, so a deny would only stand in the way."""
    edited = request.once("hco-owned-edit", lambda: hco_owned_edit(request, view))
    return NOT_DENIED if edited is not None else None


NOT_DENIED = "not denied: HCO owns this KubeVirt CR and reverts the edit"
#: The owner of the KubeVirt CR a HyperConverged names, declared by the KubeVirt CR's policies.
HCO: Owner[ClusterView] = Owner(KUBEVIRT, hco_own_write, reverts=hco_reverts)


def hco_owner(kubevirt: KubeVirtInfo, view: ClusterView) -> HyperConvergedInfo | None:
    """The HyperConverged HCO writes ``kubevirt`` from: where its permitted devices are edited."""
    return view.hyperconverged(kubevirt.namespace) if is_hco_owned(kubevirt) else None

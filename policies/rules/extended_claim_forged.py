"""extended-resource-claim-forged: a ResourceClaim carrying the scheduler's own annotation.

When DRA serves a pod's extended resources (KEP-5004, beta in 1.36), kube-scheduler makes one
ResourceClaim for the pod and marks it ``resource.kubernetes.io/extended-resource-claim: <pod>``;
quota counts the pod's extended resources through it. Before kubernetes#135434, quota skipped any
claim that said so, for as many claims as a user wrote with the annotation and an owner pod:
quota on ``requests.deviceclass.resource.kubernetes.io/...`` (or an explicit extended resource
name) is dodged (kubernetes#135404). A user has no reason to write the annotation; only the
scheduler does. docs/dra.md has the sources.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.cluster.kinds import RESOURCE_CLAIM
from policies.cluster.view import ClusterView
from policies.vocabulary.fields import get_map, get_str
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest, JSONObject
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "extended-resource-claim-forged"
ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
SCHEDULER = "system:kube-scheduler"


def _annotations(obj: JSONObject | None) -> JSONObject:
    return get_map(get_map(obj or {}, "metadata", ""), "annotations", "metadata")


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    del view
    if request.obj is None or request.sub_resource or request.user.username == SCHEDULER:
        return ()
    annotations = _annotations(request.obj)
    if ANNOTATION not in annotations:
        return ()
    if request.operation == UPDATE and ANNOTATION in _annotations(request.old):
        return ()  # the scheduler's claim, edited (a label, a finalizer): not new
    pod = get_str(annotations, ANNOTATION, "metadata.annotations") or "(empty)"
    return [
        Finding(
            f"claim {request.namespace}/{request.name} carries {ANNOTATION}: {pod} but is "
            f"written by {request.user.username or '(unknown user)'}, not the scheduler: "
            "quota of extended resources served by DRA may not count it (kubernetes#135404)",
            chain=(
                f"{ANNOTATION} marks the one claim kube-scheduler makes for a pod's extended "
                "resources (KEP-5004)",
                "quota before kubernetes#135434 skips every claim so marked",
            ),
            remediation=(
                f"remove the annotation {ANNOTATION} from the claim; ask for the devices with a "
                "claim of your own, or with the extended resource in the pod's limits",
            ),
        )
    ]


POLICY = Policy(
    id=ID,
    summary=(
        "A ResourceClaim not written by kube-scheduler carries the scheduler's "
        "resource.kubernetes.io/extended-resource-claim annotation, with which quota of "
        "extended resources from DRA skips it (kubernetes#135404)."
    ),
    scope={RESOURCE_CLAIM: frozenset({CREATE, UPDATE})},
    default_action=Action.WARN,
    default_reason=(
        "Only the scheduler has a reason to write it; a patched kube-apiserver (kubernetes#135434) "
        "no longer lets it dodge quota, so the warning says what to remove rather than refusing "
        "a claim that may be harmless."
    ),
    failure_action=Action.WARN,
    check=check,
    audit=None,
    reads=frozenset(),
)

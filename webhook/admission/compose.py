"""The AdmissionReview an API server would POST for a request: what ``check`` judges, what
``make demo``, the benchmarks and the tests send, in the shape ``parse_review`` reads back.

Apart from ``review.py`` (parsing what arrives): building one is for the commands and the tests,
never on the server's path.
"""

from __future__ import annotations

from typing import Any

from policies.cluster.kinds import RESOURCE_OF, REVIEWED_AS_SUBRESOURCE
from policies.vocabulary.requests import AdmissionRequest
from webhook.admission.review import API_VERSION, KIND


def _resource(request: AdmissionRequest) -> tuple[dict[str, str], str]:
    """The resource and subresource the API server names for a request of this kind (the
    request's own when it names one: a Scale's is its parent's)."""
    named = request.resource
    if named.resource:
        resource = {"group": named.group, "version": named.version, "resource": named.resource}
        return resource, request.sub_resource
    kind = request.group_kind
    parent, subresource = REVIEWED_AS_SUBRESOURCE.get(kind, (kind, ""))
    served = RESOURCE_OF.get(parent)
    if served is None:
        raise ValueError(f"no API resource known for {kind}: add it to policies/cluster/kinds.py")
    version = request.version if parent == kind else served.version
    resource = {"group": parent.group, "version": version, "resource": served.plural}
    return resource, request.sub_resource or subresource


def review_of(request: AdmissionRequest) -> dict[str, Any]:
    """The AdmissionReview the API server would POST for ``request``; ``parse_review`` of its
    bytes gives ``request`` back, with the resource the review names."""
    kind = {"group": request.group, "version": request.version, "kind": request.kind}
    resource, subresource = _resource(request)
    body: dict[str, Any] = {
        "uid": request.uid,
        "kind": kind,
        "resource": resource,
        "requestKind": dict(kind),
        "requestResource": dict(resource),
        "name": request.name,
        "namespace": request.namespace or None,
        "operation": request.operation,
        "userInfo": {"username": request.user.username, "groups": list(request.user.groups)},
        "object": request.obj,
        "oldObject": request.old,
        "dryRun": request.dry_run,
    }
    if subresource:
        body["subResource"] = body["requestSubResource"] = subresource
    return {"apiVersion": API_VERSION, "kind": KIND, "request": body}

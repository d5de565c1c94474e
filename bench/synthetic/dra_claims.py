"""The DRA cluster's ResourceClaims and ResourceClaimTemplates, as the API server holds them: a
claim made for a pod from a template is owned by the pod; an allocated one has the scheduler's
``status.allocation`` (devices, a nodeSelector pinning the node) and ``reservedFor`` its pod."""

from __future__ import annotations

import random
from collections.abc import Iterator

from bench.synthetic import draw
from bench.synthetic.dra_layout import DRIVER, DraLayout
from bench.synthetic.dra_nodes import RESOURCE_API
from bench.synthetic.dra_plan import PlannedClaim, Request, dra_plan
from bench.synthetic.draw import Obj

#: The request name every claim and template here uses (pods' containers name the claim entry).
REQUEST = "gpu"


def claim_spec(request: Request) -> Obj:
    """spec.devices of a claim, with the defaults the API server fills in."""
    exactly: Obj = {
        "allocationMode": "ExactCount",
        "count": request.count,
        "deviceClassName": request.device_class,
    }
    if request.selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in request.selectors]
    return {"devices": {"requests": [{"exactly": exactly, "name": REQUEST}]}}


def _bookkeeping(rng: random.Random, namespace: str, name: str) -> Obj:
    return {
        "name": name,
        "namespace": namespace,
        "uid": draw.uid(rng),
        "resourceVersion": draw.resource_version(rng),
        "creationTimestamp": draw.stamp(rng, 60, 0.1),
    }


def resource_claim_templates(layout: DraLayout) -> Iterator[Obj]:
    rng = random.Random(f"{layout.seed}:dra-templates")
    for template in dra_plan(layout).templates:
        yield {
            "apiVersion": RESOURCE_API,
            "kind": "ResourceClaimTemplate",
            "metadata": _bookkeeping(rng, template.namespace, template.name),
            "spec": {"metadata": {}, "spec": claim_spec(template.request)},
        }


def _status(seed: int, claim: PlannedClaim) -> Obj:
    if not claim.node:
        return {}
    pinned = {"key": "metadata.name", "operator": "In", "values": [claim.node]}
    results = [
        {"request": REQUEST, "driver": DRIVER, "pool": claim.node, "device": device}
        for device in claim.devices
    ]
    uid = draw.name_uid(seed, claim.namespace, claim.consumer)
    return {
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [pinned]}]},
        },
        "reservedFor": [{"resource": "pods", "name": claim.consumer, "uid": uid}],
    }


def resource_claims(layout: DraLayout) -> Iterator[Obj]:
    rng = random.Random(f"{layout.seed}:dra-claims")
    for claim in dra_plan(layout).claims:
        meta = _bookkeeping(rng, claim.namespace, claim.name)
        if claim.template:
            pod_uid = draw.name_uid(layout.seed, claim.namespace, claim.consumer)
            meta["generateName"] = f"{claim.consumer}-{REQUEST}-"
            meta["annotations"] = {"resource.kubernetes.io/pod-claim-name": REQUEST}
            meta["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": claim.consumer,
                    "uid": pod_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        if claim.node:
            meta["finalizers"] = ["resource.kubernetes.io/delete-protection"]
        yield {
            "apiVersion": RESOURCE_API,
            "kind": "ResourceClaim",
            "metadata": meta,
            "spec": claim_spec(claim.request),
            "status": _status(layout.seed, claim),
        }

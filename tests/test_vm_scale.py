"""A pool's or VMIRS's replicas raised through its ``scale`` subresource (``kubectl scale``, an
autoscaler) are judged as the parent asked to run: the review names only an autoscaling/v1
Scale, so ``request.resource`` tells whose scale it is, and the parent's template is read from
the state. A parent the state does not hold is "cannot tell", never all clear."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from policies.cluster.kinds import VM_POOL, VM_REPLICA_SET, judged_as
from policies.rules import eviction_strategy, passthrough_provider
from policies.vocabulary.requests import GroupVersionResource
from tests.builders import Obj, dead_node, kubevirt, node, state_of, vm_pool, vm_replica_set
from tests.test_manifests import rendered, webhooks
from tools.routes import review, routed
from webhook.admission.compose import review_of
from webhook.admission.review import ReviewError, parse_review
from webhook.engine import Engine

RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"  # only the dead omen2 advertises it
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"  # the healthy omen1 does
NODES = (
    dead_node("omen2", allocatable={RTX_5090: "1"}),
    node("omen1", allocatable={RTX_3090: "1"}),
)
PERMITTED = [("10de:2b85", RTX_5090), ("10de:2204", RTX_3090)]
GVR = ("group", "version", "resource")
POOLS = ("pool.kubevirt.io", "v1beta1", "virtualmachinepools")
VMIRS = ("kubevirt.io", "v1", "virtualmachineinstancereplicasets")
DEPLOYMENTS = ("apps", "v1", "deployments")
DEAD = [(passthrough_provider.ID, RTX_5090 + " (gpus[gpu1])")]
UNSEEN = [
    (passthrough_provider.ID, "VirtualMachineInstanceReplicaSet vms/p is not in gpu-guard's view")
]


def _scale(name: str, replicas: int | None) -> Obj:
    """An autoscaling/v1 Scale as the API server builds it for a CRD's scale subresource
    (apiextensions-apiserver: spec.replicas from specReplicasPath, absent when unset)."""
    spec = {} if replicas is None else {"replicas": replicas}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {"name": name, "namespace": "vms", "uid": "7d1c", "resourceVersion": "812"},
        "spec": spec,
        "status": {"replicas": 0, "selector": f"app={name}"},
    }


def scale_review(
    resource: tuple[str, str, str], name: str, old: int | None, new: int | None
) -> bytes:
    """The review ``kubectl scale --replicas=<new>`` makes the API server send (recorded shape:
    kind Scale, the parent's resource, subResource scale, requestKind/requestResource too)."""
    group, version, plural = resource
    gvr = {"group": group, "version": version, "resource": plural}
    kind = {"group": "autoscaling", "version": "v1", "kind": "Scale"}
    request = {
        "uid": "0b7e",
        "kind": kind,
        "resource": gvr,
        "subResource": "scale",
        "requestKind": kind,
        "requestResource": gvr,
        "requestSubResource": "scale",
        "name": name,
        "namespace": "vms",
        "operation": "UPDATE",
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
        "object": _scale(name, new),
        "oldObject": _scale(name, old),
        "dryRun": False,
        "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(review).encode()


def verdicts(body: bytes, *state: Obj) -> list[tuple[str, str]]:
    decision = Engine().evaluate(parse_review(body), state_of(*NODES, kubevirt(PERMITTED), *state))
    return [(v.policy, v.message.split(":")[0]) for v in decision.verdicts]


@pytest.mark.parametrize(
    ("resource", "old", "new", "held", "expected"),
    [
        (POOLS, 0, 2, vm_pool("p", gpus=[RTX_5090], replicas=0), DEAD),
        (POOLS, None, 1, vm_pool("p", gpus=[RTX_5090], replicas=None), DEAD),
        (POOLS, 2, 3, vm_pool("p", gpus=[RTX_5090], replicas=2), DEAD),
        (POOLS, 3, 1, vm_pool("p", gpus=[RTX_5090], replicas=3), []),
        (POOLS, 2, 2, vm_pool("p", gpus=[RTX_5090], replicas=2), []),
        (POOLS, 0, 2, vm_pool("p", gpus=[RTX_3090], replicas=0), []),
        (POOLS, 0, 2, vm_pool("p", gpus=[RTX_5090], run_strategy="Halted"), []),
        (VMIRS, 0, 1, vm_replica_set("p", gpus=[RTX_5090], replicas=0), DEAD),
        (VMIRS, 1, 0, vm_replica_set("p", gpus=[RTX_5090], replicas=1), []),
        (VMIRS, 0, 1, vm_pool("p", gpus=[RTX_5090], replicas=0), UNSEEN),
        (DEPLOYMENTS, 0, 2, vm_pool("p", gpus=[RTX_5090], replicas=0), []),
    ],
    ids=[
        "a pool scaled from 0 whose template asks for a dead provider's GPU is warned",
        "a pool scaled from an unset count is warned",
        "a pool scaled up from 2 is warned too: its new VMs ask now",
        "a pool scaled down is not judged",
        "a scale that keeps the count is not judged",
        "a pool scaled up whose GPU a ready node serves is let through",
        "a pool whose template makes halted VMs starts none when scaled",
        "a replica set scaled from 0 is warned",
        "a replica set scaled to 0 is not judged",
        "a replica set's scale is never read as a pool of the same name: cannot tell",
        "a deployment's scale is not a VM template's",
    ],
)
def test_a_raised_replica_count_is_judged_as_the_parent_asked_to_run(
    resource: tuple[str, str, str], old: int | None, new: int, held: Obj, expected: list[Any]
) -> None:
    assert verdicts(scale_review(resource, "p", old, new), held) == expected


@pytest.mark.parametrize(
    ("resource", "kind"),
    [(POOLS, "VirtualMachinePool"), (VMIRS, "VirtualMachineInstanceReplicaSet")],
)
def test_scaling_a_parent_the_state_does_not_hold_is_cannot_tell_never_all_clear(
    resource: tuple[str, str, str], kind: str
) -> None:
    decision = Engine().evaluate(
        parse_review(scale_review(resource, "gone", 0, 2)), state_of(*NODES, kubevirt(PERMITTED))
    )
    assert [v.policy for v in decision.verdicts] == [passthrough_provider.ID]
    message = decision.verdicts[0].message
    assert message.startswith(f"{kind} vms/gone is not in gpu-guard's view")
    assert decision.verdicts[0].remediation == (f"kubectl get {kind.lower()} -n vms gone",)


@pytest.mark.parametrize(
    ("resource", "held", "field"),
    [
        (
            POOLS,
            vm_pool("p", gpus=[RTX_3090], replicas=0),
            eviction_strategy.TEMPLATE_FIELDS[VM_POOL],
        ),
        (
            VMIRS,
            vm_replica_set("p", gpus=[RTX_3090], replicas=0),
            eviction_strategy.TEMPLATE_FIELDS[VM_REPLICA_SET],
        ),
    ],
)
def test_a_scaled_template_is_held_to_a_migratable_eviction_strategy(
    resource: tuple[str, str, str], held: Obj, field: str
) -> None:
    live_migrate = kubevirt(PERMITTED, eviction_strategy="LiveMigrate")
    decision = Engine().evaluate(
        parse_review(scale_review(resource, "p", 0, 1)), state_of(*NODES, live_migrate, held)
    )
    assert [v.policy for v in decision.verdicts] == [eviction_strategy.ID]
    assert decision.verdicts[0].message.endswith(f"Set {field}: None.")


def test_a_scale_review_keeps_the_resource_and_subresource_it_was_sent_for() -> None:
    parsed = parse_review(scale_review(POOLS, "p", 0, 2))
    assert parsed.resource == GroupVersionResource(*POOLS)
    assert parsed.sub_resource == "scale"
    assert judged_as(parsed) == VM_POOL
    built = review_of(parsed)["request"]  # what check and the tests send: the same resource
    assert built["resource"] == dict(zip(GVR, POOLS, strict=True))
    assert built["subResource"] == "scale"
    assert parse_review(orjson.dumps(review_of(parsed))) == parsed


@pytest.mark.parametrize(
    "resource",
    [["pool.kubevirt.io"], {"group": 1, "version": "v1", "resource": "x"}, "virtualmachinepools"],
    ids=["a list", "a number for the group", "a bare string"],
)
def test_a_malformed_resource_is_refused_with_a_one_line_reason(resource: Any) -> None:
    review = json.loads(scale_review(POOLS, "p", 0, 2))
    review["request"]["resource"] = resource
    with pytest.raises(ReviewError) as caught:
        parse_review(json.dumps(review).encode())
    assert str(caught.value) == "request.resource: needs string group, version and resource"


def _sent_scale(resource: tuple[str, str, str], old: int | None, new: int | None) -> dict[str, Any]:
    """What webhook routing reads of ``scale_review``'s request (tools.routes)."""
    group, version, plural = resource
    sent = review(
        plural,
        "UPDATE",
        _scale("p", new),
        _scale("p", old),
        group=group,
        namespace="vms",
        sub_resource="scale",
    )
    sent["resource"]["version"] = version
    return sent


@pytest.mark.parametrize(
    ("old", "new", "hooks"),
    [(0, 2, {"vms"}), (None, 1, {"vms"}), (2, 3, {"vms"}), (3, 1, set()), (2, 2, set())],
    ids=[
        "a scale from 0 is sent",
        "a scale from an unset count is sent",
        "a scale up from 2 is sent",
        "a scale down is never sent",
        "a scale to the same count is never sent",
    ],
)
@pytest.mark.parametrize(
    "resource",
    [POOLS, ("pool.kubevirt.io", "v1alpha1", "virtualmachinepools"), VMIRS],
    ids=["a pool", "a pool served as v1alpha1", "a replica set"],
)
def test_the_api_server_sends_only_a_raised_replica_count(
    resource: tuple[str, str, str], old: int | None, new: int, hooks: set[str]
) -> None:
    validating = webhooks(rendered("base"), "ValidatingWebhookConfiguration")
    assert routed(validating, _sent_scale(resource, old, new)) == hooks

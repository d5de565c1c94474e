"""The owners a policy declares (``Policy.owners``): the kubelet of its Node, HCO of its KubeVirt
CR, what ends a pod or a VMI (their updates only). The engine reads each declaration the same
way, only for requests of the owner's kind (and operations), and every policy judging an owned
kind declares its owner."""

from __future__ import annotations

import asyncio
import copy
import time

import pytest

from policies.cluster.hyperconverged import HCO_KUBEVIRT_NAME, HCO_SERVICE_ACCOUNT
from policies.cluster.identities import (
    KUBELET,
    KUBEVIRT_COMPONENTS,
    OWN_KUBELET,
    POD_ENDERS,
)
from policies.cluster.kinds import KUBEVIRT, NODE, POD
from policies.cluster.kubevirt_config import HCO, HCO_OWN_WRITE
from policies.cluster.view import ClusterView
from policies.registry import ALL_POLICIES
from policies.vocabulary.owners import Owner
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action
from tests.builders import always_deny, gpu_pod, kubevirt, node, request, state_of, with_labels
from webhook.admission.pipeline import Admission
from webhook.config import GuardConfig
from webhook.engine import Decision, Engine

OMEN1 = node("omen1", labels={"nvidia.com/gpu.workload.config": "container"})
STATE = state_of(OMEN1, gpu_pod("train", "omen1"))


def relabel(user: str) -> AdmissionRequest:
    new = with_labels(OMEN1, {"nvidia.com/gpu.workload.config": "vm-passthrough"})
    return request("UPDATE", new, OMEN1, user=user)


def hco_write() -> AdmissionRequest:
    """HCO's own update of the KubeVirt CR its HyperConverged owns."""
    namespace = "kubevirt-hyperconverged"
    cr = kubevirt()
    cr["metadata"] = {"name": HCO_KUBEVIRT_NAME, "namespace": namespace}
    user = f"system:serviceaccount:{namespace}:{HCO_SERVICE_ACCOUNT}"
    return request("UPDATE", cr, copy.deepcopy(cr), user=user)


def test_every_policy_judging_an_owned_kind_declares_its_owner_and_no_other() -> None:
    owners = {owner for policy in ALL_POLICIES for owner in policy.owners}
    assert owners == {KUBELET, HCO, POD_ENDERS, KUBEVIRT_COMPONENTS}
    for policy in ALL_POLICIES:
        expected = {
            owner
            for owner in owners
            if owner.kind in policy.scope
            and (not owner.operations or owner.operations & policy.scope[owner.kind])
        }
        assert set(policy.owners) == expected, policy.id


@pytest.mark.parametrize(
    ("owners", "user", "exempt"),
    [
        pytest.param((KUBELET,), "system:node:omen1", OWN_KUBELET, id="its own kubelet, declared"),
        pytest.param((), "system:node:omen1", "", id="its own kubelet, not declared"),
        pytest.param((KUBELET,), "system:node:omen2", "", id="another node's kubelet"),
        pytest.param((KUBELET,), "kubernetes-admin", "", id="an admin"),
    ],
)
def test_an_owners_own_write_is_exempt_whole_only_where_a_policy_declares_the_owner(
    owners: tuple[Owner[ClusterView], ...], user: str, exempt: str
) -> None:
    decision = Engine(GuardConfig(), [always_deny(NODE, *owners)]).evaluate(relabel(user), STATE)
    assert decision.exempt == exempt
    assert decision.allowed is bool(exempt)


def never(*_: object) -> str | None:
    raise AssertionError("asked of a request of another kind")


@pytest.mark.parametrize(
    ("owner", "action", "message"),
    [
        pytest.param(
            Owner(NODE, lambda r: None, reverts=lambda r, v: "reverted anyway"),
            Action.WARN,
            "no (reverted anyway)",
            id="an owner that reverts the edit: a warning saying why",
        ),
        pytest.param(
            Owner(NODE, lambda r: None, reverts=lambda r, v: None),
            Action.DENY,
            "no",
            id="an owner that keeps this edit: the deny stands",
        ),
        pytest.param(
            Owner(KUBEVIRT, never, reverts=never),
            Action.DENY,
            "no",
            id="an owner of another kind is never asked",
        ),
    ],
)
def test_a_deny_of_an_edit_the_owner_reverts_is_a_warning_saying_why(
    owner: Owner[ClusterView], action: Action, message: str
) -> None:
    engine = Engine(GuardConfig(), [always_deny(NODE, owner)])
    (verdict,) = engine.evaluate(relabel("kubernetes-admin"), STATE).verdicts
    assert (verdict.action, verdict.message) == (action, message)


@pytest.mark.parametrize(
    ("review", "exempt"),
    [
        pytest.param(relabel("system:node:omen1"), OWN_KUBELET, id="the kubelet's own Node"),
        pytest.param(hco_write(), HCO_OWN_WRITE, id="HCO's own KubeVirt CR"),
    ],
)
async def test_an_owners_own_write_is_answered_at_once_while_every_slot_is_taken(
    review: AdmissionRequest, exempt: str
) -> None:
    inside, held = asyncio.Event(), asyncio.Event()

    class Held(Admission):
        async def decide(self, review: AdmissionRequest) -> Decision:
            inside.set()
            await held.wait()
            return await super().decide(review)

    admission = Held(Engine(), STATE, max_in_flight=1, deadline=5)
    busy = asyncio.create_task(admission.admit(relabel("kubernetes-admin"), time.perf_counter()))
    await inside.wait()  # it holds the only slot: a review that waited for one would be shed
    decision = await admission.admit(review, time.perf_counter())
    held.set()
    assert (await busy).allowed is False  # the slot was taken all along
    assert decision.exempt == exempt


def test_an_owner_of_some_operations_is_asked_only_for_those() -> None:
    """What ends pods owns their updates (the phase), not their creation: a pod created by the
    node's kubelet (a static pod's mirror) is judged by a policy on pod creates."""
    created = request("CREATE", gpu_pod("mirror", "omen1"), user="system:node:omen1")
    updated = request("UPDATE", gpu_pod("mirror", "omen1"), gpu_pod("mirror", "omen1"),
                      user="system:node:omen1")  # fmt: skip
    for review, exempt in ((created, False), (updated, True)):
        policy = always_deny(POD, POD_ENDERS, operation=review.operation)
        decision = Engine(GuardConfig(), [policy]).evaluate(review, STATE)
        assert bool(decision.exempt) is exempt, review.operation

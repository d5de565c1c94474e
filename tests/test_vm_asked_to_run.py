"""A VM created Halted or Manual and later started is judged when it is asked to run, by the
policies that judge a VM created running:

- the UPDATE that sets its runStrategy to Always, RerunOnFailure or Once (what ``virtctl start``
  has virt-api write for a Halted VM), or ``spec.running: true``;
- the ``virtualmachines/status`` UPDATE that adds a Start entry to ``status.stateChangeRequests``
  (what ``virtctl start`` has virt-api write for a Manual VM, and for a Halted one with
  ``--paused``: kubevirt pkg/virt-api/rest/lifecycle.go, ``StartVMRequestHandler``). The webhook
  sends no other status write (tests/test_manifests.py routes them; tests/e2e/test_vm_start.py
  replays virt-api's writes on a real API server).
"""

from __future__ import annotations

import pytest

from policies.cluster.kubevirt import project_vm
from tests.builders import node, request, state_of, vm
from webhook.engine import Engine

GPU = "nvidia.com/GA102_GEFORCE_RTX_3090"
"""A device no node of the state advertises: passthrough-without-ready-provider warns."""


@pytest.mark.parametrize(
    ("run_strategy", "running", "judged"),
    [
        ("Always", None, True),
        ("RerunOnFailure", None, True),
        ("Once", None, True),
        (None, True, True),
        ("Manual", None, False),
        ("Halted", None, False),
    ],
    ids=["Always", "RerunOnFailure", "Once", "running: true", "Manual", "still Halted"],
)
def test_a_halted_vm_is_judged_when_its_update_asks_it_to_run(
    run_strategy: str | None, running: bool | None, judged: bool
) -> None:
    halted = vm("v", gpus=[GPU], run_strategy="Halted")
    started = vm("v", gpus=[GPU], run_strategy=run_strategy, running=running)
    decision = Engine().evaluate(request("UPDATE", started, halted), state_of(node("n")))
    policies = [v.policy for v in decision.verdicts]
    assert policies == (["passthrough-without-ready-provider"] if judged else [])


def with_requests(obj: dict[str, object], *actions: str) -> dict[str, object]:
    """``obj`` with status.stateChangeRequests holding entries with these actions."""
    status = {**obj["status"], "stateChangeRequests": [{"action": a} for a in actions]}  # type: ignore[dict-item]
    return {**obj, "status": status}


@pytest.mark.parametrize(
    ("run_strategy", "before", "after", "judged"),
    [
        ("Manual", (), ("Start",), True),
        ("Manual", (), ("Stop", "Start"), True),
        ("Halted", (), ("Start",), True),
        ("Manual", (), ("Stop",), False),
        ("Manual", ("Start",), (), False),
    ],
    ids=[
        "Manual, Start added",
        "Manual, Stop then Start (a restart)",
        "Halted, Start added (virtctl start --paused)",
        "Manual, Stop added",
        "Manual, the Start entry removed by virt-controller",
    ],
)
def test_a_status_write_that_asks_a_vm_to_start_is_judged_like_a_vm_asked_to_run(
    run_strategy: str, before: tuple[str, ...], after: tuple[str, ...], judged: bool
) -> None:
    stopped = vm("v", gpus=[GPU], run_strategy=run_strategy)
    review = request(
        "UPDATE",
        with_requests(stopped, *after),
        with_requests(stopped, *before),
        user="system:serviceaccount:kubevirt:kubevirt-apiserver",
        sub_resource="status",
    )
    decision = Engine().evaluate(review, state_of(node("n")))
    policies = [v.policy for v in decision.verdicts]
    assert policies == (["passthrough-without-ready-provider"] if judged else [])


def test_a_pending_start_entry_makes_a_stopped_vm_one_that_should_run() -> None:
    manual = vm("v", run_strategy="Manual")
    assert not project_vm(manual).should_run
    assert project_vm(with_requests(manual, "Start")).should_run
    assert not project_vm(with_requests(manual, "Stop")).should_run


def test_no_mutation_patches_through_the_status_subresource() -> None:
    stopped = vm("v", gpus=[GPU], run_strategy="Manual", eviction_strategy="LiveMigrate")
    review = request("UPDATE", with_requests(stopped, "Start"), stopped, sub_resource="status")
    assert Engine().mutations_for(review) == ()
    assert Engine().mutations_for(request("UPDATE", stopped, stopped)) != ()

"""A VM created Halted and later started is judged when it is asked to run: the UPDATE that sets
its runStrategy to Always, RerunOnFailure or Once (what ``virtctl start`` has virt-api write for
a Halted VM), or ``spec.running: true``, gets the verdicts a VM created running gets.

(``virtctl start`` of a Manual VM writes a Start entry to ``status.stateChangeRequests`` through
``virtualmachines/status`` instead: no webhook rule sends that subresource yet, so it is not
judged; the audit still finds the VM once it wants to run.)
"""

from __future__ import annotations

import pytest

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

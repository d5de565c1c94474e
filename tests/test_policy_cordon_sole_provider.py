"""cordon-sole-provider: cordoning, tainting or deleting the only healthy provider of a device."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from policies.rules.cordon_sole_provider import POLICY, check
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import (
    Obj,
    cordoned,
    dead_node,
    judged_by,
    node,
    owned_vmi,
    request,
    state_of,
    tainted,
    vmi,
    with_labels,
    with_spec,
)
from webhook.engine import Engine

NODE = "tower1"
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
TOWER1 = node(NODE, allocatable={RTX_3090: "1"})
WIN11 = owned_vmi("win11-gaming", NODE, gpus=[RTX_3090])

Change = Callable[[Obj], AdmissionRequest]


def cordon(obj: Obj) -> AdmissionRequest:
    return request("UPDATE", cordoned(obj), obj)


def taint_no_schedule(obj: Obj) -> AdmissionRequest:
    return request("UPDATE", tainted(obj, "maintenance", "NoSchedule", "gpu"), obj)


def taint_no_execute(obj: Obj) -> AdmissionRequest:
    return request("UPDATE", tainted(obj, "maintenance", "NoExecute"), obj)


def delete(obj: Obj) -> AdmissionRequest:
    return request("DELETE", None, obj)


CHANGES = [
    pytest.param(cordon, id="a cordon"),
    pytest.param(taint_no_schedule, id="a NoSchedule taint"),
    pytest.param(taint_no_execute, id="a NoExecute taint"),
    pytest.param(delete, id="a delete"),
]


def findings(change: Change, target: Obj, objects: Sequence[Obj]) -> list[Finding]:
    review = change(target)
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize(
    "objects",
    [
        pytest.param([TOWER1, WIN11], id="the only provider runs the VM"),
        pytest.param(
            [TOWER1, WIN11, dead_node("tower2", allocatable={RTX_3090: "1"})],
            id="another provider is dead",
        ),
        pytest.param(
            [TOWER1, WIN11, node("tower2", unschedulable=True, allocatable={RTX_3090: "1"})],
            id="another provider is already cordoned",
        ),
        pytest.param(
            [TOWER1, vmi("waiting", gpus=[RTX_3090], phase="Pending")],
            id="a VMI still waits for the device",
        ),
        pytest.param(
            [TOWER1, owned_vmi("vm", NODE, host_devices=[RTX_3090])],
            id="the device is in hostDevices",
        ),
        pytest.param([WIN11], id="the state has not seen the node yet"),
    ],
)
def test_taking_away_the_only_healthy_provider_is_warned(
    change: Change, objects: list[Obj]
) -> None:
    assert len(findings(change, TOWER1, objects)) == 1
    assert POLICY.default_action == Action.WARN


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize(
    ("target", "objects"),
    [
        pytest.param(
            TOWER1,
            [TOWER1, WIN11, node("tower2", allocatable={RTX_3090: "2"})],
            id="another healthy provider remains",
        ),
        pytest.param(
            TOWER1,
            [WIN11, node("tower2", allocatable={RTX_3090: "2"})],
            id="another healthy provider remains though the state lacks this node",
        ),
        pytest.param(TOWER1, [TOWER1], id="no VM uses the device"),
        pytest.param(
            TOWER1,
            [TOWER1, owned_vmi("vm", NODE, gpus=[RTX_3090], phase="Succeeded")],
            id="the VM using it has finished",
        ),
        pytest.param(
            TOWER1,
            [TOWER1, owned_vmi("other", NODE, gpus=["nvidia.com/TU104GL_TESLA_T4"])],
            id="VMs use some other device",
        ),
        pytest.param(
            dead_node("omen2", allocatable={RTX_3090: "1"}),
            [
                dead_node("omen2", allocatable={RTX_3090: "1"}),
                owned_vmi("vm", "omen2", gpus=[RTX_3090]),
            ],
            id="a dead node provides nothing: removing it changes nothing",
        ),
        pytest.param(
            node(NODE, allocatable={RTX_3090: "0"}),
            [node(NODE, allocatable={RTX_3090: "0"}), WIN11],
            id="a node advertising a count of 0",
        ),
    ],
)
def test_nothing_to_say_when_the_device_keeps_a_provider_or_has_no_user(
    change: Change, target: Obj, objects: list[Obj]
) -> None:
    assert not findings(change, target, objects)


@pytest.mark.parametrize(
    ("new", "old"),
    [
        pytest.param(TOWER1, cordoned(TOWER1), id="an uncordon"),
        pytest.param(cordoned(TOWER1), cordoned(TOWER1), id="a node that stays cordoned"),
        pytest.param(
            tainted(TOWER1, "maintenance", "PreferNoSchedule"),
            TOWER1,
            id="a PreferNoSchedule taint",
        ),
        pytest.param(
            tainted(TOWER1, "maintenance", "NoSchedule", "b"),
            tainted(TOWER1, "maintenance", "NoSchedule", "a"),
            id="a taint whose value changes is not a new taint",
        ),
        pytest.param(TOWER1, tainted(TOWER1, "maintenance"), id="a removed taint"),
        pytest.param(with_labels(TOWER1, {"team": "gpu"}), TOWER1, id="a label change"),
    ],
)
def test_updates_that_do_not_take_the_node_away_are_allowed(new: Obj, old: Obj) -> None:
    assert not check(request("UPDATE", new, old), state_of(TOWER1, WIN11))


@pytest.mark.parametrize(
    ("change", "action"),
    [
        pytest.param(cordon, "cordoning tower1", id="cordon"),
        pytest.param(taint_no_schedule, "tainting tower1 NoSchedule (maintenance)", id="taint"),
        pytest.param(delete, "deleting tower1", id="delete"),
    ],
)
def test_the_message_names_the_action_the_resource_the_vms_and_the_safe_step(
    change: Change, action: str
) -> None:
    (finding,) = findings(
        change, TOWER1, [TOWER1, WIN11, vmi("waiting", gpus=[RTX_3090], phase="Pending")]
    )
    assert finding.message == (
        f"{action}, the only healthy provider of {RTX_3090}, while vms/waiting and "
        "vms/win11-gaming (here) use it: a drain hangs or stops them for good. Add a provider or "
        "stop them first."
    )
    assert len(f"[{POLICY.id}] {finding.message}") <= 256
    assert finding.remediation == (
        f"bring up another node that advertises {RTX_3090}, or",
        "virtctl stop waiting -n vms",
        "virtctl stop win11-gaming -n vms",
    )


def test_one_finding_per_resource_the_node_alone_provides() -> None:
    t4 = "nvidia.com/TU104GL_TESLA_T4"
    both = node(NODE, allocatable={RTX_3090: "1", t4: "1"})
    objects = [both, WIN11, owned_vmi("t4-vm", NODE, gpus=[t4]), node("n2", allocatable={t4: "1"})]
    (finding,) = findings(cordon, both, objects)
    assert RTX_3090 in finding.message
    assert t4 not in finding.message
    objects[-1] = node("n2")
    assert [RTX_3090 in f.message for f in findings(cordon, both, objects)] == [True, False]


@pytest.mark.parametrize(
    ("operation", "sub_resource", "applies"),
    [
        pytest.param("UPDATE", "", True, id="a node update is judged"),
        pytest.param("DELETE", "", True, id="a node delete is judged"),
        pytest.param(
            "UPDATE", "status", True, id="nodes/status is judged: its spec is the stored one"
        ),
        pytest.param("CREATE", "", False, id="a node create is out of scope"),
    ],
)
def test_scope(operation: str, sub_resource: str, applies: bool) -> None:
    obj = None if operation == "DELETE" else cordoned(TOWER1)
    old = None if operation == "CREATE" else TOWER1
    assert judged_by(POLICY, request(operation, obj, old, sub_resource=sub_resource)) is applies


def test_a_node_object_without_status_is_not_healthy_and_not_judged() -> None:
    bare = with_spec({**TOWER1, "status": {}}, {})
    assert not check(cordon(bare), state_of(WIN11))


def test_the_engine_warns_by_default_and_allows_the_cordon() -> None:
    decision = Engine().evaluate(cordon(TOWER1), state_of(TOWER1, WIN11))
    assert decision.allowed
    assert [(v.policy, v.action) for v in decision.verdicts] == [(POLICY.id, Action.WARN)]


def test_the_chain_runs_from_the_sole_provider_to_the_vms_to_what_a_drain_does() -> None:
    (finding,) = findings(cordon, TOWER1, [TOWER1, WIN11])
    assert finding.chain == (
        f"{NODE} is the only healthy provider of {RTX_3090}",
        "vms/win11-gaming cannot live-migrate (host devices)",
        "a drain hangs (evictionStrategy LiveMigrate) or stops them (None)",
    )


def test_one_vm_is_said_to_use_the_device_in_the_singular() -> None:
    (finding,) = findings(cordon, TOWER1, [TOWER1, WIN11])
    assert "while vms/win11-gaming (here) uses it: a drain hangs" in finding.message


def test_a_taint_of_both_blocking_effects_names_both_and_every_new_key_in_taint_order() -> None:
    both = tainted(tainted(TOWER1, "maintenance", "NoExecute"), "gpu-fault", "NoSchedule")
    (finding,) = check(request("UPDATE", both, TOWER1), state_of(TOWER1, WIN11))
    assert finding.message.startswith(
        "tainting tower1 NoExecute and NoSchedule (maintenance and gpu-fault), the only healthy"
    )


def test_the_states_view_of_the_node_wins_over_the_requests_old_object() -> None:
    down = dead_node(NODE, allocatable={RTX_3090: "1"})
    assert findings(cordon, TOWER1, [down, WIN11]) == []


FIRST = "nvidia.com/A_FIRST"
"""Sorts before RTX_3090: the resources are judged in name order."""


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param(
            [node("n2", allocatable={FIRST: "1"}), owned_vmi("first-vm", NODE, gpus=[FIRST])],
            id="keeps a provider",
        ),
        pytest.param([], id="has no live user"),
    ],
)
def test_a_resource_that_is_fine_does_not_hide_a_later_one_the_node_alone_provides(
    extra: list[Obj],
) -> None:
    both = node(NODE, allocatable={FIRST: "1", RTX_3090: "1"})
    (finding,) = findings(cordon, both, [both, WIN11, *extra])
    assert f"the only healthy provider of {RTX_3090}," in finding.message

"""A newer Kubernetes never blinds the guard (issue 34): a field, attribute type or value newer
than the code is kept, never refused or dropped; what cannot be read is unknown, and answers
over it move only towards "cannot tell"."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from policies.cel.selectors import select
from policies.cel.values import Outcome, Unreadable
from policies.cluster import dra
from policies.cluster.dra import UNREADABLE_TYPE, project_resource_slice
from policies.cluster.kinds import NODE
from policies.state.cluster import ClusterState
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.semver import parse_version
from tests.builders import node, request, with_labels
from tests.dra_builders import (
    GPU_DEVICE_CLASS,
    claim_pod,
    gpu,
    resource_claim,
    resource_slice,
)
from webhook.engine import Engine
from webhook.state.feeding import new_state
from webhook.state.live import LiveState

MATCH, NO, UNKNOWN = Outcome.MATCH, Outcome.NO_MATCH, Outcome.UNKNOWN
NV = "device.attributes['gpu.nvidia.com']"
WORKLOAD = "nvidia.com/gpu.workload.config"


def device_with(**attributes: dict[str, Any]) -> Any:
    """One NVIDIA GPU publishing these attributes besides its usual ones."""
    slice_ = resource_slice("omen1-gpu", "omen1", [gpu(extra=attributes)])
    return project_resource_slice(slice_).devices[0]


LISTS = device_with(
    numaNodes={"ints": [0, 1]},
    pcieRoots={"strings": ["pci0000:00", "pci0000:40"]},
    flags={"bools": [True, True]},
    firmware={"versions": ["1.0.0", "1.2.3"]},
    tooMany={"ints": list(range(49))},
)


def test_list_typed_attributes_are_read_as_tuples_of_their_type() -> None:
    assert LISTS.attribute("numaNodes") == (0, 1)
    assert LISTS.attribute("pcieRoots") == ("pci0000:00", "pci0000:40")
    assert LISTS.attribute("flags") == (True, True)
    assert LISTS.attribute("firmware") == (parse_version("1.0.0"), parse_version("1.2.3"))


# KEP-5491 adds one CEL function, includes() (k8s.io/dynamic-resource-allocation/cel, 1.36):
# a list includes a value equal to an item, a scalar one equal to itself. The lists are plain
# CEL lists otherwise: in, size(), exists(), all(), indexing.
KEP_5491 = [
    (f"{NV}.numaNodes.includes(1)", MATCH),
    (f"{NV}.numaNodes.includes(2)", NO),
    (f"{NV}.numaNodes.includes('1')", NO),  # another type: unequal, not an error
    (f"{NV}.pcieRoots.includes('pci0000:40')", MATCH),
    (f"{NV}.flags.includes(false)", NO),
    (f"{NV}.firmware.includes(semver('1.2.3'))", MATCH),
    (f"{NV}.type.includes('gpu')", MATCH),  # a scalar: equal to itself
    (f"{NV}.type.includes('mig')", NO),
    (f"1 in {NV}.numaNodes", MATCH),
    (f"size({NV}.numaNodes) == 2", MATCH),
    (f"{NV}.numaNodes.exists(n, n > 0)", MATCH),
    (f"{NV}.numaNodes.all(n, n == 0)", NO),
    (f"{NV}.numaNodes[1] == 1", MATCH),
    (f"{NV}.tooMany.includes(0)", UNKNOWN),  # past 48 values includes() is an error
]


@pytest.mark.parametrize(("expression", "outcome"), KEP_5491)
def test_list_attributes_evaluate_in_cel_as_the_scheduler_does(
    expression: str, outcome: Outcome
) -> None:
    result = select([expression], LISTS)
    assert result.outcome is outcome, result.reason
    if outcome is UNKNOWN:
        assert "cannot be applied to lists longer than 48 values" in result.reason


def test_an_attribute_of_an_unknown_type_is_kept_and_only_what_reads_it_is_undecided() -> None:
    device = device_with(topology={"matrix": [[0, 1]]}, odd={"int": 1, "unit": "x"})
    assert device.attribute("topology") == Unreadable("matrix")
    assert device.attribute("odd") == Unreadable("int, unit")
    assert device.unreadable == ("gpu.nvidia.com/odd", "gpu.nvidia.com/topology")
    assert select([f"{NV}.type == 'gpu'"], device).outcome is MATCH
    result = select([f"{NV}.topology == 1"], device)
    assert result.outcome is UNKNOWN
    assert "topology is of a type gpu-guard cannot read (matrix)" in result.reason


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"int": 1, "string": "x"}, "more than one value: int, string"),
        ({"ints": []}, "expected a non-empty list"),
        ({"ints": ["0"]}, "expected a int"),
        ({"versions": ["one"]}, "not a semantic version"),
        ("1", "expected a typed value"),
    ],
)
def test_a_malformed_value_of_a_known_type_is_still_refused_by_name(
    value: Any, problem: str
) -> None:
    with pytest.raises(ObjectError, match=problem):
        device_with(broken=value)


def test_a_device_field_not_modelled_yet_makes_its_selection_cannot_tell(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hook for a field newer than the code that changes what a device can give (counters,
    shared allocation and taints were such fields until they were modelled)."""
    monkeypatch.setattr(dra, "UNMODELLED_DEVICE_FIELDS", ("futureSharing",))
    slice_ = resource_slice("omen1-gpu", "omen1", [{**gpu(), "futureSharing": {"ways": 4}}])
    (device,) = project_resource_slice(slice_).devices
    result = select([f"{NV}.type == 'gpu'"], device)
    assert result.outcome is UNKNOWN
    assert result.reason == "publishes futureSharing, which gpu-guard does not model"
    assert select([f"{NV}.type == 'mig'"], device).outcome is NO  # a no still stands


def omen1_with(device: dict[str, Any]) -> ClusterState:
    """omen1 (container mode) whose one published device a running pod's claim holds."""
    state = ClusterState()
    for obj in (
        node("omen1", labels={WORKLOAD: "container"}),
        GPU_DEVICE_CLASS,
        resource_slice("omen1-gpu", "omen1", [device]),
        resource_claim("train-gpu", allocated=("omen1", "omen1", "gpu-0"), reserved_for=["t"]),
        claim_pod("t", "omen1", claim="train-gpu"),
    ):
        state.upsert(obj)
    return state


@pytest.mark.parametrize("published", [{"kind": {"gpu": True}}, {"strings": ["gpu"]}])
def test_a_device_whose_type_cannot_be_read_still_counts_as_the_gpu_its_claim_holds(
    published: dict[str, Any],
) -> None:
    unreadable = {**gpu(), "attributes": {**gpu()["attributes"], "type": published}}
    state = omen1_with(unreadable)
    (device,) = state.devices_on("omen1")
    assert device.device.type == UNREADABLE_TYPE
    switch = with_labels(
        node("omen1", labels={WORKLOAD: "container"}), {WORKLOAD: "vm-passthrough"}
    )
    decision = Engine().evaluate(request("UPDATE", switch, node("omen1")), state)
    assert not decision.allowed and "ml/t" in decision.deny_message
    assert "gpu-0 (type unreadable)" in decision.deny_message  # and says why it counted


def test_what_a_slice_keeps_unread_is_logged_once_per_slice_and_cause_never_per_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    odd = gpu(extra={"numa": {"matrix": [[0]]}, "slot": {"unit": "x"}})
    slice_ = resource_slice("omen1-gpu", "omen1", [odd])
    state = new_state()  # as every feeder builds it: the pure state itself logs nothing
    with caplog.at_level(logging.WARNING, logger="gpu-guard.state"):
        for _ in range(3):  # the driver republishing it
            state.upsert(slice_)
    lines = [r.getMessage() for r in caplog.records if r.name == "gpu-guard.state"]
    assert len(lines) == 2, lines
    assert lines[0].startswith("ResourceSlice omen1-gpu: attribute gpu.nvidia.com/numa is of a")
    assert lines[1].startswith("ResourceSlice omen1-gpu: attribute gpu.nvidia.com/slot is of a")


def test_provider_answers_over_an_unmodelled_device_say_cannot_be_judged_not_no_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dra, "UNMODELLED_DEVICE_FIELDS", ("futureSharing",))
    state = ClusterState()
    for obj in (
        node("omen1", labels={WORKLOAD: "container"}),
        resource_slice("omen1-gpu", "omen1", [{**gpu(), "futureSharing": {"ways": 4}}]),
        GPU_DEVICE_CLASS,
    ):
        state.upsert(obj)
    decision = Engine().evaluate(request("CREATE", resource_claim("train-gpu")), state)
    (verdict,) = decision.verdicts
    assert verdict.policy == "claim-without-ready-device"
    assert "cannot be judged: publishes futureSharing, which gpu-guard does not model" in (
        verdict.message
    )


def test_an_object_its_watch_resends_unreadable_is_logged_once_not_per_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    live = LiveState(cast(Any, None))  # no request is made: only the state is fed
    bad = node("omen1", allocatable={"nvidia.com/gpu": "lots"})
    with caplog.at_level(logging.WARNING, logger="gpu-guard.state"):
        for _ in range(3):  # MODIFIED events of the same object
            live._upsert(live.statuses[NODE], bad)
    lines = [r.getMessage() for r in caplog.records if r.name == "gpu-guard.state"]
    assert len(lines) == 1 and lines[0].startswith("Node /omen1: ignored: "), lines
    assert "allocatable" in lines[0]

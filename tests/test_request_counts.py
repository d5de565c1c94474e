"""The state counts a request's own selectors per node once per request shape, and never
answers from a count the cluster has moved past."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from policies.state.cluster import ClusterState
from tests.dra_builders import device_class, gpu, resource_slice

CLASS = "gpu.nvidia.com"
RTX_5090 = ("device.attributes['gpu.nvidia.com'].productName == 'NVIDIA GeForce RTX 5090'",)
ALWAYS = "device.driver == 'gpu.nvidia.com'"


def state_of(*objs: Any) -> ClusterState:
    state = ClusterState()
    for obj in objs:
        state.upsert(obj)
    return state


def five_090s_and_a_3090() -> list[Any]:
    return [
        device_class(CLASS, ALWAYS),
        resource_slice("n1-slice", "n1", [gpu("gpu-0"), gpu("gpu-1")]),
        resource_slice("n2-slice", "n2", [gpu("gpu-0", product="NVIDIA GeForce RTX 3090")]),
    ]


def test_a_requests_selectors_are_counted_per_node() -> None:
    state = state_of(*five_090s_and_a_3090())
    counts = state.class_request_counts(CLASS, RTX_5090)
    assert (dict(counts.accepted), dict(counts.possible)) == ({"n1": 2}, {"n1": 2})


CHANGES: list[tuple[str, Callable[[ClusterState], object]]] = [
    (
        "a pool republished with one device fewer",
        lambda s: s.upsert(resource_slice("n1-slice", "n1", [gpu("gpu-0")], generation=2)),
    ),
    (
        "a slice of a 5090 added on another node",
        lambda s: s.upsert(resource_slice("n3-slice", "n3", [gpu("gpu-0")])),
    ),
    ("a slice deleted", lambda s: s.delete_object(resource_slice("n1-slice", "n1", []))),
    (
        "the class narrowed to nothing",
        lambda s: s.upsert(device_class(CLASS, "device.driver == 'other.example.com'")),
    ),
]


@pytest.mark.parametrize("change", [c for _, c in CHANGES], ids=[name for name, _ in CHANGES])
def test_after_any_change_the_counts_are_those_of_a_state_that_never_counted_before(
    change: Callable[[ClusterState], object],
) -> None:
    warm = state_of(*five_090s_and_a_3090())
    before = warm.class_request_counts(CLASS, RTX_5090)  # counted, and kept
    change(warm)
    cold = state_of(*five_090s_and_a_3090())
    change(cold)
    after = warm.class_request_counts(CLASS, RTX_5090)
    assert after == cold.class_request_counts(CLASS, RTX_5090)
    assert after != before  # each change moves the count: a stale answer would show


def test_asking_twice_without_a_change_counts_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import policies.state.dra as dra

    state = state_of(*five_090s_and_a_3090())
    calls: list[int] = []
    real = dra.select  # type: ignore[attr-defined]

    def counting(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(dra, "select", counting)
    state.class_request_counts(CLASS, RTX_5090)
    first = len(calls)
    state.class_request_counts(CLASS, RTX_5090)
    assert first == 3 and len(calls) == first

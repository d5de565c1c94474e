"""policies.cluster.claim_fit: whether one Ready node can satisfy a claim's requests, and if not,
why.

States are built from the fixture shapes (tests/dra_builders.py): NVIDIA's classes, slices as the
driver publishes them, nodes Ready or not; requests as the API server stores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from policies.cluster.claim_fit import claim_fit
from policies.cluster.claim_shortfall import Why
from policies.cluster.dra_claims import ClaimRequest, project_resource_claim
from policies.state.cluster import ClusterState
from tests.builders import Obj, cordoned, node, state_of, tainted
from tests.dra_builders import (
    GPU_DEVICE_CLASS,
    MIG_DEVICE_CLASS,
    NVIDIA,
    VFIO_DEVICE_CLASS,
    gpu,
    resource_slice,
)
from tests.test_state_indexes import scan_free_state

GPU = GPU_DEVICE_CLASS
VFIO = VFIO_DEVICE_CLASS
MIG = MIG_DEVICE_CLASS
CLASSES = (GPU, VFIO, MIG)
H100 = "NVIDIA H100 80GB HBM3"
NVL = "NVIDIA H100 NVL"
DOWN_SINCE = "2026-10-14T06:40:00Z"
NVL_SELECTOR = f"device.attributes['gpu.nvidia.com'].productName == '{NVL}'"


def down(name: str) -> Obj:
    """A node whose kubelet stopped posting status on 2026-10-14."""
    return node(
        name,
        ready="Unknown",
        reason="NodeStatusUnknown",
        message="Kubelet stopped posting node status.",
        since=DOWN_SINCE,
        taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}],
    )


def gpus(node_name: str, count: int, product: str = H100, type_: str = "gpu", **kwargs: Any) -> Obj:
    """The slice NVIDIA's driver publishes for ``count`` devices of one kind on a node."""
    devices = [gpu(f"gpu-{i}", type_=type_, product=product) for i in range(count)]
    return resource_slice(f"{node_name}-gpu.nvidia.com", node_name, devices, **kwargs)


def choice(
    device_class: str = NVIDIA,
    *,
    count: int = 1,
    mode: str = "ExactCount",
    selectors: Sequence[str] = (),
    name: str = "",
) -> Obj:
    out: Obj = {"deviceClassName": device_class, "allocationMode": mode}
    if mode == "ExactCount":
        out["count"] = count
    if selectors:
        out["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if name:
        out["name"] = name
    return out


def exactly(name: str = "gpu", device_class: str = NVIDIA, **kwargs: Any) -> Obj:
    return {"name": name, "exactly": choice(device_class, **kwargs)}


def first_available(name: str, *choices: Obj) -> Obj:
    return {"name": name, "firstAvailable": list(choices)}


def requests_of(*requests: Obj) -> tuple[ClaimRequest, ...]:
    claim = {
        "metadata": {"name": "c", "namespace": "ml"},
        "spec": {"devices": {"requests": list(requests)}},
    }
    return project_resource_claim(claim).requests


def shared_slice(name: str, devices: Sequence[Obj], selector_node: str = "") -> Obj:
    """A node-independent pool: every node reaches it, or those a label selector names."""
    obj = resource_slice(name, "", devices, pool=name, all_nodes=not selector_node)
    if selector_node:
        obj["spec"]["nodeSelector"] = {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/hostname",
                            "operator": "In",
                            "values": [selector_node],
                        }
                    ]
                }
            ]
        }
    return obj


def fit_of(objects: Sequence[Obj], *requests: Obj) -> Any:
    return claim_fit(requests_of(*requests), state_of(*CLASSES, *objects))


def reasons(objects: Sequence[Obj], *requests: Obj) -> list[tuple[str, str]]:
    """(request, what is said) for each request no Ready node can satisfy."""
    fit = fit_of(objects, *requests)
    assert fit.fits == (not fit.unmet)
    return [(unmet.request, unmet.describe()) for unmet in fit.unmet]


# --- what fits --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("objects", "requests", "where"),
    [
        pytest.param([node("dgx-3"), gpus("dgx-3", 4)], [exactly()], "dgx-3", id="one GPU"),
        pytest.param(
            [node("dgx-3"), gpus("dgx-3", 4)],
            [exactly(count=4)],
            "dgx-3",
            id="as many GPUs as one node has",
        ),
        pytest.param(
            [down("dgx-1"), gpus("dgx-1", 8), node("dgx-3"), gpus("dgx-3", 4)],
            [exactly(count=4)],
            "dgx-3",
            id="a Ready node with enough, beside a dead one with more",
        ),
        pytest.param(
            [node("dgx-3"), gpus("dgx-3", 2)],
            [
                exactly(
                    mode="All",
                    selectors=[f"device.attributes['gpu.nvidia.com'].productName == '{H100}'"],
                )
            ],
            "dgx-3",
            id="All: every matching device of the node, at least one",
        ),
        pytest.param(
            [node("dgx-3"), gpus("dgx-3", 2)],
            [first_available("gpu", choice("mig.nvidia.com", name="mig"), choice(name="whole"))],
            "dgx-3",
            id="firstAvailable: the second alternative fits",
        ),
        pytest.param(
            [node("n1"), resource_slice("n1", "n1", [gpu("gpu-0"), gpu("vfio-0", type_="vfio")])],
            [exactly("gpu"), exactly("passthrough", "vfio.gpu.nvidia.com")],
            "n1",
            id="two requests of different classes on one node",
        ),
        pytest.param(
            [node("n1"), gpus("n1", 2)],
            [exactly("a"), exactly("b")],
            "n1",
            id="two requests, two distinct devices",
        ),
        pytest.param(
            [node("n1"), shared_slice("fabric", [gpu("gpu-0")])],
            [exactly()],
            "n1",
            id="a node-independent pool every node reaches",
        ),
        pytest.param(
            [
                node("n1"),
                node("n2"),
                shared_slice("fabric", [gpu("vfio-0", type_="vfio")], selector_node="n2"),
                gpus("n1", 1),
                gpus("n2", 1),
            ],
            [exactly("gpu"), exactly("passthrough", "vfio.gpu.nvidia.com")],
            "n2",
            id="a local device and a node-independent one its selector lets the node reach",
        ),
        pytest.param(
            [
                node("n1"),
                resource_slice("n1", "n1", [gpu(extra={"tier": {"string": "gold"}}), gpu("gpu-1")]),
            ],
            [exactly(selectors=["device.attributes['gpu.nvidia.com'].tier == 'gold'"])],
            "n1",
            id="a selector undecided on one device, matching another",
        ),
    ],
)
def test_a_claim_fits_on_a_ready_node_with_enough_matching_devices(
    objects: list[Obj], requests: list[Obj], where: str
) -> None:
    fit = fit_of(objects, *requests)
    assert fit.fits and fit.unmet == ()
    assert fit.node == where


# --- why not: each message ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("objects", "request_", "why", "said"),
    [
        pytest.param(
            [node("n1"), gpus("n1", 1)],
            exactly(device_class="gpu.nvidia.io"),
            Why.NO_CLASS,
            "no DeviceClass gpu.nvidia.io (did you mean gpu.nvidia.com?)",
            id="a class that does not exist, with did-you-mean",
        ),
        pytest.param(
            [node("n1"), gpus("n1", 1)],
            exactly(device_class="tpu.example.com"),
            Why.NO_CLASS,
            "no DeviceClass tpu.example.com",
            id="a class that does not exist, nothing close",
        ),
        pytest.param(
            [node("n1"), gpus("n1", 1)],
            exactly(device_class="vfio.gpu.nvidia.com"),
            Why.CLASS_MATCHES_NOTHING,
            "class vfio.gpu.nvidia.com matches no published device",
            id="a class no published device matches",
        ),
        pytest.param(
            [node("dgx-3"), gpus("dgx-3", 4), node("dgx-2"), gpus("dgx-2", 2)],
            exactly(count=8),
            Why.TOO_FEW_ON_ONE_NODE,
            "asks 8, at most 4 on one node (dgx-3)",
            id="more than one node has",
        ),
        pytest.param(
            [node("a"), gpus("a", 4), node("b"), gpus("b", 4)],
            exactly(count=6),
            Why.TOO_FEW_ON_ONE_NODE,
            "asks 6, at most 4 on one node (a)",
            id="enough across nodes is not enough: a claim comes from one node",
        ),
        pytest.param(
            [node("dgx-3"), gpus("dgx-3", 4), down("dgx-1"), gpus("dgx-1", 8)],
            exactly(count=8),
            Why.TOO_FEW_ON_ONE_NODE,
            "asks 8, at most 4 on one node (dgx-3); dgx-1 has 8 but is NotReady since 2026-10-14 "
            "(Kubelet stopped posting node status.)",
            id="only a dead node has enough",
        ),
        pytest.param(
            [node("dgx-3"), gpus("dgx-3", 4), down("node-9"), gpus("node-9", 1, NVL)],
            exactly(selectors=[NVL_SELECTOR]),
            Why.NO_READY_NODE,
            "only node-9 has a matching device (NVIDIA H100 NVL) and it is NotReady since "
            "2026-10-14 (Kubelet stopped posting node status.)",
            id="the only provider is NotReady",
        ),
        pytest.param(
            [cordoned(node("node-9")), gpus("node-9", 2, NVL)],
            exactly(),
            Why.NO_READY_NODE,
            "only node-9 has 2 matching devices (NVIDIA H100 NVL) and it is cordoned",
            id="the only provider is cordoned",
        ),
        pytest.param(
            [
                tainted(node("node-9"), "node.kubernetes.io/not-ready", "NoExecute"),
                gpus("node-9", 1),
            ],
            exactly(),
            Why.NO_READY_NODE,
            "only node-9 has a matching device (NVIDIA H100 80GB HBM3) and it is tainted "
            "node.kubernetes.io/not-ready:NoExecute",
            id="the only provider has the not-ready taint",
        ),
        pytest.param(
            [gpus("node-9", 1)],
            exactly(),
            Why.NO_READY_NODE,
            "only node-9 has a matching device (NVIDIA H100 80GB HBM3) and it is not a known node",
            id="the slice of a node the state does not know",
        ),
        pytest.param(
            [down("node-8"), gpus("node-8", 1), down("node-9"), gpus("node-9", 1)],
            exactly(),
            Why.NO_READY_NODE,
            "only node-8 and node-9 have matching devices (NVIDIA H100 80GB HBM3), none Ready: "
            "node-8 NotReady since 2026-10-14 (Kubelet stopped posting node status.), "
            "node-9 NotReady since 2026-10-14 (Kubelet stopped posting node status.)",
            id="every provider is NotReady",
        ),
        pytest.param(
            [down("n1"), node("n2"), shared_slice("fabric", [gpu()], selector_node="n1")],
            exactly(),
            Why.NO_READY_NODE,
            "its matching devices are node-independent and no Ready node reaches them",
            id="a node-independent pool only a dead node reaches",
        ),
        pytest.param(
            [node("n1"), gpus("n1", 2, NVL)],
            exactly(
                selectors=["device.attributes['gpu.nvidia.com'].productName == 'nvidia h100 nvl'"]
            ),
            Why.SELECTORS_MATCH_NOTHING,
            "its selectors reject every device of class gpu.nvidia.com (2 devices) "
            "(did you mean productName == 'NVIDIA H100 NVL'?)",
            id="a product name in the wrong case",
        ),
        pytest.param(
            [node("n1"), gpus("n1", 1, NVL)],
            exactly(
                selectors=[
                    'device.attributes["gpu.nvidia.com"]["productName"] == "NVIDIA-H100-NVL"'
                ]
            ),
            Why.SELECTORS_MATCH_NOTHING,
            "its selectors reject every device of class gpu.nvidia.com (1 device) "
            "(did you mean productName == 'NVIDIA H100 NVL'?)",
            id="a product name spelled like the node label",
        ),
        pytest.param(
            [node("n1"), gpus("n1", 1, NVL)],
            exactly(selectors=["device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100'"]),
            Why.SELECTORS_MATCH_NOTHING,
            "its selectors reject every device of class gpu.nvidia.com (1 device)",
            id="a product nobody publishes, nothing close",
        ),
        pytest.param(
            [node("n1"), gpus("n1", 1)],
            exactly(selectors=["device.attributes['gpu.nvidia.com'].prodcutName == 'x'"]),
            Why.CANNOT_BE_JUDGED,
            "cannot be judged: fails on this device: no such member in mapping: 'prodcutName' "
            "(gpu.nvidia.com/n1/gpu-0)",
            id="a selector that fails on every device",
        ),
        pytest.param(
            [node("n1"), gpus("n1", 1)],
            exactly(selectors=["device.driver =="]),
            Why.CANNOT_BE_JUDGED,
            "cannot be judged: selector 1 does not compile: syntax error at column 15",
            id="a selector that does not compile",
        ),
        pytest.param(
            [node("n1"), gpus("n1", 1)],
            exactly(
                selectors=["cel.bind(t, device.attributes['gpu.nvidia.com'].type, t == 'gpu')"]
            ),
            Why.CANNOT_BE_JUDGED,
            "cannot be judged: selector 1 uses bind(), which this evaluator does not have",
            id="a selector this evaluator cannot run",
        ),
    ],
)
def test_a_request_no_ready_node_can_satisfy_says_why(
    objects: list[Obj], request_: Obj, why: Why, said: str
) -> None:
    fit = fit_of(objects, request_)
    assert not fit.fits and fit.node == ""
    ((unmet),) = fit.unmet
    assert unmet.request == request_["name"]
    assert [s.why for s in unmet.shortfalls] == [why]
    assert unmet.describe() == said


def test_an_undecided_device_never_reads_as_no_device() -> None:
    """One device matches nothing, the other cannot be judged: the answer is not 'no device'."""
    tier = "device.attributes['gpu.nvidia.com'].tier == 'gold'"
    objects = [
        node("n1"),
        resource_slice("n1", "n1", [gpu(extra={"tier": {"string": "x"}}), gpu("gpu-1")]),
    ]
    ((_, said),) = reasons(objects, exactly(selectors=[tier]))
    assert said.startswith("cannot be judged: fails on this device:")
    assert "gpu.nvidia.com/n1/gpu-1" in said


def test_the_not_ready_providers_give_the_shortfall_its_time_and_chain() -> None:
    fit = fit_of([down("node-9"), gpus("node-9", 1, NVL)], exactly())
    ((unmet),) = fit.unmet
    (shortfall,) = unmet.shortfalls
    assert unmet.since == shortfall.since == datetime(2026, 10, 14, 6, 40, tzinfo=UTC)
    assert shortfall.chain == (
        "node-9: NotReady since 2026-10-14 (Kubelet stopped posting node status.)",
    )


def test_more_not_ready_providers_than_shown_are_counted() -> None:
    objects = [o for i in range(5) for o in (down(f"n{i}"), gpus(f"n{i}", 1))]
    ((_, said),) = reasons(objects, exactly())
    assert said.startswith("only n0, n1, n2 and 2 more have matching devices")


# --- firstAvailable, All, several requests ------------------------------------------------------


def test_first_available_says_why_each_alternative_falls_short() -> None:
    objects = [node("dgx-3"), gpus("dgx-3", 4)]
    alternatives = first_available(
        "gpu", choice("mig.nvidia.com", name="mig"), choice(count=8, name="whole")
    )
    assert reasons(objects, alternatives) == [
        (
            "gpu",
            "no alternative fits: mig: class mig.nvidia.com matches no published device; "
            "whole: asks 8, at most 4 on one node (dgx-3)",
        )
    ]


def test_alternatives_failing_alike_are_said_once() -> None:
    profile = "device.attributes['gpu.nvidia.com'].profile == '{}'"
    alternatives = first_available(
        "mig",
        choice("mig.nvidia.com", name="small", selectors=[profile.format("1g.10gb")]),
        choice("mig.nvidia.com", name="large", selectors=[profile.format("2g.20gb")]),
    )
    assert reasons([node("n1"), gpus("n1", 1)], alternatives) == [
        ("mig", "class mig.nvidia.com matches no published device")
    ]


def test_all_takes_every_device_and_leaves_none_for_another_request_of_the_claim() -> None:
    objects = [node("n1"), gpus("n1", 2)]
    said = reasons(objects, exactly("every", mode="All"), exactly("one"))
    assert said == [
        (
            "",
            "requests every and one each fit on a Ready node, but no one node has them all "
            "(a claim is allocated on one node)",
        )
    ]


def test_all_on_a_class_with_devices_only_on_a_dead_node_names_it() -> None:
    ((_, said),) = reasons([down("n1"), gpus("n1", 3)], exactly(mode="All"))
    assert said.startswith("only n1 has 3 matching devices")


@pytest.mark.parametrize(
    ("objects", "fits"),
    [
        pytest.param([node("n1"), gpus("n1", 1)], False, id="one device for two requests"),
        pytest.param([node("n1"), gpus("n1", 2)], True, id="a device for each"),
        pytest.param(
            [node("n1"), gpus("n1", 1), node("n2"), gpus("n2", 1)],
            False,
            id="one each on two nodes",
        ),
    ],
)
def test_two_requests_of_one_class_need_distinct_devices_on_one_node(
    objects: list[Obj], fits: bool
) -> None:
    assert fit_of(objects, exactly("a"), exactly("b")).fits is fits


def test_requests_that_fit_only_on_different_nodes_are_said_not_to_fit_together() -> None:
    objects = [
        node("n1"),
        gpus("n1", 1),
        node("n2"),
        resource_slice("n2", "n2", [gpu("vfio-0", type_="vfio")]),
    ]
    said = reasons(objects, exactly("gpu"), exactly("nic", "vfio.gpu.nvidia.com"))
    assert said == [
        (
            "",
            "requests gpu and nic each fit on a Ready node, but no one node has them all "
            "(a claim is allocated on one node)",
        )
    ]


def test_each_request_that_cannot_be_satisfied_is_named() -> None:
    objects = [node("n1"), gpus("n1", 1)]
    said = reasons(
        objects,
        exactly("gpu"),
        exactly("nic", "vfio.gpu.nvidia.com"),
        exactly("more", count=2),
    )
    assert said == [
        ("nic", "class vfio.gpu.nvidia.com matches no published device"),
        ("more", "asks 2, at most 1 on one node (n1)"),
    ]


def test_a_claim_without_requests_fits_trivially() -> None:
    assert fit_of([]).fits


def test_a_republished_pool_counts_only_its_newest_generation() -> None:
    objects = [
        node("omen2"),
        gpus("omen2", 1, generation=1),
        {**gpus("omen2", 1, type_="vfio", generation=2), "metadata": {"name": "omen2-b"}},
    ]
    assert reasons(objects, exactly()) == [
        ("gpu", "class gpu.nvidia.com matches no published device")
    ]
    assert fit_of(objects, exactly(device_class="vfio.gpu.nvidia.com")).fits


# --- admission cost ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [
        pytest.param(exactly(), id="a claim that fits"),
        pytest.param(exactly(count=16), id="too many on one node"),
        pytest.param(exactly(selectors=[NVL_SELECTOR]), id="the only provider is dead"),
        pytest.param(exactly(device_class="gpu.nvidia.io"), id="no such class"),
    ],
)
def test_judging_a_claim_uses_the_indexes_not_cluster_listings(request_: Obj) -> None:
    state: ClusterState = scan_free_state(
        *CLASSES, node("dgx-3"), gpus("dgx-3", 8), down("node-9"), gpus("node-9", 1, NVL)
    )
    claim_fit(requests_of(request_), state)  # a listing raises


def test_a_fitting_claim_is_decided_on_the_first_ready_node_with_enough(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The selectors run on one node's devices, not on every node's."""
    objects = [o for i in range(20) for o in (node(f"n{i:02}"), gpus(f"n{i:02}", 2))]
    state = state_of(*CLASSES, *objects)
    evaluated: list[str] = []
    original = state.class_devices_on

    def counting(class_name: str, node_name: str) -> Any:
        evaluated.append(node_name)
        return original(class_name, node_name)

    monkeypatch.setattr(state, "class_devices_on", counting)
    fit = claim_fit(
        requests_of(exactly(selectors=["device.attributes['gpu.nvidia.com'].type == 'gpu'"])), state
    )
    assert fit.fits
    assert evaluated == [fit.node]

"""Which devices and nodes a DeviceTaintRule's deviceSelector selects, answered from indexes
(device names, pool names, drivers' nodes) so admitting a rule costs the same at any cluster
size: the same answer as filtering every published device, for every selector shape; the node
lookup stops at its bound; nothing is left in the indexes once the devices are gone."""

from __future__ import annotations

import pytest

from policies.cluster.device_taints import project_device_taint_rule
from policies.cluster.kinds import RESOURCE_SLICE
from policies.state.cluster import ClusterState
from tests.builders import Obj, node, state_of
from tests.dra_builders import gpu, resource_slice
from tests.test_device_taints import rule

NVIDIA = "gpu.nvidia.com"
OTHER = "fpga.example.com"
SLICES = [
    resource_slice("dgx-1-gpus", "dgx-1", [gpu("gpu-0"), gpu("gpu-1")]),
    resource_slice("dgx-2-gpus", "dgx-2", [gpu("gpu-0"), gpu("gpu-1")]),
    resource_slice("dgx-1-fpga", "dgx-1", [gpu("gpu-0")], driver=OTHER, pool="shared"),
    resource_slice("fabric", "", [gpu("link-0"), gpu("gpu-1")], pool="shared", all_nodes=True),
]
CLUSTER = [node("dgx-1"), node("dgx-2"), *SLICES]


@pytest.mark.parametrize(
    "selector",
    [
        {},
        {"pool": "dgx-1"},
        {"pool": "shared"},
        {"pool": "shared", "driver": OTHER},
        {"pool": "dgx-2", "device": "gpu-1"},
        {"device": "gpu-0"},
        {"device": "gpu-1"},
        {"device": "link-0"},
        {"driver": NVIDIA},
        {"driver": OTHER},
        {"driver": NVIDIA, "device": "gpu-1"},
        {"pool": "nowhere"},
        {"device": "nothing"},
        {"driver": "absent.example.com"},
    ],
    ids=repr,
)
def test_the_indexes_select_what_filtering_every_device_selects(selector: dict[str, str]) -> None:
    state = state_of(*CLUSTER)
    info = project_device_taint_rule(rule("r", **selector))
    every = [
        d for d in state.published_devices() if info.selects(d.device.driver, d.pool, d.device.name)
    ]
    assert [d.id for d in state.devices_selected(info)] == sorted(d.id for d in every)
    assert state.nodes_selected(info, 10) == sorted({d.node for d in every if d.node})


def wide(nodes: int) -> ClusterState:
    names = [f"n{i:03d}" for i in range(nodes)]
    return state_of(
        *(node(n) for n in names),
        *(resource_slice(f"{n}-gpus", n, [gpu("gpu-0"), gpu("gpu-1")]) for n in names),
    )


@pytest.mark.parametrize("selector", [{"device": "gpu-0"}, {"driver": NVIDIA}], ids=repr)
def test_the_node_lookup_stops_at_its_bound(selector: dict[str, str]) -> None:
    info = project_device_taint_rule(rule("r", **selector))
    assert len(wide(40).nodes_selected(info, 3)) == 3


def test_nothing_is_left_in_the_selection_indexes_once_the_slices_are_gone() -> None:
    state = state_of(*CLUSTER)
    for obj in SLICES:
        state.delete(RESOURCE_SLICE, "", obj["metadata"]["name"])
    info = project_device_taint_rule(rule("r", device="gpu-0"))
    assert state.devices_selected(info) == [] and state.nodes_selected(info, 10) == []
    taints = state._dra.taints
    assert (taints.named, taints.pool_drivers) == ({}, {})


def test_a_slice_replaced_by_a_newer_generation_is_selected_as_published() -> None:
    newer: Obj = resource_slice("dgx-1-gpus-2", "dgx-1", [gpu("gpu-7")], pool="dgx-1", generation=2)
    state = state_of(*CLUSTER, newer)
    info = project_device_taint_rule(rule("r", pool="dgx-1"))
    assert [d.device.name for d in state.devices_selected(info)] == ["gpu-7"]
    hidden = project_device_taint_rule(rule("r", driver=NVIDIA, device="gpu-1"))
    assert state.nodes_selected(hidden, 10) == ["dgx-2"]

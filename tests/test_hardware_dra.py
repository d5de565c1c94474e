"""Hardware from DRA: the devices NVIDIA's driver publishes in ResourceSlices are hardware a node
has, named by their vendorID/deviceID or their productName, kept while the node is NotReady,
gone when the driver republishes or removes them."""

from __future__ import annotations

from typing import Any

import pytest

from policies.cluster.dra import DeviceInfo, project_resource_slice, published_devices
from policies.cluster.hardware import (
    SOURCE_DRA,
    SOURCE_NFD_LABEL,
    dra_device_ids,
    published_hardware,
)
from policies.cluster.kinds import NODE, RESOURCE_SLICE
from policies.cluster.pciids import PciId, bundled_database
from policies.state.cluster import ClusterState
from tests.builders import Obj, dead_node, node, state_of
from tests.dra_builders import (
    DRA_FIXTURES,
    gpu,
    needs_fixtures,
    recorded_object,
    resource_slice,
)
from webhook.state.files import load_state

RTX_5090 = PciId("10de", "2b85")
RTX_3090 = PciId("10de", "2204")
A100_40GB = PciId("10de", "20b0")
NFD_5090 = "feature.node.kubernetes.io/pci-0300_10de_2b85.present"


def ids(vendor: str, device: str) -> dict[str, Obj]:
    return {"vendorID": {"string": vendor}, "deviceID": {"string": device}}


def device(**fields: Any) -> DeviceInfo:
    """One device as the projection reads it from a slice of NVIDIA's driver."""
    (info,) = project_resource_slice(resource_slice("s", "omen2", [gpu(**fields)])).devices
    return info


def hardware(state: ClusterState, pci: PciId) -> dict[str, set[str]]:
    return {name: set(sources) for name, sources in state.nodes_with_hardware(pci).items()}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param(
            {"type_": "vfio", "extra": ids("0x10de", "0x2b85")},
            {RTX_5090},
            id="a vfio device by its vendorID and deviceID as the driver spells them",
        ),
        pytest.param(
            {"type_": "vfio", "extra": ids("10DE", "2B85")},
            {RTX_5090},
            id="ids without 0x and in upper case",
        ),
        pytest.param(
            {
                "type_": "vfio",
                "product": "NVIDIA GeForce RTX 3090",
                "extra": ids("0x10de", "0x2b85"),
            },
            {RTX_5090},
            id="the ids win over the product name",
        ),
        pytest.param({}, {RTX_5090}, id="a full GPU by its product name, as GFD's is mapped"),
        pytest.param(
            {"product": "NVIDIA A100-SXM4-40GB", "type_": "mig"},
            {A100_40GB},
            id="a MIG device by its parent's product name",
        ),
        pytest.param(
            {"type_": "vfio", "extra": ids("nvidia", "0x2b85")},
            {RTX_5090},
            id="a malformed vendorID falls back to the product name",
        ),
        pytest.param(
            {"type_": "vfio", "extra": {"vendorID": {"int": 4318}, "deviceID": {"int": 11141}}},
            {RTX_5090},
            id="int-typed ids are not the driver's spelling: the product name",
        ),
        pytest.param({"product": "NVIDIA Quantum Widget"}, set(), id="an unknown product"),
    ],
)
def test_a_published_device_is_named_by_its_ids_else_its_product(
    fields: dict[str, Any], expected: set[PciId]
) -> None:
    assert dra_device_ids(device(**fields), bundled_database()) == expected


def test_another_drivers_devices_are_not_read_as_nvidia_hardware() -> None:
    other = resource_slice(
        "s", "omen2", [gpu(type_="vfio", extra=ids("0x10de", "0x2b85"))], driver="other.example"
    )
    (info,) = project_resource_slice(other).devices
    assert dra_device_ids(info, bundled_database()) == frozenset()


def test_a_gpu_published_twice_is_named_by_the_exact_id_of_its_bus() -> None:
    # gpu-0 (product name only) and gpu-vfio-0 (exact ids) are the same GPU at 0000:01:00.0;
    # the GPU at 0000:41:00.0 has no twin and is named by its product.
    slice_ = resource_slice(
        "s",
        "omen2",
        [
            gpu("gpu-0", product="NVIDIA A100-SXM4-40GB"),
            gpu("gpu-vfio-0", type_="vfio", extra=ids("0x10de", "0x20b2")),
            gpu("gpu-1", product="NVIDIA GeForce RTX 3090", bus="0000:41:00.0"),
        ],
    )
    devices = published_devices(project_resource_slice(slice_))
    found = published_hardware(devices, bundled_database())
    assert found == {PciId("10de", "20b2"): {SOURCE_DRA}, RTX_3090: {SOURCE_DRA}}


# --- the state's hardware index -------------------------------------------------------------------

VFIO_5090 = gpu("gpu-vfio-0", type_="vfio", extra=ids("0x10de", "0x2b85"))
VFIO_3090 = gpu("gpu-vfio-0", type_="vfio", bus="0000:41:00.0", extra=ids("0x10de", "0x2204"))


def test_a_gpu_only_the_dra_driver_publishes_is_hardware_of_its_node() -> None:
    state = state_of(node("omen2"), resource_slice("omen2-a", "omen2", [VFIO_5090]))
    assert hardware(state, RTX_5090) == {"omen2": {SOURCE_DRA}}
    assert state.known_hardware("10de") == [RTX_5090]


def test_slices_of_a_notready_node_still_count_as_its_hardware() -> None:
    state = state_of(dead_node("omen2"), resource_slice("omen2-a", "omen2", [VFIO_5090]))
    assert hardware(state, RTX_5090) == {"omen2": {SOURCE_DRA}}
    state.upsert(node("omen2"))
    state.upsert(dead_node("omen2"))
    assert hardware(state, RTX_5090) == {"omen2": {SOURCE_DRA}}
    state.delete(NODE, "", "omen2")  # the slices outlive the Node object, as NodeFeatures do
    assert hardware(state, RTX_5090) == {"omen2": {SOURCE_DRA}}


def test_dra_hardware_joins_the_nodes_other_sources_and_leaves_them_when_it_goes() -> None:
    state = state_of(
        node("omen2", labels={NFD_5090: "true"}), resource_slice("omen2-a", "omen2", [VFIO_5090])
    )
    assert hardware(state, RTX_5090) == {"omen2": {SOURCE_NFD_LABEL, SOURCE_DRA}}
    state.delete(RESOURCE_SLICE, "", "omen2-a")
    assert hardware(state, RTX_5090) == {"omen2": {SOURCE_NFD_LABEL}}


def test_a_republished_pool_replaces_the_hardware_of_its_older_generation() -> None:
    state = state_of(resource_slice("omen2-a", "omen2", [VFIO_5090], generation=1))
    state.upsert(resource_slice("omen2-b", "omen2", [VFIO_3090], generation=2))
    assert hardware(state, RTX_5090) == {}  # omen2-a stays, outdated: the scheduler ignores it
    assert hardware(state, RTX_3090) == {"omen2": {SOURCE_DRA}}
    state.delete(RESOURCE_SLICE, "", "omen2-b")
    assert hardware(state, RTX_5090) == {"omen2": {SOURCE_DRA}}


def test_a_slice_moved_to_another_node_moves_its_hardware() -> None:
    state = state_of(resource_slice("s", "omen2", [VFIO_5090], pool="p"))
    state.upsert(resource_slice("s", "omen3", [VFIO_5090], pool="p"))
    assert hardware(state, RTX_5090) == {"omen3": {SOURCE_DRA}}


def test_devices_of_no_one_node_are_no_nodes_hardware() -> None:
    state = state_of(resource_slice("fabric", "", [VFIO_5090], all_nodes=True))
    assert hardware(state, RTX_5090) == {}
    assert state.known_hardware("10de") == []


@needs_fixtures
def test_the_recorded_state_file_shows_omen2s_passthrough_gpu() -> None:
    state = load_state([str(DRA_FIXTURES / "objects.yaml")])
    assert hardware(state, RTX_5090) == {"omen2": {SOURCE_DRA}}
    assert hardware(state, RTX_3090) == {}  # tower1's slice was deleted (review 021)


@needs_fixtures
def test_the_recorded_slices_replayed_leave_the_hardware_they_describe() -> None:
    state = ClusterState()
    state.upsert(recorded_object("007"))  # omen2's RTX 5090 as a full GPU: its product name
    state.upsert(recorded_object("008"))  # tower1's RTX 3090 as a vfio device: its ids
    assert hardware(state, RTX_5090) == {"omen2": {SOURCE_DRA}}
    assert hardware(state, RTX_3090) == {"tower1": {SOURCE_DRA}}
    state.upsert(recorded_object("020"))  # omen2 republished: gpu-vfio-0 at the same bus
    assert hardware(state, RTX_5090) == {"omen2": {SOURCE_DRA}}
    state.delete_object(recorded_object("021", old=True))
    assert hardware(state, RTX_3090) == {}

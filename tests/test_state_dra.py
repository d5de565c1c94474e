"""ClusterState's DRA indexes stay right through add, modify and delete, and replaying what the API
server sent ends where the saved state file begins."""

from __future__ import annotations

from typing import Any

import pytest

from policies.cluster.dra import DeviceId
from policies.cluster.kinds import POD, RESOURCE_CLAIM, RESOURCE_SLICE, group_kind_of
from policies.state.cluster import ClusterState
from tests.builders import Obj, dead_node, node, state_of
from tests.dra_builders import (
    DRA_FIXTURES,
    GPU_CLASS,
    GPU_DEVICE_CLASS,
    VFIO_DEVICE_CLASS,
    claim_pod,
    claim_template,
    claim_vm,
    claim_vmi,
    device_class,
    gpu,
    needs_fixtures,
    replayed,
    resource_claim,
    resource_slice,
)
from webhook.state.files import load_state

GPU = GPU_DEVICE_CLASS
VFIO = VFIO_DEVICE_CLASS


def names(devices: Any) -> list[str]:
    return [d.device.name for d in devices]


def test_a_slice_publishes_its_devices_for_its_node_and_driver() -> None:
    state = state_of(resource_slice("omen2-a", "omen2", [gpu("gpu-0"), gpu("gpu-1")]))
    assert names(state.devices_on("omen2")) == ["gpu-0", "gpu-1"]
    assert names(state.devices_on("omen2", "gpu.nvidia.com")) == ["gpu-0", "gpu-1"]
    assert state.devices_on("omen2", "other.example.com") == []
    assert state.dra_drivers_on("omen2") == ["gpu.nvidia.com"]
    assert state.nodes_with_devices("gpu.nvidia.com") == ["omen2"]
    published = state.published_device(DeviceId("gpu.nvidia.com", "omen2", "gpu-1"))
    assert published is not None and published.slice == "omen2-a"


def test_a_republished_pool_replaces_its_devices_and_an_older_generation_is_ignored() -> None:
    state = state_of(resource_slice("omen2-a", "omen2", [gpu("gpu-0")], generation=1))
    state.upsert(
        resource_slice("omen2-b", "omen2", [gpu("gpu-vfio-0", type_="vfio")], generation=2)
    )
    assert names(state.devices_on("omen2")) == ["gpu-vfio-0"]  # omen2-a stays, outdated
    assert {s.name for s in state.resource_slices()} == {"omen2-a", "omen2-b"}
    state.delete(RESOURCE_SLICE, "", "omen2-b")
    assert names(state.devices_on("omen2")) == ["gpu-0"]
    state.delete(RESOURCE_SLICE, "", "omen2-a")
    assert state.devices_on("omen2") == [] and state.nodes_with_devices("gpu.nvidia.com") == []
    assert state.published_device(DeviceId("gpu.nvidia.com", "omen2", "gpu-0")) is None


def test_a_slice_update_in_place_changes_what_the_node_publishes() -> None:
    state = state_of(resource_slice("omen2-a", "omen2", [gpu("gpu-0")]))
    state.upsert(resource_slice("omen2-a", "omen2", [gpu("gpu-0"), gpu("gpu-1")], generation=2))
    assert names(state.devices_on("omen2")) == ["gpu-0", "gpu-1"]


def test_class_members_follow_slices_and_class_changes() -> None:
    state = state_of(GPU, VFIO, resource_slice("omen2-a", "omen2", [gpu("gpu-0")]))
    assert state.class_device_counts("gpu.nvidia.com") == {"omen2": 1}
    assert state.class_device_counts("vfio.gpu.nvidia.com") == {}
    state.upsert(
        resource_slice("omen2-a", "omen2", [gpu("gpu-vfio-0", type_="vfio")], generation=2)
    )
    assert state.class_device_counts("gpu.nvidia.com") == {}
    assert names(state.class_devices_on("vfio.gpu.nvidia.com", "omen2")) == ["gpu-vfio-0"]
    state.upsert(device_class("vfio.gpu.nvidia.com", "device.driver == 'other.example.com'"))
    assert state.class_device_counts("vfio.gpu.nvidia.com") == {}
    state.delete_object(VFIO)
    assert state.device_class("vfio.gpu.nvidia.com") is None
    assert state.class_device_counts("vfio.gpu.nvidia.com") == {}


def test_devices_a_class_cannot_decide_are_kept_apart_with_why() -> None:
    broken = device_class("profiles", "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'")
    state = state_of(broken, resource_slice("omen2-a", "omen2", [gpu("gpu-0")]))
    assert state.class_device_counts("profiles") == {}
    ((device, why),) = state.class_undecided("profiles")
    assert device.device.name == "gpu-0" and "profile" in why
    state.delete(RESOURCE_SLICE, "", "omen2-a")
    assert state.class_undecided("profiles") == []


def test_a_not_ready_nodes_slices_stay_but_it_serves_no_extended_resource() -> None:
    slice_ = resource_slice("omen2-a", "omen2", [gpu("gpu-0")])
    state = state_of(GPU, slice_, node("omen2"), node("omen3"))
    assert state.extended_resource_providers("nvidia.com/gpu") == ["omen2"]
    assert state.healthy_extended_resource_provider_count("nvidia.com/gpu") == 1
    state.upsert(dead_node("omen2"))
    assert names(state.devices_on("omen2")) == ["gpu-0"]
    assert state.extended_resource_providers("nvidia.com/gpu") == ["omen2"]
    assert state.healthy_extended_resource_provider_count("nvidia.com/gpu") == 0
    state.upsert(node("omen2"))
    assert state.healthy_extended_resource_provider_count("nvidia.com/gpu") == 1
    state.delete_object(GPU)
    assert state.extended_resource_providers("nvidia.com/gpu") == []


def test_a_class_that_stops_serving_an_extended_resource_leaves_no_provider_behind() -> None:
    state = state_of(resource_slice("omen2-a", "omen2", [gpu("gpu-0")]), GPU)
    state.upsert(device_class("gpu.nvidia.com", GPU_CLASS))
    assert state.extended_resource_providers("nvidia.com/gpu") == []
    state.upsert(GPU)
    state.upsert(resource_slice("omen2-a", "omen2", [gpu("gpu-0"), gpu("gpu-1")], generation=2))
    state.delete(RESOURCE_SLICE, "", "omen2-a")
    assert state.extended_resource_providers("nvidia.com/gpu") == []


def test_allocated_claims_by_node_follow_status_updates_and_deletes() -> None:
    slice_ = resource_slice("omen2-a", "omen2", [gpu("gpu-0")])
    pending = resource_claim("train-gpu")
    allocated = resource_claim(
        "train-gpu", allocated=("omen2", "omen2", "gpu-0"), reserved_for=["train-dra"]
    )
    state = state_of(slice_, pending, claim_pod("train-dra", "omen2", claim="train-gpu"))
    assert state.claims_allocated_on("omen2") == []
    state.upsert(allocated)
    (on_node,) = state.claims_allocated_on("omen2")
    assert on_node.claim.name == "train-gpu"
    assert [p.key for p in on_node.pods] == ["ml/train-dra"]
    ((result, device),) = on_node.devices
    assert result.device == "gpu-0" and device is not None and device.node == "omen2"
    state.delete(RESOURCE_SLICE, "", "omen2-a")  # the driver stopped publishing it
    assert state.claims_allocated_on("omen2")[0].devices[0][1] is None
    state.delete(POD, "ml", "train-dra")
    assert state.claims_allocated_on("omen2")[0].pods == ()
    state.delete(RESOURCE_CLAIM, "ml", "train-gpu")
    assert state.claims_allocated_on("omen2") == [] and state.claim("ml", "train-gpu") is None


def test_pods_vms_and_vmis_are_linked_to_the_claims_and_templates_they_name() -> None:
    state = state_of(
        claim_pod("train-dra", "omen2", claim="train-gpu"),
        claim_pod("infer", "omen2", template="one-gpu", claim="infer-gpu-x7k2p"),
        claim_vm("gpu-fedora", template="rtx5090-vfio"),
        claim_vmi("rhel9", claim="tower1-3090"),
        claim_template("rtx5090-vfio"),
    )
    assert [p.key for p in state.claim_referrers("ml", "train-gpu").pods] == ["ml/train-dra"]
    assert [p.key for p in state.claim_referrers("ml", "infer-gpu-x7k2p").pods] == ["ml/infer"]
    assert [p.key for p in state.claim_referrers("ml", "one-gpu", template=True).pods] == [
        "ml/infer"
    ]
    assert [v.key for v in state.claim_referrers("vms", "rtx5090-vfio", template=True).vms] == [
        "vms/gpu-fedora"
    ]
    assert [v.key for v in state.claim_referrers("vms", "tower1-3090").vmis] == ["vms/rhel9"]
    assert state.claim_referrers("vms", "train-gpu").pods == ()  # claims are namespaced
    state.upsert(claim_pod("train-dra", "omen2", claim="other-gpu"))
    assert state.claim_referrers("ml", "train-gpu").pods == ()
    state.delete_object(claim_vm("gpu-fedora", template="rtx5090-vfio"))
    assert state.claim_referrers("vms", "rtx5090-vfio", template=True).vms == ()
    assert state.claim_template("vms", "rtx5090-vfio") is not None


def test_a_pod_holding_a_gpu_only_through_a_claim_is_kept_on_its_node() -> None:
    state = state_of(claim_pod("train-dra", "omen2", claim="train-gpu"))
    assert [p.key for p in state.pods_on("omen2")] == ["ml/train-dra"]
    assert state.pod("ml", "train-dra") is not None


# --- replaying the recorded reviews ---------------------------------------------------------------


def _dra_answers(state: ClusterState) -> dict[str, Any]:
    return {
        "classes": state.device_classes(),
        "slices": state.resource_slices(),
        "claims": state.claims(),
        "templates": state.claim_templates(),
        "omen2": state.devices_on("omen2"),
        "tower1": state.devices_on("tower1"),
        "vfio on omen2": state.class_device_counts("vfio.gpu.nvidia.com"),
        "gpu on omen2": state.class_device_counts("gpu.nvidia.com"),
        "allocated on omen2": state.claims_allocated_on("omen2"),
    }


@needs_fixtures
def test_replaying_the_recorded_reviews_ends_where_the_saved_state_file_begins() -> None:
    rebuilt = replayed()
    saved = load_state([str(DRA_FIXTURES / "objects.yaml")])
    assert _dra_answers(rebuilt) == _dra_answers(saved)
    assert names(saved.devices_on("omen2")) == ["gpu-vfio-0"]
    assert saved.devices_on("tower1") == []  # its slice was deleted
    assert saved.class_device_counts("vfio.gpu.nvidia.com") == {"omen2": 1}
    (held,) = saved.claims_allocated_on("omen2")
    assert [p.key for p in held.pods] == ["ml/train-dra"]
    assert held.devices[0][1] is None  # gpu-0 went when the pool was republished for vfio


@needs_fixtures
@pytest.mark.parametrize(
    "kind", ["DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate"]
)
def test_the_state_file_keys_every_dra_object_it_holds(kind: str) -> None:
    import yaml

    items: list[Obj] = yaml.safe_load((DRA_FIXTURES / "objects.yaml").read_text())["items"]
    mine = [i for i in items if i["kind"] == kind]
    saved = load_state([str(DRA_FIXTURES / "objects.yaml")])
    keys = {(i["metadata"].get("namespace", ""), i["metadata"]["name"]) for i in mine}
    assert saved.keys(group_kind_of(mine[0])) == keys

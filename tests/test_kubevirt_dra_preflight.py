"""KubeVirt 1.9's DRA preflight: a VM entry whose claim request asks several devices, the DRA
driver's gates that exclude each other in a GPUCluster, and the IOMMUFD gate with nodes that do
not advertise devices.kubevirt.io/iommufd."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from policies.diagnoses.iommufd import IOMMUFD_MISSING
from policies.registry import diagnose_all
from policies.rules import driver_gates_exclusive, vm_claim_preflight
from tests.builders import Obj, kubevirt, node, request, state_of
from tests.dra_builders import claim_template, claim_vm, resource_claim
from tests.test_gpu_cluster import gpu_cluster

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
DRA_GATES = ("GPUsWithDRA", "HostDevicesWithDRA", "HostDevices")


def kv(version: str = "v1.9.0", *gates: str) -> Obj:
    return kubevirt(feature_gates=(*DRA_GATES, *gates), version=version)


def two_gpu_claim() -> Obj:
    return resource_claim("two-gpus", "vms", count=2)


def warned(vm: Obj, *objects: Obj) -> list[str]:
    return [f.message for f in vm_claim_preflight.check(request("CREATE", vm), state_of(*objects))]


def test_a_vm_taking_a_device_from_a_request_for_two_is_warned_on_kubevirt_1_9() -> None:
    (message,) = warned(claim_vm("big", claim="two-gpus", namespace="vms"), kv(), two_gpu_claim())
    assert message.startswith(
        "gpus[] entry gpu1 takes its device from request gpu of claim vms/two-gpus, which asks "
        "count 2: KubeVirt v1.9.0 starts a VM with exactly one device per request"
    )


def test_a_template_asking_every_device_is_warned_too() -> None:
    template = claim_template("all-vfio")
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "All"
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"].pop("count")
    (message,) = warned(claim_vm("big", template="all-vfio", namespace="vms"), kv(), template)
    assert "which asks allocationMode All" in message


@pytest.mark.parametrize(
    ("objects"),
    [
        pytest.param([kv("v1.8.2"), two_gpu_claim()], id="KubeVirt 1.8"),
        pytest.param([kv(""), two_gpu_claim()], id="a KubeVirt that reports no version"),
        pytest.param([kv(), resource_claim("two-gpus", "vms")], id="a request for one"),
        pytest.param([two_gpu_claim()], id="no KubeVirt CR"),
    ],
)
def test_one_device_per_request_or_an_older_kubevirt_passes(objects: list[Any]) -> None:
    assert warned(claim_vm("big", claim="two-gpus", namespace="vms"), *objects) == []


IOMMU_NODE = node("tower1", allocatable={"devices.kubevirt.io/iommufd": "1k"})


def test_with_iommufd_on_a_vm_is_warned_when_no_ready_node_advertises_it() -> None:
    (message,) = warned(
        claim_vm("any", claim="one", namespace="vms"), kv("v1.9.0", "IOMMUFD"), node("tower1")
    )
    assert "no Ready node advertises it: the VM can run nowhere" in message
    assert (
        warned(claim_vm("any", claim="one", namespace="vms"), kv("v1.9.0", "IOMMUFD"), IOMMU_NODE)
        == []
    )
    assert warned(claim_vm("any", claim="one", namespace="vms"), kv(), node("tower1")) == []


def test_the_audit_names_nodes_without_iommufd_while_the_gate_is_on() -> None:
    labels = {"kubevirt.io/schedulable": "true"}
    plain = node("tower2", labels=labels)
    iommu = node("tower1", labels=labels, allocatable={"devices.kubevirt.io/iommufd": "1k"})
    found = diagnose_all(state_of(kv("v1.9.0", "IOMMUFD"), plain, iommu), NOW)[IOMMUFD_MISSING]
    assert [f.resource.name for f in found] == ["tower2"]
    assert diagnose_all(state_of(kv(), plain), NOW)[IOMMUFD_MISSING] == []


@pytest.mark.parametrize(
    ("gates", "pairs"),
    [
        ({"DynamicMIG": True, "PassthroughSupport": True}, "DynamicMIG with PassthroughSupport"),
        (
            {"MPSSupport": True, "NVMLDeviceHealthCheck": True},
            "MPSSupport with NVMLDeviceHealthCheck",
        ),
        (
            {"DynamicMIG": True, "MPSSupport": True, "NVMLDeviceHealthCheck": True},
            "DynamicMIG with NVMLDeviceHealthCheck; DynamicMIG with MPSSupport; MPSSupport with "
            "NVMLDeviceHealthCheck",
        ),
    ],
)
def test_a_gpucluster_with_driver_gates_that_exclude_each_other_is_warned(
    gates: dict[str, bool], pairs: str
) -> None:
    cluster = gpu_cluster(featureGates=gates)
    (finding,) = driver_gates_exclusive.check(request("CREATE", cluster), state_of())
    assert f"({pairs})" in finding.message


@pytest.mark.parametrize(
    "gates",
    [
        {"DynamicMIG": True},
        {"PassthroughSupport": True, "DeviceMetadata": True},
        {"DynamicMIG": True, "PassthroughSupport": False},
    ],
)
def test_gates_that_go_together_pass(gates: dict[str, bool]) -> None:
    cluster = gpu_cluster(featureGates=gates)
    assert not driver_gates_exclusive.check(request("CREATE", cluster), state_of())


def test_the_audit_reports_a_stored_gpucluster_with_exclusive_gates() -> None:
    cluster = gpu_cluster(featureGates={"DynamicMIG": True, "PassthroughSupport": True})
    found = list(driver_gates_exclusive.audit(state_of(cluster)))
    assert [ref.kind for ref, _ in found] == ["GPUCluster"]

"""vm-claim-preflight: KubeVirt 1.9's DRA preflight, a VM entry whose claim request asks several
devices, and the IOMMUFD gate with no Ready node advertising devices.kubevirt.io/iommufd."""

from __future__ import annotations

from typing import Any

import pytest

from policies.rules import vm_claim_preflight
from policies.rules.vm_claim_preflight import IOMMUFD_DEVICE
from tests.builders import Obj, kubevirt, node, request, state_of
from tests.dra_builders import claim_template, claim_vm, resource_claim

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


IOMMU_NODE = node("tower1", allocatable={IOMMUFD_DEVICE: "1k"})


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

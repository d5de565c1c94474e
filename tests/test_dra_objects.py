"""DRA projections: the wire format a real API server sent reads as expected; bad fields named."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from policies.cel.values import Unreadable
from policies.cluster.dra import (
    NVIDIA_DRIVER,
    DeviceClassInfo,
    ResourceSliceInfo,
    project_device_class,
    project_resource_slice,
    published_devices,
)
from policies.cluster.dra_claims import (
    ClaimRef,
    ResourceClaimInfo,
    ResourceClaimTemplateInfo,
    project_resource_claim,
    project_resource_claim_template,
)
from policies.cluster.kinds import group_kind_of
from policies.cluster.kubevirt import project_vm, project_vmi
from policies.cluster.node_selector import NodeSelector, project_node_selector
from policies.cluster.nodes import project_node
from policies.cluster.pods import project_pod
from policies.cluster.projections import PROJECTIONS
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.semver import Version, normalize_version, parse_version
from tests.builders import node
from tests.dra_builders import claim_pod, needs_fixtures, recorded_object, resource_slice

pytestmark = needs_fixtures


def test_the_nvidia_device_classes_read_their_selectors_and_extended_resource() -> None:
    classes = [project_device_class(recorded_object(n)) for n in ("004", "005", "006")]
    assert [(c.name, c.extended_resource_name) for c in classes] == [
        ("gpu.nvidia.com", "nvidia.com/gpu"),
        ("vfio.gpu.nvidia.com", ""),
        ("mig.nvidia.com", ""),
    ]
    assert all(len(c.selectors) == 1 and "device.driver == 'gpu.nvidia.com'" in c.selectors[0]
               for c in classes)  # fmt: skip


def test_a_full_gpu_reads_typed_attributes_under_their_qualified_names() -> None:
    slice_ = project_resource_slice(recorded_object("007"))
    assert (slice_.driver, slice_.pool, slice_.generation, slice_.slice_count, slice_.node) == (
        NVIDIA_DRIVER,
        "omen2",
        1,
        1,
        "omen2",
    )
    (device,) = slice_.devices
    assert device.name == "gpu-0" and device.type == "gpu"
    assert device.attributes["gpu.nvidia.com/productName"] == "NVIDIA GeForce RTX 5090"
    assert device.attributes["gpu.nvidia.com/driverVersion"] == Version(570, 133, 20)
    assert device.attributes["resource.kubernetes.io/numaNode"] == 0
    assert device.pci_bus_id == "0000:01:00.0"
    assert device.capacity == {"gpu.nvidia.com/memory": Decimal(32607 * 2**20)}


def test_the_republished_pool_replaces_the_gpu_with_its_vfio_device() -> None:
    before = project_resource_slice(recorded_object("020", old=True))
    after = project_resource_slice(recorded_object("020"))
    assert [d.name for d in before.devices] == ["gpu-0"]
    assert (after.generation, [d.name for d in after.devices]) == (2, ["gpu-vfio-0"])
    (vfio,) = after.devices
    assert vfio.type == "vfio" and vfio.attribute("iommuFDEnabled") is False
    assert vfio.pci_bus_id == before.devices[0].pci_bus_id
    assert vfio.capacity == {"gpu.nvidia.com/addressableMemory": Decimal(32 * 2**30)}


@pytest.mark.parametrize(
    ("attributes", "bus"),
    [
        ({"resource.kubernetes.io/pciBusID": {"string": "0000:41:00.0"}}, "0000:41:00.0"),
        ({"pcieBusID": {"string": "0000:41:00.0"}}, "0000:41:00.0"),
        ({}, ""),
    ],
    ids=["standard name", "older driver releases", "none"],
)
def test_the_pci_bus_id_is_read_under_either_spelling(attributes: dict[str, Any], bus: str) -> None:
    obj = resource_slice("s", "n", [{"name": "gpu-0", "attributes": attributes}])
    assert project_resource_slice(obj).devices[0].pci_bus_id == bus


def test_the_claim_reads_its_request_and_the_allocation_the_scheduler_wrote() -> None:
    created = project_resource_claim(recorded_object("009"))
    assert not created.allocated and created.results == () and created.nodes == ()
    (request,) = created.requests
    assert request.choices[0].device_class == "gpu.nvidia.com"
    assert (request.choices[0].allocation_mode, request.choices[0].count) == ("ExactCount", 1)
    allocated = project_resource_claim(recorded_object("015"))
    assert allocated.allocated and allocated.nodes == ("omen2",)
    assert [(r.request, r.driver, r.pool, r.device) for r in allocated.results] == [
        ("gpu", "gpu.nvidia.com", "omen2", "gpu-0")
    ]
    assert allocated.reserving_pods == ("train-dra",)


def test_templates_read_first_available_alternatives_in_order() -> None:
    mig = project_resource_claim_template(recorded_object("011"))
    (request,) = mig.requests
    assert request.exactly is None
    assert [(c.name, c.device_class) for c in request.choices] == [
        ("small", "mig.nvidia.com"),
        ("large", "mig.nvidia.com"),
    ]
    vfio = project_resource_claim_template(recorded_object("010"))
    assert "lowerAscii().matches" in vfio.requests[0].choices[0].selectors[0]


def test_a_v1beta1_request_spelled_flat_reads_as_exactly() -> None:
    obj = copy.deepcopy(recorded_object("009"))
    obj["spec"]["devices"]["requests"] = [{"name": "gpu", "deviceClassName": "gpu.nvidia.com"}]
    (request,) = project_resource_claim(obj).requests
    assert request.exactly is not None and request.exactly.device_class == "gpu.nvidia.com"
    assert (request.exactly.allocation_mode, request.exactly.count) == ("ExactCount", 1)


def test_pods_vms_and_vmis_name_their_claims_and_kubevirt_devices_their_request() -> None:
    assert project_pod(recorded_object("012")).claims == (ClaimRef("gpu", "train-gpu", ""),)
    vm = project_vm(recorded_object("017"))
    assert vm.claims == (ClaimRef("gpu", "", "rtx5090-vfio"),)
    assert [(d.field, d.claim_name, d.request_name, d.device_name) for d in vm.devices] == [
        ("gpus", "gpu", "gpu", "")
    ]
    vmi = project_vmi(recorded_object("018"))
    assert vmi.claims == (ClaimRef("hd", "tower1-3090", ""),)
    assert vmi.devices[0].field == "hostDevices" and vmi.devices[0].claim_name == "hd"


def test_a_pod_claim_from_a_template_is_resolved_through_its_status() -> None:
    obj = claim_pod("train", "omen2", template="one-gpu", claim="train-gpu-x7k2p")
    assert project_pod(obj).claims == (ClaimRef("gpu", "train-gpu-x7k2p", "one-gpu"),)
    del obj["status"]["resourceClaimStatuses"]
    assert project_pod(obj).claims == (ClaimRef("gpu", "", "one-gpu"),)


def test_a_pod_whose_extended_resource_dra_serves_names_the_claim_the_scheduler_made() -> None:
    obj = recorded_object("013")
    assert project_pod(obj).claims == ()
    obj["status"] = {"extendedResourceClaimStatus": {"resourceClaimName": "train-extended-gpu-4x"}}
    assert project_pod(obj).claims == (ClaimRef("", "train-extended-gpu-4x", ""),)


def test_every_recorded_dra_object_goes_through_its_kinds_projection() -> None:
    kinds = {
        "DeviceClass": DeviceClassInfo,
        "ResourceSlice": ResourceSliceInfo,
        "ResourceClaim": ResourceClaimInfo,
        "ResourceClaimTemplate": ResourceClaimTemplateInfo,
    }
    for number in ("004", "005", "006", "007", "008", "009", "010", "011", "014", "015", "020"):
        obj = recorded_object(number)
        assert isinstance(PROJECTIONS[group_kind_of(obj)](obj), kinds[obj["kind"]]), number


def _set(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy with the field at ``path`` (keys and list indexes joined by '|') set to ``value``."""
    out = copy.deepcopy(obj)
    target: Any = out
    *parents, last = path.split("|")
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    target[int(last) if isinstance(target, list) else last] = value
    return out


ATTRIBUTES = "spec|devices|0|attributes"
MALFORMED = [
    ("007", f"{ATTRIBUTES}|type", {"string": "gpu", "int": 1}, "spec.devices[0].attributes.type"),
    ("007", f"{ATTRIBUTES}|type", {"string": 7}, "spec.devices[0].attributes.type.string"),
    ("007", f"{ATTRIBUTES}|driverVersion", {"version": "570.133"}, "driverVersion.version"),
    ("007", f"{ATTRIBUTES}|resource.kubernetes.io/numaNode", {"int": True}, "numaNode.int"),
    ("007", "spec|devices|0|capacity|memory", {"value": "lots"}, "capacity.memory.value"),
    ("007", "spec|devices|0|capacity|memory", "32Gi", "spec.devices[0].capacity.memory"),
    ("007", "spec|pool|generation", "2", "spec.pool.generation"),
    ("007", "spec|devices", {"gpu-0": {}}, "spec.devices"),
    ("004", "spec|selectors|0|cel|expression", 42, "spec.selectors[0].cel.expression"),
    ("009", "spec|devices|requests|0|exactly|count", "1", "requests[0].exactly.count"),
    ("011", "spec|spec|devices|requests|0|firstAvailable|1", "large", "firstAvailable[1]"),
    ("015", "status|allocation|nodeSelector|nodeSelectorTerms|0", "omen2", "nodeSelectorTerms[0]"),
    ("015", "status|reservedFor", {"name": "train-dra"}, "status.reservedFor"),
]


def test_an_attribute_of_a_type_newer_than_the_code_is_kept_unread_not_refused() -> None:
    """Issue 34: a newer Kubernetes (or an alpha gate) stores types this code does not know;
    refusing the slice would drop its node's GPUs from every answer."""
    obj = _set(recorded_object("007"), f"{ATTRIBUTES}|type", {"float": 1.5})
    (device,) = PROJECTIONS[group_kind_of(obj)](obj).devices
    assert device.attribute("type") == Unreadable("float")


@pytest.mark.parametrize(("number", "path", "value", "named"), MALFORMED)
def test_a_malformed_dra_field_raises_an_error_naming_it(
    number: str, path: str, value: Any, named: str
) -> None:
    obj = _set(recorded_object(number), path, value)
    with pytest.raises(ObjectError) as caught:
        PROJECTIONS[group_kind_of(obj)](obj)
    assert caught.value.path.endswith(named), caught.value


def _selector(*terms: list[tuple[str, str, list[str], bool]]) -> NodeSelector:
    obj = {
        "s": {
            "nodeSelectorTerms": [
                {
                    ("matchFields" if field else "matchExpressions"): [
                        {"key": k, "operator": op, "values": values}
                    ]
                    for k, op, values, field in term
                }
                for term in terms
            ]
        }
    }
    selector = project_node_selector(obj, "s", "spec")
    assert selector is not None
    return selector


@pytest.mark.parametrize(
    ("selector", "matches", "pinned"),
    [
        (_selector([("metadata.name", "In", ["omen2"], True)]), True, ("omen2",)),
        (_selector([("metadata.name", "In", ["tower1"], True)]), False, ("tower1",)),
        (_selector([("rack", "In", ["r1"], False)]), True, ()),
        (_selector([("rack", "NotIn", ["r1"], False)]), False, ()),
        (_selector([("rack", "Exists", [], False)]), True, ()),
        (_selector([("gpus", "Gt", ["3"], False)]), True, ()),
        (_selector([("gpus", "Lt", ["3"], False)]), False, ()),
        (
            _selector([("rack", "DoesNotExist", [], False)], [("rack", "In", ["r1"], False)]),
            True,
            (),
        ),
        (_selector([]), False, ()),
    ],
    ids=[
        "pinned here",
        "pinned elsewhere",
        "label In",
        "label NotIn",
        "Exists",
        "Gt",
        "Lt",
        "terms are ORed",
        "an empty term selects nothing",
    ],
)
def test_node_selectors_match_as_node_affinity_does(
    selector: NodeSelector, matches: bool, pinned: tuple[str, ...]
) -> None:
    omen2 = project_node(node("omen2", labels={"rack": "r1", "gpus": "4"}))
    assert selector.matches(omen2) is matches
    assert selector.pinned_nodes() == pinned


def test_per_device_node_selection_takes_each_devices_own_node() -> None:
    obj = resource_slice("fabric", "", [{"name": "a", "nodeName": "n1"}, {"name": "b"}])
    del obj["spec"]["nodeName"]
    obj["spec"]["perDeviceNodeSelection"] = True
    obj["spec"]["devices"][1]["allNodes"] = True
    devices = published_devices(project_resource_slice(obj))
    assert [(d.device.name, d.node, d.all_nodes) for d in devices] == [
        ("a", "n1", False),
        ("b", "", True),
    ]


@pytest.mark.parametrize(
    ("text", "strict", "normalized"),
    [
        ("570.133.20", Version(570, 133, 20), Version(570, 133, 20)),
        ("1.2.3-rc.1+build.5", Version(1, 2, 3, ("rc", 1), "build.5"), Version(1, 2, 3, ("rc", 1))),
        ("v12.8", None, Version(12, 8, 0)),
        ("01.2.3", None, Version(1, 2, 3)),
        ("1.2", None, Version(1, 2, 0)),
        ("banana", None, None),
    ],
)
def test_versions_parse_strictly_and_normalize_on_request(
    text: str, strict: Version | None, normalized: Version | None
) -> None:
    assert parse_version(text) == strict
    assert normalize_version(text) == normalized


def test_versions_order_by_semver_precedence() -> None:
    ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta.2", "1.0.0-beta.11",
               "1.0.0-rc.1", "1.0.0", "1.10.0", "570.133.20"]  # fmt: skip
    versions = [parse_version(v) for v in ordered]
    assert all(v is not None for v in versions)
    assert sorted(versions, key=lambda v: v or Version(0, 0, 0)) == versions
    assert parse_version("1.0.0+a") == parse_version("1.0.0+b")  # build metadata never counts

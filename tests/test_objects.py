"""Projections: what each kind of object means to the policies, and errors that name the field."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from policies.cluster.gpu_operator import project_cluster_policy
from policies.cluster.kubevirt import project_kubevirt, project_vm, project_vmi
from policies.cluster.nfd import project_node_feature
from policies.cluster.nodes import project_node
from policies.cluster.pciids import PciId
from policies.cluster.pods import PodInfo, project_pod
from policies.cluster.vm_run import run_strategy_of
from policies.vocabulary.fields import ObjectError, parse_count
from tests.builders import (
    Obj,
    cluster_policy,
    dead_node,
    kubevirt,
    node,
    node_feature,
    pod,
    vm,
    vmi,
)

RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"


def with_field(obj: Obj, path: Sequence[str | int], value: Any) -> Obj:
    """A deep copy of ``obj`` with the field at ``path`` set, creating mappings on the way."""
    out = copy.deepcopy(obj)
    here: Any = out
    for step in path[:-1]:
        if isinstance(step, str) and step not in here:
            here[step] = {}
        here = here[step]
    here[path[-1]] = value
    return out


def with_containers(obj: Obj, *resources: Mapping[str, Mapping[str, str]]) -> Obj:
    """A pod with one app container per ``{"limits": ..., "requests": ...}`` mapping."""
    containers = [
        {"name": f"c{i}", "image": "busybox", "resources": {k: dict(v) for k, v in res.items()}}
        for i, res in enumerate(resources)
    ]
    return with_field(obj, ["spec", "containers"], containers)


def without_conditions(obj: Obj) -> Obj:
    return with_field(obj, ["status", "conditions"], [])


# --- pod GPU holdings -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "gpu", "extended"),
    [
        pytest.param(
            pod("p", "n", limits={"nvidia.com/gpu": "2"}),
            {"nvidia.com/gpu": 2},
            {"nvidia.com/gpu": 2},
            id="a limit alone is what the pod holds",
        ),
        pytest.param(
            pod("p", "n", requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "2"}),
            {"nvidia.com/gpu": 2},
            {"nvidia.com/gpu": 2},
            id="a limit larger than the request wins",
        ),
        pytest.param(
            pod("p", "n", requests={"nvidia.com/gpu": "3"}, limits={"nvidia.com/gpu": "1"}),
            {"nvidia.com/gpu": 3},
            {"nvidia.com/gpu": 3},
            id="a request larger than the limit wins",
        ),
        pytest.param(
            pod("p", "n", requests={"nvidia.com/gpu": "1"}),
            {"nvidia.com/gpu": 1},
            {"nvidia.com/gpu": 1},
            id="a request alone is what the pod holds",
        ),
        pytest.param(
            with_containers(
                pod("p", "n"),
                {"limits": {"nvidia.com/gpu": "1"}},
                {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}},
                {"limits": {"cpu": "4"}},
            ),
            {"nvidia.com/gpu": 3},
            {"nvidia.com/gpu": 3},
            id="app containers are summed",
        ),
        pytest.param(
            pod("p", "n", limits={"nvidia.com/gpu.shared": "1"}),
            {"nvidia.com/gpu.shared": 1},
            {"nvidia.com/gpu.shared": 1},
            id="a shared GPU counts as a container GPU",
        ),
        pytest.param(
            pod("p", "n", limits={"nvidia.com/mig-1g.10gb": "2"}),
            {"nvidia.com/mig-1g.10gb": 2},
            {"nvidia.com/mig-1g.10gb": 2},
            id="a MIG slice counts as a container GPU",
        ),
        pytest.param(
            pod("p", "n", limits={RTX_5090: "1"}),
            {},
            {RTX_5090: 1},
            id="a passthrough device is extended but not a container GPU",
        ),
        pytest.param(
            pod("p", "n", limits={"nvidia.com/2b85": "1", "devices.kubevirt.io/kvm": "1"}),
            {},
            {"nvidia.com/2b85": 1, "devices.kubevirt.io/kvm": 1},
            id="raw id passthrough names and other vendors are extended only",
        ),
        pytest.param(
            pod("p", "n", limits={"cpu": "8", "memory": "64Gi", "hugepages-2Mi": "1Gi"}),
            {},
            {},
            id="cpu memory and hugepages are not extended resources",
        ),
        pytest.param(
            pod("p", "n", limits={"nvidia.com/gpu": "0"}),
            {},
            {},
            id="a zero count is not a holding",
        ),
        pytest.param(
            pod(
                "p",
                "n",
                limits={"nvidia.com/gpu": "1"},
                init_limits={"nvidia.com/gpu": "2"},
                phase="Pending",
                initialized=False,
            ),
            {"nvidia.com/gpu": 2},
            {"nvidia.com/gpu": 2},
            id="an init container's larger GPU count holds while the pod is initializing",
        ),
        pytest.param(
            pod(
                "p",
                "n",
                limits={"nvidia.com/gpu": "2"},
                init_limits={"nvidia.com/gpu": "1"},
                phase="Pending",
                initialized=False,
            ),
            {"nvidia.com/gpu": 2},
            {"nvidia.com/gpu": 2},
            id="init containers are not added to the app containers while initializing",
        ),
        pytest.param(
            pod("p", "n", init_limits={"nvidia.com/gpu": "1"}, phase="Pending", initialized=False),
            {"nvidia.com/gpu": 1},
            {"nvidia.com/gpu": 1},
            id="an init container alone holds a GPU while the pod is initializing",
        ),
        pytest.param(
            pod("p", "n", init_limits={"nvidia.com/gpu": "1"}, phase="Running", initialized=True),
            {},
            {},
            id="an init container holds nothing once the pod is initialized",
        ),
        pytest.param(
            without_conditions(pod("p", "n", init_limits={"nvidia.com/gpu": "1"}, phase="Pending")),
            {"nvidia.com/gpu": 1},
            {"nvidia.com/gpu": 1},
            id="a pending pod without an Initialized condition is initializing",
        ),
        pytest.param(
            without_conditions(pod("p", "n", init_limits={"nvidia.com/gpu": "1"}, phase="Running")),
            {},
            {},
            id="a running pod without an Initialized condition is initialized",
        ),
    ],
)
def test_pod_gpu_holdings(obj: Obj, gpu: dict[str, int], extended: dict[str, int]) -> None:
    info = project_pod(obj)
    assert dict(info.gpu) == gpu
    assert dict(info.extended) == extended


def test_a_pod_projection_keeps_identity_node_and_app() -> None:
    info = project_pod(
        pod("train", "gpu1", namespace="ml", app="trainer", limits={"nvidia.com/gpu": "1"})
    )
    assert (info.namespace, info.name, info.node, info.app, info.key) == (
        "ml",
        "train",
        "gpu1",
        "trainer",
        "ml/train",
    )
    assert project_pod(pod("pending")).node == ""


@pytest.mark.parametrize(
    ("terminating", "expected"),
    [
        pytest.param(True, True, id="a deletionTimestamp marks the pod terminating"),
        pytest.param(False, False, id="no deletionTimestamp means not terminating"),
    ],
)
def test_terminating_comes_from_the_deletion_timestamp(terminating: bool, expected: bool) -> None:
    info = project_pod(pod("p", "n", limits={"nvidia.com/gpu": "1"}, terminating=terminating))
    assert info.terminating is expected
    assert (info.problem == "Terminating") is expected


@pytest.mark.parametrize(
    ("phase", "finished"),
    [
        pytest.param("Succeeded", True, id="Succeeded is finished"),
        pytest.param("Failed", True, id="Failed is finished"),
        pytest.param("Running", False, id="Running is not finished"),
        pytest.param("Pending", False, id="Pending is not finished"),
        pytest.param("Unknown", False, id="Unknown is not finished"),
    ],
)
def test_finished_pod_phases(phase: str, finished: bool) -> None:
    info: PodInfo = project_pod(pod("p", "n", limits={"nvidia.com/gpu": "1"}, phase=phase))
    assert info.phase == phase
    assert info.finished is finished


# --- quantities -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "count"),
    [
        pytest.param(3, 3, id="an int is itself"),
        pytest.param(0, 0, id="zero is zero"),
        pytest.param("1", 1, id="a plain number string"),
        pytest.param(" 4 ", 4, id="surrounding spaces are forgiven"),
        pytest.param("2k", 2000, id="decimal k"),
        pytest.param("3M", 3_000_000, id="decimal M"),
        pytest.param("1Ki", 1024, id="binary Ki"),
        pytest.param("2Mi", 2 * 2**20, id="binary Mi"),
        pytest.param("1e3", 1000, id="a decimal exponent"),
        pytest.param("500m", 0, id="half a unit in milli rounds down to zero"),
        pytest.param("1500m", 1, id="milli units round down"),
        pytest.param("2000m", 2, id="whole milli units"),
    ],
)
def test_parse_count_reads_quantities(value: object, count: int) -> None:
    assert parse_count(value, "status.allocatable.nvidia.com/gpu") == count


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("two", id="a word"),
        pytest.param("", id="an empty string"),
        pytest.param("1x", id="an unknown suffix"),
        pytest.param("m", id="a suffix without a number"),
        pytest.param("Ki", id="a binary suffix without a number"),
        pytest.param("1ki", id="a lower-case binary suffix"),
        pytest.param("NaN", id="not a number"),
        pytest.param("Infinity", id="infinity"),
        pytest.param(True, id="a boolean"),
        pytest.param(1.5, id="a float"),
        pytest.param(["1"], id="a list"),
        pytest.param({"count": 1}, id="a mapping"),
        pytest.param(
            "1e1000000",
            id="an exponent beyond the decimal context",
        ),
    ],
)
def test_parse_count_refuses_junk_with_its_path(value: object) -> None:
    with pytest.raises(ObjectError) as caught:
        parse_count(value, "spec.containers[0].resources.limits.nvidia.com/gpu")
    assert caught.value.path == "spec.containers[0].resources.limits.nvidia.com/gpu"
    assert str(caught.value).startswith("spec.containers[0].resources.limits.nvidia.com/gpu: ")


# --- wrong types name their path ------------------------------------------------------------------

Projection = Callable[[Obj], object]


@pytest.mark.parametrize(
    ("projection", "obj", "path"),
    [
        pytest.param(
            project_node,
            with_field(node("n"), ["metadata", "labels"], ["a", "b"]),
            "metadata.labels",
            id="node labels as a list",
        ),
        pytest.param(
            project_node,
            with_field(node("n"), ["metadata", "labels", "zone"], 3),
            "metadata.labels.zone",
            id="a node label value that is not a string",
        ),
        pytest.param(
            project_node,
            with_field(node("n"), ["spec", "unschedulable"], "yes"),
            "spec.unschedulable",
            id="unschedulable as a string",
        ),
        pytest.param(
            project_node,
            with_field(node("n"), ["spec", "taints"], [["unreachable"]]),
            "spec.taints[0]",
            id="a taint that is not a mapping",
        ),
        pytest.param(
            project_node,
            with_field(node("n"), ["status", "allocatable", "nvidia.com/gpu"], "lots"),
            "status.allocatable.nvidia.com/gpu",
            id="an allocatable count that is not a quantity",
        ),
        pytest.param(
            project_node,
            with_field(node("n"), ["status", "conditions", 0, "lastTransitionTime"], "yesterday"),
            "status.conditions[0].lastTransitionTime",
            id="a condition time that is not RFC 3339",
        ),
        pytest.param(
            project_node,
            with_field(
                node("n"), ["status", "conditions", 0, "lastTransitionTime"], "2026-07-10T03:12:41"
            ),
            "status.conditions[0].lastTransitionTime",
            id="a condition time without a zone",
        ),
        pytest.param(
            project_node,
            with_field(node("n"), ["status", "nodeInfo", "swap", "capacity"], "much"),
            "status.nodeInfo.swap.capacity",
            id="a swap capacity that is not a quantity",
        ),
        pytest.param(
            project_pod,
            with_field(pod("p", "n"), ["spec", "containers"], {"main": {}}),
            "spec.containers",
            id="pod containers as a mapping",
        ),
        pytest.param(
            project_pod,
            with_field(pod("p", "n"), ["spec", "containers", 0], "main"),
            "spec.containers[0]",
            id="a pod container that is not a mapping",
        ),
        pytest.param(
            project_pod,
            with_field(
                pod("p", "n", limits={"nvidia.com/gpu": "1"}),
                ["spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"],
                "one",
            ),
            "spec.containers[0].resources.limits.nvidia.com/gpu",
            id="a GPU limit that is not a quantity",
        ),
        pytest.param(
            project_pod,
            with_field(
                pod("p", "n", init_limits={"nvidia.com/gpu": "1"}, initialized=False),
                ["spec", "initContainers", 0, "resources"],
                [],
            ),
            "spec.initContainers[0].resources",
            id="init container resources as a list",
        ),
        pytest.param(
            project_pod,
            with_field(pod("p", "n"), ["spec", "nodeName"], 7),
            "spec.nodeName",
            id="a node name that is not a string",
        ),
        pytest.param(
            project_vm,
            with_field(
                vm("v", gpus=["x"]),
                ["spec", "template", "spec", "domain", "devices", "gpus", 0],
                "x",
            ),
            "spec.template.spec.domain.devices.gpus[0]",
            id="a VM gpus entry that is not a mapping",
        ),
        pytest.param(
            project_vm,
            with_field(
                vm("v", gpus=["x"]),
                ["spec", "template", "spec", "domain", "devices", "gpus", 0, "deviceName"],
                5,
            ),
            "spec.template.spec.domain.devices.gpus[0].deviceName",
            id="a VM deviceName that is a number",
        ),
        pytest.param(
            project_vm,
            with_field(
                vm("v"), ["spec", "template", "spec", "domain", "devices", "hostDevices"], "x"
            ),
            "spec.template.spec.domain.devices.hostDevices",
            id="VM hostDevices as a string",
        ),
        pytest.param(
            project_vm,
            with_field(vm("v", run_strategy=None), ["spec", "running"], "true"),
            "spec.running",
            id="running as a string",
        ),
        pytest.param(
            project_vmi,
            with_field(
                vmi("i", host_devices=["x"]), ["spec", "domain", "devices", "hostDevices", 0], 1
            ),
            "spec.domain.devices.hostDevices[0]",
            id="a VMI hostDevices entry that is not a mapping",
        ),
        pytest.param(
            project_vmi,
            with_field(vmi("i"), ["metadata", "ownerReferences"], {"kind": "VirtualMachine"}),
            "metadata.ownerReferences",
            id="VMI ownerReferences as a mapping",
        ),
        pytest.param(
            project_kubevirt,
            with_field(
                kubevirt(),
                ["spec", "configuration", "developerConfiguration", "featureGates"],
                ["HostDevices", 3],
            ),
            "spec.configuration.developerConfiguration.featureGates[1]",
            id="a feature gate that is a number",
        ),
        pytest.param(
            project_kubevirt,
            with_field(
                kubevirt([("10de:2b85", RTX_5090)]),
                [
                    "spec",
                    "configuration",
                    "permittedHostDevices",
                    "pciHostDevices",
                    0,
                    "externalResourceProvider",
                ],
                "true",
            ),
            "spec.configuration.permittedHostDevices.pciHostDevices[0].externalResourceProvider",
            id="externalResourceProvider as a string",
        ),
        pytest.param(
            project_kubevirt,
            with_field(
                kubevirt(),
                ["spec", "configuration", "permittedHostDevices", "mediatedDevices"],
                {"mdevNameSelector": "x"},
            ),
            "spec.configuration.permittedHostDevices.mediatedDevices",
            id="mediatedDevices as a mapping",
        ),
        pytest.param(
            project_kubevirt,
            with_field(
                kubevirt(usb=[("046d:c52b", "kubevirt.io/receiver")]),
                ["spec", "configuration", "permittedHostDevices", "usb", 0, "selectors"],
                {"vendor": "046d"},
            ),
            "spec.configuration.permittedHostDevices.usb[0].selectors",
            id="usb selectors as a mapping",
        ),
        pytest.param(
            project_cluster_policy,
            with_field(cluster_policy(), ["spec", "sandboxWorkloads", "enabled"], "true"),
            "spec.sandboxWorkloads.enabled",
            id="sandboxWorkloads.enabled as a string",
        ),
        pytest.param(
            project_node_feature,
            with_field(
                node_feature("n", [("0300", "10de", "2b85")]),
                [
                    "spec",
                    "features",
                    "instances",
                    "pci.device",
                    "elements",
                    0,
                    "attributes",
                    "device",
                ],
                0x2B85,
            ),
            "spec.features.instances.pci.device.elements[0].attributes.device",
            id="a NodeFeature device attribute that is a number",
        ),
    ],
)
def test_a_field_of_the_wrong_type_names_its_path(
    projection: Projection, obj: Obj, path: str
) -> None:
    with pytest.raises(ObjectError) as caught:
        projection(obj)
    assert caught.value.path == path
    assert str(caught.value).startswith(f"{path}: ")


# --- run strategies -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "strategy", "should_run"),
    [
        pytest.param({"runStrategy": "Always"}, "Always", True, id="Always runs"),
        pytest.param(
            {"runStrategy": "RerunOnFailure"}, "RerunOnFailure", True, id="RerunOnFailure runs"
        ),
        pytest.param({"runStrategy": "Once"}, "Once", True, id="Once runs"),
        pytest.param(
            {"runStrategy": "Manual"}, "Manual", False, id="Manual does not run by itself"
        ),
        pytest.param({"runStrategy": "Halted"}, "Halted", False, id="Halted does not run"),
        pytest.param({"running": True}, "Always", True, id="deprecated running true means Always"),
        pytest.param(
            {"running": False}, "Halted", False, id="deprecated running false means Halted"
        ),
        pytest.param({}, "Halted", False, id="neither runStrategy nor running means Halted"),
        pytest.param(
            {"runStrategy": "Once", "running": False},
            "Once",
            True,
            id="runStrategy wins over running",
        ),
    ],
)
def test_run_strategies(spec: dict[str, Any], strategy: str, should_run: bool) -> None:
    assert run_strategy_of(spec) == strategy
    obj = vm("v", run_strategy=None)
    obj["spec"].update(spec)
    assert project_vm(obj).run_strategy == strategy
    assert project_vm(obj).should_run is should_run


def test_a_vm_projection_lists_gpus_then_host_devices_with_their_fields() -> None:
    info = project_vm(
        vm(
            "gpu-fedora",
            gpus=[RTX_5090],
            host_devices=["nvidia.com/2b85"],
            unschedulable_since="2026-03-01T00:00:00Z",
            eviction_strategy="LiveMigrate",
        )
    )
    assert info.key == "vms/gpu-fedora"
    assert [(d.field, d.name, d.device_name) for d in info.devices] == [
        ("gpus", "gpu1", RTX_5090),
        ("hostDevices", "hd1", "nvidia.com/2b85"),
    ]
    assert info.eviction_strategy == "LiveMigrate"
    assert info.printable_status == "ErrorUnschedulable"
    scheduled = info.conditions[0]
    assert (scheduled.type, scheduled.status) == ("PodScheduled", "False")
    assert scheduled.last_transition == datetime(2026, 3, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("phase", "live"),
    [
        pytest.param("", True, id="a new VMI without a phase is live"),
        pytest.param("Running", True, id="a running VMI is live"),
        pytest.param("Succeeded", False, id="a succeeded VMI is not live"),
        pytest.param("Failed", False, id="a failed VMI is not live"),
    ],
)
def test_vmi_liveness_follows_its_phase(phase: str, live: bool) -> None:
    assert project_vmi(vmi("i", phase=phase)).live is live


def test_a_vmi_projection_reads_node_devices_and_owner() -> None:
    info = project_vmi(vmi("gpu-fedora", node_name="omen2", gpus=[RTX_5090], owner="gpu-fedora"))
    assert (info.node, info.owner_vm, info.key) == ("omen2", "gpu-fedora", "vms/gpu-fedora")
    assert [d.device_name for d in info.devices] == [RTX_5090]
    assert project_vmi(vmi("bare")).owner_vm == ""


# --- nodes ----------------------------------------------------------------------------------------


def test_node_allocatable_keeps_only_extended_resources_as_counts() -> None:
    obj = node("omen2", allocatable={RTX_5090: "1", "nvidia.com/gpu": "2", "hugepages-1Gi": "4Gi"})
    assert dict(project_node(obj).allocatable) == {RTX_5090: 1, "nvidia.com/gpu": 2}


def test_a_dead_node_projection_keeps_conditions_taints_and_stale_allocatable() -> None:
    info = project_node(dead_node("omen2", allocatable={RTX_5090: "1"}))
    ready = info.condition("Ready")
    assert ready is not None
    assert (ready.status, ready.reason) == ("Unknown", "NodeStatusUnknown")
    assert ready.last_transition == datetime(2026, 7, 10, 3, 12, 41, tzinfo=UTC)
    assert [(t.key, t.effect) for t in info.taints] == [
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    ]
    assert info.allocatable[RTX_5090] == 1
    assert info.condition("MemoryPressure") is None


@pytest.mark.parametrize(
    ("capacity", "expected"),
    [
        pytest.param(None, None, id="no swap reported"),
        pytest.param("32Gi", 32 * 2**30, id="a swap capacity as a quantity"),
        pytest.param(0, 0, id="a swap capacity of zero"),
    ],
)
def test_node_swap_capacity(capacity: object, expected: int | None) -> None:
    obj = node("omen2")
    if capacity is not None:
        obj = with_field(obj, ["status", "nodeInfo", "swap", "capacity"], capacity)
    assert project_node(obj).swap_capacity == expected


# --- KubeVirt CR ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "pci"),
    [
        pytest.param("10de:2b85", PciId("10de", "2b85"), id="lower case"),
        pytest.param("10DE:2B85", PciId("10de", "2b85"), id="upper case"),
        pytest.param("10De:2b8A", PciId("10de", "2b8a"), id="mixed case"),
        pytest.param(" 10de:2b85 ", PciId("10de", "2b85"), id="surrounding spaces"),
        pytest.param("10de-2b85", None, id="a dash instead of a colon is malformed"),
        pytest.param("0x10de:0x2b85", None, id="0x prefixes are malformed"),
        pytest.param("10de:2b8", None, id="a short device id is malformed"),
        pytest.param("10de", None, id="a vendor alone is malformed"),
        pytest.param("", None, id="an empty selector is malformed"),
    ],
)
def test_kubevirt_pci_selectors(selector: str, pci: PciId | None) -> None:
    info = project_kubevirt(kubevirt([(selector, RTX_5090)]))
    (entry,) = info.pci_devices
    assert entry.selector == selector
    assert entry.pci == pci
    assert entry.resource_name == RTX_5090


def test_a_kubevirt_projection_reads_entries_gates_mdevs_and_eviction() -> None:
    obj = kubevirt(
        [("10de:2b85", RTX_5090), ("10de:2204", "nvidia.com/GA102_GEFORCE_RTX_3090")],
        mdevs=[("NVIDIA A10-24Q", "nvidia.com/NVIDIA_A10-24Q")],
        external=True,
        feature_gates=("HostDevices", "GPU"),
        eviction_strategy="LiveMigrate",
    )
    info = project_kubevirt(obj)
    assert (info.namespace, info.name) == ("kubevirt", "kubevirt")
    assert [(e.index, str(e.pci), e.external) for e in info.pci_devices] == [
        (0, "10de:2b85", True),
        (1, "10de:2204", True),
    ]
    (mdev,) = info.mediated_devices
    assert (mdev.index, mdev.selector, mdev.resource_name, mdev.external) == (
        0,
        "NVIDIA A10-24Q",
        "nvidia.com/NVIDIA_A10-24Q",
        False,
    )
    assert info.gates.enabled == ("HostDevices", "GPU")
    assert info.gates.disabled == ()
    assert info.eviction_strategy == "LiveMigrate"
    assert info.permitted_resource_names == frozenset(
        {RTX_5090, "nvidia.com/GA102_GEFORCE_RTX_3090", "nvidia.com/NVIDIA_A10-24Q"}
    )


def test_a_kubevirt_projection_reads_usb_entries_and_permits_their_resource_names() -> None:
    obj = kubevirt(usb=[("046d:c52b", "kubevirt.io/receiver"), ("0951:1666", "kubevirt.io/stick")])
    info = project_kubevirt(obj)
    assert [(u.index, u.selectors, u.resource_name, u.external) for u in info.usb_devices] == [
        (0, ("046d:c52b",), "kubevirt.io/receiver", False),
        (1, ("0951:1666",), "kubevirt.io/stick", False),
    ]
    assert info.permitted_resource_names == frozenset({"kubevirt.io/receiver", "kubevirt.io/stick"})


def test_a_kubevirt_without_configuration_permits_nothing() -> None:
    info = project_kubevirt(
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
            "spec": {},
        }
    )
    assert info.pci_devices == ()
    assert info.mediated_devices == ()
    assert info.usb_devices == ()
    assert (info.gates.enabled, info.gates.disabled, info.gates.version) == ((), (), "")
    assert info.gates.release is None
    assert info.permitted_resource_names == frozenset()


# --- ClusterPolicy --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "enabled", "default"),
    [
        pytest.param(
            cluster_policy(True, "vm-passthrough"), True, "vm-passthrough", id="sandbox on"
        ),
        pytest.param(cluster_policy(False, "container"), False, "container", id="sandbox off"),
        pytest.param(
            {
                "apiVersion": "nvidia.com/v1",
                "kind": "ClusterPolicy",
                "metadata": {"name": "cluster-policy"},
                "spec": {},
            },
            False,
            "container",
            id="no sandboxWorkloads means off with a container default",
        ),
    ],
)
def test_cluster_policy_projection(obj: Obj, enabled: bool, default: str) -> None:
    info = project_cluster_policy(obj)
    assert (info.name, info.sandbox_enabled, info.default_workload) == (
        "cluster-policy",
        enabled,
        default,
    )


# --- NodeFeature ----------------------------------------------------------------------------------


def test_a_node_feature_lists_pci_devices_of_its_node() -> None:
    info = project_node_feature(
        node_feature(
            "omen2", [("0300", "10de", "2b85"), ("0300", "10DE", "2204"), ("0200", "8086", "1533")]
        )
    )
    assert (info.namespace, info.name, info.node) == ("node-feature-discovery", "omen2", "omen2")
    assert info.pci_devices == (PciId("10de", "2b85"), PciId("10de", "2204"), PciId("8086", "1533"))


def test_a_node_feature_takes_its_node_from_the_nfd_label_before_its_name() -> None:
    obj = with_field(node_feature("omen2", []), ["metadata", "name"], "omen2-x7k2p")
    assert project_node_feature(obj).node == "omen2"
    obj["metadata"]["labels"] = {}
    assert project_node_feature(obj).node == "omen2-x7k2p"


@pytest.mark.parametrize(
    "attributes",
    [
        pytest.param({"class": "0300", "vendor": "10de"}, id="no device attribute"),
        pytest.param({"class": "0300", "device": "2b85"}, id="no vendor attribute"),
        pytest.param({"vendor": "10de", "device": "zzzz"}, id="a device that is not hex"),
    ],
)
def test_a_node_feature_skips_elements_without_a_vendor_and_device(
    attributes: dict[str, str],
) -> None:
    obj = node_feature("omen2", [("0300", "10de", "2b85")])
    elements = obj["spec"]["features"]["instances"]["pci.device"]["elements"]
    elements.append({"attributes": attributes})
    assert project_node_feature(obj).pci_devices == (PciId("10de", "2b85"),)


def test_a_node_feature_without_pci_devices_has_none() -> None:
    obj = with_field(
        node_feature("omen2", []), ["spec", "features", "instances"], {"usb.device": {}}
    )
    assert project_node_feature(obj).pci_devices == ()


def test_a_native_sidecar_keeps_its_gpu_after_the_pod_is_initialized() -> None:
    obj = pod("p", "n", limits={"cpu": "1"}, phase="Running", initialized=True)
    obj["spec"]["initContainers"] = [
        {
            "name": "inference-sidecar",
            "image": "nvcr.io/nvidia/tritonserver",
            "restartPolicy": "Always",
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
        },
    ]
    assert dict(project_pod(obj).gpu) == {"nvidia.com/gpu": 1}

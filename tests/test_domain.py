"""Domain rules: node health, the operator's effective mode, hardware sources, message helpers."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from policies.hardware import (
    SOURCE_ALLOCATABLE,
    SOURCE_GFD,
    SOURCE_NFD_LABEL,
    SOURCE_NODE_FEATURE,
    node_feature_hardware,
    node_hardware,
    pci_from_nfd_label,
)
from policies.health import node_health
from policies.objects import (
    ClusterPolicyInfo,
    project_cluster_policy,
    project_node,
    project_node_feature,
)
from policies.pciids import PciId, bundled_database
from policies.text import few, plural
from policies.workload import WORKLOAD_LABEL, describe_mode, effective_mode
from tests.builders import Obj, cluster_policy, dead_node, node, node_feature

RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
NVIDIA_5090 = PciId("10de", "2b85")
NVIDIA_3090 = PciId("10de", "2204")
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"


def without_ready(obj: Obj) -> Obj:
    obj["status"]["conditions"] = [c for c in obj["status"]["conditions"] if c["type"] != "Ready"]
    return obj


# --- node health ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "healthy", "problems", "description"),
    [
        pytest.param(node("a"), True, (), "Ready", id="a Ready node is healthy"),
        pytest.param(
            dead_node("omen2"),
            False,
            ("NotReady", f"tainted {UNREACHABLE}:NoSchedule", f"tainted {UNREACHABLE}:NoExecute"),
            "NotReady since 2026-07-10 (Kubelet stopped posting node status.)",
            id="a silent kubelet leaves Ready Unknown with unreachable taints",
        ),
        pytest.param(
            node(
                "a",
                ready="False",
                reason="KubeletNotReady",
                message="PLEG is not healthy",
                since="2026-06-01T10:00:00Z",
            ),
            False,
            ("NotReady",),
            "NotReady since 2026-06-01 (PLEG is not healthy)",
            id="Ready False is NotReady with the kubelet's message",
        ),
        pytest.param(
            node(
                "a",
                ready="False",
                reason="KubeletNotReady",
                message="",
                since="2026-06-01T10:00:00Z",
            ),
            False,
            ("NotReady",),
            "NotReady since 2026-06-01 (KubeletNotReady)",
            id="Ready False without a message falls back to the reason",
        ),
        pytest.param(
            without_ready(node("a")),
            False,
            ("NotReady",),
            "NotReady (no Ready condition reported)",
            id="a node without a Ready condition is NotReady",
        ),
        pytest.param(
            node("a", unschedulable=True),
            False,
            ("cordoned",),
            "cordoned",
            id="a cordoned node is not healthy",
        ),
        pytest.param(
            node("a", taints=[{"key": NOT_READY, "effect": "NoSchedule"}]),
            False,
            (f"tainted {NOT_READY}:NoSchedule",),
            f"tainted {NOT_READY}:NoSchedule",
            id="a not-ready taint makes a Ready node unhealthy",
        ),
        pytest.param(
            node("a", taints=[{"key": UNREACHABLE, "effect": "NoExecute"}]),
            False,
            (f"tainted {UNREACHABLE}:NoExecute",),
            f"tainted {UNREACHABLE}:NoExecute",
            id="an unreachable taint makes a Ready node unhealthy",
        ),
        pytest.param(
            node(
                "a",
                taints=[
                    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                    {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
                    {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"},
                ],
            ),
            True,
            (),
            "Ready",
            id="other taints are ignored",
        ),
        pytest.param(
            dead_node("omen2", unschedulable=True),
            False,
            (
                "NotReady",
                "cordoned",
                f"tainted {UNREACHABLE}:NoSchedule",
                f"tainted {UNREACHABLE}:NoExecute",
            ),
            "NotReady since 2026-07-10 (Kubelet stopped posting node status.), cordoned",
            id="a dead cordoned node names both and leaves out its taints",
        ),
    ],
)
def test_node_health(obj: Obj, healthy: bool, problems: tuple[str, ...], description: str) -> None:
    health = node_health(project_node(obj))
    assert health.healthy is healthy
    assert health.problems == problems
    assert health.describe() == description


def test_node_health_keeps_since_reason_and_message_of_the_ready_condition() -> None:
    health = node_health(project_node(dead_node("omen2")))
    assert health.since == datetime(2026, 7, 10, 3, 12, 41, tzinfo=UTC)
    assert (health.reason, health.message) == (
        "NodeStatusUnknown",
        "Kubelet stopped posting node status.",
    )


def test_a_ready_node_has_no_since_even_if_its_condition_changed_recently() -> None:
    assert node_health(project_node(node("a", since="2026-07-10T00:00:00Z"))).since is None


# --- effective mode -------------------------------------------------------------------------------

SANDBOX_CONTAINER = project_cluster_policy(cluster_policy(True, "container"))
SANDBOX_PASSTHROUGH = project_cluster_policy(cluster_policy(True, "vm-passthrough"))
SANDBOX_VGPU = project_cluster_policy(cluster_policy(True, "vm-vgpu"))
SANDBOX_BOGUS_DEFAULT = project_cluster_policy(cluster_policy(True, "vm-passthru"))
SANDBOX_OFF = project_cluster_policy(cluster_policy(False, "vm-passthrough"))


def labelled(value: str | None) -> dict[str, str]:
    return {} if value is None else {WORKLOAD_LABEL: value}


@pytest.mark.parametrize(
    ("label", "policy", "mode", "description"),
    [
        pytest.param(
            "vm-passthrough",
            SANDBOX_CONTAINER,
            "vm-passthrough",
            "vm-passthrough",
            id="a valid label wins over the default",
        ),
        pytest.param(
            "container",
            SANDBOX_PASSTHROUGH,
            "container",
            "container",
            id="a container label wins over a vm-passthrough default",
        ),
        pytest.param("vm-vgpu", SANDBOX_CONTAINER, "vm-vgpu", "vm-vgpu", id="vm-vgpu is a mode"),
        pytest.param(
            None,
            SANDBOX_PASSTHROUGH,
            "vm-passthrough",
            "vm-passthrough (ClusterPolicy default)",
            id="a missing label takes the ClusterPolicy default",
        ),
        pytest.param(
            None,
            SANDBOX_CONTAINER,
            "container",
            "container (ClusterPolicy default)",
            id="a missing label with a container default is container",
        ),
        pytest.param(
            "passthrough",
            SANDBOX_VGPU,
            "vm-vgpu",
            "vm-vgpu (ClusterPolicy default)",
            id="an invalid label takes the ClusterPolicy default",
        ),
        pytest.param(
            "",
            SANDBOX_PASSTHROUGH,
            "vm-passthrough",
            "vm-passthrough (ClusterPolicy default)",
            id="an empty label takes the ClusterPolicy default",
        ),
        pytest.param(
            "VM-Passthrough",
            SANDBOX_CONTAINER,
            "container",
            "container (ClusterPolicy default)",
            id="label values are case-sensitive",
        ),
        pytest.param(
            None,
            SANDBOX_BOGUS_DEFAULT,
            "container",
            "container (ClusterPolicy default)",
            id="an invalid default means container",
        ),
        pytest.param(
            "vm-passthrough",
            SANDBOX_OFF,
            "container",
            "container (sandbox workloads disabled)",
            id="sandbox workloads disabled makes every node container",
        ),
        pytest.param(
            None,
            SANDBOX_OFF,
            "container",
            "container (sandbox workloads disabled)",
            id="sandbox workloads disabled ignores the default too",
        ),
        pytest.param(
            "vm-passthrough",
            None,
            "vm-passthrough",
            "vm-passthrough",
            id="without a ClusterPolicy the label is taken at face value",
        ),
        pytest.param(
            "vm-vgpu",
            None,
            "vm-vgpu",
            "vm-vgpu",
            id="without a ClusterPolicy vm-vgpu is taken at face value",
        ),
    ],
)
def test_effective_mode_and_its_description(
    label: str | None, policy: ClusterPolicyInfo | None, mode: str, description: str
) -> None:
    assert effective_mode(labelled(label), policy) == mode
    assert describe_mode(labelled(label), policy) == description


@pytest.mark.parametrize(
    "label",
    [
        pytest.param(None, id="a missing label"),
        pytest.param("passthrough", id="an invalid label"),
    ],
)
def test_without_a_cluster_policy_a_missing_or_invalid_label_means_container(
    label: str | None,
) -> None:
    assert effective_mode(labelled(label), None) == "container"


@pytest.mark.parametrize(
    "label",
    [
        pytest.param(None, id="a missing label"),
        pytest.param("passthrough", id="an invalid label"),
    ],
)
def test_without_a_cluster_policy_the_description_does_not_invoke_one(label: str | None) -> None:
    assert "ClusterPolicy" not in describe_mode(labelled(label), None)


# --- hardware -------------------------------------------------------------------------------------


def nfd(fields: str) -> str:
    return f"feature.node.kubernetes.io/pci-{fields}.present"


@pytest.mark.parametrize(
    ("label", "pci"),
    [
        pytest.param(nfd("0300_10de_2b85"), NVIDIA_5090, id="class vendor device names a device"),
        pytest.param(
            nfd("0302_10de_2330"), PciId("10de", "2330"), id="a 3D controller class works too"
        ),
        pytest.param(
            nfd("10de_2b85"),
            NVIDIA_5090,
            id="vendor device names a device",
        ),
        pytest.param(nfd("8086_56a0"), PciId("8086", "56a0"), id="vendor device of another vendor"),
        pytest.param(nfd("0300_10de"), None, id="class vendor names no device"),
        pytest.param(nfd("0302_10de"), None, id="a 3D controller class and vendor names no device"),
        pytest.param(nfd("10de"), None, id="vendor alone names no device"),
        pytest.param(nfd("0300_10de_2b85_1234"), None, id="four fields are not understood"),
        pytest.param(
            "feature.node.kubernetes.io/pci-0300_10de_2b85.sriov.capable",
            None,
            id="a label that is not .present",
        ),
        pytest.param("feature.node.kubernetes.io/usb-ef_1d6b_0002.present", None, id="a usb label"),
    ],
)
def test_pci_from_nfd_label(label: str, pci: PciId | None) -> None:
    assert pci_from_nfd_label(label) == pci


@pytest.mark.parametrize(
    ("obj", "hardware"),
    [
        pytest.param(
            node("a", labels={nfd("0300_10de_2b85"): "true"}),
            {NVIDIA_5090: {SOURCE_NFD_LABEL}},
            id="an NFD device label",
        ),
        pytest.param(
            node("a", labels={nfd("0300_10de_2b85"): "false"}),
            {},
            id="an NFD label that is not true",
        ),
        pytest.param(
            node("a", labels={nfd("0300_10de"): "true", nfd("10de"): "true"}),
            {},
            id="vendor-level NFD labels say nothing about the device",
        ),
        pytest.param(
            node("a", labels={"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3090"}),
            {NVIDIA_3090: {SOURCE_GFD}},
            id="a GFD product label",
        ),
        pytest.param(
            node("a", labels={"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3090-SHARED"}),
            {NVIDIA_3090: {SOURCE_GFD}},
            id="a time-sliced GFD product label",
        ),
        pytest.param(
            node("a", labels={"nvidia.com/gpu.product": "Mystery-GPU-9000"}),
            {},
            id="an unknown GFD product",
        ),
        pytest.param(
            node("a", allocatable={RTX_5090: "1"}),
            {NVIDIA_5090: {SOURCE_ALLOCATABLE}},
            id="a sandbox resource in allocatable",
        ),
        pytest.param(
            node("a", allocatable={"nvidia.com/2b85": "2"}),
            {NVIDIA_5090: {SOURCE_ALLOCATABLE}},
            id="a raw-id sandbox resource in allocatable",
        ),
        pytest.param(
            dead_node("omen2", allocatable={RTX_5090: "1"}),
            {NVIDIA_5090: {SOURCE_ALLOCATABLE}},
            id="stale allocatable on a dead node is still hardware",
        ),
        pytest.param(node("a", allocatable={RTX_5090: "0"}), {}, id="a zero count is no hardware"),
        pytest.param(
            node(
                "a",
                allocatable={
                    "nvidia.com/gpu": "4",
                    "nvidia.com/mig-1g.10gb": "7",
                    "nvidia.com/gpu.shared": "8",
                },
            ),
            {},
            id="container GPU resources give no PCI id",
        ),
        pytest.param(
            node("a", labels={nfd("0300_10de_2b85"): "true"}, allocatable={RTX_5090: "1"}),
            {NVIDIA_5090: {SOURCE_NFD_LABEL, SOURCE_ALLOCATABLE}},
            id="sources of one device accumulate",
        ),
        pytest.param(
            node(
                "a",
                labels={
                    nfd("0300_10de_2b85"): "true",
                    "nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3090",
                },
            ),
            {NVIDIA_5090: {SOURCE_NFD_LABEL}, NVIDIA_3090: {SOURCE_GFD}},
            id="two devices from two sources",
        ),
        pytest.param(node("a"), {}, id="a plain node has no known hardware"),
    ],
)
def test_node_hardware_sources(obj: Obj, hardware: dict[PciId, set[str]]) -> None:
    assert node_hardware(project_node(obj), bundled_database()) == hardware


def test_node_feature_hardware_lists_every_pci_device() -> None:
    feature = project_node_feature(
        node_feature("omen2", [("0300", "10de", "2b85"), ("0300", "10de", "2204")])
    )
    assert node_feature_hardware(feature) == {
        NVIDIA_5090: {SOURCE_NODE_FEATURE},
        NVIDIA_3090: {SOURCE_NODE_FEATURE},
    }


# --- message helpers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("items", "limit", "text"),
    [
        pytest.param([], 3, "", id="nothing"),
        pytest.param(["a"], 3, "a", id="one"),
        pytest.param(["a", "b"], 3, "a and b", id="two"),
        pytest.param(["a", "b", "c"], 3, "a, b and c", id="exactly the limit"),
        pytest.param(["a", "b", "c", "d"], 3, "a, b, c and 1 more", id="one past the limit"),
        pytest.param(
            ["a", "b", "c", "d", "e", "f"], 3, "a, b, c and 3 more", id="well past the limit"
        ),
        pytest.param(["a", "b", "c"], 1, "a and 2 more", id="a limit of one"),
    ],
)
def test_few(items: list[str], limit: int, text: str) -> None:
    assert few(items, limit) == text


@pytest.mark.parametrize(
    ("count", "text"),
    [
        pytest.param(0, "0 pods", id="zero is plural"),
        pytest.param(1, "1 pod", id="one is singular"),
        pytest.param(2, "2 pods", id="two is plural"),
    ],
)
def test_plural(count: int, text: str) -> None:
    assert plural(count, "pod") == text

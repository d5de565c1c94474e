"""gpu-managed-twice: NVIDIA's device plugin and its DRA driver both handing out a node's GPUs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import yaml

from policies.diagnoses.managed_twice import GPU_MANAGED_TWICE, GPU_MANAGED_TWICE_DIAGNOSIS
from policies.model import DiagnosisFinding, Severity
from policies.registry import DIAGNOSES_BY_ID, diagnose_all
from tests.builders import Obj, cluster_policy, dead_node, gpu_pod, node, pod, state_of
from tests.dra_builders import (
    DRA_FIXTURES,
    claim_pod,
    gpu,
    needs_fixtures,
    resource_claim,
    resource_slice,
)

NOW = datetime(2026, 12, 30, 12, 0, tzinfo=UTC)
RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"


def managed_twice(*objects: Obj) -> list[DiagnosisFinding]:
    return diagnose_all(state_of(*objects), NOW)[GPU_MANAGED_TWICE]


def plugin_node(name: str = "n1", **allocatable: str) -> Obj:
    return node(name, allocatable=allocatable or {"nvidia.com/gpu": "1"})


def dra_slice(node_name: str = "n1", *devices: Obj, driver: str = "gpu.nvidia.com") -> Obj:
    return resource_slice(
        f"{node_name}-{driver}-7x2kq", node_name, list(devices) or [gpu()], driver=driver
    )


@pytest.mark.parametrize(
    ("objects", "nodes"),
    [
        pytest.param(
            [plugin_node(), dra_slice()], ["n1"], id="nvidia.com/gpu and a DRA gpu device"
        ),
        pytest.param(
            [
                plugin_node(**{"nvidia.com/gpu.shared": "4"}),
                dra_slice(),
            ],
            ["n1"],
            id="shared GPUs (time-slicing with rename) and a DRA gpu device",
        ),
        pytest.param(
            [
                plugin_node(**{"nvidia.com/mig-1g.10gb": "7"}),
                dra_slice("n1", gpu("gpu-0-mig-1g", type_="mig")),
            ],
            ["n1"],
            id="MIG profiles and a DRA mig device",
        ),
        pytest.param(
            [
                plugin_node(**{RTX_5090: "1"}),
                dra_slice("n1", gpu("gpu-vfio-0", type_="vfio", memory="32Gi")),
            ],
            ["n1"],
            id="the sandbox plugin's passthrough resource and a DRA vfio device",
        ),
        pytest.param([plugin_node()], [], id="only the device plugin"),
        pytest.param([node("n1"), dra_slice()], [], id="only the DRA driver"),
        pytest.param(
            [plugin_node("n1"), node("n2"), dra_slice("n2")], [], id="each on its own node"
        ),
        pytest.param(
            [plugin_node(**{"nvidia.com/gpu": "0"}), dra_slice()],
            [],
            id="the device plugin advertises none",
        ),
        pytest.param(
            [plugin_node(), dra_slice(driver="gpu.example.com")],
            [],
            id="another driver's slice",
        ),
        pytest.param(
            [plugin_node(**{"nvidia.com/hostdev": "2"}), dra_slice()],
            [],
            id="an NVIDIA resource that is no GPU (a network operator's host device)",
        ),
        pytest.param(
            [plugin_node("a"), dra_slice("a"), plugin_node("b"), dra_slice("b")],
            ["a", "b"],
            id="every node both manage, by name",
        ),
    ],
)
def test_a_node_is_managed_twice_only_when_both_allocators_offer_its_gpus(
    objects: list[Obj], nodes: list[str]
) -> None:
    assert [f.resource.name for f in managed_twice(*objects)] == nodes


def test_the_message_names_the_node_what_each_side_publishes_and_the_fix() -> None:
    (finding,) = managed_twice(plugin_node(), dra_slice())
    assert finding.resource.kind == "Node"
    assert finding.message == (
        "n1: the NVIDIA device plugin advertises nvidia.com/gpu: 1, and NVIDIA's DRA driver "
        "(gpu.nvidia.com) publishes 1 device (gpu-0 (gpu, NVIDIA GeForce RTX 5090)): the two "
        "allocate the same GPUs independently, so one GPU can be handed to two workloads. "
        "Disable one (DRA replaces the device plugin): label n1 "
        "nvidia.com/gpu.deploy.device-plugin=false, or set devicePlugin.enabled=false in the "
        "ClusterPolicy"
    )
    assert finding.chain.flatten() == (
        "the NVIDIA device plugin advertises nvidia.com/gpu: 1 (allocatable)",
        "NVIDIA's DRA driver (gpu.nvidia.com) publishes 1 device (gpu-0 (gpu, NVIDIA GeForce "
        "RTX 5090)) in ResourceSlice n1-gpu.nvidia.com-7x2kq",
        "two allocators hand out the same GPUs independently: one GPU can go to a pod through "
        "the device plugin and to a claim through DRA at once",
    )


@pytest.mark.parametrize(
    ("resource", "label", "field"),
    [
        ("nvidia.com/gpu", "nvidia.com/gpu.deploy.device-plugin=false", "devicePlugin"),
        (RTX_5090, "nvidia.com/gpu.deploy.sandbox-device-plugin=false", "sandboxDevicePlugin"),
    ],
)
def test_the_fix_turns_off_the_plugin_that_advertises_the_gpus(
    resource: str, label: str, field: str
) -> None:
    (finding,) = managed_twice(plugin_node(**{resource: "1"}), dra_slice())
    assert f"label n1 {label}" in finding.message
    assert f"set {field}.enabled=false in the ClusterPolicy" in finding.message
    keep_dra = finding.remediation[1]
    assert f"kubectl label node n1 {label} --overwrite" in keep_dra
    assert f'\'{{"spec":{{"{field}":{{"enabled":false}}}}}}\'' in keep_dra
    assert "kubeletPlugin.nodeSelector" in finding.remediation[2]


@pytest.mark.parametrize(
    ("objects", "policy"),
    [
        pytest.param([], "cluster-policy", id="no ClusterPolicy in the state: the chart's name"),
        pytest.param(
            [{**cluster_policy(), "metadata": {"name": "gpu-policy"}}],
            "gpu-policy",
            id="the ClusterPolicy the state holds",
        ),
    ],
)
def test_the_cluster_wide_fix_patches_the_clusterpolicy_by_its_name(
    objects: list[Obj], policy: str
) -> None:
    (finding,) = managed_twice(plugin_node(), dra_slice(), *objects)
    assert f"kubectl patch clusterpolicy {policy} --type merge" in finding.remediation[1]


@pytest.mark.parametrize(
    ("users", "expected", "evidence"),
    [
        pytest.param([], Severity.HIGH, [], id="nothing uses either: high"),
        pytest.param(
            [gpu_pod("train-0", "n1")],
            Severity.HIGH,
            ["pods holding them: ml/train-0"],
            id="only a device-plugin pod: high",
        ),
        pytest.param(
            [
                resource_claim("dra-0", allocated=("n1", "n1", "gpu-0"), reserved_for=["p"]),
                claim_pod("p", "n1", claim="dra-0"),
            ],
            Severity.HIGH,
            ["claims allocated there: ml/dra-0 (gpu-0)"],
            id="only an allocated claim: high",
        ),
        pytest.param(
            [
                gpu_pod("train-0", "n1"),
                resource_claim("dra-0", allocated=("n1", "n1", "gpu-0"), reserved_for=["p"]),
                claim_pod("p", "n1", claim="dra-0"),
            ],
            Severity.CRITICAL,
            ["pods holding them: ml/train-0", "claims allocated there: ml/dra-0 (gpu-0)"],
            id="both hand out GPUs there: critical",
        ),
        pytest.param(
            [pod("done", "n1", limits={"nvidia.com/gpu": "1"}, phase="Succeeded")],
            Severity.HIGH,
            [],
            id="a finished pod holds nothing",
        ),
    ],
)
def test_it_is_critical_when_gpus_of_both_allocators_are_in_use(
    users: list[Obj], expected: Severity, evidence: list[str]
) -> None:
    (finding,) = managed_twice(plugin_node(), dra_slice(), *users)
    declared = DIAGNOSES_BY_ID[GPU_MANAGED_TWICE].default_severity
    assert (finding.severity or declared) == expected
    assert [link for link in finding.chain.flatten() if ": ml/" in link] == evidence
    assert ("GPUs of both are in use there" in finding.message) == (expected == Severity.CRITICAL)


def test_a_notready_node_managed_twice_says_both_sides_may_be_stale() -> None:
    dead = dead_node("n1", allocatable={"nvidia.com/gpu": "1"})
    (finding,) = managed_twice(dead, dra_slice())
    assert finding.chain.flatten()[-1].startswith("n1 is NotReady since 2026-07-10")
    assert finding.chain.flatten()[-1].endswith("both sides may be stale")


@needs_fixtures
def test_the_recorded_cluster_with_omen2s_sandbox_resource_is_managed_twice() -> None:
    items: list[Obj] = yaml.safe_load((DRA_FIXTURES / "objects.yaml").read_text())["items"]
    omen2 = node(
        "omen2",
        labels={"nvidia.com/gpu.workload.config": "vm-passthrough"},
        allocatable={RTX_5090: "1"},
    )
    (finding,) = managed_twice(omen2, *items)
    assert finding.resource.name == "omen2"
    assert "the sandbox device plugin advertises nvidia.com/GB202_GEFORCE_RTX_5090: 1" in (
        finding.message
    )
    assert "gpu-vfio-0 (vfio, NVIDIA GeForce RTX 5090)" in finding.message
    assert "in ResourceSlice omen2-gpu.nvidia.com-7x2kq" in finding.chain.flatten()[1]


def test_the_declaration_warns_with_a_reason_that_cites_its_sources() -> None:
    assert GPU_MANAGED_TWICE_DIAGNOSIS.default_action.label == "warn"
    assert GPU_MANAGED_TWICE_DIAGNOSIS.default_severity == Severity.HIGH
    assert "docs/field-guide.md section 5" in GPU_MANAGED_TWICE_DIAGNOSIS.reason
    assert "devicePlugin.enabled=false" in GPU_MANAGED_TWICE_DIAGNOSIS.reason

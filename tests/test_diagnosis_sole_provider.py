"""sole-provider: which single node failing would strand which workloads, while all is green."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from policies.cluster.kinds import NODE, object_ref
from policies.diagnoses.sole_provider import SOLE_PROVIDER, SOLE_PROVIDER_DIAGNOSIS
from policies.registry import DIAGNOSES_BY_ID, diagnose_all
from policies.vocabulary.audit import DiagnosisFinding
from policies.vocabulary.verdicts import Action, Severity
from tests.builders import (
    Obj,
    cordoned,
    dead_node,
    gpu_pod,
    node,
    owned_vmi,
    state_of,
    tainted,
    vm,
)
from tests.dra_builders import (
    GPU_DEVICE_CLASS,
    VFIO_DEVICE_CLASS,
    claim_pod,
    claim_template,
    claim_vm,
    claim_vmi,
    gpu,
    resource_claim,
    resource_slice,
)
from webhook.audit.policyreport import policy_reports
from webhook.audit.report import run_audit
from webhook.engine import Engine
from webhook.state.files import load_state_objects

NOW = datetime(2026, 10, 30, 12, 0, tzinfo=UTC)
HOMELAB = Path(__file__).resolve().parents[1] / "examples" / "homelab" / "cluster.yaml"
RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
VFIO = VFIO_DEVICE_CLASS
GPU = GPU_DEVICE_CLASS

NodeMaker = Callable[..., Obj]


def sole_providers(*objects: Obj) -> list[DiagnosisFinding]:
    return diagnose_all(state_of(*objects), NOW)[SOLE_PROVIDER]


def severity(finding: DiagnosisFinding) -> Severity:
    return finding.severity or DIAGNOSES_BY_ID[SOLE_PROVIDER].default_severity


def plugin_node(name: str, make: NodeMaker = node, resource: str = RTX_5090) -> Obj:
    return make(name, allocatable={resource: "1"})


def dra_node(name: str, make: NodeMaker = node, type_: str = "vfio") -> list[Obj]:
    device = gpu("gpu-0", type_=type_)
    return [make(name), resource_slice(f"{name}-gpu.nvidia.com-x7k2p", name, [device])]


def running_vm(name: str, on: str, resource: str = RTX_5090) -> list[Obj]:
    return [vm(name, gpus=[resource]), owned_vmi(name, on, gpus=[resource])]


def running_dra_vm(name: str, on: str) -> list[Obj]:
    return [
        VFIO,
        claim_template("passthrough"),
        claim_vm(name, template="passthrough"),
        claim_vmi(name, template="passthrough", node_name=on, owner=name),
    ]


def dra_gpu_pod(name: str, on: str) -> list[Obj]:
    """A pod holding the gpu device of its allocated claim on ``on``."""
    claim = resource_claim(
        f"{name}-gpu",
        device_class="gpu.nvidia.com",
        allocated=(on, on, "gpu-0"),
        reserved_for=[name],
    )
    return [GPU, claim, claim_pod(name, on, claim=f"{name}-gpu")]


not_ready = dead_node


def cordoned_node(name: str, **kwargs: Any) -> Obj:
    return cordoned(node(name, **kwargs))


def unreachable(name: str, **kwargs: Any) -> Obj:
    return tainted(node(name, **kwargs), "node.kubernetes.io/unreachable", "NoExecute")


SECOND = [
    pytest.param(node, [], id="a second Ready provider: nothing"),
    pytest.param(not_ready, ["n1"], id="the second provider NotReady"),
    pytest.param(cordoned_node, ["n1"], id="the second provider cordoned"),
    pytest.param(unreachable, ["n1"], id="the second provider tainted unreachable"),
]


@pytest.mark.parametrize(("second", "expected"), SECOND)
def test_a_device_plugin_resource_with_one_healthy_provider_names_that_node(
    second: NodeMaker, expected: list[str]
) -> None:
    found = sole_providers(
        plugin_node("n1"), plugin_node("n2", second), *running_vm("gpu-fedora", "n1")
    )
    assert [f.resource.name for f in found] == expected


@pytest.mark.parametrize(("second", "expected"), SECOND)
def test_a_dra_claim_that_fits_on_one_healthy_node_names_that_node(
    second: NodeMaker, expected: list[str]
) -> None:
    found = sole_providers(*dra_node("n1"), *dra_node("n2", second), *running_dra_vm("win", "n1"))
    assert [f.resource.name for f in found] == expected
    for f in found:
        assert "what claim template vms/passthrough asks for exists only on n1" in f.message
        assert severity(f) is Severity.HIGH


@pytest.mark.parametrize(("second", "expected"), SECOND)
def test_a_pod_holding_a_gpu_is_stranded_by_its_sole_provider(
    second: NodeMaker, expected: list[str]
) -> None:
    found = sole_providers(
        plugin_node("n1", resource="nvidia.com/gpu"),
        plugin_node("n2", second, resource="nvidia.com/gpu"),
        gpu_pod("train-0", "n1"),
    )
    assert [f.resource.name for f in found] == expected
    for f in found:
        assert f.message == (
            "if n1 fails, ml/train-0 stops and cannot start anywhere else "
            "(nvidia.com/gpu exists only on n1)"
        )
        assert severity(f) is Severity.HIGH


@pytest.mark.parametrize(("second", "expected"), SECOND)
def test_a_pod_holding_a_dra_gpu_is_stranded_by_the_one_node_its_claim_fits(
    second: NodeMaker, expected: list[str]
) -> None:
    found = sole_providers(
        *dra_node("n1", type_="gpu"), *dra_node("n2", second, type_="gpu"), *dra_gpu_pod("a", "n1")
    )
    assert [f.resource.name for f in found] == expected
    for f in found:
        assert "ml/a stops" in f.message and "what claim ml/a-gpu asks for" in f.message


def test_a_resource_whose_only_provider_is_down_is_already_broken_and_not_predicted() -> None:
    assert sole_providers(plugin_node("n1", not_ready), *running_vm("gpu-fedora", "n1")) == []
    assert sole_providers(*dra_node("n1", not_ready), *running_dra_vm("win", "n1")) == []


def test_workloads_on_one_sole_provider_are_one_finding_in_an_on_call_engineers_words() -> None:
    found = sole_providers(
        plugin_node("omen2"),
        plugin_node("omen1", not_ready),
        *running_vm("gpu-fedora", "omen2"),
        *running_vm("rhel9-gpu-vm", "omen2"),
    )
    assert len(found) == 1
    (finding,) = found
    assert finding.resource == object_ref(NODE, "", "omen2")
    assert finding.message == (
        "if omen2 fails, vms/gpu-fedora and vms/rhel9-gpu-vm stop and cannot start anywhere else "
        f"({RTX_5090} exists only on omen2)"
    )
    assert finding.chain.flatten() == (
        f"{RTX_5090}: only omen2 provides it among healthy nodes; its other providers are not "
        "healthy: omen1 (NotReady since 2026-07-10 (Kubelet stopped posting node status.))",
        "VirtualMachine vms/gpu-fedora: Running on omen2",
        "VirtualMachine vms/rhel9-gpu-vm: Running on omen2",
    )
    assert "add a second healthy node that provides " + RTX_5090 in finding.remediation[0]
    assert finding.remediation[1].startswith("or accept the risk")


def test_a_node_sole_for_several_resources_and_kinds_of_workload_is_still_one_finding() -> None:
    found = sole_providers(
        node("n1", allocatable={RTX_5090: "1", "nvidia.com/gpu": "1"}),
        *running_vm("a", "n1"),
        vm("b", gpus=[RTX_5090], run_strategy="Always"),
        gpu_pod("train-0", "n1"),
    )
    assert len(found) == 1
    assert found[0].message == (
        "if n1 fails, ml/train-0 and vms/a stop and cannot start anywhere else, and vms/b, not "
        f"running now, cannot start anywhere else either ({RTX_5090} and nvidia.com/gpu exist "
        "only on n1)"
    )
    assert severity(found[0]) is Severity.HIGH


def test_only_vms_that_should_run_but_do_not_yet_are_medium() -> None:
    (finding,) = sole_providers(plugin_node("n1"), vm("b", gpus=[RTX_5090]))
    assert finding.message == (
        f"if n1 fails, vms/b cannot start anywhere else ({RTX_5090} exists only on n1)"
    )
    assert severity(finding) is Severity.MEDIUM


def test_a_vm_that_should_not_run_and_a_finished_pod_depend_on_nothing() -> None:
    assert (
        sole_providers(
            plugin_node("n1", resource="nvidia.com/gpu"),
            plugin_node("n2"),
            vm("halted", gpus=[RTX_5090], run_strategy="Halted"),
            gpu_pod("done", "n1", phase="Succeeded"),
        )
        == []
    )


def test_the_home_lab_predicts_tower1_and_omen1_but_not_the_already_dead_omen2() -> None:
    state, _ = load_state_objects([str(HOMELAB)])
    found = {f.resource.name: f for f in diagnose_all(state, NOW)[SOLE_PROVIDER]}
    assert sorted(found) == ["omen1", "tower1"]
    assert found["tower1"].message == (
        "if tower1 fails, vms/win11-gaming stops and cannot start anywhere else "
        f"({RTX_3090} exists only on tower1)"
    )


def test_the_declaration_is_audit_only() -> None:
    assert SOLE_PROVIDER_DIAGNOSIS.default_action is Action.AUDIT
    assert DIAGNOSES_BY_ID[SOLE_PROVIDER] is SOLE_PROVIDER_DIAGNOSIS


def test_the_cluster_policyreport_carries_the_prediction_for_the_node() -> None:
    state = state_of(plugin_node("n1"), *running_vm("gpu-fedora", "n1"))
    report = run_audit(Engine(), state, NOW)
    cluster = policy_reports(report)[0]
    assert cluster["kind"] == "ClusterPolicyReport"
    (result,) = [r for r in cluster["results"] if r["policy"] == SOLE_PROVIDER]
    assert (result["result"], result["severity"]) == ("warn", "high")
    assert result["resources"] == [{"apiVersion": "v1", "kind": "Node", "name": "n1"}]
    assert "if n1 fails, vms/gpu-fedora stops" in result["message"]

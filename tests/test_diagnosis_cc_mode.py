"""cc-mode-not-applied: a node's CC mode state failed, or is not the desired mode, with what
blocks it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

import pytest

from policies.diagnoses.cc_mode import CC_MODE_NOT_APPLIED_DIAGNOSIS
from policies.registry import diagnose_all
from policies.vocabulary.audit import DiagnosisFinding
from policies.vocabulary.verdicts import Severity
from tests.builders import Obj, cluster_policy, gpu_pod, kata_pod, node, pod, state_of, with_spec

NOW = datetime(2026, 10, 30, 12, tzinfo=UTC)
NODE = "h100-1"
CC, STATE = "nvidia.com/cc.mode", "nvidia.com/cc.mode.state"
CP = with_spec(cluster_policy(True, "container"), {"ccManager": {"enabled": True}})
KATA = kata_pod("inference", NODE, namespace="cc")


def cc_node(labels: Mapping[str, str], mode: str = "vm-passthrough") -> Obj:
    return node(NODE, labels={"nvidia.com/gpu.workload.config": mode, **labels})


def not_applied(*objects: Obj) -> list[DiagnosisFinding]:
    return diagnose_all(state_of(*objects), NOW).get(CC_MODE_NOT_APPLIED_DIAGNOSIS.id, [])


def test_a_failed_change_with_users_is_high_names_them_and_says_they_block_it() -> None:
    (finding,) = not_applied(cc_node({CC: "off", STATE: "failed"}), CP, KATA)
    assert finding.message == (
        f"{STATE}=failed on {NODE}: the CC manager could not apply mode off; 1 GPU user there: "
        "cc/inference (Kata pod: nvidia.com/pgpu: 1)"
    )
    assert finding.severity == Severity.HIGH
    assert finding.resource.kind == "Node" and finding.resource.name == NODE
    assert finding.chain.text == f"{NODE}: {CC} off, desired off, state failed"
    assert finding.chain.flatten() == (
        "GPU users hold the node's GPUs (they block the change; a retry resets them)",
        "cc/inference (Kata pod: nvidia.com/pgpu: 1)",
    )
    assert finding.remediation[1] == (
        f"stop or drain what uses {NODE}'s GPUs: cc/inference (Kata pod: nvidia.com/pgpu: 1)"
    )
    assert finding.remediation[2] == (
        f"then check: kubectl get node {NODE} --show-labels "
        f"(the change is done when {STATE} is off)"
    )


def test_a_failed_change_on_an_idle_node_has_the_default_severity_and_finds_the_managers_pod() -> (
    None
):
    manager = pod(
        "nvidia-cc-manager-x7k2p", NODE, namespace="gpu-operator", app="nvidia-cc-manager"
    )
    (finding,) = not_applied(cc_node({STATE: "failed"}), CP, manager)
    assert finding.message.endswith(
        "could not apply mode on (ClusterPolicy default); no GPU user runs there"
    )
    assert (
        finding.severity is None
        and CC_MODE_NOT_APPLIED_DIAGNOSIS.default_severity == Severity.MEDIUM
    )
    assert finding.chain.flatten() == ("no GPU user holds the node's GPUs",)
    assert finding.remediation == (
        "read why: kubectl logs -n gpu-operator nvidia-cc-manager-x7k2p",
        f"then check: kubectl get node {NODE} --show-labels "
        f"(the change is done when {STATE} is on)",
    )


def test_a_state_behind_the_desired_mode_names_the_users_that_block_it() -> None:
    (finding,) = not_applied(cc_node({CC: "on", STATE: "off"}), CP, KATA)
    assert finding.message == (
        f"{STATE}=off on {NODE}, desired on: the change is under way or blocked; 1 GPU user "
        "there: cc/inference (Kata pod: nvidia.com/pgpu: 1)"
    )
    assert finding.severity is None
    assert finding.remediation[0].startswith(
        "read why: kubectl get pods -A -l app=nvidia-cc-manager "
        f"--field-selector spec.nodeName={NODE}"
    )


@pytest.mark.parametrize(
    ("labels", "objects"),
    [
        pytest.param({CC: "on", STATE: "on"}, [CP, KATA], id="the desired mode applied"),
        pytest.param({STATE: "on"}, [CP], id="the default applied"),
        pytest.param({CC: "on"}, [CP], id="no state reported yet"),
        pytest.param(
            {CC: "on", STATE: "off"},
            [cluster_policy(True, "container")],
            id="no manager: the ClusterPolicy leaves it off",
        ),
    ],
)
def test_nothing_to_say(labels: Mapping[str, str], objects: list[Obj]) -> None:
    assert not_applied(cc_node(labels), *objects) == []


def test_a_container_node_is_judged_only_when_its_state_says_failed() -> None:
    assert not_applied(cc_node({CC: "on", STATE: "off"}, mode="container"), CP) == []
    (finding,) = not_applied(cc_node({CC: "on", STATE: "failed"}, mode="container"), CP)
    assert finding.message.startswith(f"{STATE}=failed on {NODE}")


def test_each_node_is_read_and_every_user_named_with_the_default_said_as_such() -> None:
    policy = with_spec(
        cluster_policy(True, "container"), {"ccManager": {"enabled": True, "defaultMode": "off"}}
    )
    fine = node("a-fine", labels={"nvidia.com/gpu.workload.config": "vm-passthrough", STATE: "off"})
    objects = [fine, cc_node({STATE: "on"}), policy, KATA, gpu_pod("train", NODE)]
    (finding,) = not_applied(*objects)
    assert finding.message == (
        f"{STATE}=on on {NODE}, desired off (ClusterPolicy default): the change is under way or "
        "blocked; 2 GPU users there: cc/inference (Kata pod: nvidia.com/pgpu: 1) and "
        "ml/train (nvidia.com/gpu: 1)"
    )
    assert (finding.resource.kind, finding.resource.namespace, finding.resource.name) == (
        "Node",
        "",
        NODE,
    )
    assert finding.chain.text == f"{NODE}: {CC} unset, desired off, state on"
    assert finding.remediation == (
        "read why: kubectl get pods -A -l app=nvidia-cc-manager "
        f"--field-selector spec.nodeName={NODE}, then kubectl logs of it",
        f"stop or drain what uses {NODE}'s GPUs: cc/inference (Kata pod: nvidia.com/pgpu: 1), "
        "ml/train (nvidia.com/gpu: 1)",
        f"then check: kubectl get node {NODE} --show-labels "
        f"(the change is done when {STATE} is off)",
    )


def test_a_container_node_listed_first_does_not_hide_a_failed_one() -> None:
    first = node(
        "a-container", labels={"nvidia.com/gpu.workload.config": "container", STATE: "off"}
    )
    (finding,) = not_applied(first, cc_node({CC: "on", STATE: "failed"}), CP)
    assert finding.resource.name == NODE

"""driver-upgrade-stuck: a failed driver upgrade, or one waiting on users it cannot free."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from policies.diagnoses.driver_upgrade import DRIVER_UPGRADE_STUCK_DIAGNOSIS
from policies.registry import diagnose_all
from policies.vocabulary.audit import DiagnosisFinding
from policies.vocabulary.verdicts import Severity
from tests.builders import Obj, dev_mount_pod, env_pod, gpu_pod, node, owned_by_daemonset, state_of

NOW = datetime(2026, 10, 30, 12, tzinfo=UTC)
STATE = "nvidia.com/gpu-driver-upgrade-state"
AGENT = owned_by_daemonset(env_pod("agent", "gpu-1", namespace="mon"))


def gpu_node(state: str) -> Obj:
    return node("gpu-1", labels={"nvidia.com/gpu.present": "true", STATE: state})


def stuck(*objects: Obj) -> list[DiagnosisFinding]:
    return diagnose_all(state_of(*objects), NOW).get(DRIVER_UPGRADE_STUCK_DIAGNOSIS.id, [])


def test_a_failed_upgrade_is_high_and_names_what_holds_the_gpus() -> None:
    (finding,) = stuck(gpu_node("upgrade-failed"), AGENT, gpu_pod("train", "gpu-1"))
    assert finding.message == (
        f"{STATE}=upgrade-failed on gpu-1: the driver upgrade stopped; 2 GPU users there: "
        "ml/train and mon/agent"
    )
    assert finding.severity == Severity.HIGH
    assert finding.chain.flatten() == ("mon/agent holds its GPUs (a DaemonSet's: drain leaves it)",)
    assert finding.remediation[1] == "stop what the controller cannot: mon/agent"
    assert finding.remediation[2].startswith(
        "then restart its driver pod: kubectl delete pod -A -l app=nvidia-driver-daemonset "
        "--field-selector spec.nodeName=gpu-1"
    )


def test_a_failed_upgrade_on_an_idle_node_says_so() -> None:
    (finding,) = stuck(gpu_node("upgrade-failed"))
    assert finding.message.endswith("the driver upgrade stopped; no GPU user there")
    assert finding.chain.flatten() == ("no GPU user the controller cannot free",)
    assert len(finding.remediation) == 2


@pytest.mark.parametrize(
    "state", ["wait-for-jobs-required", "pod-deletion-required", "drain-required"]
)
def test_a_wait_on_users_it_cannot_free_is_reported(state: str) -> None:
    (finding,) = stuck(gpu_node(state), dev_mount_pod("probe", "gpu-1", namespace="lab"))
    assert finding.message == (
        f"{STATE}={state} on gpu-1: the driver upgrade waits on GPU users it cannot free; "
        "1 GPU user there: lab/probe"
    )
    assert finding.chain.flatten() == ("lab/probe holds its GPUs (no GPU request)",)
    assert (
        finding.severity is None
        and DRIVER_UPGRADE_STUCK_DIAGNOSIS.default_severity == Severity.MEDIUM
    )


@pytest.mark.parametrize(
    ("state", "objects"),
    [
        pytest.param(
            "pod-deletion-required", [gpu_pod("train", "gpu-1")], id="waiting on a pod it deletes"
        ),
        pytest.param("upgrade-done", [AGENT], id="done"),
        pytest.param("cordon-required", [AGENT], id="a step that waits on nobody"),
        pytest.param("", [AGENT], id="no upgrade"),
    ],
)
def test_nothing_to_say(state: str, objects: list[Obj]) -> None:
    assert stuck(gpu_node(state), *objects) == []


def test_each_node_is_read_and_the_finding_says_where_and_what_to_do() -> None:
    done = node("a-done", labels={"nvidia.com/gpu.present": "true", STATE: "upgrade-done"})
    waiting = node(
        "a-wait", labels={"nvidia.com/gpu.present": "true", STATE: "pod-deletion-required"}
    )
    objects = [done, waiting, gpu_pod("t", "a-wait"), gpu_node("drain-required")]
    objects += [AGENT, dev_mount_pod("probe", "gpu-1", namespace="lab")]
    (finding,) = stuck(*objects)
    assert (finding.resource.kind, finding.resource.namespace, finding.resource.name) == (
        "Node",
        "",
        "gpu-1",
    )
    assert finding.chain.text == f"gpu-1: {STATE} drain-required"
    assert finding.remediation == (
        "read why: kubectl get events -n default --sort-by=.lastTimestamp | grep GPUDriverUpgrade",
        "stop what the controller cannot: lab/probe, mon/agent",
        "then restart its driver pod: kubectl delete pod -A -l app=nvidia-driver-daemonset "
        "--field-selector spec.nodeName=gpu-1; once it runs in sync, the controller moves the "
        "node on and uncordons it",
    )

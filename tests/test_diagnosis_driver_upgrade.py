"""driver-upgrade-stuck: a failed driver upgrade, or one waiting on users it cannot free."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from policies.cluster.coverage import Recording
from policies.cluster.kinds import POD
from policies.cluster.view import AuditView
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


def waiting_since(seconds: str) -> Obj:
    obj = gpu_node("wait-for-jobs-required")
    key = "nvidia.com/gpu-driver-upgrade-wait-for-pod-completion-start-time"
    obj["metadata"]["annotations"] = {key: seconds}
    return obj


TWO_HOURS_AGO = str(int(NOW.timestamp()) - 7200)
TEN_MINUTES_AGO = str(int(NOW.timestamp()) - 600)


def test_a_wait_for_jobs_longer_than_an_hour_is_reported_since_it_began() -> None:
    (finding,) = stuck(waiting_since(TWO_HOURS_AGO), gpu_pod("train", "gpu-1"))
    assert finding.message == (
        f"{STATE}=wait-for-jobs-required on gpu-1: the driver upgrade has waited for its jobs for "
        "more than 1 h; 1 GPU user there: ml/train"
    )
    assert finding.since == datetime(2026, 10, 30, 10, tzinfo=UTC)
    assert finding.chain.flatten() == ("no GPU user the controller cannot free",)


@pytest.mark.parametrize(
    "seconds", [TEN_MINUTES_AGO, "yesterday"], ids=["a short wait", "a value not in seconds"]
)
def test_a_short_or_unreadable_wait_is_left_to_the_controller(seconds: str) -> None:
    state = state_of(waiting_since(seconds), gpu_pod("train", "gpu-1"))
    assert diagnose_all(state, NOW).get(DRIVER_UPGRADE_STUCK_DIAGNOSIS.id, []) == []
    node = state.node("gpu-1")
    assert node is not None and node.labels[STATE] == "wait-for-jobs-required"


def test_a_failed_upgrade_has_no_wait_time() -> None:
    obj = waiting_since(TWO_HOURS_AGO)
    obj["metadata"]["labels"][STATE] = "upgrade-failed"
    (finding,) = stuck(obj)
    assert finding.since is None


def test_it_declares_the_gpu_users_it_asks_about_so_a_state_without_pods_leaves_it_out() -> None:
    """The examples hold no node mid-upgrade, so the coverage test never saw it ask: a node in
    an upgrade state asks who uses its GPUs, and without Pods that is unknown, not nobody."""
    recording = Recording(state_of(gpu_node("upgrade-failed"), gpu_pod("train", "gpu-1")))
    assert list(DRIVER_UPGRADE_STUCK_DIAGNOSIS.diagnose(AuditView(recording.view), NOW))
    assert POD in recording.kinds
    assert recording.kinds <= DRIVER_UPGRADE_STUCK_DIAGNOSIS.reads

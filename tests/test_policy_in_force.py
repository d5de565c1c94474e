"""Judging under each ClusterPolicy the GPU Operator may act on: the strictest answer stands,
the first (oldest) on a tie, and the message says which one was assumed and why."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from policies.cluster.gpu_operator import ClusterPolicyInfo
from policies.cluster.policy_in_force import Judge, under_each_policy_in_force
from policies.state.cluster import ClusterState
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import (
    Obj,
    cluster_policy,
    gpu_pod,
    node,
    request,
    state_of,
    vmi,
    with_labels,
)
from webhook.engine import Engine


def named(name: str, created: str, sandbox: bool = True) -> Obj:
    return {**cluster_policy(sandbox), "metadata": {"name": name, "creationTimestamp": created}}


OLD = named("old", "2025-01-01T00:00:00Z")
NEW = named("new", "2026-01-01T00:00:00Z")


def view(*objects: Obj, version: str = "") -> ClusterState:
    state = state_of(*objects)
    state.follow_gpu_operator_version(lambda: version)
    return state


def by_name(answers: dict[str, Sequence[Finding]]) -> Judge:
    def judge(policy: ClusterPolicyInfo | None) -> Sequence[Finding]:
        return answers.get(policy.name if policy is not None else "", ())

    return judge


WARN = (Finding("careful", Action.WARN),)
DENY = (Finding("no"),)


@pytest.mark.parametrize(
    ("objects", "version", "answers", "expected"),
    [
        ([], "", {"": DENY}, "no"),
        ([OLD], "", {"old": DENY}, "no"),
        ([OLD, NEW], "v26.7.0", {"old": (), "new": DENY}, None),
        ([OLD, NEW], "v26.7.0", {"old": WARN, "new": DENY}, "careful"),
        (
            [OLD, NEW],
            "",
            {"old": (), "new": DENY},
            "no (judged under ClusterPolicy new: the GPU Operator may act on any of 2, "
            "gpuOperator.version is not configured)",
        ),
        (
            [OLD, NEW],
            "26.3.1",
            {"old": WARN, "new": DENY},
            "no (judged under ClusterPolicy new: the GPU Operator may act on any of 2, "
            "GPU Operator 26.3.1 keeps its choice in memory)",
        ),
        (
            [OLD, NEW],
            "",
            {"old": DENY, "new": DENY},
            "no (judged under ClusterPolicy old: the GPU Operator may act on any of 2, "
            "gpuOperator.version is not configured)",
        ),
        ([OLD, NEW], "", {}, None),
    ],
    ids=[
        "no ClusterPolicy: judged under none",
        "one: judged under it, said nothing of",
        "26.7: the oldest only, though a younger one would deny",
        "26.7: the oldest's warning, not a younger one's denial",
        "unknown: the one that denies",
        "26.3: a denial beats a warning",
        "a tie: the oldest",
        "none finds anything",
    ],
)
def test_the_strictest_answer_under_any_cluster_policy_in_force_stands(
    objects: list[Obj],
    version: str,
    answers: dict[str, Sequence[Finding]],
    expected: str | None,
) -> None:
    found = under_each_policy_in_force(view(*objects, version=version), by_name(answers))
    assert [f.message for f in found] == ([] if expected is None else [expected])


# --- each deny rule that reads the ClusterPolicy judges under every candidate --------------------

WORKLOAD = "nvidia.com/gpu.workload.config"
VGPU_CONFIG = "nvidia.com/vgpu.config"


def policy_named(name: str, created: str, default: str) -> Obj:
    return {
        **cluster_policy(True, default),
        "metadata": {"name": name, "creationTimestamp": created},
    }


def gpu_node(labels: dict[str, str]) -> Obj:
    return node("gpu-1", labels={"nvidia.com/gpu.present": "true", **labels})


def without(obj: Obj, key: str) -> Obj:
    return with_labels(obj, {key: None})


CONTAINER_NODE = gpu_node({WORKLOAD: "container"})
PASSTHROUGH_NODE = gpu_node({WORKLOAD: "vm-passthrough"})
VGPU_NODE = gpu_node({VGPU_CONFIG: "A10-12Q"})


@pytest.mark.parametrize(
    ("rule", "defaults", "old", "new", "users"),
    [
        (
            "workload-switch-with-gpu-pods",
            ("container", "vm-passthrough"),
            CONTAINER_NODE,
            without(CONTAINER_NODE, WORKLOAD),
            [gpu_pod("train", "gpu-1")],
        ),
        (
            "passthrough-to-container-with-live-vms",
            ("vm-passthrough", "container"),
            PASSTHROUGH_NODE,
            without(PASSTHROUGH_NODE, WORKLOAD),
            [vmi("win11", node_name="gpu-1", gpus=["nvidia.com/GA102_GEFORCE_RTX_3090"])],
        ),
        (
            "vgpu-reconfig-with-live-vms",
            ("container", "vm-vgpu"),
            VGPU_NODE,
            with_labels(VGPU_NODE, {VGPU_CONFIG: "A10-24Q"}),
            [vmi("desktop", node_name="gpu-1", gpus=["nvidia.com/NVIDIA_A10-12Q"])],
        ),
    ],
    ids=["workload switch", "passthrough to container", "vGPU reconfiguration"],
)
@pytest.mark.parametrize(("version", "denied"), [("v26.7.0", False), ("26.3.1", True), ("", True)])
def test_a_deny_rule_that_reads_the_cluster_policy_denies_if_any_candidate_would(
    rule: str,
    defaults: tuple[str, str],
    old: Obj,
    new: Obj,
    users: list[Obj],
    version: str,
    denied: bool,
) -> None:
    """The oldest ClusterPolicy's default lets the change through; a younger one's does not."""
    older = policy_named("cluster-policy", "2025-01-01T00:00:00Z", defaults[0])
    younger = policy_named("bootstrap-policy", "2026-01-01T00:00:00Z", defaults[1])
    state = view(older, younger, old, *users, version=version)
    decision = Engine().evaluate(request("UPDATE", new, old), state)
    denials = [v for v in decision.denials if v.policy == rule]
    assert bool(denials) is denied
    if denied:
        assert "judged under ClusterPolicy bootstrap-policy" in denials[0].message

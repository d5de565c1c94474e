"""mig-reconfig-with-gpu-pods: a MIG layout change under running GPU pods."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from policies.cluster.workload import MIG_CONFIG_LABEL
from policies.rules.mig_reconfig import POLICY, check
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import (
    Obj,
    gpu_pod,
    judged_by,
    node,
    owned_by_daemonset,
    pod,
    request,
    state_of,
    with_labels,
)
from webhook.engine import Engine

NODE = "a100-1"
TRAIN = gpu_pod("train", NODE, "nvidia.com/mig-1g.10gb")


def mig_change(old: str | None, new: str | None) -> tuple[Obj, Obj]:
    base = node(NODE, allocatable={"nvidia.com/mig-1g.10gb": "7"})
    return with_labels(base, {MIG_CONFIG_LABEL: new}), with_labels(base, {MIG_CONFIG_LABEL: old})


def findings(objects: Sequence[Obj], old: str | None, new: str | None) -> list[Finding]:
    review = request("UPDATE", *mig_change(old, new))
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


@pytest.mark.parametrize(
    ("objects", "old", "new"),
    [
        pytest.param([TRAIN], "all-1g.10gb", "all-3g.40gb", id="a changed layout under a MIG pod"),
        pytest.param([TRAIN], None, "all-1g.10gb", id="a layout set for the first time"),
        pytest.param([TRAIN], "all-1g.10gb", None, id="a layout label removed"),
        pytest.param(
            [gpu_pod("train", NODE)], "all-disabled", "all-1g.10gb", id="a whole-GPU pod counts"
        ),
        pytest.param(
            [gpu_pod("train", NODE, terminating=True)],
            "all-disabled",
            "all-1g.10gb",
            id="a terminating GPU pod still holds its GPU",
        ),
    ],
)
def test_reconfiguring_mig_under_gpu_pods_is_denied(
    objects: list[Obj], old: str | None, new: str | None
) -> None:
    assert len(findings(objects, old, new)) == 1
    assert POLICY.default_action == Action.DENY


@pytest.mark.parametrize(
    ("objects", "old", "new"),
    [
        pytest.param([], "all-1g.10gb", "all-3g.40gb", id="an idle node is reconfigured freely"),
        pytest.param(
            [gpu_pod("train", NODE, phase="Succeeded")],
            "all-1g.10gb",
            "all-3g.40gb",
            id="a finished GPU pod holds nothing",
        ),
        pytest.param(
            [gpu_pod("train", "a100-2")], "all-1g.10gb", "all-3g.40gb", id="GPU pods elsewhere"
        ),
        pytest.param(
            [pod("web", NODE, limits={"cpu": "1"})],
            "all-1g.10gb",
            "all-3g.40gb",
            id="pods without GPUs",
        ),
        pytest.param([TRAIN], "all-1g.10gb", "all-1g.10gb", id="an unchanged layout"),
        pytest.param([TRAIN], None, None, id="an update that does not touch the label"),
    ],
)
def test_everything_else_is_allowed(objects: list[Obj], old: str | None, new: str | None) -> None:
    assert findings(objects, old, new) == []


def test_the_mig_manager_bookkeeping_label_is_not_a_reconfiguration() -> None:
    base = node(NODE, labels={MIG_CONFIG_LABEL: "all-1g.10gb"})
    review = request("UPDATE", with_labels(base, {"nvidia.com/mig.config.state": "success"}), base)
    assert not check(review, state_of(TRAIN))


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        pytest.param("all-1g.10gb", "all-3g.40gb", "all-1g.10gb -> all-3g.40gb", id="changed"),
        pytest.param(None, "all-1g.10gb", "set to all-1g.10gb", id="set"),
        pytest.param("all-1g.10gb", None, "removed (was all-1g.10gb)", id="removed"),
    ],
)
def test_the_message_names_the_change_the_node_the_pods_and_the_safe_step(
    old: str | None, new: str | None, said: str
) -> None:
    (finding,) = findings([TRAIN, gpu_pod("infer", NODE)], old, new)
    assert finding.message.startswith(
        f"{MIG_CONFIG_LABEL} {said} on {NODE} while 2 GPU pods run there (ml/infer and ml/train)"
    )
    assert "the MIG manager needs idle GPUs" in finding.message
    assert finding.message.endswith(f"Cordon {NODE} and drain them first.")
    assert len(f"[{POLICY.id}] {finding.message}") <= 256
    assert finding.confirm_pods_on == NODE
    assert finding.remediation[:2] == (
        f"kubectl cordon {NODE}",
        "drain or wait for: ml/infer, ml/train",
    )


def test_the_remediation_reapplies_the_change_after_the_drain() -> None:
    (finding,) = findings([TRAIN], "all-1g.10gb", None)
    assert f"kubectl label node {NODE} {MIG_CONFIG_LABEL}-" in finding.remediation
    (finding,) = findings([TRAIN], None, "all-1g.10gb")
    assert (
        f"kubectl label node {NODE} {MIG_CONFIG_LABEL}=all-1g.10gb --overwrite"
        in finding.remediation
    )


@pytest.mark.parametrize(
    ("operation", "sub_resource", "applies"),
    [
        pytest.param("UPDATE", "", True, id="a node update is judged"),
        pytest.param("UPDATE", "status", True, id="a label write through nodes/status is judged"),
        pytest.param("DELETE", "", False, id="a node delete is out of scope"),
    ],
)
def test_scope(operation: str, sub_resource: str, applies: bool) -> None:
    new_node, old_node = mig_change("a", "b")
    obj = None if operation == "DELETE" else new_node
    assert (
        judged_by(POLICY, request(operation, obj, old_node, sub_resource=sub_resource)) is applies
    )


def test_the_engine_denies_by_default() -> None:
    decision = Engine().evaluate(
        request("UPDATE", *mig_change("all-1g.10gb", "all-3g.40gb")), state_of(TRAIN)
    )
    assert [(v.policy, v.action) for v in decision.verdicts] == [(POLICY.id, Action.DENY)]
    assert decision.nodes_to_confirm() == [NODE]


@pytest.mark.parametrize(
    ("pods", "said"),
    [
        pytest.param([TRAIN], "while 1 GPU pod runs there (ml/train)", id="one pod runs"),
        pytest.param(
            [TRAIN, gpu_pod("infer", NODE)],
            "while 2 GPU pods run there (ml/infer and ml/train)",
            id="two pods run",
        ),
    ],
)
def test_the_message_counts_the_pods_in_a_sentence_that_agrees(pods: list[Obj], said: str) -> None:
    (finding,) = findings(pods, "all-1g.10gb", "all-3g.40gb")
    assert said in finding.message


@pytest.mark.parametrize(
    ("obj", "old"),
    [
        pytest.param(mig_change(None, "all-1g.10gb")[0], None, id="a node with no old object"),
        pytest.param(None, mig_change("all-1g.10gb", None)[1], id="a node with no new object"),
    ],
)
def test_a_request_without_both_the_old_and_the_new_node_is_not_a_change(
    obj: Obj | None, old: Obj | None
) -> None:
    assert check(request("UPDATE", obj, old), state_of(TRAIN)) == ()


@pytest.mark.parametrize(
    ("labels", "flagged"),
    [({MIG_CONFIG_LABEL: "all-1g.10gb"}, True), ({}, False)],
    ids=["a MIG configuration over a GPU pod", "none"],
)
def test_a_node_created_with_a_mig_configuration_is_judged_against_the_pods_bound_to_its_name(
    labels: dict[str, str], flagged: bool
) -> None:
    created = request("CREATE", node(NODE, labels=labels))
    assert bool(check(created, state_of(TRAIN))) is flagged


def test_a_daemonset_gpu_pod_is_named_as_one_a_drain_leaves() -> None:
    agent = owned_by_daemonset(gpu_pod("agent", NODE, namespace="mon"))
    (finding,) = findings([TRAIN, agent], "all-1g.10gb", "all-3g.40gb")
    assert finding.remediation == (
        f"kubectl cordon {NODE}",
        "drain or wait for: ml/train",
        "drain leaves DaemonSet pods mon/agent: give their DaemonSet a nodeSelector or affinity "
        f"{NODE} does not match, and wait for them to go",
        f"kubectl label node {NODE} {MIG_CONFIG_LABEL}=all-3g.40gb --overwrite",
        f"kubectl uncordon {NODE} once nvidia.com/mig.config.state=success",
    )

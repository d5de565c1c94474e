"""workload-label-invalid: a workload label the GPU Operator does not know, and so ignores."""

from __future__ import annotations

from typing import Any

import pytest

from policies.cluster.workload import WORKLOAD_LABEL
from policies.rules.workload_label_invalid import POLICY, audit, check, meant
from policies.vocabulary.requests import ObjectRef
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import (
    Obj,
    cluster_policy,
    gpu_pod,
    judged_by,
    node,
    request,
    state_of,
    with_labels,
)
from webhook.engine import Engine

NODE = "omen1"
GPU_NODE = node(NODE, labels={"nvidia.com/gpu.present": "true"})


def relabel(old: str | None, new: str | None, extra: dict[str, str | None] | None = None) -> Any:
    """The update of the GPU node from one workload label value to another (None: absent)."""
    before = with_labels(GPU_NODE, {WORKLOAD_LABEL: old})
    after = with_labels(before, {WORKLOAD_LABEL: new, **(extra or {})})
    return request("UPDATE", after, before)


def findings(old: str | None, new: str | None, *objects: Obj, **kw: Any) -> list[Finding]:
    review = relabel(old, new, **kw)
    assert judged_by(POLICY, review)
    return list(check(review, state_of(GPU_NODE, *objects)))


@pytest.mark.parametrize(
    ("value", "suggestion"),
    [
        pytest.param("vm_passthrough", "vm-passthrough", id="an underscore for the hyphen"),
        pytest.param("VM-Passthrough", "vm-passthrough", id="the right mode in another case"),
        pytest.param("vm passthrough", "vm-passthrough", id="a space for the hyphen"),
        pytest.param("vm-passthru", "vm-passthrough", id="a shortened mode"),
        pytest.param("passthrough", "vm-passthrough", id="the mode without its vm- prefix"),
        pytest.param("vgpu", "vm-vgpu", id="vgpu without its prefix"),
        pytest.param("containers", "container", id="a plural"),
        pytest.param(" container", "container", id="a stray space"),
    ],
)
def test_a_misspelt_mode_is_warned_about_with_the_mode_it_most_likely_meant(
    value: str, suggestion: str
) -> None:
    (finding,) = findings("container", value, cluster_policy())
    assert finding.message.startswith(
        f"{WORKLOAD_LABEL}={value!r} on {NODE} is not a mode "
        "(container, vm-passthrough, vm-vgpu): the GPU Operator ignores it"
    )
    assert finding.message.endswith(f"Did you mean {suggestion}?")
    assert finding.remediation == (
        f"kubectl label node {NODE} {WORKLOAD_LABEL}={suggestion} --overwrite",
        f"or, for the default mode on purpose: kubectl label node {NODE} {WORKLOAD_LABEL}-",
    )
    assert len(f"[{POLICY.id}] {finding.message}") <= 256


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("", id="an empty value"),
        pytest.param("kata", id="a runtime, not a mode"),
        pytest.param("vfio-pci", id="a driver, not a mode"),
    ],
)
def test_a_value_like_no_mode_is_warned_about_with_only_the_way_back_to_the_default(
    value: str,
) -> None:
    (finding,) = findings(None, value, cluster_policy())
    assert "Did you mean" not in finding.message
    assert finding.remediation == (f"kubectl label node {NODE} {WORKLOAD_LABEL}-",)


@pytest.mark.parametrize(
    ("objects", "fallback"),
    [
        pytest.param(
            [cluster_policy(default_workload="vm-passthrough")],
            "vm-passthrough (ClusterPolicy default)",
            id="the ClusterPolicy's default",
        ),
        pytest.param(
            [cluster_policy(sandbox=False)],
            "container (sandbox workloads disabled)",
            id="container while sandbox workloads are off",
        ),
        pytest.param([], "container (no valid label)", id="container with no ClusterPolicy known"),
    ],
)
def test_the_message_names_the_mode_the_operator_runs_instead(
    objects: list[Obj], fallback: str
) -> None:
    (finding,) = findings("container", "vm_vgpu", *objects)
    assert f"the GPU Operator ignores it and runs {NODE} as {fallback}." in finding.message


@pytest.mark.parametrize(
    ("old", "new", "extra"),
    [
        pytest.param(None, "container", None, id="container set"),
        pytest.param("container", "vm-passthrough", None, id="vm-passthrough set"),
        pytest.param("vm-passthrough", "vm-vgpu", None, id="vm-vgpu set"),
        pytest.param("vm-passthrough", None, None, id="the label removed: the default on purpose"),
        pytest.param(
            "vm_passthrough",
            "vm_passthrough",
            {"team": "ml"},
            id="an invalid value already there is the audit's, not every node update's",
        ),
        pytest.param("container", "container", {"team": "ml"}, id="an update of another label"),
    ],
)
def test_valid_modes_removals_and_other_changes_are_allowed(
    old: str | None, new: str | None, extra: dict[str, str | None] | None
) -> None:
    assert findings(old, new, cluster_policy(), extra=extra) == []


def test_a_node_without_a_gpu_is_judged_the_same_the_label_is_wrong_anywhere() -> None:
    cpu_node = node("cpu-1")
    review = request("UPDATE", with_labels(cpu_node, {WORKLOAD_LABEL: "passthrough"}), cpu_node)
    assert len(check(review, state_of(cpu_node))) == 1


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("vm-passthrough", "vm-passthrough"),
        ("Vm_VGPU", "vm-vgpu"),
        ("contianer", "container"),
        ("", None),
        ("nvidia", None),
    ],
)
def test_meant_maps_near_misses_to_a_mode_and_nothing_else_to_one(
    value: str, expected: str | None
) -> None:
    assert meant(value) == expected


def test_the_audit_reports_every_node_whose_label_names_no_mode() -> None:
    state = state_of(
        cluster_policy(),
        node("omen1", labels={WORKLOAD_LABEL: "vm_passthrough"}),
        node("omen2", labels={WORKLOAD_LABEL: "vm-passthrough"}),
        node("omen3", labels={WORKLOAD_LABEL: ""}),
        node("omen4"),
    )
    found = [(ref, finding.message.split(" is not")[0]) for ref, finding in audit(state)]
    assert found == [
        (ObjectRef("v1", "Node", "", "omen1"), f"{WORKLOAD_LABEL}='vm_passthrough' on omen1"),
        (ObjectRef("v1", "Node", "", "omen3"), f"{WORKLOAD_LABEL}='' on omen3"),
    ]


@pytest.mark.parametrize(
    ("operation", "sub_resource", "applies"),
    [
        pytest.param("UPDATE", "", True, id="a node update is judged"),
        pytest.param("UPDATE", "status", True, id="a label write through nodes/status is judged"),
        pytest.param("CREATE", "", True, id="a node create is judged"),
        pytest.param("DELETE", "", False, id="a node delete is out of scope"),
    ],
)
def test_scope(operation: str, sub_resource: str, applies: bool) -> None:
    review = relabel("container", "vm_passthrough")
    obj = None if operation == "DELETE" else review.obj
    old = None if operation == "CREATE" else review.old
    assert judged_by(POLICY, request(operation, obj, old, sub_resource=sub_resource)) is applies


def test_the_engine_warns_by_default_and_lets_the_label_through() -> None:
    decision = Engine().evaluate(relabel("container", "VM-Passthrough"), state_of(GPU_NODE))
    assert [(v.policy, v.action) for v in decision.verdicts] == [(POLICY.id, Action.WARN)]
    assert decision.allowed


def test_under_gpu_pods_the_invalid_label_is_only_warned_about_the_mode_does_not_change() -> None:
    """A typo away from container, with CUDA pods there: the operator keeps the node container,
    so the switch policy rightly stays silent and this one says the label did nothing."""
    state = state_of(GPU_NODE, cluster_policy(), gpu_pod("train", NODE))
    decision = Engine().evaluate(relabel("container", "vm_passthrough"), state)
    assert [(v.policy, v.action) for v in decision.verdicts] == [(POLICY.id, Action.WARN)]


def test_an_update_without_its_old_node_is_not_judged() -> None:
    new = with_labels(node(NODE), {WORKLOAD_LABEL: "vm_passthrough"})
    assert check(request("UPDATE", new, None), state_of(cluster_policy())) == ()


@pytest.mark.parametrize(
    ("value", "flagged"), [("vm_passthrough", True), ("container", False)], ids=["typo", "valid"]
)
def test_a_node_created_with_a_workload_label_is_judged(value: str, flagged: bool) -> None:
    created = request("CREATE", with_labels(GPU_NODE, {WORKLOAD_LABEL: value}))
    assert bool(check(created, state_of(cluster_policy()))) is flagged

"""cc-mode-change-with-gpu-users: a node's confidential computing mode changed under GPU users."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from policies.rules.cc_mode import POLICY, check
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import (
    Obj,
    cluster_policy,
    env_pod,
    gpu_pod,
    judged_by,
    kata_pod,
    node,
    owned_by_daemonset,
    owned_vmi,
    request,
    state_of,
    with_labels,
    with_spec,
)
from webhook.engine import Engine

NODE = "h100-1"
PT = "vm-passthrough"
H100 = "nvidia.com/GH100_H100_PCIE"
WORKLOAD = "nvidia.com/gpu.workload.config"
CC = "nvidia.com/cc.mode"
STATE = "nvidia.com/cc.mode.state"
CC_DEPLOY = "nvidia.com/gpu.deploy.cc-manager"


def policy(enabled: bool = True, default: str | None = None, **sandbox: Any) -> Obj:
    cc: dict[str, Any] = {"enabled": enabled}
    if default is not None:
        cc["defaultMode"] = default
    obj = with_spec(
        cluster_policy(True, sandbox.pop("default_workload", "container")), {"ccManager": cc}
    )
    obj["spec"]["sandboxWorkloads"].update(sandbox)
    return obj


CP = policy()
KATA = kata_pod("inference", NODE, namespace="cc")
VMI = owned_vmi("trainer", NODE, gpus=[H100])
IN_FORCE = {WORKLOAD: PT, CC: "on", STATE: "on"}

Labels = Mapping[str, str | None]


def gpu_node(name: str = NODE, labels: Labels | None = None) -> Obj:
    return with_labels(
        node(name, labels={"nvidia.com/gpu.present": "true"}), dict(labels or IN_FORCE)
    )


def relabel(old: Labels, new: Labels) -> AdmissionRequest:
    before = gpu_node(labels=old)
    return request("UPDATE", with_labels(before, new), before)


def findings(review: AdmissionRequest, objects: Sequence[Obj]) -> list[Finding]:
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


def gpu_cluster() -> Obj:
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "GPUCluster",
        "metadata": {"name": "gpu-cluster"},
        "spec": {},
    }


@pytest.mark.parametrize(
    ("old", "new", "objects", "what"),
    [
        pytest.param(
            IN_FORCE, {CC: "off"}, [CP, KATA], f"{CC} on -> off", id="on to off under a Kata pod"
        ),
        pytest.param(
            {WORKLOAD: PT, STATE: "on"},
            {CC: "ppcie"},
            [CP, VMI],
            f"{CC} unset -> ppcie",
            id="the label set to another mode than the default under a VMI",
        ),
        pytest.param(
            {WORKLOAD: PT, CC: "off", STATE: "off"},
            {CC: None},
            [CP, env_pod("nb", NODE)],
            f"{CC} off removed (default on)",
            id="the label removed, the default differs, under a pod reaching GPUs unasked",
        ),
        pytest.param(
            IN_FORCE,
            {CC: "off"},
            [KATA],
            f"{CC} on -> off",
            id="no ClusterPolicy known: the manager is taken to run",
        ),
        pytest.param(
            {**IN_FORCE, WORKLOAD: "vm-vgpu"},
            {CC: "off"},
            [CP, VMI],
            f"{CC} on -> off",
            id="a vm-vgpu node runs the manager too",
        ),
        pytest.param(
            {WORKLOAD: PT, CC: "on", STATE: "off", CC_DEPLOY: "false"},
            {CC_DEPLOY: "true"},
            [CP, VMI],
            "the CC manager arriving would apply mode on (state off)",
            id="the manager's deploy label back to true where the state differs",
        ),
        pytest.param(
            {WORKLOAD: PT, CC: "on", "nvidia.com/gpu.deploy.operands": "false"},
            {"nvidia.com/gpu.deploy.operands": "true"},
            [CP, VMI],
            "the CC manager arriving would apply mode on (state unknown)",
            id="the operands back on a node whose state is unknown",
        ),
        pytest.param(
            IN_FORCE,
            {CC: "off"},
            [policy(default="off"), gpu_pod("train", NODE)],
            f"{CC} on -> off",
            id="a pod with nvidia.com/gpu",
        ),
        pytest.param(
            {CC: "on", STATE: "on"},
            {CC: "off"},
            [policy(default_workload=PT), VMI],
            f"{CC} on -> off",
            id="a node passthrough by the ClusterPolicy's default workload",
        ),
        pytest.param(
            IN_FORCE,
            {CC: "off"},
            [CP, gpu_cluster(), KATA],
            f"{CC} on -> off",
            id="a GPUCluster beside the ClusterPolicy: the label is read as the ClusterPolicy does",
        ),
    ],
)
def test_a_mode_change_under_gpu_users_is_denied(
    old: Labels, new: Labels, objects: list[Obj], what: str
) -> None:
    (finding,) = findings(relabel(old, new), [gpu_node(labels=old), *objects])
    assert finding.message.startswith(f"{what} on {NODE} while 1 GPU user runs there (")
    assert finding.confirm_pods_on == NODE


@pytest.mark.parametrize(
    ("old", "new", "objects"),
    [
        pytest.param(IN_FORCE, {CC: "off"}, [CP], id="an idle node"),
        pytest.param(
            IN_FORCE,
            {CC: "off"},
            [CP, owned_vmi("t", "h100-2", gpus=[H100])],
            id="users on another node",
        ),
        pytest.param(IN_FORCE, {"team": "a"}, [CP, KATA], id="another label"),
        pytest.param(IN_FORCE, {STATE: "off"}, [CP, KATA], id="the manager's own state label"),
        pytest.param(
            IN_FORCE, {CC: None}, [CP, KATA], id="the label removed where the default is the same"
        ),
        pytest.param(
            {WORKLOAD: PT, STATE: "on"},
            {CC: "on"},
            [CP, KATA],
            id="the label set to the default it had",
        ),
        pytest.param(
            {**IN_FORCE, WORKLOAD: "container"},
            {CC: "off"},
            [CP, gpu_pod("t", NODE)],
            id="a container node",
        ),
        pytest.param(
            IN_FORCE, {CC: "off"}, [policy(enabled=False), KATA], id="the manager disabled"
        ),
        pytest.param(
            {**IN_FORCE, CC_DEPLOY: "false"}, {CC: "off"}, [CP, KATA], id="the manager pinned off"
        ),
        pytest.param(
            {**IN_FORCE, "nvidia.com/gpu.deploy.operands": "false"},
            {CC: "off"},
            [CP, KATA],
            id="every operand off",
        ),
        pytest.param(
            {**IN_FORCE, WORKLOAD: "vm-vgpu"},
            {CC: "off", WORKLOAD: PT},
            [CP, VMI],
            id="a workload mode switch at once: the switch's own policies judge it",
        ),
        pytest.param(
            IN_FORCE, {CC: "off"}, [gpu_cluster(), KATA], id="a GPUCluster and no ClusterPolicy"
        ),
        pytest.param(
            {WORKLOAD: PT, CC: "on", STATE: "on", CC_DEPLOY: "false"},
            {CC_DEPLOY: "true"},
            [CP, VMI],
            id="the manager arriving where the state is already the desired mode",
        ),
        pytest.param(
            IN_FORCE,
            {CC: "off"},
            [CP, kata_pod("done", NODE, phase="Succeeded")],
            id="a finished Kata pod",
        ),
        pytest.param(
            {WORKLOAD: PT, STATE: "off"},
            {CC: "off"},
            [policy(default="off"), KATA],
            id="the label set to the mode the ClusterPolicy's default already gives",
        ),
    ],
)
def test_everything_else_is_allowed(old: Labels, new: Labels, objects: list[Obj]) -> None:
    assert findings(relabel(old, new), [gpu_node(labels=old), *objects]) == []


def test_the_message_names_every_user_and_the_remediation_is_the_safe_order() -> None:
    agent = owned_by_daemonset(env_pod("agent", NODE, namespace="mon"))
    objects = [gpu_node(), CP, VMI, KATA, gpu_pod("train", NODE), agent]
    (finding,) = findings(relabel(IN_FORCE, {CC: "off"}), objects)
    assert finding.message == (
        f"{CC} on -> off on {NODE} while 4 GPU users run there (vms/trainer ({H100}), "
        "cc/inference (Kata pod: nvidia.com/pgpu: 1), ml/train (nvidia.com/gpu: 1) and 1 more): "
        "the CC manager resets its GPUs and drains no user workload. Stop them first."
    )
    assert finding.remediation == (
        f"kubectl cordon {NODE}",
        "virtctl stop trainer -n vms",
        "kubectl delete pod inference -n cc",
        "drain or wait for: ml/train",
        "drain leaves DaemonSet pods mon/agent: give their DaemonSet a nodeSelector or affinity "
        f"{NODE} does not match, and wait for them to go",
        f"kubectl label node {NODE} {CC}=off --overwrite",
        f"wait for {STATE}=off on {NODE}, then kubectl uncordon {NODE}",
    )


def test_the_manager_arriving_is_stopped_before_the_change_is_applied() -> None:
    old = {WORKLOAD: PT, CC: "on", STATE: "off", CC_DEPLOY: "false"}
    (finding,) = findings(relabel(old, {CC_DEPLOY: "true"}), [gpu_node(labels=old), CP, VMI])
    assert finding.remediation == (
        f"kubectl cordon {NODE}",
        "virtctl stop trainer -n vms",
        "then apply this change",
        f"wait for {STATE}=on on {NODE}, then kubectl uncordon {NODE}",
    )


def test_removing_the_label_is_undone_with_a_minus() -> None:
    old = {WORKLOAD: PT, CC: "off", STATE: "off"}
    (finding,) = findings(relabel(old, {CC: None}), [gpu_node(labels=old), CP, KATA])
    assert finding.remediation[-2:] == (
        f"kubectl label node {NODE} {CC}-",
        f"wait for {STATE}=on on {NODE}, then kubectl uncordon {NODE}",
    )


# --- the ClusterPolicy ----------------------------------------------------------------------------


def cp_change(old: Obj, new: Obj) -> AdmissionRequest:
    return request("UPDATE", new, old)


UNLABELLED = gpu_node(labels={WORKLOAD: PT, STATE: "on"})
OTHER = gpu_node("h100-2", {WORKLOAD: PT, STATE: "on"})


@pytest.mark.parametrize(
    ("old", "new", "objects", "what"),
    [
        pytest.param(
            CP,
            policy(default="off"),
            [UNLABELLED, KATA],
            "ccManager.defaultMode on -> off",
            id="the default moved",
        ),
        pytest.param(
            cluster_policy(True, "container"),
            CP,
            [gpu_node(labels={WORKLOAD: PT}), VMI],
            "ccManager.enabled true (defaultMode on)",
            id="the manager enabled where the state is unknown",
        ),
        pytest.param(
            policy(default="off"),
            CP,
            [gpu_node(labels={WORKLOAD: PT, STATE: "off"}), KATA],
            "ccManager.defaultMode off -> on",
            id="the default moved back to on",
        ),
        pytest.param(
            policy(default_workload=PT, default="on"),
            policy(default_workload=PT, default="off"),
            [gpu_node(labels={STATE: "on"}), VMI],
            "ccManager.defaultMode on -> off",
            id="a node passthrough by the default workload",
        ),
    ],
)
def test_a_clusterpolicy_change_reaching_nodes_with_users_is_denied(
    old: Obj, new: Obj, objects: list[Obj], what: str
) -> None:
    (finding,) = findings(cp_change(old, new), objects)
    assert finding.message.startswith(f"{what} on {NODE} while 1 GPU user runs there (")
    assert finding.confirm_pods_on == NODE


@pytest.mark.parametrize(
    ("old", "new", "objects"),
    [
        pytest.param(
            CP, policy(default="off"), [gpu_node(), KATA], id="the node has its own label"
        ),
        pytest.param(CP, policy(default="off"), [UNLABELLED, OTHER], id="no user there"),
        pytest.param(
            CP, policy(enabled=False, default="off"), [UNLABELLED, KATA], id="the manager disabled"
        ),
        pytest.param(
            policy(default="on"), CP, [UNLABELLED, KATA], id="on written out is the default on"
        ),
        pytest.param(
            CP,
            with_spec(CP, {"driver": {"version": "580"}}),
            [UNLABELLED, KATA],
            id="another setting",
        ),
        pytest.param(
            cluster_policy(True, "container"),
            CP,
            [UNLABELLED, KATA],
            id="the manager enabled where the state is already the default",
        ),
        pytest.param(
            CP,
            policy(default="off"),
            [gpu_node(labels={WORKLOAD: "container"}), gpu_pod("t", NODE)],
            id="a container node",
        ),
        pytest.param(
            policy(default="on"),
            policy(default="off", default_workload=PT),
            [gpu_node(labels={STATE: "on"}), VMI],
            id="a node the same change moves into a VM mode",
        ),
    ],
)
def test_other_clusterpolicy_changes_are_allowed(old: Obj, new: Obj, objects: list[Obj]) -> None:
    assert findings(cp_change(old, new), objects) == []


def test_each_node_reached_gets_its_finding_with_the_pin_to_keep_its_mode() -> None:
    other = gpu_node("h100-2", {WORKLOAD: "vm-vgpu", STATE: "on"})
    objects = [
        UNLABELLED,
        other,
        KATA,
        owned_vmi("desk", "h100-2", gpus=["nvidia.com/NVIDIA_A10-12Q"]),
    ]
    first, second = findings(cp_change(CP, policy(default="off")), objects)
    assert first.confirm_pods_on == NODE and second.confirm_pods_on == "h100-2"
    assert first.remediation == (
        f"kubectl cordon {NODE}",
        "kubectl delete pod inference -n cc",
        "then apply this change",
        f"wait for {STATE}=off on {NODE}, then kubectl uncordon {NODE}",
        f"or pin its mode first: kubectl label node {NODE} {CC}=on",
    )
    assert second.remediation[-1] == f"or pin its mode first: kubectl label node h100-2 {CC}=on"


def test_a_node_the_change_does_not_reach_does_not_hide_the_next_one() -> None:
    pinned = gpu_node("h100-0", {WORKLOAD: PT, STATE: "on", CC_DEPLOY: "false"})
    (finding,) = findings(cp_change(CP, policy(default="off")), [pinned, UNLABELLED, KATA])
    assert finding.confirm_pods_on == NODE


def test_enabling_the_manager_pins_each_node_to_the_mode_its_state_reports() -> None:
    objects = [gpu_node(labels={WORKLOAD: PT, STATE: "off"}), KATA]
    (finding,) = findings(cp_change(cluster_policy(True, "container"), CP), objects)
    assert finding.remediation[-1] == f"or pin its mode first: kubectl label node {NODE} {CC}=off"


def test_a_clusterpolicy_without_the_old_object_is_not_judged() -> None:
    review = request("UPDATE", policy(default="off"), None)
    assert check(review, state_of(UNLABELLED, KATA)) == ()


@pytest.mark.parametrize(
    ("review", "applies"),
    [
        pytest.param(relabel(IN_FORCE, {CC: "off"}), True, id="a node update"),
        pytest.param(cp_change(CP, policy(default="off")), True, id="a ClusterPolicy update"),
        pytest.param(request("CREATE", gpu_node()), False, id="a node create"),
        pytest.param(request("CREATE", CP), False, id="a ClusterPolicy create"),
    ],
)
def test_scope(review: AdmissionRequest, applies: bool) -> None:
    assert judged_by(POLICY, review) == applies


def test_the_engine_denies_by_default() -> None:
    decision = Engine().evaluate(relabel(IN_FORCE, {CC: "off"}), state_of(gpu_node(), CP, KATA))
    assert [(v.policy, v.action) for v in decision.verdicts] == [(POLICY.id, Action.DENY)]
    assert not decision.allowed


def test_enabling_the_manager_where_no_state_is_reported_pins_the_old_default() -> None:
    objects = [gpu_node(labels={WORKLOAD: PT}), KATA]
    (finding,) = findings(cp_change(cluster_policy(True, "container"), CP), objects)
    assert finding.remediation[-1] == f"or pin its mode first: kubectl label node {NODE} {CC}=on"


def test_a_default_change_on_a_clusterpolicy_the_operator_does_not_act_on_moves_nothing() -> None:
    def named(obj: Obj, name: str, created: str) -> Obj:
        return {**obj, "metadata": {"name": name, "creationTimestamp": created}}

    oldest = named(CP, "cluster-policy", "2025-01-01T00:00:00Z")
    younger = named(CP, "bootstrap-policy", "2026-01-01T00:00:00Z")
    state = state_of(oldest, younger, UNLABELLED, KATA)
    state.follow_gpu_operator_version(lambda: "v26.7.0")
    review = cp_change(
        younger, named(policy(default="off"), "bootstrap-policy", "2026-01-01T00:00:00Z")
    )
    assert check(review, state) == ()
    review = cp_change(
        oldest, named(policy(default="off"), "cluster-policy", "2025-01-01T00:00:00Z")
    )
    assert len(check(review, state)) == 1

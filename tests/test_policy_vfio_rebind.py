"""vfio-rebind-with-gpu-pods: the recovery trap, vfio-manager deployed under running CUDA pods."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from policies.cluster.workload import VFIO_MANAGER_DEPLOY_LABEL, WORKLOAD_LABEL
from policies.rules.vfio_rebind import POLICY, check
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import (
    Obj,
    gpu_pod,
    judged_by,
    node,
    pod,
    request,
    state_of,
    with_labels,
)
from tests.test_review import recorded
from webhook.admission.review import parse_review
from webhook.engine import Engine

NODE = "omen2"
OPERATOR = "system:serviceaccount:gpu-operator:gpu-operator"
TRAIN = gpu_pod("train", NODE)


def deploy_label(old: str | None, new: str | None, **labels: str) -> tuple[Obj, Obj]:
    """(new, old) node objects for an UPDATE moving the vfio-manager deploy label old -> new."""
    base = node(NODE, labels=labels, allocatable={"nvidia.com/gpu": "1"})
    return (
        with_labels(base, {VFIO_MANAGER_DEPLOY_LABEL: new}),
        with_labels(base, {VFIO_MANAGER_DEPLOY_LABEL: old}),
    )


def findings(objects: Sequence[Obj], old: str | None, new: str | None) -> list[Finding]:
    new_node, old_node = deploy_label(old, new, **{WORKLOAD_LABEL: "vm-passthrough"})
    review = request("UPDATE", new_node, old_node, user=OPERATOR)
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


@pytest.mark.parametrize(
    ("objects", "old", "new"),
    [
        pytest.param([TRAIN], None, "true", id="the operator adding the label under a GPU pod"),
        pytest.param([TRAIN], "false", "true", id="a pinned false turned true under a GPU pod"),
        pytest.param([TRAIN], "", "true", id="an empty value turned true under a GPU pod"),
        pytest.param(
            [gpu_pod("train", NODE, terminating=True)],
            None,
            "true",
            id="a terminating GPU pod still holds its GPU",
        ),
        pytest.param(
            [gpu_pod("train", NODE, phase="Pending", initialized=False)],
            None,
            "true",
            id="a pending GPU pod bound to the node counts",
        ),
        pytest.param(
            [gpu_pod("infer", NODE, "nvidia.com/mig-1g.10gb")],
            None,
            "true",
            id="a MIG pod counts",
        ),
    ],
)
def test_deploying_vfio_manager_under_gpu_pods_is_denied(
    objects: list[Obj], old: str | None, new: str | None
) -> None:
    assert len(findings(objects, old, new)) == 1
    assert POLICY.default_action == Action.DENY


@pytest.mark.parametrize(
    ("objects", "old", "new"),
    [
        pytest.param([], None, "true", id="a node without GPU pods gets vfio-manager freely"),
        pytest.param(
            [gpu_pod("train", NODE, phase="Succeeded")],
            None,
            "true",
            id="a finished GPU pod holds nothing",
        ),
        pytest.param(
            [gpu_pod("train", NODE, phase="Failed")], None, "true", id="a failed GPU pod neither"
        ),
        pytest.param([gpu_pod("train", "omen1")], None, "true", id="GPU pods on another node"),
        pytest.param([pod("web", NODE, limits={"cpu": "1"})], None, "true", id="pods without GPUs"),
        pytest.param(
            [gpu_pod("virt-launcher-x", NODE, "nvidia.com/GB202_GEFORCE_RTX_5090")],
            None,
            "true",
            id="a VM's passthrough device is not a CUDA GPU",
        ),
        pytest.param([TRAIN], "true", "true", id="an unchanged true label"),
        pytest.param([TRAIN], None, "false", id="pinning the label to false is the safe step"),
        pytest.param([TRAIN], "true", None, id="removing the label"),
        pytest.param([TRAIN], None, None, id="an update that does not touch the label"),
        pytest.param([TRAIN], None, "True", id="only the exact value true deploys vfio-manager"),
    ],
)
def test_everything_else_is_allowed(objects: list[Obj], old: str | None, new: str | None) -> None:
    assert findings(objects, old, new) == []


def test_the_message_names_the_node_the_pods_and_the_safe_step() -> None:
    pods = [gpu_pod(f"job-{i}", NODE) for i in range(5)]
    (finding,) = findings(pods, None, "true")
    message = finding.message
    assert message.startswith(
        f"{VFIO_MANAGER_DEPLOY_LABEL}=true: vfio-manager would bind every NVIDIA GPU on {NODE} "
        "to vfio-pci, killing 5 GPU pods (ml/job-0, ml/job-1, ml/job-2 and 2 more) and host CUDA."
    )
    assert message.endswith(f"Label {NODE} container or pin it false first.")
    assert len(f"[{POLICY.id}] {message}") <= 256
    assert finding.confirm_pods_on == NODE
    assert finding.remediation[:2] == (
        f"kubectl label node {NODE} {WORKLOAD_LABEL}=container --overwrite",
        f"or: kubectl label node {NODE} {VFIO_MANAGER_DEPLOY_LABEL}=false --overwrite",
    )


@pytest.mark.parametrize(
    ("operation", "sub_resource", "applies"),
    [
        pytest.param("UPDATE", "", True, id="a node update is judged"),
        pytest.param("UPDATE", "status", True, id="a label write through nodes/status is judged"),
        pytest.param("CREATE", "", True, id="a node create is judged against its pods"),
        pytest.param("DELETE", "", False, id="a node delete is out of scope"),
    ],
)
def test_scope(operation: str, sub_resource: str, applies: bool) -> None:
    new_node, old_node = deploy_label(None, "true")
    obj = None if operation == "DELETE" else new_node
    old = None if operation == "CREATE" else old_node
    assert judged_by(POLICY, request(operation, obj, old, sub_resource=sub_resource)) is applies


def test_the_recorded_operator_update_is_denied_by_the_engine() -> None:
    """Fixture 014: the GPU Operator's service account adding the deploy label to omen2, whose
    train-0 holds a GPU. The real engine denies it with the policy's default action."""
    review = parse_review(recorded("014"))
    assert review.user.username == OPERATOR
    state = state_of(gpu_pod("train-0", NODE))
    decision = Engine().evaluate(review, state)
    (verdict,) = [v for v in decision.verdicts if v.policy == POLICY.id]
    assert verdict.action == Action.DENY
    assert not decision.allowed
    assert "ml/train-0" in verdict.message
    assert decision.nodes_to_confirm() == [NODE]


def test_the_chain_runs_from_the_label_to_the_rebind_to_the_pods_and_the_last_step_drains() -> None:
    (finding,) = findings([TRAIN, gpu_pod("infer", NODE)], None, "true")
    assert finding.chain == (
        f"{VFIO_MANAGER_DEPLOY_LABEL}=true on {NODE}",
        "vfio-manager binds every NVIDIA GPU there to vfio-pci",
        "CUDA dies in ml/infer and ml/train",
    )
    assert finding.remediation[2] == (
        f"to pass {NODE} to VMs later: cordon it, drain or wait for ml/infer, ml/train"
    )


def test_an_update_without_its_old_node_is_not_judged() -> None:
    new = with_labels(node(NODE), {VFIO_MANAGER_DEPLOY_LABEL: "true"})
    assert check(request("UPDATE", new, None), state_of(TRAIN)) == ()


@pytest.mark.parametrize(
    ("value", "objects", "flagged"),
    [
        pytest.param("true", (TRAIN,), True, id="deploy label true over a GPU pod"),
        pytest.param("false", (TRAIN,), False, id="pinned false"),
        pytest.param("true", (), False, id="nothing bound there"),
    ],
)
def test_a_node_created_with_the_deploy_label_is_judged_against_the_pods_bound_to_its_name(
    value: str, objects: tuple[Obj, ...], flagged: bool
) -> None:
    created = request("CREATE", with_labels(node(NODE), {VFIO_MANAGER_DEPLOY_LABEL: value}))
    assert bool(check(created, state_of(*objects))) is flagged

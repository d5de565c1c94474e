"""clusterpolicy-delete-with-gpu-users: deleting the ClusterPolicy in force under GPU users warns
with what the GPU Operator then does; deleting one that changes nothing says nothing."""

from __future__ import annotations

import pytest

from policies.rules.clusterpolicy_delete import ID
from policies.vocabulary.verdicts import Action
from tests.builders import Obj, cluster_policy, gpu_pod, node, request, state_of, vmi
from webhook.admission.response import decision_response
from webhook.admission.warnings import WARNING_MAX_CHARS
from webhook.engine import Engine

WORKLOAD = "nvidia.com/gpu.workload.config"
A10 = "nvidia.com/GA102GL_A10"
DESKTOP = vmi("desktop-0", node_name="omen1", gpus=[A10])
SANDBOX_PT = cluster_policy(default_workload="vm-passthrough")
PT_NODE = node("omen1", labels={WORKLOAD: "vm-passthrough"})


def test_deleting_the_clusterpolicy_in_force_warns_with_what_the_operator_does() -> None:
    state = (PT_NODE, DESKTOP, SANDBOX_PT)
    decision = Engine().evaluate(request("DELETE", None, SANDBOX_PT), state_of(*state))
    assert [(v.policy, v.action) for v in decision.verdicts] == [(ID, Action.WARN)]
    message = decision.verdicts[0].message
    assert "VMI vms/desktop-0" in message
    assert "garbage collector deletes every operand" in message
    assert "vfio-manager's preStop unbinds" in message


@pytest.mark.parametrize(
    ("deleted", "objects"),
    [
        pytest.param(
            {**SANDBOX_PT, "metadata": {"name": "ignored"}},
            (SANDBOX_PT, PT_NODE, DESKTOP),
            id="one the operator ignores",
        ),
        pytest.param(SANDBOX_PT, (SANDBOX_PT,), id="the one in force, with no GPU user"),
    ],
)
def test_deleting_a_clusterpolicy_that_changes_nothing_says_nothing(
    deleted: Obj, objects: tuple[Obj, ...]
) -> None:
    decision = Engine().evaluate(request("DELETE", None, deleted), state_of(*objects))
    assert decision.verdicts == []


def test_the_warning_fits_the_api_servers_limits() -> None:
    """What test_warning_parts checks of every change file, for a request no change file makes."""
    decision = Engine().evaluate(
        request("DELETE", None, SANDBOX_PT), state_of(PT_NODE, DESKTOP, SANDBOX_PT)
    )
    warnings = decision_response("uid", decision)["warnings"]
    assert all(w.startswith(f"[{ID}] ") and len(w) <= WARNING_MAX_CHARS for w in warnings)
    assert "garbage collector" in " ".join(warnings)


TRAIN = gpu_pod("train-0", "omen2", namespace="ml")
CUDA_NODE = node("omen2", labels={WORKLOAD: "container"})
UNLABELLED = node("omen3", labels={"nvidia.com/gpu.present": "true"})
SIDE_JOB = gpu_pod("side-0", "omen3", namespace="ml")


@pytest.mark.parametrize(
    ("objects", "users"),
    [
        pytest.param((PT_NODE, DESKTOP), "1 GPU user (VMI vms/desktop-0)", id="a live VM"),
        pytest.param((CUDA_NODE, TRAIN), "1 GPU user (ml/train-0)", id="a CUDA pod"),
        pytest.param(
            (PT_NODE, DESKTOP, CUDA_NODE, TRAIN, UNLABELLED, SIDE_JOB),
            "3 GPU users (VMI vms/desktop-0, ml/train-0 and ml/side-0)",
            id="VMs first, then pods of labelled and unlabelled GPU nodes",
        ),
    ],
)
def test_the_warning_names_every_gpu_user_and_what_the_operator_does(
    objects: tuple[Obj, ...], users: str
) -> None:
    decision = Engine().evaluate(
        request("DELETE", None, SANDBOX_PT), state_of(SANDBOX_PT, *objects)
    )
    (verdict,) = decision.verdicts
    assert verdict.message == (
        f"ClusterPolicy cluster-policy is deleted under {users}: the garbage collector deletes "
        "every operand the GPU Operator made from it; vfio-manager's preStop unbinds the GPUs of "
        "live VMs, the device plugins go, and a new ClusterPolicy's sandboxWorkloads then set "
        "every unlabelled GPU node's mode."
    )
    assert verdict.chain == (
        "ClusterPolicy cluster-policy deleted",
        "its operand DaemonSets are garbage-collected (controller owner)",
        "vfio-manager preStop: vfio-manage unbind --all; device plugins removed",
    )
    assert verdict.remediation == (
        "stop the GPU VMs and drain the GPU pods first, or keep the ClusterPolicy",
        "to change its settings, edit it instead of deleting and re-creating it",
    )


def test_no_clusterpolicy_in_force_means_nothing_to_delete_under() -> None:
    deleted = request("DELETE", None, SANDBOX_PT)
    assert Engine().evaluate(deleted, state_of(PT_NODE, DESKTOP)).verdicts == []

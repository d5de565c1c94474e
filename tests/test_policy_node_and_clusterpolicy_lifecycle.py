"""Delete and re-create: a Node or the ClusterPolicy created is judged like a change, against what
is bound to its name or the ClusterPolicy in force (or none); deleting either under GPU users
warns, naming them (node-delete-with-gpu-users, clusterpolicy-delete-with-gpu-users)."""

from __future__ import annotations

import pytest

from policies.rules import clusterpolicy_delete, node_delete_gpu_users
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action
from tests.builders import Obj, cluster_policy, gpu_pod, node, request, state_of, vmi
from webhook.engine import Engine

WORKLOAD = "nvidia.com/gpu.workload.config"
VFIO = "nvidia.com/gpu.deploy.vfio-manager"
A10 = "nvidia.com/GA102GL_A10"
TRAIN = gpu_pod("train-0", "omen1", namespace="ml")
DESKTOP = vmi("desktop-0", node_name="omen1", gpus=[A10])


def verdicts(review: AdmissionRequest, *objects: Obj) -> list[tuple[str, Action]]:
    decision = Engine().evaluate(review, state_of(*objects))
    return [(v.policy, v.action) for v in decision.verdicts]


@pytest.mark.parametrize(
    ("labels", "objects", "expected"),
    [
        pytest.param(
            {WORKLOAD: "vm-passthrough"},
            (TRAIN,),
            [("workload-switch-with-gpu-pods", Action.DENY)],
            id="vm-passthrough over a CUDA pod bound to its name is denied",
        ),
        pytest.param(
            {},
            (TRAIN, cluster_policy(default_workload="vm-passthrough")),
            [("workload-switch-with-gpu-pods", Action.DENY)],
            id="unlabelled under a vm-passthrough default over a CUDA pod is denied",
        ),
        pytest.param(
            {VFIO: "true"},
            (TRAIN,),
            [("vfio-rebind-with-gpu-pods", Action.DENY)],
            id="the vfio-manager deploy label over a CUDA pod is denied",
        ),
        pytest.param(
            {"nvidia.com/mig.config": "all-1g.10gb"},
            (TRAIN,),
            [("mig-reconfig-with-gpu-pods", Action.DENY)],
            id="a MIG configuration over a CUDA pod is denied",
        ),
        pytest.param(
            {WORKLOAD: "vm-passthrough"}, (), [], id="vm-passthrough with nothing bound is allowed"
        ),
        pytest.param({WORKLOAD: "container"}, (TRAIN,), [], id="container over a CUDA pod"),
    ],
)
def test_a_node_created_is_judged_against_the_pods_bound_to_its_name(
    labels: dict[str, str], objects: tuple[Obj, ...], expected: list[tuple[str, Action]]
) -> None:
    created = request("CREATE", node("omen1", labels=labels))
    assert verdicts(created, *objects) == expected


def test_a_node_created_says_so_and_names_the_pods() -> None:
    created = request("CREATE", node("omen1", labels={WORKLOAD: "vm-passthrough"}))
    decision = Engine().evaluate(created, state_of(TRAIN))
    assert decision.deny_message.startswith(
        "[workload-switch-with-gpu-pods] node omen1 would be created in vm-passthrough "
        f"({WORKLOAD} set) while 1 pod uses its NVIDIA GPUs: ml/train-0"
    ), decision.deny_message


@pytest.mark.parametrize(
    ("objects", "named"),
    [
        pytest.param((TRAIN,), ["ml/train-0"], id="a CUDA pod"),
        pytest.param((DESKTOP,), ["VMI vms/desktop-0"], id="a live GPU VMI"),
        pytest.param((), [], id="nothing: no warning"),
    ],
)
def test_deleting_a_node_warns_naming_its_gpu_users(
    objects: tuple[Obj, ...], named: list[str]
) -> None:
    omen1 = node("omen1", labels={WORKLOAD: "container"})
    decision = Engine().evaluate(request("DELETE", None, omen1), state_of(omen1, *objects))
    warned = [v for v in decision.verdicts if v.policy == node_delete_gpu_users.ID]
    assert decision.allowed
    assert [w.action for w in warned] == ([Action.WARN] if named else [])
    for name in named:
        assert name in warned[0].message
    if named:
        assert "pod garbage collector" in warned[0].message


SANDBOX_PT = cluster_policy(default_workload="vm-passthrough")
GPU_NODE = node("omen1", labels={"nvidia.com/gpu.present": "true"})
PT_NODE = node("omen1", labels={WORKLOAD: "vm-passthrough"})


@pytest.mark.parametrize(
    ("in_force", "expected"),
    [
        pytest.param((), [Action.DENY], id="none in force: its default moves the GPU node"),
        pytest.param(
            (cluster_policy(sandbox=False),),
            [Action.DENY],
            id="beside one with sandbox workloads off",
        ),
        pytest.param((SANDBOX_PT,), [], id="the same settings as the one in force"),
    ],
)
def test_a_clusterpolicy_created_is_judged_against_the_one_in_force_or_none(
    in_force: tuple[Obj, ...], expected: list[Action]
) -> None:
    created = request("CREATE", {**SANDBOX_PT, "metadata": {"name": "second"}})
    decision = Engine().evaluate(created, state_of(GPU_NODE, TRAIN, *in_force))
    assert [v.action for v in decision.verdicts] == expected
    if expected:
        assert decision.deny_message.startswith(
            "[sandbox-disable-with-live-vms] a new ClusterPolicy second (sandboxWorkloads.enabled"
        ), decision.deny_message


def test_deleting_the_clusterpolicy_in_force_warns_with_what_the_operator_does() -> None:
    state = (PT_NODE, DESKTOP, SANDBOX_PT)
    decision = Engine().evaluate(request("DELETE", None, SANDBOX_PT), state_of(*state))
    assert [(v.policy, v.action) for v in decision.verdicts] == [
        (clusterpolicy_delete.ID, Action.WARN)
    ]
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

"""Delete and re-create: a Node or the ClusterPolicy created is judged like a change, against
what is bound to its name or against the ClusterPolicy in force (or none)."""

from __future__ import annotations

import pytest

from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action
from tests.builders import Obj, cluster_policy, gpu_pod, node, request, state_of
from webhook.engine import Engine

WORKLOAD = "nvidia.com/gpu.workload.config"
VFIO = "nvidia.com/gpu.deploy.vfio-manager"
TRAIN = gpu_pod("train-0", "omen1", namespace="ml")
SANDBOX_PT = cluster_policy(default_workload="vm-passthrough")
GPU_NODE = node("omen1", labels={"nvidia.com/gpu.present": "true"})


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

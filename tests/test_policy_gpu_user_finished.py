"""gpu-user-marked-finished: a GPU user's phase may be set to Succeeded or Failed only by what runs
it (the pod's kubelet, KubeVirt) or cleans up after its node (the pod garbage collector), or for a
node that is gone or out of service; anyone else is refused, since the guard would stop counting
a user that still runs."""

from __future__ import annotations

from typing import Any

import pytest

from policies.rules.gpu_user_finished import ID, OUT_OF_SERVICE
from tests.builders import gpu_pod, node, pod, request, state_of, vmi
from webhook.engine import Engine

A10 = "nvidia.com/GA102GL_A10"
ADMIN = "kubernetes-admin"
KUBELET = "system:node:gpu-1"
POD_GC = "system:serviceaccount:kube-system:pod-garbage-collector"
HANDLER = "system:serviceaccount:kubevirt:kubevirt-handler"
ELSEWHERE = "system:serviceaccount:ml:kubevirt-handler"
KCM = "system:kube-controller-manager"
OTHER_KUBELET = "system:node:gpu-2"
MASTERS = ("system:masters",)


def with_phase(obj: dict[str, Any], phase: str) -> dict[str, Any]:
    return {**obj, "status": {**obj["status"], "phase": phase}}


CUDA = gpu_pod("train-0", "gpu-1")
VMI = vmi("render-0", node_name="gpu-1", gpus=[A10], namespace="vms", owner="render")
PLAIN = pod("web-0", "gpu-1")


@pytest.mark.parametrize(
    ("what", "obj", "phase", "user", "groups", "denied"),
    [
        ("a CUDA pod marked Succeeded by an admin", CUDA, "Succeeded", ADMIN, None, True),
        ("a CUDA pod marked Failed by an admin", CUDA, "Failed", ADMIN, None, True),
        ("a GPU VMI marked Succeeded by a namespace editor", VMI, "Succeeded", "dev", None, True),
        ("a CUDA pod ended by its own kubelet", CUDA, "Succeeded", KUBELET, None, False),
        ("a CUDA pod ended by another node's kubelet", CUDA, "Failed", OTHER_KUBELET, None, True),
        ("its kubelet's name without system:nodes", CUDA, "Failed", KUBELET, MASTERS, True),
        ("a CUDA pod failed by the pod garbage collector", CUDA, "Failed", POD_GC, None, False),
        ("podgc's name without its group", CUDA, "Failed", POD_GC, MASTERS, True),
        ("a CUDA pod failed by kube-controller-manager", CUDA, "Failed", KCM, None, False),
        ("a GPU VMI ended by virt-handler", VMI, "Succeeded", HANDLER, None, False),
        ("virt-handler's name in another namespace", VMI, "Failed", ELSEWHERE, None, True),
        ("a pod without GPUs marked Succeeded by an admin", PLAIN, "Succeeded", ADMIN, None, False),
        ("a CUDA pod moved to Pending by an admin", CUDA, "Pending", ADMIN, None, False),
    ],
)  # fmt: skip
def test_only_what_runs_a_gpu_user_may_mark_it_finished(
    what: str,
    obj: dict[str, Any],
    phase: str,
    user: str,
    groups: tuple[str, ...] | None,
    denied: bool,
) -> None:
    state = state_of(node("gpu-1", allocatable={"nvidia.com/gpu": "1", A10: "1"}), CUDA, VMI, PLAIN)
    sub = "status" if obj["kind"] == "Pod" else ""
    review = request(
        "UPDATE", with_phase(obj, phase), obj, user=user, groups=groups, sub_resource=sub
    )
    decision = Engine().evaluate(review, state)
    assert (not decision.allowed) is denied, (what, decision)
    assert ([v.policy for v in decision.verdicts] == [ID]) is denied, what


def test_the_deny_names_the_user_the_writer_and_how_to_end_it_for_real() -> None:
    review = request("UPDATE", with_phase(VMI, "Succeeded"), VMI, user="dev", sub_resource="")
    decision = Engine().evaluate(review, state_of(node("gpu-1"), VMI))
    (verdict,) = decision.verdicts
    assert verdict.message.startswith(
        "VMI vms/render-0 uses GPUs on gpu-1 and is marked Succeeded by dev, not by KubeVirt"
    )
    assert verdict.remediation == ("virtctl stop render -n vms",)


@pytest.mark.parametrize(
    ("what", "nodes"),
    [
        ("its node is gone (podgc's orphaned pods)", []),
        (
            "its node is out of service (non-graceful shutdown)",
            [node("gpu-1", taints=[{"key": OUT_OF_SERVICE, "value": "nodeshutdown",
                                    "effect": "NoExecute"}])],
        ),
    ],
)  # fmt: skip
def test_anyone_may_mark_a_user_finished_when_its_node_is_down(
    what: str, nodes: list[dict[str, Any]]
) -> None:
    review = request("UPDATE", with_phase(CUDA, "Failed"), CUDA, sub_resource="status")
    assert Engine().evaluate(review, state_of(*nodes, CUDA)).allowed, what


def test_the_engine_exempts_the_pods_own_kubelet_before_any_policy_runs() -> None:
    review = request("UPDATE", with_phase(CUDA, "Succeeded"), CUDA, user=KUBELET,
                     sub_resource="status")  # fmt: skip
    decision = Engine().evaluate(review, state_of(node("gpu-1"), CUDA))
    assert decision.exempt and "kubelet" in decision.exempt

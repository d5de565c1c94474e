"""node-delete-with-gpu-users: deleting a Node warns, naming the pods and VMIs using its GPUs."""

from __future__ import annotations

import pytest

from policies.cluster.coverage import Recording
from policies.rules.node_delete_gpu_users import ID, POLICY
from policies.vocabulary.verdicts import Action
from tests.builders import Obj, gpu_pod, node, request, state_of, vmi
from webhook.admission.response import decision_response
from webhook.admission.warnings import WARNING_MAX_CHARS
from webhook.engine import Engine

WORKLOAD = "nvidia.com/gpu.workload.config"
A10 = "nvidia.com/GA102GL_A10"
TRAIN = gpu_pod("train-0", "omen1", namespace="ml")
DESKTOP = vmi("desktop-0", node_name="omen1", gpus=[A10])


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
    warned = [v for v in decision.verdicts if v.policy == ID]
    assert decision.allowed
    assert [w.action for w in warned] == ([Action.WARN] if named else [])
    for name in named:
        assert name in warned[0].message
    if named:
        assert "pod garbage collector" in warned[0].message


def test_the_warning_fits_the_api_servers_limits_with_its_instruction_first() -> None:
    """What test_warning_parts checks of every change file, for a request no change file makes."""
    omen1 = node("omen1", labels={WORKLOAD: "container"})
    pods = [gpu_pod(f"train-{i}", "omen1", namespace="ml") for i in range(8)]
    decision = Engine().evaluate(request("DELETE", None, omen1), state_of(omen1, DESKTOP, *pods))
    warnings = decision_response("uid", decision)["warnings"]
    assert warnings[0].startswith(f"[{ID}] ")
    assert all(len(w) <= WARNING_MAX_CHARS for w in warnings), warnings
    assert "Drain it first." in warnings[0], warnings


@pytest.mark.parametrize(
    ("objects", "users"),
    [
        pytest.param(
            (TRAIN,), "1 GPU user runs there: ml/train-0 (nvidia.com/gpu: 1)", id="one pod"
        ),
        pytest.param(
            (TRAIN, DESKTOP),
            "2 GPU users run there: ml/train-0 (nvidia.com/gpu: 1) and VMI vms/desktop-0",
            id="a pod and a VMI",
        ),
    ],
)
def test_the_warning_says_who_ends_why_and_what_to_do_first(
    objects: tuple[Obj, ...], users: str
) -> None:
    omen1 = node("omen1", labels={WORKLOAD: "container"})
    (verdict,) = (
        Engine().evaluate(request("DELETE", None, omen1), state_of(omen1, *objects)).verdicts
    )
    assert verdict.message == (
        f"node omen1 is deleted while {users}. The pod garbage collector deletes every pod bound "
        "to a missing node, so they end; omen1 returns only when its kubelet registers it again. "
        "Drain it first."
    )
    named = users.split(" there: ")[1]
    assert verdict.chain == ("Node omen1 deleted", "podgc deletes the pods bound to it", named)


@pytest.mark.parametrize(
    ("objects", "steps"),
    [
        pytest.param(
            (TRAIN,),
            ("kubectl cordon omen1", "drain or wait for: ml/train-0", "kubectl delete node omen1"),
            id="a pod: cordon and drain first",
        ),
        pytest.param(
            (DESKTOP,),
            ("virtctl stop desktop-0 -n vms", "kubectl delete node omen1"),
            id="a VMI: stop it first",
        ),
    ],
)
def test_the_repair_frees_the_gpus_before_the_delete(
    objects: tuple[Obj, ...], steps: tuple[str, ...]
) -> None:
    omen1 = node("omen1", labels={WORKLOAD: "container"})
    (verdict,) = (
        Engine().evaluate(request("DELETE", None, omen1), state_of(omen1, *objects)).verdicts
    )
    assert verdict.remediation == steps


def test_it_declares_everything_it_asks_of_the_state() -> None:
    """No sample reaches it, so the coverage test never saw it ask: who uses the GPUs reads the
    ClusterPolicy (its runtime class) besides the pods, claims and VMIs."""
    omen1 = node("omen1", labels={WORKLOAD: "container"})
    recording = Recording(state_of(omen1, TRAIN, DESKTOP))
    assert POLICY.check(request("DELETE", None, omen1), recording.view)
    assert recording.kinds == POLICY.reads

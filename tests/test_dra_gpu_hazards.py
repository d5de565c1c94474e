"""The node hazards of vfio-manager, the vGPU manager and the MIG manager count a pod that holds a
GPU through an allocated DRA claim exactly like one with nvidia.com/gpu limits, and name its
claim. States are built from the recorded fixture shapes (tests/fixtures/dra)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

import pytest

from policies.cluster.view import ClusterView
from policies.cluster.workload import MIG_CONFIG_LABEL, VFIO_MANAGER_DEPLOY_LABEL, WORKLOAD_LABEL
from policies.diagnoses.nodes import RECOVERY_TRAP_PASSTHROUGH
from policies.registry import diagnose_all
from policies.rules import mig_reconfig, sandbox_disable, vfio_rebind, workload_switch
from policies.state.cluster import ClusterState
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action, Policy, Severity
from tests.builders import (
    Obj,
    cluster_policy,
    dead_node,
    node,
    request,
    state_of,
    with_labels,
)
from tests.dra_builders import (
    DRA_FIXTURES,
    GPU_DEVICE_CLASS,
    claim_pod,
    gpu,
    needs_fixtures,
    replayed,
    resource_claim,
    resource_slice,
)
from webhook.admission.review import parse_review
from webhook.engine import Engine
from webhook.state.files import load_state

NODE = "omen2"
HOLDER = "ml/train-dra (claim ml/train-gpu: gpu-0)"
GPU_DRA = GPU_DEVICE_CLASS
SLICE = resource_slice("omen2-gpu.nvidia.com-7x2kq", NODE, [gpu("gpu-0")])
TRAIN = claim_pod("train-dra", NODE, claim="train-gpu")
CLAIM = resource_claim("train-gpu", allocated=(NODE, NODE, "gpu-0"), reserved_for=["train-dra"])
SWITCH_REVIEW = "019"


def dra_objects(node_obj: Obj) -> tuple[Obj, ...]:
    return (cluster_policy(), node_obj, GPU_DRA, SLICE, TRAIN, CLAIM)


def relabelled(labels: Mapping[str, str | None], base: Mapping[str, str]) -> AdmissionRequest:
    old = node(NODE, labels=base)
    return request("UPDATE", with_labels(old, labels), old)


CONTAINER = {WORKLOAD_LABEL: "container"}
PASSTHROUGH = {WORKLOAD_LABEL: "vm-passthrough"}
NODE_HAZARDS = [
    pytest.param(
        workload_switch.POLICY,
        relabelled(PASSTHROUGH, CONTAINER),
        id="workload-switch-with-gpu-pods denies moving the node to vm-passthrough",
    ),
    pytest.param(
        workload_switch.POLICY,
        relabelled({WORKLOAD_LABEL: "vm-vgpu"}, CONTAINER),
        id="workload-switch-with-gpu-pods denies moving the node to vm-vgpu",
    ),
    pytest.param(
        vfio_rebind.POLICY,
        relabelled({VFIO_MANAGER_DEPLOY_LABEL: "true"}, PASSTHROUGH),
        id="vfio-rebind-with-gpu-pods denies deploying vfio-manager",
    ),
    pytest.param(
        mig_reconfig.POLICY,
        relabelled({MIG_CONFIG_LABEL: "all-1g.10gb"}, CONTAINER),
        id="mig-reconfig-with-gpu-pods denies a new MIG layout",
    ),
]


@pytest.mark.parametrize(("policy", "change"), NODE_HAZARDS)
def test_a_pod_holding_the_gpu_through_a_claim_blocks_the_node_hazard(
    policy: Policy[ClusterView], change: AdmissionRequest
) -> None:
    decision = Engine(policies=(policy,)).evaluate(change, state_of(*dra_objects(node(NODE))))
    (verdict,) = decision.verdicts
    assert verdict.action == Action.DENY
    assert HOLDER in verdict.message
    assert decision.nodes_to_confirm() == [NODE]


@pytest.mark.parametrize(("policy", "change"), NODE_HAZARDS)
@pytest.mark.parametrize(
    "claim",
    [
        pytest.param(resource_claim("train-gpu"), id="its claim not allocated"),
        pytest.param(
            resource_claim(
                "train-gpu", allocated=("tower1", "tower1", "gpu-0"), reserved_for=["train-dra"]
            ),
            id="its claim allocated on another node",
        ),
        pytest.param(
            resource_claim(
                "train-gpu", allocated=(NODE, NODE, "gpu-vfio-0"), reserved_for=["train-dra"]
            ),
            id="its claim holding a vfio device",
        ),
    ],
)
def test_a_pod_without_an_nvidia_gpu_allocated_there_blocks_nothing(
    policy: Policy[ClusterView], change: AdmissionRequest, claim: Obj
) -> None:
    vfio = resource_slice(
        "omen2-gpu.nvidia.com-7x2kq", NODE, [gpu("gpu-0"), gpu("gpu-vfio-0", type_="vfio")]
    )
    state = state_of(cluster_policy(), node(NODE), GPU_DRA, vfio, TRAIN, claim)
    assert Engine(policies=(policy,)).evaluate(change, state).verdicts == []


def test_a_clusterpolicy_change_that_moves_the_node_into_a_vm_mode_names_the_claim() -> None:
    unlabelled = node(NODE, labels={"nvidia.com/gpu.present": "true"})
    state = state_of(*dra_objects(unlabelled))
    change = request("UPDATE", cluster_policy(True, "vm-passthrough"), cluster_policy())
    findings = sandbox_disable.check(change, state)
    (finding,) = findings
    assert HOLDER in finding.message
    assert finding.confirm_pods_on == NODE


def test_the_recovery_trap_is_critical_when_a_claim_holds_the_gpu() -> None:
    dead = dead_node(
        NODE,
        labels={
            **PASSTHROUGH,
            "nvidia.com/gpu.present": "true",
            "feature.node.kubernetes.io/pci-10de.present": "true",
        },
    )
    found = diagnose_all(state_of(*dra_objects(dead)), datetime(2026, 10, 30, tzinfo=UTC))
    (trap,) = found[RECOVERY_TRAP_PASSTHROUGH]
    assert trap.severity == Severity.CRITICAL
    assert f"1 GPU pod still bound there: {HOLDER}." in trap.message


# --- the recorded switch --------------------------------------------------------------------------


def saved_state() -> ClusterState:
    """objects.yaml: after the driver republished omen2's pool (gpu-0 gone, vfio in its place)."""
    return load_state([str(DRA_FIXTURES / "objects.yaml")])


@needs_fixtures
@pytest.mark.parametrize(
    ("state", "holder"),
    [
        pytest.param(
            lambda: replayed(until=SWITCH_REVIEW),
            "ml/train-dra (claim ml/train-gpu: gpu-0)",
            id="the state when the switch was sent: gpu-0 published as type gpu",
        ),
        pytest.param(
            saved_state,
            "ml/train-dra (claim ml/train-gpu: gpu-0 (no longer published))",
            id="the saved state: gpu-0 republished away, its allocation still standing",
        ),
    ],
)
def test_the_recorded_switch_of_omen2_under_a_claimed_gpu_is_denied(
    state: Callable[[], ClusterState], holder: str
) -> None:
    (path,) = sorted((DRA_FIXTURES / "admission-reviews").glob(f"{SWITCH_REVIEW}-*.json"))
    decision = Engine().evaluate(parse_review(path.read_bytes()), state())
    assert not decision.allowed
    denials: Sequence[str] = [v.policy for v in decision.denials]
    assert denials == [workload_switch.ID]
    assert holder in decision.deny_message
    assert "kubectl cordon omen2" in decision.denials[0].remediation

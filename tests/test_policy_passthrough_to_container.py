"""passthrough-to-container-with-live-vms: a node leaving its VM mode under running GPU VMs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from policies.cluster.workload import OPERANDS_DEPLOY_LABEL, WORKLOAD_LABEL
from policies.rules.passthrough_to_container import POLICY, check
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import (
    Obj,
    cluster_policy,
    judged_by,
    kata_pod,
    node,
    owned_vmi,
    request,
    state_of,
    vmi,
    with_labels,
)
from webhook.engine import Engine

NODE = "tower1"
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
SANDBOX = cluster_policy(True, "container")
PASSTHROUGH_DEFAULT = cluster_policy(True, "vm-passthrough")
SANDBOX_OFF = cluster_policy(False, "vm-passthrough")
WIN11 = owned_vmi("win11-gaming", NODE, gpus=[RTX_3090])

Labels = Mapping[str, str | None]


def relabel(old: Labels, new: Labels) -> tuple[Obj, Obj]:
    base = node(NODE, allocatable={RTX_3090: "1"})
    return with_labels(base, new), with_labels(base, old)


def findings(objects: Sequence[Obj], old: Labels, new: Labels) -> list[Finding]:
    review = request("UPDATE", *relabel(old, new))
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


def mode(value: str | None) -> Labels:
    return {WORKLOAD_LABEL: value}


PASSTHROUGH = mode("vm-passthrough")
CONTAINER = mode("container")
OPERANDS_OFF = {WORKLOAD_LABEL: "vm-passthrough", OPERANDS_DEPLOY_LABEL: "false"}


@pytest.mark.parametrize(
    ("objects", "old", "new"),
    [
        pytest.param([SANDBOX, WIN11], PASSTHROUGH, CONTAINER, id="vm-passthrough to container"),
        pytest.param([SANDBOX, WIN11], mode("vm-vgpu"), CONTAINER, id="vm-vgpu to container"),
        pytest.param(
            [SANDBOX, WIN11],
            PASSTHROUGH,
            mode("vm-vgpu"),
            id="vm-passthrough to vm-vgpu also removes vfio-manager",
        ),
        pytest.param(
            [SANDBOX, WIN11],
            PASSTHROUGH,
            mode(None),
            id="removing the label falls back to a container default",
        ),
        pytest.param(
            [SANDBOX, WIN11],
            PASSTHROUGH,
            mode("vm-passthru"),
            id="an invalid value falls back to a container default",
        ),
        pytest.param(
            [PASSTHROUGH_DEFAULT, WIN11],
            mode(None),
            CONTAINER,
            id="labelling container a node that had the vm-passthrough default",
        ),
        pytest.param(
            [WIN11],
            PASSTHROUGH,
            CONTAINER,
            id="without a ClusterPolicy labels are taken as they are",
        ),
        pytest.param(
            [SANDBOX, WIN11], PASSTHROUGH, OPERANDS_OFF, id="operands false strips every operand"
        ),
        pytest.param(
            [SANDBOX, owned_vmi("vm", NODE, host_devices=[RTX_3090])],
            PASSTHROUGH,
            CONTAINER,
            id="a GPU in hostDevices counts like one in gpus",
        ),
        pytest.param(
            [SANDBOX, owned_vmi("vm", NODE, gpus=[RTX_3090], phase="Scheduled")],
            PASSTHROUGH,
            CONTAINER,
            id="a VMI scheduled to the node but not yet running counts",
        ),
    ],
)
def test_leaving_vm_mode_under_live_gpu_vms_is_denied(
    objects: list[Obj], old: Labels, new: Labels
) -> None:
    assert len(findings(objects, old, new)) == 1
    assert POLICY.default_action == Action.DENY


@pytest.mark.parametrize(
    ("objects", "old", "new"),
    [
        pytest.param([SANDBOX], PASSTHROUGH, CONTAINER, id="a node without VMs"),
        pytest.param(
            [SANDBOX, owned_vmi("vm", NODE, gpus=[RTX_3090], phase="Succeeded")],
            PASSTHROUGH,
            CONTAINER,
            id="a finished VMI",
        ),
        pytest.param(
            [SANDBOX, owned_vmi("vm", NODE, gpus=[RTX_3090], phase="Failed")],
            PASSTHROUGH,
            CONTAINER,
            id="a failed VMI",
        ),
        pytest.param(
            [SANDBOX, owned_vmi("ubuntu-dev", NODE)],
            PASSTHROUGH,
            CONTAINER,
            id="a VM without devices",
        ),
        pytest.param(
            [SANDBOX, owned_vmi("nfv", NODE, host_devices=["intel.com/qat"])],
            PASSTHROUGH,
            CONTAINER,
            id="a VM whose host device the GPU Operator does not serve",
        ),
        pytest.param(
            [SANDBOX, owned_vmi("vm", "tower2", gpus=[RTX_3090])],
            PASSTHROUGH,
            CONTAINER,
            id="GPU VMs on another node",
        ),
        pytest.param(
            [SANDBOX, vmi("pending", gpus=[RTX_3090], phase="Pending")],
            PASSTHROUGH,
            CONTAINER,
            id="a VMI not yet on any node",
        ),
        pytest.param(
            [SANDBOX, WIN11],
            CONTAINER,
            PASSTHROUGH,
            id="entering vm-passthrough is not this policy",
        ),
        pytest.param([SANDBOX, WIN11], PASSTHROUGH, PASSTHROUGH, id="an unchanged label"),
        pytest.param(
            [PASSTHROUGH_DEFAULT, WIN11],
            PASSTHROUGH,
            mode(None),
            id="removing a label equal to the vm-passthrough default",
        ),
        pytest.param(
            [SANDBOX_OFF, WIN11],
            PASSTHROUGH,
            CONTAINER,
            id="with sandbox workloads off the node was container already",
        ),
        pytest.param(
            [SANDBOX, WIN11],
            {**CONTAINER},
            {WORKLOAD_LABEL: "container", OPERANDS_DEPLOY_LABEL: "false"},
            id="operands false on a container node does not touch VMs",
        ),
        pytest.param([SANDBOX, WIN11], OPERANDS_OFF, OPERANDS_OFF, id="operands already false"),
        pytest.param(
            [SANDBOX, WIN11],
            PASSTHROUGH,
            {WORKLOAD_LABEL: "vm-passthrough", OPERANDS_DEPLOY_LABEL: "true"},
            id="operands true",
        ),
    ],
)
def test_everything_else_is_allowed(objects: list[Obj], old: Labels, new: Labels) -> None:
    assert findings(objects, old, new) == []


def test_the_message_names_the_node_the_modes_the_vms_and_the_safe_step() -> None:
    (finding,) = findings(
        [SANDBOX, WIN11, owned_vmi("rhel9", NODE, host_devices=[RTX_3090])],
        PASSTHROUGH,
        mode(None),
    )
    assert finding.message == (
        f"node {NODE} would leave vm-passthrough for container (ClusterPolicy default) "
        "under live GPU VMs vms/rhel9 and vms/win11-gaming: the sandbox plugin goes, "
        "vfio-manager's preStop unbinds their GPUs. Stop the VMs first."
    )
    assert len(f"[{POLICY.id}] {finding.message}") <= 256
    assert finding.remediation == (
        "virtctl stop rhel9 -n vms",
        "virtctl stop win11-gaming -n vms",
        "then change the node's labels",
    )
    assert finding.max_action is None


def test_a_mode_the_node_had_from_the_default_is_said_to_come_from_it() -> None:
    (finding,) = findings([PASSTHROUGH_DEFAULT, WIN11], mode(None), CONTAINER)
    assert finding.message.startswith(
        f"node {NODE} would leave vm-passthrough (ClusterPolicy default) for container under "
    )


def test_the_message_for_operands_false() -> None:
    (finding,) = findings([SANDBOX, WIN11], PASSTHROUGH, OPERANDS_OFF)
    assert finding.message.startswith(
        f"node {NODE} would lose every GPU operand ({OPERANDS_DEPLOY_LABEL}=false) under "
        "live GPU VMs vms/win11-gaming:"
    )
    assert len(f"[{POLICY.id}] {finding.message}") <= 256


def test_an_ownerless_vmi_is_stopped_by_its_own_name() -> None:
    (finding,) = findings(
        [SANDBOX, vmi("bare", node_name=NODE, gpus=[RTX_3090])], PASSTHROUGH, CONTAINER
    )
    assert finding.remediation[0] == "virtctl stop bare -n vms"


@pytest.mark.parametrize(
    ("operation", "sub_resource", "applies"),
    [
        pytest.param("UPDATE", "", True, id="a node update is judged"),
        pytest.param("UPDATE", "status", True, id="a label write through nodes/status is judged"),
        pytest.param("DELETE", "", False, id="a node delete is out of scope"),
    ],
)
def test_scope(operation: str, sub_resource: str, applies: bool) -> None:
    new_node, old_node = relabel(PASSTHROUGH, CONTAINER)
    obj = None if operation == "DELETE" else new_node
    assert (
        judged_by(POLICY, request(operation, obj, old_node, sub_resource=sub_resource)) is applies
    )


def test_the_engine_denies_by_default() -> None:
    review = request("UPDATE", *relabel(PASSTHROUGH, CONTAINER))
    decision = Engine().evaluate(review, state_of(SANDBOX, WIN11))
    assert [(v.policy, v.action) for v in decision.verdicts] == [(POLICY.id, Action.DENY)]
    assert not decision.allowed


def test_kata_pods_are_vm_like_users_the_switch_to_container_would_kill() -> None:
    objects = [SANDBOX, WIN11, kata_pod("cc-job", NODE, namespace="cc")]
    (finding,) = findings(objects, PASSTHROUGH, CONTAINER)
    assert finding.message == (
        "node tower1 would leave vm-passthrough for container under live GPU VMs and Kata pods "
        "vms/win11-gaming and cc/cc-job: the sandbox plugin goes, vfio-manager's preStop "
        "unbinds their GPUs. Stop them first."
    )
    assert finding.remediation == (
        "virtctl stop win11-gaming -n vms",
        "kubectl delete pod cc-job -n cc",
        "then change the node's labels",
    )
    assert finding.confirm_pods_on == NODE


def test_a_kata_pod_alone_is_enough_and_vms_alone_need_no_pod_confirmation() -> None:

    (finding,) = findings([SANDBOX, kata_pod("cc-job", NODE)], PASSTHROUGH, CONTAINER)
    assert "under Kata pods ml/cc-job:" in finding.message
    (vms,) = findings([SANDBOX, WIN11], PASSTHROUGH, CONTAINER)
    assert vms.confirm_pods_on == "" and vms.message.endswith("Stop the VMs first.")


GPU_CLUSTER = {
    "apiVersion": "nvidia.com/v1alpha1",
    "kind": "GPUCluster",
    "metadata": {"name": "gpu-cluster"},
    "spec": {},
}


def test_a_gpucluster_alone_ignores_the_label_but_beside_a_clusterpolicy_it_does_not() -> None:
    assert findings([GPU_CLUSTER, WIN11], PASSTHROUGH, CONTAINER) == []
    (finding,) = findings([SANDBOX, GPU_CLUSTER, WIN11], PASSTHROUGH, CONTAINER)
    assert finding.message.startswith("node tower1 would leave vm-passthrough for container")


@pytest.mark.parametrize(
    ("labels", "policy", "flagged"),
    [
        pytest.param(CONTAINER, PASSTHROUGH_DEFAULT, True, id="container, the default passthrough"),
        pytest.param(PASSTHROUGH, PASSTHROUGH_DEFAULT, False, id="vm-passthrough"),
        pytest.param(CONTAINER, SANDBOX, False, id="container, the default container"),
    ],
)
def test_a_node_created_is_judged_as_a_change_from_an_unlabelled_node(
    labels: Labels, policy: Obj, flagged: bool
) -> None:
    created = request("CREATE", with_labels(node(NODE), labels))
    assert bool(check(created, state_of(policy, WIN11))) is flagged


def test_an_update_without_its_old_node_is_not_judged() -> None:
    new, _ = relabel(PASSTHROUGH, CONTAINER)
    assert check(request("UPDATE", new, None), state_of(PASSTHROUGH_DEFAULT, WIN11)) == ()

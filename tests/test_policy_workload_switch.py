"""workload-switch-with-gpu-pods: a node moving to vm-passthrough/vm-vgpu under live CUDA pods."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from policies.cluster.workload import WORKLOAD_LABEL
from policies.rules.workload_switch import POLICY, check
from policies.vocabulary.verdicts import Action
from tests.builders import (
    Obj,
    cluster_policy,
    dev_mount_pod,
    env_pod,
    gpu_pod,
    judged_by,
    node,
    owned_by_daemonset,
    pod,
    request,
    state_of,
    with_labels,
)
from tests.test_policy_cc_mode import gpu_cluster

NODE = "gpu1"
RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
SANDBOX = cluster_policy(True, "container")
SANDBOX_PASSTHROUGH_DEFAULT = cluster_policy(True, "vm-passthrough")
SANDBOX_OFF = cluster_policy(False, "vm-passthrough")
RUNNING_GPU_POD = gpu_pod("train", NODE)


def relabel_request(old: str | None, new: str | None, name: str = NODE) -> tuple[Obj, Obj]:
    """(new, old) node objects for an UPDATE that moves the workload label from old to new."""
    base = node(name, allocatable={"nvidia.com/gpu": "2"})
    return with_labels(base, {WORKLOAD_LABEL: new}), with_labels(base, {WORKLOAD_LABEL: old})


def findings_for(objects: Sequence[Obj], old: str | None, new: str | None) -> list[str]:
    new_node, old_node = relabel_request(old, new)
    review = request("UPDATE", new_node, old_node)
    assert judged_by(POLICY, review)
    return [f.message for f in check(review, state_of(*objects))]


@pytest.mark.parametrize(
    ("objects", "old", "new"),
    [
        pytest.param(
            [SANDBOX, RUNNING_GPU_POD],
            "container",
            "vm-passthrough",
            id="a running GPU pod blocks container to vm-passthrough",
        ),
        pytest.param(
            [SANDBOX, RUNNING_GPU_POD],
            "container",
            "vm-vgpu",
            id="a running GPU pod blocks container to vm-vgpu",
        ),
        pytest.param(
            [SANDBOX, RUNNING_GPU_POD],
            None,
            "vm-passthrough",
            id="a running GPU pod blocks labelling an unlabelled node vm-passthrough",
        ),
        pytest.param(
            [SANDBOX, gpu_pod("train", NODE, phase="Pending", initialized=False)],
            "container",
            "vm-passthrough",
            id="a pending pod bound to the node blocks the switch",
        ),
        pytest.param(
            [SANDBOX, gpu_pod("train", NODE, phase="Unknown")],
            "container",
            "vm-passthrough",
            id="a pod in phase Unknown still blocks the switch",
        ),
        pytest.param(
            [SANDBOX, gpu_pod("train", NODE, terminating=True)],
            "container",
            "vm-passthrough",
            id="a terminating pod still blocks the switch",
        ),
        pytest.param(
            [SANDBOX, gpu_pod("infer", NODE, "nvidia.com/mig-1g.10gb")],
            "container",
            "vm-passthrough",
            id="a MIG pod blocks the switch",
        ),
        pytest.param(
            [SANDBOX, gpu_pod("notebook", NODE, "nvidia.com/gpu.shared")],
            "container",
            "vm-vgpu",
            id="a shared GPU pod blocks the switch",
        ),
        pytest.param(
            [
                SANDBOX,
                pod(
                    "warm",
                    NODE,
                    init_limits={"nvidia.com/gpu": "1"},
                    phase="Pending",
                    initialized=False,
                ),
            ],
            "container",
            "vm-passthrough",
            id="an init container GPU blocks the switch while the pod is initializing",
        ),
        pytest.param(
            [SANDBOX, pod("train", NODE, requests={"nvidia.com/gpu": "1"})],
            "container",
            "vm-passthrough",
            id="a GPU held through requests alone blocks the switch",
        ),
        pytest.param(
            [SANDBOX_PASSTHROUGH_DEFAULT, RUNNING_GPU_POD],
            "container",
            None,
            id="removing the label blocks when the ClusterPolicy default is vm-passthrough",
        ),
        pytest.param(
            [SANDBOX_PASSTHROUGH_DEFAULT, RUNNING_GPU_POD],
            "container",
            "vm-passthru",
            id="an invalid label value falls back to a vm-passthrough default and blocks",
        ),
        pytest.param(
            [RUNNING_GPU_POD],
            "container",
            "vm-passthrough",
            id="without a ClusterPolicy the new label is taken at face value and blocks",
        ),
    ],
)
def test_the_switch_is_denied(objects: list[Obj], old: str | None, new: str | None) -> None:
    messages = findings_for(objects, old, new)
    assert len(messages) == 1
    assert POLICY.default_action == Action.DENY


@pytest.mark.parametrize(
    ("objects", "old", "new"),
    [
        pytest.param(
            [SANDBOX, gpu_pod("train", NODE, phase="Succeeded")],
            "container",
            "vm-passthrough",
            id="a succeeded pod does not block the switch",
        ),
        pytest.param(
            [SANDBOX, gpu_pod("train", NODE, phase="Failed")],
            "container",
            "vm-passthrough",
            id="a failed pod does not block the switch",
        ),
        pytest.param(
            [SANDBOX, gpu_pod("virt-launcher-vm", NODE, RTX_5090)],
            "container",
            "vm-passthrough",
            id="a pod holding only a passthrough device does not block the switch",
        ),
        pytest.param(
            [SANDBOX, pod("web", NODE, limits={"cpu": "2"})],
            "container",
            "vm-passthrough",
            id="a pod without GPUs does not block the switch",
        ),
        pytest.param(
            [SANDBOX, pod("warm", NODE, init_limits={"nvidia.com/gpu": "1"}, initialized=True)],
            "container",
            "vm-passthrough",
            id="an init container GPU does not block once the pod is initialized",
        ),
        pytest.param(
            [SANDBOX, gpu_pod("train", "gpu2")],
            "container",
            "vm-passthrough",
            id="a GPU pod on another node does not block the switch",
        ),
        pytest.param(
            [SANDBOX, gpu_pod("train", "")],
            "container",
            "vm-passthrough",
            id="an unscheduled GPU pod does not block the switch",
        ),
        pytest.param(
            [SANDBOX], "container", "vm-passthrough", id="a node without pods switches freely"
        ),
        pytest.param(
            [SANDBOX, RUNNING_GPU_POD],
            "container",
            "container",
            id="an unchanged container label does not block",
        ),
        pytest.param(
            [SANDBOX, RUNNING_GPU_POD],
            "vm-passthrough",
            "vm-passthrough",
            id="an unchanged vm-passthrough label does not block",
        ),
        pytest.param(
            [SANDBOX, RUNNING_GPU_POD],
            "vm-passthrough",
            "container",
            id="moving vm-passthrough to container is out of this policy's scope",
        ),
        pytest.param(
            [SANDBOX, RUNNING_GPU_POD],
            "container",
            None,
            id="removing the label with a container default does not block",
        ),
        pytest.param(
            [SANDBOX_PASSTHROUGH_DEFAULT, RUNNING_GPU_POD],
            "vm-passthrough",
            None,
            id="removing a label equal to the vm-passthrough default changes nothing",
        ),
        pytest.param(
            [SANDBOX_PASSTHROUGH_DEFAULT, RUNNING_GPU_POD],
            None,
            "vm-passthrough",
            id="labelling a node with its vm-passthrough default changes nothing",
        ),
        pytest.param(
            [SANDBOX, RUNNING_GPU_POD],
            "container",
            "vm-passthru",
            id="an invalid label value falls back to a container default and does not block",
        ),
        pytest.param(
            [SANDBOX_OFF, RUNNING_GPU_POD],
            "container",
            "vm-passthrough",
            id="with sandbox workloads disabled every node stays container",
        ),
        pytest.param(
            [SANDBOX_OFF, RUNNING_GPU_POD],
            "container",
            None,
            id="with sandbox workloads disabled the vm-passthrough default is ignored",
        ),
    ],
)
def test_the_switch_is_allowed(objects: list[Obj], old: str | None, new: str | None) -> None:
    assert findings_for(objects, old, new) == []


# --- the message ----------------------------------------------------------------------------------


def test_the_message_names_the_pods_their_gpus_and_the_modes() -> None:
    (message,) = findings_for(
        [SANDBOX, gpu_pod("train", NODE), gpu_pod("infer", NODE, "nvidia.com/mig-1g.10gb")],
        "container",
        "vm-passthrough",
    )
    assert message.startswith(
        f"node {NODE} would move from container to vm-passthrough ({WORKLOAD_LABEL} set) "
        "while 2 pods use"
    )
    assert "ml/infer (nvidia.com/mig-1g.10gb: 1) and ml/train (nvidia.com/gpu: 1)" in message


def test_the_message_names_at_most_three_pods_then_counts_the_rest() -> None:
    pods = [gpu_pod(f"job-{i}", NODE) for i in range(5)]
    (message,) = findings_for([SANDBOX, *pods], "container", "vm-passthrough")
    assert "while 5 pods use its NVIDIA GPUs" in message
    assert (
        "ml/job-0 (nvidia.com/gpu: 1), ml/job-1 (nvidia.com/gpu: 1), "
        "ml/job-2 (nvidia.com/gpu: 1) and 2 more" in message
    )
    assert "job-3" not in message
    assert "job-4" not in message


def test_the_message_says_vfio_manager_rebinds_every_gpu_and_to_cordon_the_node_first() -> None:
    (message,) = findings_for([SANDBOX, RUNNING_GPU_POD], "container", "vm-passthrough")
    assert f"vfio-manager will rebind every NVIDIA GPU on {NODE} to vfio-pci" in message
    assert message.endswith(
        f"First cordon {NODE} (kubectl cordon {NODE}), drain its GPU pods or wait for them to "
        "finish, then change the label."
    )
    assert "while 1 pod uses its NVIDIA GPUs: ml/train (nvidia.com/gpu: 1). " in message


def test_a_mode_a_node_had_from_the_default_is_said_to_come_from_it() -> None:
    (message,) = findings_for([SANDBOX_PASSTHROUGH_DEFAULT, RUNNING_GPU_POD], None, "vm-vgpu")
    assert message.startswith(
        f"node {NODE} would move from vm-passthrough (ClusterPolicy default) to vm-vgpu "
    )


def test_the_message_marks_terminating_pods() -> None:
    (message,) = findings_for(
        [SANDBOX, gpu_pod("train", NODE, terminating=True)], "container", "vm-passthrough"
    )
    assert "ml/train (nvidia.com/gpu: 1, terminating)" in message


def test_the_message_says_when_a_removed_label_falls_back_to_the_default() -> None:
    (message,) = findings_for([SANDBOX_PASSTHROUGH_DEFAULT, RUNNING_GPU_POD], "container", None)
    assert message.startswith(
        f"node {NODE} would move from container to vm-passthrough (ClusterPolicy default) "
        f"({WORKLOAD_LABEL} removed)"
    )


def test_the_remediation_cordons_drains_and_then_relabels() -> None:
    new_node, old_node = relabel_request("container", "vm-vgpu")
    (finding,) = check(request("UPDATE", new_node, old_node), state_of(SANDBOX, RUNNING_GPU_POD))
    assert finding.remediation == (
        f"kubectl cordon {NODE}",
        "drain or wait for: ml/train",
        f"kubectl label node {NODE} {WORKLOAD_LABEL}=vm-vgpu --overwrite",
    )
    assert finding.max_action is None
    assert finding.confirm_pods_on == NODE


@pytest.mark.parametrize(
    ("users", "named"),
    [
        pytest.param(
            [env_pod("notebook", NODE)],
            "ml/notebook (env NVIDIA_VISIBLE_DEVICES=all with runtimeClassName nvidia)",
            id="a runtime-class pod without a request",
        ),
        pytest.param(
            [dev_mount_pod("probe", NODE)],
            "ml/probe (privileged, mounts /dev/nvidia0 from the host)",
            id="a privileged pod mounting a GPU device from the host",
        ),
    ],
)
def test_pods_reaching_gpus_unasked_are_named_with_how(users: list[Obj], named: str) -> None:
    (message,) = findings_for([SANDBOX, *users], "container", "vm-passthrough")
    assert f"1 pod uses its NVIDIA GPUs: {named}." in message


def test_a_daemonset_user_still_blocks_the_switch_and_the_remediation_says_drain_leaves_it() -> (
    None
):
    agent = owned_by_daemonset(env_pod("agent", NODE, namespace="mon"))
    new_node, old_node = relabel_request("container", "vm-passthrough")
    state = state_of(SANDBOX, RUNNING_GPU_POD, agent)
    (finding,) = check(request("UPDATE", new_node, old_node), state)
    assert "DaemonSet: drain leaves it" in finding.message
    assert finding.remediation == (
        f"kubectl cordon {NODE}",
        "drain or wait for: ml/train",
        "drain leaves DaemonSet pods mon/agent: give their DaemonSet a nodeSelector or affinity "
        f"{NODE} does not match, and wait for them to go",
        f"kubectl label node {NODE} {WORKLOAD_LABEL}=vm-passthrough --overwrite",
    )


def test_the_gpu_operators_own_operands_never_block_the_switch() -> None:
    operand = env_pod("nvidia-dcgm-exporter-x2x7q", NODE, namespace="gpu-operator")
    operand["metadata"]["labels"] = {"app": "nvidia-dcgm-exporter"}
    assert findings_for([SANDBOX, owned_by_daemonset(operand)], "container", "vm-passthrough") == []


# --- scope ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operation", "sub_resource", "applies"),
    [
        pytest.param("UPDATE", "", True, id="a node update is judged"),
        pytest.param("CREATE", "", True, id="a node create is judged against its pods"),
        pytest.param("DELETE", "", False, id="a node delete is out of scope"),
        pytest.param("UPDATE", "status", True, id="a label write through nodes/status is judged"),
    ],
)
def test_scope(operation: str, sub_resource: str, applies: bool) -> None:
    new_node, old_node = relabel_request("container", "vm-passthrough")
    old = None if operation == "CREATE" else old_node
    obj = None if operation == "DELETE" else new_node
    review = request(operation, obj, old, sub_resource=sub_resource)
    assert judged_by(POLICY, review) is applies


def test_a_pod_update_is_out_of_scope() -> None:
    assert not judged_by(POLICY, request("UPDATE", RUNNING_GPU_POD, RUNNING_GPU_POD))


def test_a_request_without_the_old_object_is_not_judged() -> None:
    new_node, _ = relabel_request("container", "vm-passthrough")
    assert check(request("UPDATE", new_node, None), state_of(SANDBOX, RUNNING_GPU_POD)) == ()


@pytest.mark.parametrize(
    ("labels", "objects", "denied"),
    [
        pytest.param(
            {WORKLOAD_LABEL: "vm-passthrough"},
            [SANDBOX, RUNNING_GPU_POD],
            True,
            id="vm-passthrough",
        ),
        pytest.param(
            {},
            [SANDBOX_PASSTHROUGH_DEFAULT, RUNNING_GPU_POD],
            True,
            id="unlabelled under a vm-passthrough default",
        ),
        pytest.param(
            {WORKLOAD_LABEL: "vm-passthrough"},
            [SANDBOX_PASSTHROUGH_DEFAULT, RUNNING_GPU_POD],
            True,
            id="the default's own mode: a new node had no mode before",
        ),
        pytest.param(
            {WORKLOAD_LABEL: "container"}, [SANDBOX, RUNNING_GPU_POD], False, id="container"
        ),
        pytest.param(
            {WORKLOAD_LABEL: "vm-passthrough"}, [SANDBOX], False, id="nothing bound there"
        ),
    ],
)
def test_a_node_created_is_judged_against_the_gpu_pods_bound_to_its_name(
    labels: dict[str, str], objects: list[Obj], denied: bool
) -> None:
    created = request("CREATE", node(NODE, labels=labels))
    assert bool(check(created, state_of(*objects))) is denied


@pytest.mark.parametrize(
    ("labels", "how"),
    [({WORKLOAD_LABEL: "vm-passthrough"}, "set"), ({}, "absent")],
    ids=["labelled", "unlabelled"],
)
def test_a_created_node_is_named_as_created(labels: dict[str, str], how: str) -> None:
    created = request("CREATE", node(NODE, labels=labels))
    (finding,) = check(created, state_of(SANDBOX_PASSTHROUGH_DEFAULT, RUNNING_GPU_POD))
    assert finding.message.startswith(f"node {NODE} would be created in vm-passthrough"), finding
    assert finding.message.endswith(
        f"({WORKLOAD_LABEL} {how}) while 1 pod uses its NVIDIA GPUs: ml/train (nvidia.com/gpu: 1)."
        f" vfio-manager will rebind every NVIDIA GPU on {NODE} to vfio-pci and kill them. Create "
        "it labelled container, wait for its GPU pods to end, then relabel it."
    ), finding.message
    assert finding.remediation == (
        f"create {NODE} with {WORKLOAD_LABEL}=container",
        "wait for: ml/train",
        f"kubectl label node {NODE} {WORKLOAD_LABEL}=vm-passthrough --overwrite",
    )


@pytest.mark.parametrize(
    ("objects", "denied"),
    [
        pytest.param([gpu_cluster(), RUNNING_GPU_POD], False, id="a GPUCluster alone ignores it"),
        pytest.param(
            [SANDBOX, gpu_cluster(), RUNNING_GPU_POD],
            True,
            id="beside a ClusterPolicy it is read as the ClusterPolicy reads it",
        ),
    ],
)
def test_the_label_is_judged_unless_a_gpucluster_alone_runs_the_operator(
    objects: list[Obj], denied: bool
) -> None:
    assert bool(findings_for(objects, "container", "vm-passthrough")) is denied


def test_a_created_node_asks_to_wait_for_every_gpu_pod_bound_to_its_name() -> None:
    created = request("CREATE", node(NODE, labels={WORKLOAD_LABEL: "vm-passthrough"}))
    pods = state_of(SANDBOX, RUNNING_GPU_POD, gpu_pod("infer", NODE))
    (finding,) = check(created, pods)
    assert finding.remediation == (
        f"create {NODE} with {WORKLOAD_LABEL}=container",
        "wait for: ml/infer, ml/train",
        f"kubectl label node {NODE} {WORKLOAD_LABEL}=vm-passthrough --overwrite",
    )

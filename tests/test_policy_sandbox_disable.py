"""sandbox-disable-with-live-vms: ClusterPolicy changes that move nodes' modes under workloads."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from policies.cluster.workload import GPU_PRESENT_LABEL, WORKLOAD_LABEL
from policies.rules.sandbox_disable import POLICY, check
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import (
    Obj,
    cluster_policy,
    gpu_pod,
    judged_by,
    kata_pod,
    node,
    owned_vmi,
    request,
    state_of,
    with_spec,
)
from webhook.engine import Engine

RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
ON = cluster_policy(True, "container")
OFF = cluster_policy(False, "container")
ON_PASSTHROUGH = cluster_policy(True, "vm-passthrough")
OFF_PASSTHROUGH = cluster_policy(False, "vm-passthrough")
ON_VGPU = cluster_policy(True, "vm-vgpu")


def gpu_node(name: str, mode: str | None = None) -> Obj:
    labels = {GPU_PRESENT_LABEL: "true"}
    if mode is not None:
        labels[WORKLOAD_LABEL] = mode
    return node(name, labels=labels, allocatable={"nvidia.com/gpu": "1"})


TOWER1 = gpu_node("tower1", "vm-passthrough")
UNLABELLED = gpu_node("omen1")
CONTAINER_NODE = gpu_node("omen3", "container")
WIN11 = owned_vmi("win11-gaming", "tower1", gpus=[RTX_3090])
VM_ON_UNLABELLED = owned_vmi("rhel9", "omen1", gpus=[RTX_3090])
TRAIN_ON_UNLABELLED = gpu_pod("train", "omen1")


def change(old: Obj, new: Obj) -> AdmissionRequest:
    return request("UPDATE", new, old)


def findings(review: AdmissionRequest, objects: Sequence[Obj]) -> list[Finding]:
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


@pytest.mark.parametrize(
    ("review", "objects", "start"),
    [
        pytest.param(
            change(ON, OFF),
            [TOWER1, WIN11],
            "sandboxWorkloads.enabled true -> false moves tower1 (vm-passthrough -> container)",
            id="disabling sandbox workloads under a VM on a vm-passthrough node",
        ),
        pytest.param(
            change(ON_PASSTHROUGH, OFF_PASSTHROUGH),
            [UNLABELLED, VM_ON_UNLABELLED],
            "sandboxWorkloads.enabled true -> false moves omen1 (vm-passthrough -> container)",
            id="disabling sandbox workloads under a VM on an unlabelled node in the default mode",
        ),
        pytest.param(
            change(ON_PASSTHROUGH, ON),
            [UNLABELLED, VM_ON_UNLABELLED],
            "defaultWorkload vm-passthrough -> container moves omen1 (vm-passthrough -> container)",
            id="a default moving to container under a VM on an unlabelled node",
        ),
        pytest.param(
            change(ON_PASSTHROUGH, ON_VGPU),
            [UNLABELLED, VM_ON_UNLABELLED],
            "defaultWorkload vm-passthrough -> vm-vgpu moves omen1 (vm-passthrough -> vm-vgpu)",
            id="a default moving from vm-passthrough to vm-vgpu also removes vfio-manager",
        ),
        pytest.param(
            change(ON, ON_PASSTHROUGH),
            [UNLABELLED, TRAIN_ON_UNLABELLED],
            "defaultWorkload container -> vm-passthrough moves omen1 (container -> vm-passthrough)",
            id="a default moving to vm-passthrough under a GPU pod on an unlabelled node",
        ),
        pytest.param(
            change(ON, ON_VGPU),
            [UNLABELLED, TRAIN_ON_UNLABELLED],
            "defaultWorkload container -> vm-vgpu moves omen1 (container -> vm-vgpu)",
            id="a default moving to vm-vgpu under a GPU pod",
        ),
        pytest.param(
            change(OFF_PASSTHROUGH, ON_PASSTHROUGH),
            [UNLABELLED, TRAIN_ON_UNLABELLED],
            "sandboxWorkloads.enabled false -> true moves omen1 (container -> vm-passthrough)",
            id="enabling sandbox workloads with a vm-passthrough default under a GPU pod",
        ),
        pytest.param(
            change(OFF, ON),
            [TOWER1, gpu_pod("train", "tower1")],
            "sandboxWorkloads.enabled false -> true moves tower1 (container -> vm-passthrough)",
            id="enabling sandbox workloads under a GPU pod on a node labelled vm-passthrough",
        ),
        pytest.param(
            change(ON, ON_PASSTHROUGH),
            [gpu_node("omen1", "bogus"), TRAIN_ON_UNLABELLED],
            "defaultWorkload container -> vm-passthrough moves omen1",
            id="a node with an invalid label follows the default",
        ),
        pytest.param(
            change(ON, ON_PASSTHROUGH),
            [
                node("omen1", labels={"feature.node.kubernetes.io/pci-10de.present": "true"}),
                TRAIN_ON_UNLABELLED,
            ],
            "defaultWorkload container -> vm-passthrough moves omen1",
            id="a node known as a GPU node by its NFD label alone",
        ),
        pytest.param(
            change(ON, ON_PASSTHROUGH),
            [UNLABELLED, gpu_pod("train", "omen1", terminating=True)],
            "defaultWorkload container -> vm-passthrough moves omen1",
            id="a terminating GPU pod still holds its GPU",
        ),
    ],
)
def test_moving_nodes_under_their_workloads_is_denied(
    review: AdmissionRequest, objects: list[Obj], start: str
) -> None:
    (finding,) = findings(review, objects)
    assert finding.message.startswith(start)
    assert POLICY.default_action == Action.DENY


@pytest.mark.parametrize(
    ("review", "objects"),
    [
        pytest.param(change(ON, OFF), [TOWER1], id="disabling with no VMs running"),
        pytest.param(
            change(ON, OFF),
            [TOWER1, owned_vmi("done", "tower1", gpus=[RTX_3090], phase="Succeeded")],
            id="disabling with only a finished VMI",
        ),
        pytest.param(
            change(ON, OFF),
            [TOWER1, owned_vmi("plain", "tower1")],
            id="disabling under a VM without devices",
        ),
        pytest.param(
            change(ON, OFF),
            [CONTAINER_NODE, owned_vmi("vm", "omen3", gpus=[RTX_3090])],
            id="a node labelled container stays container",
        ),
        pytest.param(
            change(ON, OFF),
            [UNLABELLED, TRAIN_ON_UNLABELLED],
            id="disabling under GPU pods: container nodes stay container",
        ),
        pytest.param(
            change(ON, ON_PASSTHROUGH),
            [CONTAINER_NODE, gpu_pod("train", "omen3")],
            id="a default change does not reach a node labelled container",
        ),
        pytest.param(
            change(ON, ON_PASSTHROUGH),
            [TOWER1, WIN11],
            id="a default change does not reach a node labelled vm-passthrough",
        ),
        pytest.param(
            change(ON, ON_PASSTHROUGH),
            [UNLABELLED, gpu_pod("train", "omen1", phase="Succeeded")],
            id="a finished GPU pod holds nothing",
        ),
        pytest.param(
            change(ON, ON_PASSTHROUGH),
            [node("cpu1"), gpu_pod("odd", "cpu1")],
            id="a node without GPUs is no GPU node",
        ),
        pytest.param(
            change(ON_PASSTHROUGH, ON),
            [UNLABELLED, TRAIN_ON_UNLABELLED],
            id="moving GPU pods' nodes to container hurts no pod",
        ),
        pytest.param(
            change(OFF, OFF_PASSTHROUGH),
            [UNLABELLED, TRAIN_ON_UNLABELLED],
            id="a default change while sandbox workloads are off",
        ),
        pytest.param(
            change(ON, with_spec(ON, {"driver": {"enabled": False}})),
            [TOWER1, WIN11, UNLABELLED, TRAIN_ON_UNLABELLED],
            id="an unrelated edit",
        ),
    ],
)
def test_everything_else_is_allowed(review: AdmissionRequest, objects: list[Obj]) -> None:
    assert findings(review, objects) == []


def test_the_vm_message_names_the_nodes_the_vms_and_the_safe_step() -> None:
    objects = [TOWER1, WIN11, owned_vmi("rhel9", "tower1", host_devices=[RTX_3090])]
    (finding,) = findings(change(ON, OFF), objects)
    assert finding.message == (
        "sandboxWorkloads.enabled true -> false moves tower1 (vm-passthrough -> container) under "
        "live GPU VMs vms/rhel9 and vms/win11-gaming: the sandbox plugin goes, vfio-manager "
        "unbinds their GPUs. Stop the VMs first."
    )
    assert len(f"[{POLICY.id}] {finding.message}") <= 256
    assert finding.remediation == (
        "virtctl stop rhel9 -n vms",
        "virtctl stop win11-gaming -n vms",
    )
    assert finding.confirm_pods_on == ""


def test_a_default_change_suggests_pinning_the_nodes_mode() -> None:
    (finding,) = findings(change(ON_PASSTHROUGH, ON), [UNLABELLED, VM_ON_UNLABELLED])
    assert finding.remediation == (
        "virtctl stop rhel9 -n vms",
        f"or pin each node's mode first: kubectl label node omen1 {WORKLOAD_LABEL}=vm-passthrough",
    )


def test_the_pod_message_names_the_node_the_pods_and_the_safe_step() -> None:
    objects = [UNLABELLED, TRAIN_ON_UNLABELLED, gpu_pod("infer", "omen1")]
    (finding,) = findings(change(ON, ON_PASSTHROUGH), objects)
    assert finding.message == (
        "defaultWorkload container -> vm-passthrough moves omen1 (container -> vm-passthrough) "
        "under GPU pods ml/infer and ml/train: vfio-manager would bind its GPUs to vfio-pci, "
        "killing them. Label omen1 container first."
    )
    assert len(f"[{POLICY.id}] {finding.message}") <= 256
    assert finding.confirm_pods_on == "omen1"
    assert finding.remediation == (f"kubectl label node omen1 {WORKLOAD_LABEL}=container",)


def test_pods_on_many_nodes_get_a_finding_per_node_then_one_for_the_rest() -> None:
    objects: list[Obj] = []
    for i in range(5):
        objects += [gpu_node(f"gpu{i}"), gpu_pod(f"train-{i}", f"gpu{i}")]
    found = findings(change(ON, ON_PASSTHROUGH), objects)
    assert [f.confirm_pods_on for f in found] == ["gpu0", "gpu1", "gpu2", ""]
    assert found[-1].message == (
        "defaultWorkload container -> vm-passthrough also moves 2 more nodes into a VM mode under "
        "2 GPU pods: gpu3 and gpu4. Label them with their mode first."
    )
    assert found[-1].remediation == (
        f"kubectl label node gpu3 {WORKLOAD_LABEL}=container",
        f"kubectl label node gpu4 {WORKLOAD_LABEL}=container",
    )


def test_a_change_of_both_settings_names_both() -> None:
    (finding,) = findings(change(ON_PASSTHROUGH, OFF), [TOWER1, WIN11])
    assert finding.message.startswith(
        "sandboxWorkloads.enabled true -> false and defaultWorkload vm-passthrough -> container "
        "moves tower1 (vm-passthrough -> container) under live GPU VMs vms/win11-gaming: "
    )


def test_a_node_moving_between_vm_modes_is_checked_for_both_hazards() -> None:
    # vm-vgpu -> vm-passthrough: the vGPU operands leave under the VM, vfio-manager arrives
    # under the pod.
    objects = [UNLABELLED, VM_ON_UNLABELLED, TRAIN_ON_UNLABELLED]
    vm_finding, pod_finding = findings(change(ON_VGPU, ON_PASSTHROUGH), objects)
    assert "under live GPU VMs vms/rhel9" in vm_finding.message
    assert "under GPU pods ml/train" in pod_finding.message
    assert pod_finding.confirm_pods_on == "omen1"


def test_only_nodes_whose_mode_moves_are_named() -> None:
    objects = [TOWER1, WIN11, gpu_pod("train", "tower1"), UNLABELLED, VM_ON_UNLABELLED]
    (finding,) = findings(change(ON_PASSTHROUGH, ON), objects)
    assert "omen1" in finding.message
    assert "tower1" not in finding.message


@pytest.mark.parametrize(
    ("review", "applies"),
    [
        pytest.param(change(ON, OFF), True, id="a ClusterPolicy update is judged"),
        pytest.param(request("CREATE", ON), True, id="a ClusterPolicy create is judged"),
        pytest.param(request("DELETE", None, ON), False, id="a ClusterPolicy delete is not"),
        pytest.param(
            request("UPDATE", OFF, ON, sub_resource="status"),
            False,
            id="the status subresource is not",
        ),
    ],
)
def test_scope(review: AdmissionRequest, applies: bool) -> None:
    assert judged_by(POLICY, review) is applies


def test_the_engine_denies_by_default() -> None:
    decision = Engine().evaluate(change(ON, OFF), state_of(TOWER1, WIN11))
    assert [(v.policy, v.action) for v in decision.verdicts] == [(POLICY.id, Action.DENY)]
    assert not decision.allowed


KATA = with_spec(
    ON, {"sandboxWorkloads": {"enabled": True, "defaultWorkload": "container", "mode": "kata"}}
)


def test_a_sandbox_mode_switch_to_kata_under_live_vms_is_denied_naming_them() -> None:
    (finding,) = findings(change(ON, KATA), [TOWER1, WIN11, CONTAINER_NODE])
    assert finding.message == (
        "sandboxWorkloads.mode kubevirt -> kata swaps the sandbox device plugin of tower1 "
        "under live GPU VMs "
        f"vms/win11-gaming ({RTX_3090}): the plugin serving them goes, and a restart "
        "finds no provider. Stop them first."
    )
    assert finding.remediation == ("virtctl stop win11-gaming -n vms",)


def test_a_sandbox_mode_switch_back_to_kubevirt_judges_the_kata_pods() -> None:

    objects = [TOWER1, WIN11, kata_pod("cc-job", "tower1", namespace="cc")]
    (finding,) = findings(change(KATA, ON), objects)
    assert "under Kata pods cc/cc-job (Kata pod: nvidia.com/pgpu: 1)" in finding.message
    assert finding.remediation == ("kubectl delete pod cc-job -n cc",)
    assert findings(change(KATA, ON), [TOWER1, WIN11]) == []


def test_a_sandbox_mode_switch_reaches_unlabelled_nodes_the_default_makes_passthrough() -> None:
    kata_default = with_spec(
        KATA,
        {
            "sandboxWorkloads": {
                "enabled": True,
                "defaultWorkload": "vm-passthrough",
                "mode": "kata",
            }
        },
    )
    (finding,) = findings(change(ON_PASSTHROUGH, kata_default), [UNLABELLED, VM_ON_UNLABELLED])
    assert "swaps the sandbox device plugin of omen1" in finding.message
    assert findings(change(ON, KATA), [UNLABELLED, VM_ON_UNLABELLED]) == []


def test_a_swapped_node_listed_first_does_not_hide_the_nodes_after_it() -> None:
    first = gpu_node("a-pt", "vm-passthrough")
    vm_there = owned_vmi("desk", "a-pt", gpus=[RTX_3090])
    kata_default = with_spec(
        KATA,
        {
            "sandboxWorkloads": {
                "enabled": True,
                "defaultWorkload": "vm-passthrough",
                "mode": "kata",
            }
        },
    )
    swap, pods = findings(
        change(ON, kata_default), [first, vm_there, UNLABELLED, TRAIN_ON_UNLABELLED]
    )
    assert "swaps the sandbox device plugin of a-pt under live GPU VMs" in swap.message
    assert pods.confirm_pods_on == "omen1"
    assert "moves omen1 (container -> vm-passthrough) under GPU pods ml/train" in pods.message


def test_kata_pods_on_a_node_leaving_its_vm_mode_are_told_to_stop_too() -> None:
    (finding,) = findings(change(ON, OFF), [TOWER1, kata_pod("cc-job", "tower1", namespace="cc")])
    assert finding.message == (
        "sandboxWorkloads.enabled true -> false moves tower1 (vm-passthrough -> container) under "
        "Kata pods cc/cc-job: the sandbox plugin goes, vfio-manager unbinds their GPUs. Stop them "
        "first."
    )
    assert finding.remediation == ("kubectl delete pod cc-job -n cc",)


def named(obj: Obj, name: str, created: str) -> Obj:
    return {**obj, "metadata": {"name": name, "creationTimestamp": created}}


OLDEST = named(ON, "cluster-policy", "2025-01-01T00:00:00Z")
YOUNGER = named(ON, "bootstrap-policy", "2026-01-01T00:00:00Z")


@pytest.mark.parametrize(
    ("version", "judged"),
    [("v26.7.0", False), ("26.3.1", True), ("", True)],
    ids=[
        "from 26.7 a younger ClusterPolicy is not in force: its change moves nothing",
        "26.3 may act on any: judged",
        "an unknown version may act on any: judged",
    ],
)
def test_a_change_to_a_cluster_policy_counts_only_if_the_operator_may_act_on_it(
    version: str, judged: bool
) -> None:
    state = state_of(OLDEST, YOUNGER, TOWER1, WIN11)
    state.follow_gpu_operator_version(lambda: version)
    review = change(YOUNGER, named(OFF, "bootstrap-policy", "2026-01-01T00:00:00Z"))
    assert bool(check(review, state)) is judged
    # The one in force is judged whatever the version.
    assert check(change(OLDEST, named(OFF, "cluster-policy", "2025-01-01T00:00:00Z")), state)


SECOND = {**ON_PASSTHROUGH, "metadata": {"name": "second"}}


@pytest.mark.parametrize(
    ("in_force", "flagged"),
    [
        pytest.param((), True, id="none in force: no node ran a VM mode"),
        pytest.param((OFF,), True, id="beside one with sandbox workloads off"),
        pytest.param((ON_PASSTHROUGH,), False, id="the same settings as the one in force"),
    ],
)
def test_a_clusterpolicy_created_is_judged_against_the_one_in_force_or_none(
    in_force: tuple[Obj, ...], flagged: bool
) -> None:
    created = request("CREATE", SECOND)
    found = check(created, state_of(UNLABELLED, TRAIN_ON_UNLABELLED, *in_force))
    assert bool(found) is flagged
    if flagged:
        assert found[0].message.startswith(
            "a new ClusterPolicy second (sandboxWorkloads.enabled false -> true and "
            "defaultWorkload container -> vm-passthrough) moves omen1 (container -> "
            "vm-passthrough) under GPU pods"
        ), found[0].message


def test_an_update_without_its_old_clusterpolicy_is_not_judged() -> None:
    assert check(request("UPDATE", OFF, None), state_of(ON, TOWER1, WIN11)) == ()


def test_from_26_7_a_clusterpolicy_created_beside_another_is_never_in_force() -> None:
    state = state_of(UNLABELLED, TRAIN_ON_UNLABELLED, OLDEST)
    state.follow_gpu_operator_version(lambda: "v26.7.0")
    assert check(request("CREATE", SECOND), state) == ()
    state.follow_gpu_operator_version(lambda: "26.3.1")
    assert check(request("CREATE", SECOND), state)  # the operator may act on either

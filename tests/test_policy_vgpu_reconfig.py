"""vgpu-reconfig-with-live-vms: a vGPU profile change under the VMs that hold the node's vGPUs."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from policies.cluster.workload import VGPU_CONFIG_LABEL, WORKLOAD_LABEL
from policies.rules.vgpu_reconfig import POLICY, check
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import (
    Obj,
    cluster_policy,
    judged_by,
    kubevirt,
    node,
    request,
    state_of,
    vmi,
    with_labels,
)
from webhook.engine import Engine

NODE = "gpu-a10-1"
A10_12Q = "nvidia.com/NVIDIA_A10-12Q"
PERMITTED = kubevirt(mdevs=[("NVIDIA A10-12Q", A10_12Q)])
DESKTOP = vmi("desktop-0", node_name=NODE, gpus=[A10_12Q], namespace="vdi", owner="desktop-0")


def profile_change(old: str | None, new: str | None, mode: str = "vm-vgpu") -> tuple[Obj, Obj]:
    base = node(NODE, labels={WORKLOAD_LABEL: mode}, allocatable={A10_12Q: "2"})
    return with_labels(base, {VGPU_CONFIG_LABEL: new}), with_labels(base, {VGPU_CONFIG_LABEL: old})


def findings(
    objects: Sequence[Obj], old: str | None, new: str | None, mode: str = "vm-vgpu"
) -> list[Finding]:
    review = request("UPDATE", *profile_change(old, new, mode))
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


@pytest.mark.parametrize(
    ("objects", "old", "new", "mode"),
    [
        pytest.param([PERMITTED, DESKTOP], "A10-12Q", "A10-4Q", "vm-vgpu", id="a changed profile"),
        pytest.param([PERMITTED, DESKTOP], None, "A10-4Q", "vm-vgpu", id="a profile set at last"),
        pytest.param(
            [DESKTOP], "A10-12Q", "A10-4Q", "vm-vgpu", id="no KubeVirt CR: the vm-vgpu mode says"
        ),
        pytest.param(
            [PERMITTED, DESKTOP],
            "A10-12Q",
            "A10-4Q",
            "",
            id="a permitted mdev tells without a mode label",
        ),
        pytest.param(
            [
                PERMITTED,
                vmi("desktop-0", node_name=NODE, host_devices=[A10_12Q], namespace="vdi"),
            ],
            "A10-12Q",
            "A10-4Q",
            "vm-vgpu",
            id="a vGPU in hostDevices counts",
        ),
    ],
)
def test_a_profile_change_under_a_running_vm_is_denied(
    objects: list[Obj], old: str | None, new: str | None, mode: str
) -> None:
    (finding,) = findings(objects, old, new, mode)
    assert finding.max_action is None
    assert POLICY.default_action == Action.DENY


@pytest.mark.parametrize(
    ("objects", "old", "new"),
    [
        pytest.param([PERMITTED], "A10-12Q", "A10-4Q", id="an idle node"),
        pytest.param(
            [PERMITTED, vmi("desktop-0", node_name=NODE, gpus=[A10_12Q], phase="Succeeded")],
            "A10-12Q",
            "A10-4Q",
            id="a VMI that has finished holds nothing",
        ),
        pytest.param(
            [PERMITTED, vmi("desktop-0", node_name="gpu-a10-2", gpus=[A10_12Q])],
            "A10-12Q",
            "A10-4Q",
            id="VMs on another node",
        ),
        pytest.param(
            [PERMITTED, vmi("plain", node_name=NODE)], "A10-12Q", "A10-4Q", id="a VMI without GPUs"
        ),
        pytest.param([PERMITTED, DESKTOP], "A10-12Q", "A10-12Q", id="an unchanged profile"),
        pytest.param([PERMITTED, DESKTOP], None, None, id="an update that leaves the label be"),
    ],
)
def test_everything_else_is_allowed(objects: list[Obj], old: str | None, new: str | None) -> None:
    assert findings(objects, old, new) == []


def test_a_passthrough_gpu_on_a_passthrough_node_is_no_vgpu() -> None:
    passthrough = vmi("win11", node_name=NODE, gpus=["nvidia.com/GA102GL_A10"])
    assert findings([PERMITTED, passthrough], "A10-12Q", "A10-4Q", "vm-passthrough") == []


def test_the_device_managers_state_label_is_not_a_profile_change() -> None:
    base = node(NODE, labels={WORKLOAD_LABEL: "vm-vgpu", VGPU_CONFIG_LABEL: "A10-12Q"})
    review = request("UPDATE", with_labels(base, {"nvidia.com/vgpu.config.state": "success"}), base)
    assert not check(review, state_of(PERMITTED, DESKTOP))


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        pytest.param("A10-12Q", "A10-4Q", "A10-12Q -> A10-4Q", id="changed"),
        pytest.param(None, "A10-4Q", "set to A10-4Q", id="set"),
    ],
)
def test_the_deny_names_the_profiles_the_vmis_and_the_safe_step(
    old: str | None, new: str | None, said: str
) -> None:
    other = vmi("desktop-1", node_name=NODE, gpus=[A10_12Q], namespace="vdi")
    (finding,) = findings([PERMITTED, DESKTOP, other], old, new)
    assert finding.message.startswith(
        f"{VGPU_CONFIG_LABEL} {said} on {NODE} under 2 live VMIs (vdi/desktop-0 and vdi/desktop-1)"
    )
    assert "deletes the GPU's mdevs, in use or not" in finding.message
    assert finding.message.endswith("Stop or migrate the VMs first.")
    assert len(f"[{POLICY.id}] {finding.message}") <= 256
    assert finding.chain == (
        f"vdi/desktop-0 ({A10_12Q}) on {NODE}",
        f"vdi/desktop-1 ({A10_12Q}) on {NODE}",
    )
    assert finding.remediation == (
        "virtctl stop desktop-0 -n vdi",
        "virtctl stop desktop-1 -n vdi",
        f"kubectl label node {NODE} {VGPU_CONFIG_LABEL}={new} --overwrite",
        f"wait for nvidia.com/vgpu.config.state=success on {NODE}, then start the VMs",
    )


def test_a_vmi_kubevirt_may_migrate_is_migrated_rather_than_stopped() -> None:
    migratable = vmi("desktop-0", node_name=NODE, gpus=[A10_12Q], namespace="vdi")
    migratable["status"]["conditions"] = [{"type": "LiveMigratable", "status": "True"}]
    (finding,) = findings([PERMITTED, migratable], "A10-12Q", "A10-4Q")
    assert finding.remediation[0].startswith("virtctl migrate desktop-0 -n vdi (LiveMigratable")


@pytest.mark.parametrize(
    ("objects", "default"),
    [
        pytest.param([PERMITTED, DESKTOP], "default", id="the device manager's own default"),
        pytest.param(
            [
                PERMITTED,
                DESKTOP,
                {
                    **cluster_policy(True, "vm-vgpu"),
                    "spec": {
                        "sandboxWorkloads": {"enabled": True, "defaultWorkload": "vm-vgpu"},
                        "vgpuDeviceManager": {"config": {"default": "A10-24Q"}},
                    },
                },
            ],
            "A10-24Q",
            id="the ClusterPolicy's default config",
        ),
    ],
)
def test_removing_the_profile_only_warns_and_names_the_config_that_comes_next(
    objects: list[Obj], default: str
) -> None:
    (finding,) = findings(objects, "A10-12Q", None)
    assert finding.max_action == Action.WARN
    assert finding.message.startswith(
        f"{VGPU_CONFIG_LABEL} removed on {NODE} (was A10-12Q) under 1 live VMI (vdi/desktop-0)"
    )
    assert f"the vGPU Device Manager's next start applies config {default}." in finding.message
    assert finding.message.endswith("Keep the label, or stop the VMs first.")
    assert len(f"[{POLICY.id}] {finding.message}") <= 256
    assert finding.chain == (f"vdi/desktop-0 ({A10_12Q}) on {NODE}",)
    assert finding.remediation == (
        f"kubectl label node {NODE} {VGPU_CONFIG_LABEL}=A10-12Q --overwrite "
        "(to keep the profile named)",
        "virtctl stop desktop-0 -n vdi",
    )


def test_an_emptied_profile_is_a_removal() -> None:
    (finding,) = findings([PERMITTED, DESKTOP], "A10-12Q", "")
    assert finding.max_action == Action.WARN
    assert f"{VGPU_CONFIG_LABEL} emptied on {NODE}" in finding.message


@pytest.mark.parametrize(
    ("operation", "sub_resource", "applies"),
    [
        pytest.param("UPDATE", "", True, id="a node update is judged"),
        pytest.param("UPDATE", "status", True, id="a label write through nodes/status is judged"),
        pytest.param("DELETE", "", False, id="a node delete is out of scope"),
    ],
)
def test_scope(operation: str, sub_resource: str, applies: bool) -> None:
    new_node, old_node = profile_change("A10-12Q", "A10-4Q")
    obj = None if operation == "DELETE" else new_node
    assert (
        judged_by(POLICY, request(operation, obj, old_node, sub_resource=sub_resource)) is applies
    )


@pytest.mark.parametrize(
    ("new", "action"),
    [
        pytest.param("A10-4Q", Action.DENY, id="a change is denied"),
        pytest.param(None, Action.WARN, id="a removal warns"),
    ],
)
def test_the_engine_denies_a_change_and_warns_on_a_removal(new: str | None, action: Action) -> None:
    decision = Engine().evaluate(
        request("UPDATE", *profile_change("A10-12Q", new)), state_of(PERMITTED, DESKTOP)
    )
    assert [(v.policy, v.action) for v in decision.verdicts] == [(POLICY.id, action)]


def test_a_node_created_with_a_profile_is_judged_by_its_own_labels_against_the_vms_there() -> None:
    """No KubeVirt CR names the profile: only the new node's vm-vgpu label makes the VMI's
    NVIDIA device a vGPU of this node."""
    labels = {WORKLOAD_LABEL: "vm-vgpu", VGPU_CONFIG_LABEL: "A10-4Q"}
    created = request("CREATE", node(NODE, labels=labels, allocatable={A10_12Q: "2"}))
    (finding,) = check(created, state_of(DESKTOP))
    assert f"{VGPU_CONFIG_LABEL} " in finding.message and "A10-4Q on" in finding.message
    assert "vdi/desktop-0" in finding.message


def test_an_update_reads_the_vgpus_held_by_the_nodes_old_mode() -> None:
    """The profile changes as the node leaves vm-vgpu: the VMIs held vGPUs of the old mode."""
    base = node(NODE, allocatable={A10_12Q: "2"})
    old = with_labels(base, {WORKLOAD_LABEL: "vm-vgpu", VGPU_CONFIG_LABEL: "A10-12Q"})
    new = with_labels(base, {WORKLOAD_LABEL: "container", VGPU_CONFIG_LABEL: "A10-4Q"})
    assert len(check(request("UPDATE", new, old), state_of(DESKTOP))) == 1


def test_an_update_without_its_old_node_is_not_judged() -> None:
    new, _ = profile_change("A10-12Q", "A10-4Q")
    assert check(request("UPDATE", new, None), state_of(PERMITTED, DESKTOP)) == ()

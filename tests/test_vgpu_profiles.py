"""vGPU profiles in the answers: the profiles nodes offer and a did-you-mean for near misses where
a permitted mdev or a VM's vGPU has no provider, and vgpu-config-failed in the audit."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from policies.cluster.vgpu import looks_like_vgpu, profile_near_misses, profile_of, vgpu_nodes
from policies.cluster.workload import VGPU_CONFIG_LABEL, WORKLOAD_LABEL
from policies.diagnoses.vgpu import VGPU_CONFIG_FAILED_DIAGNOSIS
from policies.registry import diagnose_all
from policies.rules import passthrough_provider, permitted_hardware
from policies.vocabulary.audit import DiagnosisFinding
from policies.vocabulary.verdicts import Severity
from tests.builders import Obj, cluster_policy, kubevirt, node, pod, request, state_of, vm, vmi

NOW = datetime(2026, 10, 30, 12, 0, tzinfo=UTC)
A10_12Q = "nvidia.com/NVIDIA_A10-12Q"
STATE_LABEL = "nvidia.com/vgpu.config.state"
OFFER = (
    f"vGPU profiles on offer (node: {VGPU_CONFIG_LABEL}): {A10_12Q} on gpu-a10-1 (A10-12Q); "
    "none on gpu-a10-2 (A10-4Q)"
)


def vgpu_node(name: str, config: str | None, **allocatable: str) -> Obj:
    labels = {WORKLOAD_LABEL: "vm-vgpu"}
    if config is not None:
        labels[VGPU_CONFIG_LABEL] = config
    return node(name, labels=labels, allocatable=allocatable)


CLUSTER = [
    vgpu_node("gpu-a10-1", "A10-12Q", **{A10_12Q: "2"}),
    vgpu_node("gpu-a10-2", "A10-4Q"),  # relabelled, its plugin paused or failed: nothing yet
    node(
        "tower1",
        labels={WORKLOAD_LABEL: "vm-passthrough"},
        allocatable={"nvidia.com/GA102GL_A10": "1"},
    ),
    kubevirt([("10de:2236", "nvidia.com/GA102GL_A10")], mdevs=[("NVIDIA A10-12Q", A10_12Q)]),
]


@pytest.mark.parametrize(
    ("resource", "profile"),
    [
        (A10_12Q, "A10-12Q"),
        ("nvidia.com/GRID_T4-1Q", "T4-1Q"),
        ("nvidia.com/NVIDIA_RTX_Pro_6000_Blackwell_DC-48C", "DC-48C"),
        ("NVIDIA A10-12Q", "A10-12Q"),
        ("A10-12Q", "A10-12Q"),
    ],
)
def test_the_profile_is_what_follows_the_last_separator(resource: str, profile: str) -> None:
    assert profile_of(resource) == profile


@pytest.mark.parametrize(
    ("name", "vgpu"),
    [
        (A10_12Q, True),
        ("nvidia.com/GRID_T4-1Q", True),
        ("nvidia.com/NVIDIA_A100-1-5C", True),
        ("nvidia.com/GA102_GEFORCE_RTX_3090", False),
        ("nvidia.com/GH100_H100_SXM5_80GB", False),
        ("nvidia.com/TU104GL_Tesla_T4", False),
        ("nvidia.com/gpu", False),
        ("example.com/NVIDIA_A10-12Q", False),
    ],
)
def test_a_vgpu_name_is_told_from_a_passthrough_one_by_its_type(name: str, vgpu: bool) -> None:
    assert looks_like_vgpu(name) is vgpu


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        pytest.param("nvidia.com/A10-12Q", (A10_12Q,), id="the profile under nvidia.com"),
        pytest.param("A10-12Q", (A10_12Q,), id="the profile alone"),
        pytest.param("NVIDIA A10-12Q", (A10_12Q,), id="the sysfs name, as mdevNameSelector"),
        pytest.param("nvidia.com/nvidia_a10-12q", (A10_12Q,), id="another case"),
        pytest.param(A10_12Q, (), id="itself is no near miss"),
        pytest.param("nvidia.com/NVIDIA_A10-24Q", (), id="another profile"),
        pytest.param("nvidia.com/GA102GL_A10", (), id="the passthrough GPU"),
    ],
)
def test_near_misses_are_another_case_or_the_profile_spelt_short(
    name: str, meant: tuple[str, ...]
) -> None:
    assert profile_near_misses(name, vgpu_nodes(state_of(*CLUSTER))) == meant


def test_the_vgpu_nodes_are_the_vm_vgpu_ones_with_their_labels_and_mdevs() -> None:
    nodes = vgpu_nodes(state_of(*CLUSTER))
    assert [(n.name, n.config, n.resources) for n in nodes] == [
        ("gpu-a10-1", "A10-12Q", (A10_12Q,)),
        ("gpu-a10-2", "A10-4Q", ()),
    ]


def test_an_unlabelled_node_is_a_vgpu_node_when_the_clusterpolicy_default_is_vm_vgpu() -> None:
    unlabelled = node("gpu-a10-3", labels={"nvidia.com/gpu.present": "true"})
    for policy, expected in (
        (cluster_policy(True, "vm-vgpu"), ["gpu-a10-3"]),
        (cluster_policy(), []),
    ):
        assert [n.name for n in vgpu_nodes(state_of(unlabelled, policy))] == expected


# --- a VM's vGPU without a provider ---------------------------------------------------------


def vm_message(device: str) -> tuple[str, tuple[str, ...]]:
    (finding,) = passthrough_provider.check(
        request("CREATE", vm("desktop-9", gpus=[device])), state_of(*CLUSTER)
    )
    return finding.message, finding.remediation


def test_a_vm_asking_the_short_profile_is_told_the_resource_and_what_is_offered() -> None:
    message, remediation = vm_message("nvidia.com/A10-12Q")
    assert message.startswith(
        "nvidia.com/A10-12Q (gpus[gpu1]): no node advertises it; did you mean "
        f"{A10_12Q}? (the sandbox device plugin names the A10-12Q vGPU {A10_12Q})"
    )
    assert OFFER in message
    assert remediation[0] == f"set deviceName to {A10_12Q}"


def test_a_vm_asking_a_profile_no_node_makes_is_told_the_profiles_on_offer() -> None:
    message, remediation = vm_message("nvidia.com/NVIDIA_A10-24Q")
    assert "did you mean" not in message
    assert f"no node advertises it; {OFFER}" in message
    assert remediation[0] == (
        f"set deviceName to a vGPU on offer, or give a vm-vgpu node a {VGPU_CONFIG_LABEL} that "
        "creates A10-24Q (once no VM holds its vGPUs)"
    )


def test_a_miscased_vgpu_still_says_names_are_case_sensitive() -> None:
    message, _ = vm_message("nvidia.com/nvidia_a10-12q")
    assert f"did you mean {A10_12Q}? (resource names are case-sensitive)" in message


def test_a_passthrough_gpu_without_a_provider_says_nothing_of_vgpus() -> None:
    message, _ = vm_message("nvidia.com/GB202_GEFORCE_RTX_5090")
    assert "vGPU" not in message


def test_the_audit_of_a_stuck_vgpu_vm_names_the_profiles_on_offer() -> None:
    stuck = vm("desktop-9", gpus=["nvidia.com/A10-12Q"], namespace="vdi")
    (finding,) = diagnose_all(state_of(*CLUSTER, stuck), NOW)["vm-unschedulable"]
    assert finding.message.endswith(
        f"needs nvidia.com/A10-12Q; no node advertises it; did you mean {A10_12Q}?; {OFFER}"
    )
    assert OFFER in finding.chain.flatten()


# --- a permitted mdev without a provider -------------------------------------------------------


def permitted_messages(*mdevs: tuple[str, str]) -> list[str]:
    review = request("CREATE", kubevirt(mdevs=list(mdevs)))
    return [f.message for f in permitted_hardware.check(review, state_of(*CLUSTER))]


def test_a_permitted_short_profile_is_told_the_resource_and_what_is_offered() -> None:
    (message,) = permitted_messages(("NVIDIA A10-12Q", A10_12Q), ("A10-12Q", "nvidia.com/A10-12Q"))
    assert message == (
        "mediatedDevices[1] 'A10-12Q': no node advertises nvidia.com/A10-12Q (did you mean "
        f"{A10_12Q}? the sandbox device plugin names the A10-12Q vGPU {A10_12Q}); {OFFER}; "
        "VMs using it never schedule"
    )


def test_a_permitted_profile_no_node_makes_names_the_offer() -> None:
    (message,) = permitted_messages(("NVIDIA A10-24Q", "nvidia.com/NVIDIA_A10-24Q"))
    assert message == (
        "mediatedDevices[0] 'NVIDIA A10-24Q': no node advertises nvidia.com/NVIDIA_A10-24Q; "
        f"{OFFER}; VMs using it never schedule"
    )


def test_an_advertised_permitted_mdev_is_fine() -> None:
    assert permitted_messages(("NVIDIA A10-12Q", A10_12Q)) == []


# --- vgpu-config-failed ------------------------------------------------------------------------


def failed(name: str = "gpu-a10-2", config: str | None = "A10-4Q", **allocatable: str) -> Obj:
    obj = vgpu_node(name, config, **allocatable)
    obj["metadata"]["labels"][STATE_LABEL] = "failed"
    return obj


def config_failed(*objects: Obj) -> list[DiagnosisFinding]:
    return diagnose_all(state_of(*objects), NOW).get(VGPU_CONFIG_FAILED_DIAGNOSIS.id, [])


def test_a_failed_profile_with_vms_on_the_node_is_high_and_names_them() -> None:
    desktop = vmi("desktop-0", node_name="gpu-a10-2", gpus=[A10_12Q], namespace="vdi")
    done = vmi("old", node_name="gpu-a10-2", gpus=[A10_12Q], namespace="vdi", phase="Succeeded")
    (finding,) = config_failed(failed(**{A10_12Q: "1"}), desktop, done, *CLUSTER[3:])
    assert finding.message == (
        f"{STATE_LABEL}=failed on gpu-a10-2: the vGPU Device Manager could not apply config "
        f"A10-4Q, and retries only when the label changes; it advertises {A10_12Q}: 1; "
        "1 live VMI there: vdi/desktop-0"
    )
    assert finding.severity == Severity.HIGH
    assert [w.name for w in finding.workloads] == ["desktop-0"]
    assert finding.resource.kind == "Node"
    assert (
        "delete the device manager's pod on gpu-a10-2 (at start it applies A10-4Q again)"
        in (finding.remediation[2])
    )


def test_a_failed_profile_on_an_idle_node_is_the_default_severity_and_finds_the_pod() -> None:
    manager = pod(
        "nvidia-vgpu-device-manager-x7k2p",
        "gpu-a10-2",
        namespace="gpu-operator",
        app="nvidia-vgpu-device-manager",
    )
    (finding,) = config_failed(failed(), manager)
    assert finding.message.endswith("it advertises no vGPU; no VM runs there")
    assert finding.severity is None
    assert VGPU_CONFIG_FAILED_DIAGNOSIS.default_severity == Severity.MEDIUM
    assert finding.remediation[0] == (
        "read why: kubectl logs -n gpu-operator nvidia-vgpu-device-manager-x7k2p"
    )


def test_a_failed_default_config_names_the_clusterpolicys_default() -> None:
    policy = cluster_policy(True, "vm-vgpu")
    policy["spec"]["vgpuDeviceManager"] = {"config": {"default": "A10-24Q"}}
    (finding,) = config_failed(failed(config=None), policy)
    assert f"could not apply config A10-24Q (the default: no {VGPU_CONFIG_LABEL})" in (
        finding.message
    )


@pytest.mark.parametrize("state", ["success", "pending", ""])
def test_a_profile_applied_or_under_way_is_no_finding(state: str) -> None:
    obj = vgpu_node("gpu-a10-1", "A10-12Q", **{A10_12Q: "2"})
    obj["metadata"]["labels"][STATE_LABEL] = state
    assert config_failed(obj) == []

"""gpu-mode-kills-users: what admission denies, the audit finds once it exists (issue 32).

A node whose mode takes the GPUs from what runs there is a deny-level, high-severity finding
naming the users, with the chain down to the label and the repair in order; the states that
kill nothing (a pinned rebind, a NotReady node the recovery trap reports, a config the guard
cannot read) are not.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from policies.diagnoses.mode_kills import GPU_MODE_KILLS_USERS
from policies.registry import diagnose_all
from policies.vocabulary.audit import DiagnosisFinding
from policies.vocabulary.verdicts import Action, Severity
from tests.builders import (
    Obj,
    cluster_policy,
    gpu_pod,
    kubevirt,
    node,
    state_of,
    vmi,
)
from webhook.engine import Engine

NOW = datetime(2026, 10, 30, 12, 0, tzinfo=UTC)
WORKLOAD = "nvidia.com/gpu.workload.config"
VGPU_CONFIG = "nvidia.com/vgpu.config"
A10_12Q = "nvidia.com/NVIDIA_A10-12Q"
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
MDEVS = kubevirt(mdevs=[("NVIDIA A10-12Q", A10_12Q)])
GPU_CLUSTER: Obj = {
    "apiVersion": "nvidia.com/v1alpha1",
    "kind": "GPUCluster",
    "metadata": {"name": "gpu-cluster"},
    "spec": {},
}


def gpu_node(name: str, **labels: str) -> Obj:
    return node(name, labels={"nvidia.com/gpu.present": "true", **labels})


def mode(value: str, **more: str) -> dict[str, str]:
    return {WORKLOAD: value, **more}


def findings(*objects: Obj) -> list[DiagnosisFinding]:
    return diagnose_all(state_of(*objects), NOW)[GPU_MODE_KILLS_USERS]


@pytest.mark.parametrize(
    ("objects", "users"),
    [
        (
            [
                cluster_policy(),
                gpu_node("omen1", **mode("vm-passthrough")),
                gpu_pod("train", "omen1"),
                gpu_pod("notebook", "omen1"),
            ],
            ["ml/notebook", "ml/train"],
        ),
        (
            [cluster_policy(), gpu_node("omen1", **mode("vm-vgpu")), gpu_pod("train", "omen1")],
            ["ml/train"],
        ),
        (
            [
                cluster_policy(default_workload="vm-passthrough"),
                gpu_node("omen1"),
                gpu_pod("train", "omen1"),
            ],
            ["ml/train"],
        ),
        (
            [
                cluster_policy(),
                gpu_node("a10-pt-1", **mode("container")),
                vmi("trainer", node_name="a10-pt-1", gpus=[RTX_3090]),
            ],
            ["vms/trainer"],
        ),
        (
            [
                cluster_policy(),
                MDEVS,
                gpu_node("a10-1", **mode("vm-passthrough")),
                vmi("desktop", node_name="a10-1", gpus=[A10_12Q]),
            ],
            ["vms/desktop"],
        ),
        (
            [
                cluster_policy(),
                MDEVS,
                gpu_node("a10-vgpu-1", **mode("vm-vgpu", **{VGPU_CONFIG: "A10-24Q"})),
                vmi("desktop", node_name="a10-vgpu-1", gpus=[A10_12Q]),
            ],
            ["vms/desktop"],
        ),
    ],
    ids=[
        "vm-passthrough under CUDA pods",
        "vm-vgpu under a CUDA pod",
        "vm-passthrough from the ClusterPolicy default under a CUDA pod",
        "container under a live passthrough VM",
        "vm-passthrough under a live vGPU VM",
        "a vGPU profile other than the one a live VM holds",
    ],
)
def test_a_node_whose_mode_kills_its_gpu_users_is_found_naming_them(
    objects: list[Obj], users: list[str]
) -> None:
    (finding,) = findings(*objects)
    assert sorted(f"{w.namespace}/{w.name}" for w in finding.workloads) == users
    for user in users:
        assert user in finding.message
        assert any(user in link for link in finding.chain.flatten())


@pytest.mark.parametrize(
    "objects",
    [
        [cluster_policy(), gpu_node("omen1", **mode("container")), gpu_pod("train", "omen1")],
        [
            cluster_policy(),
            gpu_node(
                "omen1", **mode("vm-passthrough", **{"nvidia.com/gpu.deploy.vfio-manager": "false"})
            ),
            gpu_pod("train", "omen1"),
        ],
        [
            cluster_policy(),
            node(
                "omen1",
                labels={
                    "feature.node.kubernetes.io/pci-10de.present": "true",
                    **mode("vm-passthrough"),
                },
                ready="Unknown",
                reason="NodeStatusUnknown",
                message="Kubelet stopped posting node status.",
            ),
            gpu_pod("train", "omen1"),
        ],
        [
            cluster_policy(),
            gpu_node("omen1", **mode("vm-passthrough")),
            gpu_pod("done", "omen1", phase="Succeeded"),
        ],
        [
            cluster_policy(),
            gpu_node("a10-pt-1", **mode("vm-passthrough")),
            vmi("trainer", node_name="a10-pt-1", gpus=[RTX_3090]),
        ],
        [
            cluster_policy(),
            gpu_node("a10-pt-1", **mode("container")),
            vmi("trainer", node_name="a10-pt-1", gpus=[RTX_3090], phase="Succeeded"),
        ],
        [
            cluster_policy(),
            MDEVS,
            gpu_node("a10-vgpu-1", **mode("vm-vgpu", **{VGPU_CONFIG: "A10-12Q"})),
            vmi("desktop", node_name="a10-vgpu-1", gpus=[A10_12Q]),
        ],
        [
            cluster_policy(),
            MDEVS,
            gpu_node("a10-vgpu-1", **mode("vm-vgpu", **{VGPU_CONFIG: "default"})),
            vmi("desktop", node_name="a10-vgpu-1", gpus=[A10_12Q]),
        ],
        [GPU_CLUSTER, gpu_node("omen1", **mode("vm-passthrough")), gpu_pod("train", "omen1")],
    ],
    ids=[
        "container under CUDA pods",
        "vm-passthrough with vfio-manager pinned off",
        "a NotReady node: the recovery trap's",
        "a finished pod holds nothing",
        "vm-passthrough under its passthrough VM",
        "a finished VM holds nothing",
        "the profile the VM holds",
        "a config named otherwise: its types are not known here",
        "GPU Operator 26.7's GPUCluster ignores the label",
    ],
)
def test_a_node_whose_mode_kills_nothing_is_not_found(objects: list[Obj]) -> None:
    assert findings(*objects) == []


def test_under_gpu_pods_the_chain_runs_from_the_label_to_each_pod_and_repair_is_in_order() -> None:
    (finding,) = findings(
        cluster_policy(), gpu_node("omen1", **mode("vm-passthrough")), gpu_pod("train", "omen1")
    )
    assert finding.resource.kind == "Node" and finding.resource.name == "omen1"
    assert finding.chain.flatten() == (
        f"{WORKLOAD}=vm-passthrough on omen1",
        "the GPU Operator sets nvidia.com/gpu.deploy.vfio-manager=true",
        "vfio-manager rebinds every NVIDIA GPU there to vfio-pci",
        "pod ml/train (nvidia.com/gpu: 1): its GPUs are taken",
    )
    steps = finding.remediation
    assert steps[0] == "kubectl cordon omen1" and steps[-1] == "kubectl uncordon omen1"
    assert f"kubectl label node omen1 {WORKLOAD}=container --overwrite" in steps[1]
    assert "ml/train" in steps[2]


def test_a_mode_from_the_cluster_policy_default_is_traced_to_it() -> None:
    (finding,) = findings(
        cluster_policy(default_workload="vm-passthrough"), gpu_node("omen1"), gpu_pod("t", "omen1")
    )
    assert finding.chain.flatten()[0] == (
        f"no {WORKLOAD} on omen1: mode vm-passthrough, defaultWorkload of ClusterPolicy "
        "cluster-policy"
    )


def test_under_a_live_vm_the_repair_stops_it_and_gives_the_node_back_its_mode() -> None:
    (finding,) = findings(
        cluster_policy(),
        gpu_node("a10-pt-1", **mode("container")),
        vmi("trainer", node_name="a10-pt-1", gpus=[RTX_3090], owner="trainer"),
    )
    assert "needs vm-passthrough" in finding.message.replace(
        "need vm-passthrough", "needs vm-passthrough"
    )
    assert (
        finding.chain.flatten()[-1]
        == f"VMI vms/trainer (Running): {RTX_3090} (needs vm-passthrough)"
    )
    assert finding.remediation == (
        "kubectl cordon a10-pt-1",
        "virtctl stop trainer -n vms",
        f"if a10-pt-1 is meant for these VMs: kubectl label node a10-pt-1 {WORKLOAD}="
        "vm-passthrough --overwrite, wait for their resources in a10-pt-1's allocatable, then "
        "start them",
        "kubectl uncordon a10-pt-1",
    )


def test_under_another_vgpu_profile_the_repair_puts_the_held_one_back() -> None:
    (finding,) = findings(
        cluster_policy(),
        MDEVS,
        gpu_node("a10-vgpu-1", **mode("vm-vgpu", **{VGPU_CONFIG: "A10-24Q"})),
        vmi("desktop", node_name="a10-vgpu-1", gpus=[A10_12Q], owner="desktop"),
    )
    assert "A10-12Q vGPUs" in finding.message and "to apply A10-24Q" in finding.message
    assert finding.remediation == (
        "virtctl stop desktop -n vms",
        f"kubectl label node a10-vgpu-1 {VGPU_CONFIG}=A10-12Q --overwrite, if the VMs should "
        "keep A10-12Q",
        "wait for nvidia.com/vgpu.config.state=success on a10-vgpu-1, then start the VMs",
    )


def test_the_audit_reports_it_deny_level_and_high() -> None:
    state = state_of(
        cluster_policy(), gpu_node("omen1", **mode("vm-passthrough")), gpu_pod("train", "omen1")
    )
    audit = Engine().audit(state, NOW)
    (found,) = [f for f in audit.findings if f.verdict.policy == GPU_MODE_KILLS_USERS]
    assert (found.verdict.action, found.severity) == (Action.DENY, Severity.HIGH)
    pods: Any = [f for f in audit.findings if f.verdict.policy == "gpu-pod-on-passthrough-node"]
    assert len(pods) == 1, "each pod is still told it cannot use its GPUs"


def test_a_vm_node_whose_cluster_policy_turned_sandbox_workloads_off_is_traced_to_it() -> None:
    (finding,) = findings(
        cluster_policy(sandbox=False),
        gpu_node("tower1", **mode("vm-passthrough")),
        vmi("win11", node_name="tower1", gpus=[RTX_3090]),
    )
    assert finding.chain.flatten()[0] == (
        f"{WORKLOAD}=vm-passthrough on tower1: mode container, ClusterPolicy cluster-policy has "
        "sandbox workloads disabled"
    )

"""The diagnosis: stuck VMs, the recovery trap, NotReady GPU nodes, names, operands, durations."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import pytest

import policies.diagnoses
from policies.cluster.nodes import project_node
from policies.cluster.pciids import bundled_database
from policies.cluster.view import AuditView, ClusterView
from policies.diagnoses.chains import age
from policies.diagnoses.facts import GpuNodeStatus, gpu_node_statuses, kubelet_cause
from policies.diagnoses.names import RESOURCE_NAME_CASE_MISMATCH
from policies.diagnoses.nodes import (
    GPU_NODE_NOT_READY,
    GPU_OPERAND_UNHEALTHY,
    RECOVERY_TRAP_PASSTHROUGH,
    RECOVERY_TRAP_VGPU,
)
from policies.diagnoses.sole_provider import SOLE_PROVIDER
from policies.diagnoses.vms import VM_UNSCHEDULABLE
from policies.registry import ALL_DIAGNOSES, DIAGNOSES_BY_ID, diagnose_all
from policies.rules import passthrough_provider
from policies.rules.passthrough_provider import ID as PASSTHROUGH
from policies.state.cluster import ClusterState
from policies.vocabulary.audit import Diagnosis, DiagnosisFinding, Link
from policies.vocabulary.requests import CLUSTER
from policies.vocabulary.verdicts import Action, Severity
from tests.builders import (
    Obj,
    cluster_policy,
    dead_node,
    kubevirt,
    node,
    node_feature,
    pod,
    state_of,
    vm,
    vmi,
)
from webhook.state.files import load_state_objects

HOMELAB = Path(__file__).resolve().parents[1] / "examples" / "homelab" / "cluster.yaml"
NOW = datetime(2026, 10, 30, 12, 0, tzinfo=UTC)
RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
PASSTHROUGH_LABEL = {"nvidia.com/gpu.workload.config": "vm-passthrough"}
KUBELET_DOWN = "Kubelet stopped posting node status."

T = TypeVar("T")


@cache
def homelab_state() -> ClusterState:
    """Cached for the module, so on the committed pci.ids: tests read device names in it."""
    state, _ = load_state_objects([str(HOMELAB)], bundled_database())
    return state


Found = dict[str, list[DiagnosisFinding]]


@cache
def homelab() -> Found:
    return diagnose_all(homelab_state(), NOW)


def found(result: Found, diagnosis: str) -> list[DiagnosisFinding]:
    return result[diagnosis]


def severity(diagnosis: str, finding: DiagnosisFinding) -> Severity:
    """The finding's own severity, else its diagnosis' default (what the audit reports)."""
    declared = DIAGNOSES_BY_ID[diagnosis].default_severity
    return declared if finding.severity is None else finding.severity


def gpu_nodes(view: ClusterView) -> tuple[GpuNodeStatus, ...]:
    return gpu_node_statuses(AuditView(view))


def only(items: Sequence[T]) -> T:
    assert len(items) == 1, items
    return items[0]


def diagnosed(*objects: Obj) -> Found:
    return diagnose_all(state_of(*objects), NOW)


def step_index(steps: Sequence[str], text: str) -> int:
    return next(i for i, step in enumerate(steps) if text in step)


# --- the home lab ---------------------------------------------------------------------------------


def test_both_stuck_vms_are_explained_through_omen2_for_112_days() -> None:
    stuck = {d.resource.name: d for d in found(homelab(), VM_UNSCHEDULABLE)}
    assert set(stuck) == {"gpu-fedora", "rhel9-gpu-vm"}
    for diagnosis in stuck.values():
        assert diagnosis.since is not None
        assert age(NOW - diagnosis.since).startswith("112 days")
        assert diagnosis.message.startswith("ErrorUnschedulable for 112 days 8 hours")
        assert (diagnosis.explains, diagnosis.device) == (PASSTHROUGH, RTX_5090)
        chain = diagnosis.chain.flatten()
        assert chain[0].startswith(f"needs {RTX_5090} (gpus[gpu1]): only omen2 advertises it")
        assert any(
            link.startswith("omen2: NotReady since 2026-07-10 03:12 UTC (112 days 8 hours)")
            and KUBELET_DOWN in link
            for link in chain
        )
        assert "omen2: NFD GPU labels gone (no feature.node.kubernetes.io/pci-*10de* label)" in (
            chain
        )
        assert any(link.startswith("omen2: 3 GPU operand pods Terminating") for link in chain)
        assert any(link.startswith("scheduler: 0/8 nodes are available") for link in chain)


def test_the_vms_since_is_when_the_scheduler_first_refused_them() -> None:
    since = {d.resource.name: d.since for d in found(homelab(), VM_UNSCHEDULABLE)}
    assert since == {
        "gpu-fedora": datetime(2026, 7, 10, 3, 20, 15, tzinfo=UTC),
        "rhel9-gpu-vm": datetime(2026, 7, 10, 3, 21, 2, tzinfo=UTC),
    }


def test_omen2_is_a_recovery_trap_with_three_ordered_steps_naming_it() -> None:
    trap = only(found(homelab(), RECOVERY_TRAP_PASSTHROUGH))
    assert (trap.resource.kind, trap.resource.name) == ("Node", "omen2")
    assert DIAGNOSES_BY_ID[RECOVERY_TRAP_PASSTHROUGH].default_action == Action.DENY
    assert severity(RECOVERY_TRAP_PASSTHROUGH, trap) == Severity.HIGH  # no CUDA users seen
    steps = trap.remediation
    relabel = step_index(
        steps, "kubectl label node omen2 nvidia.com/gpu.workload.config=container --overwrite"
    )
    fix = step_index(steps, "journalctl -u kubelet")
    restart = step_index(steps, "systemctl restart kubelet")
    assert (relabel, fix, restart) == (0, 1, 2)
    assert (
        "kubectl label node omen2 nvidia.com/gpu.deploy.vfio-manager=false --overwrite"
        in (steps[relabel])
    )
    assert "swapoff -a" in steps[fix] and "/etc/fstab" in steps[fix]
    assert all("omen2" in step for step in steps[:3])
    # The VMs get their GPU back only after the host is safe: the last step, naming them.
    assert "vms/gpu-fedora and vms/rhel9-gpu-vm" in steps[-1]
    assert "nvidia.com/gpu.workload.config=vm-passthrough" in steps[-1]


def test_the_trap_chain_runs_from_notready_to_the_rebind() -> None:
    trap = only(found(homelab(), RECOVERY_TRAP_PASSTHROUGH))
    chain = trap.chain.flatten()
    assert chain[0].startswith("NotReady since 2026-07-10 03:12 UTC")
    assert chain[-1].startswith(
        "vfio-manager rebinds every NVIDIA GPU on omen2 to vfio-pci (10de:2b85"
    )
    assert "host CUDA jobs" in trap.message


def test_four_gpu_nodes_are_notready_with_their_durations() -> None:
    not_ready = {d.resource.name: d for d in found(homelab(), GPU_NODE_NOT_READY)}
    durations = {name: d.since and age(NOW - d.since) for name, d in not_ready.items()}
    assert durations == {
        "omen2": "112 days 8 hours",
        "omen3": "112 days 8 hours",
        "tower2": "69 days 18 hours",
        "tower3": "30 days 3 hours",
    }
    assert "CNI" in not_ready["tower2"].chain.flatten()[1]
    # omen2's own repair is the trap's, so the NotReady finding points there.
    assert RECOVERY_TRAP_PASSTHROUGH in not_ready["omen2"].remediation[0]
    assert "2 VMs wait for its GPUs: vms/gpu-fedora and vms/rhel9-gpu-vm" in (
        not_ready["omen2"].chain.flatten()
    )


def test_the_overview_counts_the_operand_pods_of_the_incident() -> None:
    nodes = {n.name: n for n in gpu_nodes(homelab_state())}
    assert sorted(nodes) == ["omen1", "omen2", "omen3", "tower1", "tower2", "tower3"]
    totals: dict[str, int] = {}
    for status in nodes.values():
        for problem, count in status.operand_problems:
            totals[problem] = totals.get(problem, 0) + count
    assert totals == {"Error": 6, "Terminating": 4}
    assert [n.name for n in nodes.values() if n.health == "NotReady"] == [
        "omen2",
        "omen3",
        "tower2",
        "tower3",
    ]
    assert nodes["omen2"].trapped and nodes["omen2"].vms_waiting == 2
    assert nodes["omen2"].gpus == ("10de:2b85 GB202 [GeForce RTX 5090]",)


def test_the_home_lab_has_no_other_diagnoses() -> None:
    diagnoses = sorted(d for d, findings in homelab().items() if findings)
    assert diagnoses == [
        GPU_NODE_NOT_READY,
        RECOVERY_TRAP_PASSTHROUGH,
        SOLE_PROVIDER,
        VM_UNSCHEDULABLE,
    ]


def test_the_same_state_diagnoses_the_same_way_twice() -> None:
    assert diagnose_all(homelab_state(), NOW) == diagnose_all(homelab_state(), NOW)


# --- the recovery trap ----------------------------------------------------------------------------

DEAD_5090 = dead_node("omen2", labels=PASSTHROUGH_LABEL, allocatable={RTX_5090: "1"})


@pytest.mark.parametrize(
    ("objects", "trap"),
    [
        pytest.param([DEAD_5090], RECOVERY_TRAP_PASSTHROUGH, id="dead vm-passthrough node"),
        pytest.param(
            [
                dead_node(
                    "omen2",
                    labels={"nvidia.com/gpu.workload.config": "vm-vgpu"},
                    allocatable={RTX_5090: "1"},
                )
            ],
            RECOVERY_TRAP_VGPU,
            id="dead vm-vgpu node",
        ),
        pytest.param(
            [
                dead_node("omen2", allocatable={RTX_5090: "1"}),
                cluster_policy(True, "vm-passthrough"),
            ],
            RECOVERY_TRAP_PASSTHROUGH,
            id="unlabelled, ClusterPolicy default vm-passthrough",
        ),
        pytest.param(
            [
                dead_node(
                    "omen2",
                    labels={
                        **PASSTHROUGH_LABEL,
                        "nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3090",
                    },
                )
            ],
            RECOVERY_TRAP_PASSTHROUGH,
            id="the GFD product is evidence of a GPU",
        ),
        pytest.param(
            [
                dead_node(
                    "omen2",
                    labels={
                        **PASSTHROUGH_LABEL,
                        "feature.node.kubernetes.io/pci-10de.present": "true",
                    },
                )
            ],
            RECOVERY_TRAP_PASSTHROUGH,
            id="an NFD 10de label is evidence of a GPU",
        ),
        pytest.param(
            [node("omen2", labels=PASSTHROUGH_LABEL, allocatable={RTX_5090: "1"})],
            None,
            id="a Ready node is no trap",
        ),
        pytest.param(
            [dead_node("omen2", allocatable={RTX_5090: "1"})],
            None,
            id="a dead container-mode node is no trap",
        ),
        pytest.param(
            [
                dead_node(
                    "omen2",
                    labels={**PASSTHROUGH_LABEL, "nvidia.com/gpu.deploy.vfio-manager": "false"},
                    allocatable={RTX_5090: "1"},
                )
            ],
            None,
            id="vfio-manager pinned false defuses it",
        ),
        pytest.param(
            [
                dead_node(
                    "omen2",
                    labels={**PASSTHROUGH_LABEL, "nvidia.com/gpu.deploy.operands": "false"},
                    allocatable={RTX_5090: "1"},
                )
            ],
            None,
            id="operands pinned false defuses it",
        ),
        pytest.param(
            [dead_node("omen2", labels=PASSTHROUGH_LABEL)],
            None,
            id="no sign of an NVIDIA GPU, no trap",
        ),
        pytest.param(
            [
                dead_node("omen2", labels=PASSTHROUGH_LABEL),
                node_feature("omen2", [("0403", "10de", "1aef")]),
            ],
            None,
            id="a GPU's HDMI audio function is not a GPU",
        ),
        pytest.param(
            [DEAD_5090, cluster_policy(sandbox=False)],
            None,
            id="sandbox workloads off: every node is container",
        ),
    ],
)
def test_the_recovery_trap_is_a_dead_node_in_vm_mode_with_gpus_and_no_pin(
    objects: list[Obj], trap: str | None
) -> None:
    result = diagnosed(*objects)
    traps = [d for d, findings in result.items() for _ in findings if d.startswith("recovery-")]
    assert traps == ([trap] if trap else [])


@pytest.mark.parametrize(
    ("extra", "labels", "expected"),
    [
        pytest.param([], {}, Severity.HIGH, id="nothing visible uses the GPU: high"),
        pytest.param(
            [pod("train-0", "omen2", limits={"nvidia.com/gpu": "1"})],
            {},
            Severity.CRITICAL,
            id="a GPU pod bound there: critical",
        ),
        pytest.param(
            [],
            {"nvidia.com/gpu.deploy.device-plugin": "true"},
            Severity.CRITICAL,
            id="container-mode deploy labels remain: critical",
        ),
    ],
)
def test_the_trap_is_critical_when_cuda_users_are_visible(
    extra: list[Obj], labels: dict[str, str], expected: Severity
) -> None:
    dead = dead_node("omen2", labels={**PASSTHROUGH_LABEL, **labels}, allocatable={RTX_5090: "1"})
    trap = only(found(diagnosed(dead, *extra), RECOVERY_TRAP_PASSTHROUGH))
    assert severity(RECOVERY_TRAP_PASSTHROUGH, trap) == expected


def swap_node(name: str = "omen2", **kwargs: Any) -> Obj:
    """A node whose kubelet is up enough to say why it is not ready: swap."""
    obj = node(
        name,
        ready="False",
        reason="KubeletNotReady",
        message="running with swap on is not supported, please disable swap",
        since="2026-07-10T03:12:41Z",
        taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}],
        **kwargs,
    )
    obj["status"]["nodeInfo"]["swap"] = {"capacity": 34359738368}
    return obj


def test_a_kubelet_that_names_swap_gets_swapoff_as_the_fix() -> None:
    dead = swap_node(labels=PASSTHROUGH_LABEL, allocatable={RTX_5090: "1"})
    trap = only(found(diagnosed(dead), RECOVERY_TRAP_PASSTHROUGH))
    assert trap.remediation[1] == (
        "on omen2: swapoff -a, then comment swap out of /etc/fstab so it stays off"
    )
    not_ready = only(found(diagnosed(dead), GPU_NODE_NOT_READY))
    chain = not_ready.chain.flatten()
    assert "kubelet v1.33.4 refuses to run with swap on (failSwapOn, the default)" in chain
    assert "swap is on: kubelet reports 32.0 GiB of swap" in chain


@pytest.mark.parametrize(
    ("ready", "reason", "message", "kind"),
    [
        ("Unknown", "NodeStatusUnknown", KUBELET_DOWN, "silent"),
        ("False", "KubeletNotReady", "running with swap on is not supported", "swap"),
        (
            "False",
            "KubeletNotReady",
            "container runtime network not ready: cni plugin not initialized",
            "network",
        ),
        (
            "False",
            "KubeletNotReady",
            "PLEG is not healthy: pleg was last seen active 3m",
            "runtime",
        ),
        ("False", "KubeletNotReady", "something else", "other"),
    ],
)
def test_the_ready_condition_names_what_kubelet_suffers_from(
    ready: str, reason: str, message: str, kind: str
) -> None:
    obj = node("n1", ready=ready, reason=reason, message=message)
    assert kubelet_cause(project_node(obj)).kind == kind


# --- NotReady GPU nodes and operands --------------------------------------------------------------


def operand(name: str, node_name: str, problem: str = "", **kwargs: Any) -> Obj:
    obj = pod(
        name, node_name, namespace="gpu-operator", app="nvidia-device-plugin-daemonset", **kwargs
    )
    if problem:
        obj["status"]["containerStatuses"] = [
            {"name": "main", "state": {"waiting": {"reason": problem}}}
        ]
    return obj


def test_a_notready_node_without_gpus_is_not_a_gpu_finding() -> None:
    assert found(diagnosed(dead_node("cpu1")), GPU_NODE_NOT_READY) == []


def test_unhealthy_operands_on_a_ready_gpu_node_are_their_own_finding() -> None:
    state = state_of(
        node("omen1", allocatable={"nvidia.com/gpu": "1"}),
        operand("nvidia-device-plugin-daemonset-a", "omen1", "CrashLoopBackOff"),
        operand("nvidia-device-plugin-daemonset-b", "omen1", terminating=True),
        operand("nvidia-device-plugin-daemonset-c", "omen1"),
    )
    result = diagnose_all(state, NOW)
    finding = only(found(result, GPU_OPERAND_UNHEALTHY))
    assert finding.resource.name == "omen1"
    assert "1 GPU operand pod CrashLoopBackOff" in finding.message
    assert "1 GPU operand pod Terminating" in finding.message
    assert "logs nvidia-device-plugin-daemonset-a --previous" in finding.remediation[0]
    assert only(gpu_nodes(state)).operands_text() == "1 ok, 1 CrashLoopBackOff, 1 Terminating"


def test_unhealthy_operands_on_a_notready_node_are_part_of_its_notready_finding() -> None:
    result = diagnosed(
        dead_node("omen3", allocatable={"nvidia.com/gpu": "1"}),
        operand("nvidia-device-plugin-daemonset-a", "omen3", "Error"),
    )
    assert found(result, GPU_OPERAND_UNHEALTHY) == []
    chain = only(found(result, GPU_NODE_NOT_READY)).chain.flatten()
    assert "1 GPU operand pod Error: gpu-operator/nvidia-device-plugin-daemonset-a" in chain


# --- VMs ------------------------------------------------------------------------------------------


def launcher(name: str, node_name: str, resource: str) -> Obj:
    return pod(f"virt-launcher-{name}", node_name, namespace="vms", limits={resource: "1"})


def test_a_miscased_device_name_gets_a_did_you_mean() -> None:
    miscased = "nvidia.com/GA102_GeForce_RTX_3090"
    result = diagnosed(
        node("tower1", allocatable={RTX_3090: "1"}),
        vm("gpu-typo", gpus=[miscased], unschedulable_since="2026-10-29T12:00:00Z"),
    )
    finding = only(found(result, VM_UNSCHEDULABLE))
    assert finding.message == (
        f"ErrorUnschedulable for 1 day: needs {miscased}; no node advertises it; "
        f"did you mean {RTX_3090}?"
    )
    assert finding.remediation == (f"set deviceName to {RTX_3090} in VirtualMachine vms/gpu-typo",)


QAT = "intel.com/qat"
USB_STICK = "kubevirt.io/stick"
A10_24Q = "nvidia.com/NVIDIA_A10-24Q"
VFIO_FIX = "(bind the device to vfio-pci on a node that has it, or enable its device plugin)"


@pytest.mark.parametrize(
    ("cr", "field", "device", "advice"),
    [
        pytest.param(
            kubevirt([("10de:2204", RTX_3090)]),
            "gpus",
            RTX_3090,
            "(a node with that GPU in vm-passthrough mode runs the sandbox device plugin "
            "that would)",
            id="an NVIDIA GPU is told about vm-passthrough mode",
        ),
        pytest.param(
            kubevirt(mdevs=[("NVIDIA A10-24Q", A10_24Q)]),
            "gpus",
            A10_24Q,
            "(a node with that GPU in vm-vgpu mode runs the sandbox device plugin that would)",
            id="a mediated device is told about vm-vgpu mode",
        ),
        pytest.param(
            kubevirt([("8086:6f54", QAT)]),
            "hostDevices",
            QAT,
            VFIO_FIX,
            id="another vendor's PCI device is told about vfio-pci",
        ),
        pytest.param(
            kubevirt([("10de:22ba", "nvidia.com/AD102_HIGH_DEFINITION_AUDIO_CONTROLLER")]),
            "hostDevices",
            "nvidia.com/AD102_HIGH_DEFINITION_AUDIO_CONTROLLER",
            VFIO_FIX,
            id="an NVIDIA function that is not a GPU is told about vfio-pci",
        ),
        pytest.param(
            kubevirt(), "hostDevices", QAT, VFIO_FIX, id="an unpermitted non-NVIDIA name too"
        ),
        pytest.param(
            kubevirt(usb=[("0951:1666", USB_STICK)]),
            "hostDevices",
            USB_STICK,
            "(plug a USB device that matches its permittedHostDevices.usb selectors into a "
            "node, or enable its device plugin)",
            id="a USB device is told about USB",
        ),
    ],
)
def test_the_fix_for_a_device_no_node_advertises_fits_the_kind_of_device(
    cr: Obj, field: str, device: str, advice: str
) -> None:
    gpus, host_devices = ([device], []) if field == "gpus" else ([], [device])
    since = "2026-10-29T12:00:00Z"
    result = diagnosed(
        node("tower1"),
        cr,
        vm("nfv", gpus=gpus, host_devices=host_devices, unschedulable_since=since),
    )
    finding = only(found(result, VM_UNSCHEDULABLE))
    assert finding.remediation == (
        f"check the deviceName {device}: no node advertises it {advice}",
    )


def test_a_vm_stuck_because_every_unit_is_taken_says_who_holds_them() -> None:
    result = diagnosed(
        node("tower1", allocatable={RTX_3090: "1"}),
        vm("win11-gaming", gpus=[RTX_3090]),
        launcher("win11-gaming", "tower1", RTX_3090),
        vm("second", gpus=[RTX_3090], unschedulable_since="2026-10-30T06:00:00Z"),
    )
    finding = only(found(result, VM_UNSCHEDULABLE))
    assert finding.resource.name == "second"
    assert finding.explains == ""  # no passthrough verdict to explain: providers are healthy
    assert finding.message == f"ErrorUnschedulable for 6 hours: every {RTX_3090} is in use"
    assert "vms/virt-launcher-win11-gaming" in finding.chain.flatten()[0]


def test_a_vm_stuck_with_free_units_quotes_the_scheduler() -> None:
    stuck = vm("picky", gpus=[RTX_3090], unschedulable_since="2026-10-30T11:00:00Z")
    stuck["status"]["conditions"][0]["message"] = (
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/2 nodes are available"
    )
    result = diagnosed(node("tower1", allocatable={RTX_3090: "2"}), stuck)
    finding = only(found(result, VM_UNSCHEDULABLE))
    assert finding.message == (
        f"ErrorUnschedulable for 1 hour: {RTX_3090} has 2 free on 1 healthy provider; the "
        "scheduler refuses it (0/2 nodes are available: 2 node(s) didn't match Pod's node "
        "affinity/selector)"
    )
    assert finding.remediation[0].startswith("kubectl describe vmi -n vms picky")


def test_several_dead_providers_are_each_explained_and_any_one_would_do() -> None:
    result = diagnosed(
        dead_node("tower2", allocatable={RTX_3090: "1"}),
        dead_node("tower1", labels=PASSTHROUGH_LABEL, allocatable={RTX_3090: "1"}),
        vm("win11-gaming", gpus=[RTX_3090]),
    )
    finding = only(found(result, VM_UNSCHEDULABLE))
    chain = finding.chain.flatten()
    assert any(link.startswith("tower1: NotReady since") for link in chain)
    assert any(link.startswith("tower2: NotReady since") for link in chain)
    # tower2 has no trap to defuse, so it is the one to revive first.
    assert finding.remediation[0] == "any one of tower1 and tower2 would do; tower2:"
    assert finding.remediation[1].startswith("on tower2: find why kubelet is down")


@pytest.mark.parametrize(
    ("objects", "listed"),
    [
        pytest.param(
            [vm("halted", gpus=[RTX_5090], run_strategy="Halted")], [], id="a halted VM is fine"
        ),
        pytest.param(
            [vmi("bare", gpus=[RTX_5090], phase="Scheduling")],
            [("VirtualMachineInstance", "bare")],
            id="an ownerless VMI is diagnosed",
        ),
        pytest.param(
            [vmi("done", gpus=[RTX_5090], phase="Succeeded")], [], id="a finished VMI is fine"
        ),
        pytest.param(
            [vm("manual", gpus=[RTX_5090], run_strategy="Manual")], [], id="a Manual VM not started"
        ),
        pytest.param(
            [
                vm("manual", gpus=[RTX_5090], run_strategy="Manual"),
                vmi("manual", gpus=[RTX_5090], phase="Scheduling", owner="manual"),
            ],
            [("VirtualMachine", "manual")],
            id="a Manual VM that was started",
        ),
        pytest.param(
            [vm("always", gpus=[RTX_5090])], [("VirtualMachine", "always")], id="an Always VM"
        ),
        pytest.param(
            [
                vm(
                    "trying",
                    gpus=[RTX_5090],
                    run_strategy="Manual",
                    unschedulable_since="2026-10-30T06:00:00Z",
                )
            ],
            [("VirtualMachine", "trying")],
            id="a VM whose status says it is trying, with no VMI in the snapshot",
        ),
        pytest.param(
            [
                vm("stopping", gpus=[RTX_5090], run_strategy="Halted"),
                vmi("stopping", gpus=[RTX_5090], phase="Running", owner="stopping"),
            ],
            [("VirtualMachine", "stopping")],
            id="a halted VM whose VMI still lives",
        ),
    ],
)
def test_only_what_wants_to_run_is_diagnosed(
    objects: list[Obj], listed: list[tuple[str, str]]
) -> None:
    state = state_of(DEAD_5090, *objects)
    result = diagnose_all(state, NOW)
    assert [(d.resource.kind, d.resource.name) for d in found(result, VM_UNSCHEDULABLE)] == listed
    # The policy's audit reads the same definition (vms_to_run): the same VMs, each explained.
    audited = [(ref.kind, ref.name) for ref, _ in passthrough_provider.audit(state)]
    assert sorted(audited) == sorted(listed)


# --- resource names -------------------------------------------------------------------------------


def test_names_differing_only_in_case_are_one_finding_on_the_kubevirt_cr() -> None:
    miscased = "nvidia.com/GA102_GeForce_RTX_3090"
    result = diagnosed(
        node("tower1", allocatable={RTX_3090: "1"}),
        kubevirt([("10de:2204", miscased)]),
        vm("old-ci-runner", host_devices=[miscased], run_strategy="Halted"),
    )
    finding = only(found(result, RESOURCE_NAME_CASE_MISMATCH))
    assert (finding.resource.kind, str(finding.resource)) == ("KubeVirt", "kubevirt/kubevirt")
    assert f"{RTX_3090} (advertised by tower1)" in finding.message
    assert "VM vms/old-ci-runner" in finding.message
    assert RTX_3090 in finding.remediation[0]


def test_a_miscased_vm_alone_is_a_cluster_finding() -> None:
    result = diagnosed(
        node("tower1", allocatable={RTX_3090: "1"}),
        kubevirt([("10de:2204", RTX_3090)]),
        vm("halted", gpus=["nvidia.com/ga102_geforce_rtx_3090"], run_strategy="Halted"),
    )
    assert only(found(result, RESOURCE_NAME_CASE_MISMATCH)).resource == CLUSTER


def test_consistent_names_are_no_finding() -> None:
    result = diagnosed(
        node("tower1", allocatable={RTX_3090: "1"}),
        kubevirt([("10de:2204", RTX_3090)]),
        vm("win11", gpus=[RTX_3090]),
    )
    assert found(result, RESOURCE_NAME_CASE_MISMATCH) == []


# --- building blocks ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(0), "0 minutes"),
        (timedelta(minutes=12, seconds=59), "12 minutes"),
        (timedelta(hours=1, minutes=30), "1 hour 30 minutes"),
        (timedelta(hours=5), "5 hours"),
        (timedelta(days=2), "2 days"),
        (timedelta(days=112, hours=8, minutes=47), "112 days 8 hours"),
        (timedelta(seconds=-5), "0 minutes"),
    ],
)
def test_ages_read_in_days_and_hours(delta: timedelta, text: str) -> None:
    assert age(delta) == text


def test_a_chain_flattens_depth_first_below_its_root() -> None:
    tree = Link("root", (Link("a", (Link("a1"), Link("a2"))), Link("b")))
    assert tree.flatten() == ("a", "a1", "a2", "b")
    assert Link.linear("root", ["x", "y"]) == Link("root", (Link("x", (Link("y"),)),))


def test_every_diagnosis_id_is_kebab_case_and_unique() -> None:
    ids = [diagnosis.id for diagnosis in ALL_DIAGNOSES]
    assert len(ids) == len(set(ids))
    assert all(i == i.lower() and " " not in i and "_" not in i for i in ids)


def test_every_declared_diagnosis_is_registered_once() -> None:
    declared: set[str] = set()
    for info in pkgutil.iter_modules(policies.diagnoses.__path__):
        module = importlib.import_module(f"policies.diagnoses.{info.name}")
        declared.update(v.id for v in vars(module).values() if isinstance(v, Diagnosis))
    registered = [diagnosis.id for diagnosis in ALL_DIAGNOSES]
    assert len(registered) == len(set(registered))
    assert declared == set(registered)


def test_a_verdict_without_a_declared_severity_is_as_bad_as_its_action() -> None:
    assert [Severity.of_action(a) for a in (Action.DENY, Action.WARN, Action.AUDIT)] == [
        Severity.HIGH,
        Severity.MEDIUM,
        Severity.LOW,
    ]


def test_the_tracker_sees_every_node_and_every_vm_that_wants_to_run() -> None:
    seen: dict[str, int] = {}

    def track(items: Sequence[T], description: str) -> Sequence[T]:
        seen[description] = len(items)
        return items

    diagnose_all(homelab_state(), NOW, track)
    assert seen == {"nodes": 8, "VMs": 4}

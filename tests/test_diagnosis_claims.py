"""claim-on-not-ready-node: pods and VMs whose allocated claim pins them to a NotReady node."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from policies.cluster.coverage import Recording
from policies.cluster.kinds import POD, VIRTUAL_MACHINE
from policies.cluster.kubevirt import project_vmi
from policies.cluster.view import AuditView
from policies.diagnoses.claims import (
    CLAIM_ON_NOT_READY_NODE,
    CLAIM_ON_NOT_READY_NODE_DIAGNOSIS,
    launcher_vmi,
)
from policies.registry import diagnose_all
from policies.vocabulary.audit import DiagnosisFinding
from tests.builders import Obj, dead_node, node, pod, state_of, vm
from tests.dra_builders import (
    DRA_FIXTURES,
    claim_pod,
    claim_template,
    claim_vm,
    claim_vmi,
    gpu,
    needs_fixtures,
    resource_claim,
    resource_slice,
)

NOW = datetime(2026, 10, 30, 12, 0, tzinfo=UTC)
PASSTHROUGH = {"nvidia.com/gpu.workload.config": "vm-passthrough"}
LAUNCHER = "virt-launcher-gpu-fedora-dra-x7k2p"


def on_dead_node(swap: bool = False, **kwargs: Any) -> Obj:
    """omen2 as the incident left it: kubelet silent; with ``swap`` its last report showed swap."""
    obj = dead_node("omen2", **kwargs)
    if swap:
        obj["status"]["nodeInfo"]["swap"] = {"capacity": 34359738368}
    return obj


def omen2_slice(*devices: Obj) -> Obj:
    return resource_slice("omen2-gpu.nvidia.com-7x2kq", "omen2", list(devices) or [gpu()])


def train_claim(node_name: str = "omen2", **kwargs: Any) -> Obj:
    return resource_claim("train-gpu", allocated=(node_name, node_name, "gpu-0"), **kwargs)


def held_on(node_obj: Obj, *devices: Obj, phase: str = "Running") -> list[Obj]:
    """Pod ml/train-0 holding claim ml/train-gpu, allocated on omen2 (``node_obj``)."""
    return [
        node_obj,
        omen2_slice(*devices),
        train_claim(reserved_for=["train-0"]),
        claim_pod("train-0", "omen2", claim="train-gpu", phase=phase),
    ]


def pod_on_dead_omen2() -> list[Obj]:
    return held_on(on_dead_node(swap=True))


def claims_on_dead_nodes(*objects: Obj) -> list[DiagnosisFinding]:
    return diagnose_all(state_of(*objects), NOW)[CLAIM_ON_NOT_READY_NODE]


def subjects(findings: list[DiagnosisFinding]) -> list[str]:
    return [f"{f.resource.kind} {f.resource}" for f in findings]


def template_vm_on(node_obj: Obj) -> list[Obj]:
    """VM vms/gpu-fedora-dra with its GPU from a template: KubeVirt made the VMI, its
    virt-launcher pod and, for the pod, the claim the scheduler allocated on the node."""
    made = f"{LAUNCHER}-gpu-9k4mz"
    return [
        node_obj,
        omen2_slice(gpu("gpu-vfio-0", type_="vfio", memory="32Gi")),
        claim_template("rtx5090-vfio"),
        claim_vm("gpu-fedora-dra", template="rtx5090-vfio"),
        claim_vmi(
            "gpu-fedora-dra", template="rtx5090-vfio", node_name="omen2", owner="gpu-fedora-dra"
        ),
        claim_pod(LAUNCHER, "omen2", namespace="vms", template="rtx5090-vfio", claim=made),
        resource_claim(
            made,
            "vms",
            device_class="vfio.gpu.nvidia.com",
            allocated=("omen2", "omen2", "gpu-vfio-0"),
            reserved_for=[LAUNCHER],
        ),
    ]


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        pytest.param(
            held_on(on_dead_node()),
            ["Pod ml/train-0"],
            id="a pod in reservedFor of a claim on a dead node",
        ),
        pytest.param(
            held_on(node("omen2")),
            [],
            id="the same on a healthy node",
        ),
        pytest.param(
            held_on(node("omen2", unschedulable=True)),
            [],
            id="a cordoned but Ready node still runs what it holds",
        ),
        pytest.param(
            held_on(on_dead_node(), phase="Succeeded"),
            [],
            id="a finished pod waits for nothing",
        ),
        pytest.param(
            [
                on_dead_node(),
                omen2_slice(),
                resource_claim("train-gpu"),
                claim_pod("train-0", "", claim="train-gpu", phase="Pending"),
            ],
            [],
            id="an unallocated claim is claim_fit's question, not this one",
        ),
        pytest.param(
            [
                on_dead_node(),
                omen2_slice(),
                train_claim(),
                claim_pod("train-1", "", claim="train-gpu", phase="Pending"),
            ],
            ["Pod ml/train-1"],
            id="a new pod naming a claim still allocated on the dead node",
        ),
        pytest.param(
            [
                on_dead_node(),
                omen2_slice(),
                train_claim(namespace="vms"),
                claim_vm("vm-a", claim="train-gpu"),
            ],
            ["VirtualMachine vms/vm-a"],
            id="a VM that should run, with a named claim",
        ),
        pytest.param(
            [
                on_dead_node(),
                omen2_slice(),
                train_claim(namespace="vms"),
                claim_vm("vm-a", claim="train-gpu", run_strategy="Halted"),
            ],
            [],
            id="a halted VM waits for nothing",
        ),
        pytest.param(
            [
                on_dead_node(),
                omen2_slice(),
                train_claim(namespace="vms"),
                claim_vmi("vmi-a", claim="train-gpu", node_name="omen2"),
            ],
            ["VirtualMachineInstance vms/vmi-a"],
            id="a live VMI no VM owns, through its resourceClaims",
        ),
        pytest.param(
            template_vm_on(on_dead_node()),
            ["VirtualMachine vms/gpu-fedora-dra"],
            id="a VM whose claim was made from a template for its virt-launcher pod",
        ),
        pytest.param(template_vm_on(node("omen2")), [], id="that VM on a healthy node"),
    ],
)
def test_a_workload_is_reported_when_its_allocated_claim_pins_it_to_a_notready_node(
    objects: list[Obj], expected: list[str]
) -> None:
    assert subjects(claims_on_dead_nodes(*objects)) == expected


def test_a_claim_on_a_silent_kubelet_with_swap_is_chained_to_the_node_and_its_cause() -> None:
    (finding,) = claims_on_dead_nodes(*pod_on_dead_omen2())
    assert finding.message == (
        "Pod ml/train-0 is Running: its claim ml/train-gpu (resourceClaims[gpu]) is allocated "
        "on omen2 (gpu-0 (gpu, NVIDIA GeForce RTX 5090)), NotReady for 112 days 8 hours "
        "(since 2026-07-10 03:12 UTC): Ready=Unknown (NodeStatusUnknown: Kubelet stopped "
        "posting node status.); the allocation pins it to omen2 until omen2 returns or the "
        "claim is released"
    )
    assert finding.since == datetime(2026, 7, 10, 3, 12, 41, tzinfo=UTC)
    root = finding.chain
    assert root.text == "Pod ml/train-0: Running"
    (uses,) = root.children
    assert uses.text == (
        "uses claim ml/train-gpu (resourceClaims[gpu]), allocated on omen2: gpu-0 (gpu, NVIDIA "
        "GeForce RTX 5090)"
    )
    (node_link,) = uses.children
    assert node_link.text.startswith("omen2: NotReady since 2026-07-10 03:12 UTC (112 days 8 h")
    below = [link.text for link in node_link.children]
    assert below[:2] == [
        "omen2: kubelet v1.33.4 stopped posting node status: it is down, crash-looping, or cut "
        "off from the API server",
        "omen2: swap is on: kubelet reports 32.0 GiB of swap",
    ]
    assert (
        "omen2: tainted node.kubernetes.io/unreachable (NoExecute, NoSchedule): nothing new "
        "schedules there" in below
    )
    assert (
        "omen2: ResourceSlices of gpu.nvidia.com still publish gpu-0 (gpu, NVIDIA GeForce RTX "
        "5090): no provider while the node is NotReady"
    ) in below
    # the pod holding the GPU through the claim is named with the node, as a device-plugin one is
    assert "omen2: 1 GPU pod still bound: ml/train-0 (claim ml/train-gpu: gpu-0)" in below


@pytest.mark.parametrize(
    ("node_obj", "first_steps"),
    [
        pytest.param(
            on_dead_node(swap=True),
            [
                "on omen2: find why kubelet is down: systemctl status kubelet; journalctl -u "
                "kubelet -b (if it says swap is not supported: swapoff -a and comment swap out "
                "of /etc/fstab)",
                "on omen2: systemctl restart kubelet, then watch kubectl get node omen2 -w "
                "until Ready",
            ],
            id="a silent kubelet: find why, then restart it",
        ),
        pytest.param(
            node(
                "omen2",
                ready="False",
                reason="KubeletNotReady",
                message="running with swap on is not supported, please disable swap",
                since="2026-07-10T03:12:41Z",
            ),
            [
                "on omen2: swapoff -a, then comment swap out of /etc/fstab so it stays off",
                "on omen2: systemctl restart kubelet, then watch kubectl get node omen2 -w "
                "until Ready",
            ],
            id="a kubelet that names swap: swapoff first",
        ),
    ],
)
def test_the_repair_fixes_the_node_then_waits_and_only_then_releases_the_claim(
    node_obj: Obj, first_steps: list[str]
) -> None:
    (finding,) = claims_on_dead_nodes(*held_on(node_obj))
    assert list(finding.remediation) == [
        *first_steps,
        "ml/train-0 runs again by itself once omen2 is Ready: its claim ml/train-gpu stays "
        "allocated there; watch: kubectl get pod -n ml train-0 -w",
        "only if omen2 cannot come back, and is powered off (else its GPU may still be in use): "
        "kubectl delete pod -n ml train-0 --grace-period=0 --force releases the claim, which "
        "can then be allocated on another node with a matching device",
    ]


def test_a_vm_on_a_trapped_node_is_told_to_relabel_before_kubelet_returns() -> None:
    """The 112 days in DRA form: a passthrough VM's claim on a dead vm-passthrough node."""
    nfd = {"feature.node.kubernetes.io/pci-10de.present": "true"}
    dead = on_dead_node(swap=True, labels={**PASSTHROUGH, **nfd})
    (finding,) = claims_on_dead_nodes(*template_vm_on(dead))
    assert finding.resource.kind == "VirtualMachine"
    # the running VMI's entry that takes its device from the claim the launcher pod holds
    assert "(hostDevices[hd1], resourceClaims[gpu])" in finding.message
    steps = finding.remediation
    assert steps[0].startswith(
        "before kubelet returns: kubectl label node omen2 nvidia.com/gpu.workload.config=container"
    )
    assert steps[3].startswith("when nothing on omen2 uses its GPUs")
    assert "give them back to vms/gpu-fedora-dra" in steps[3]
    assert steps[-1].startswith(
        f"only if omen2 cannot come back, and is powered off (else its GPU "
        f"may still be in use): kubectl delete pod -n vms {LAUNCHER}"
    )


def test_a_stuck_vm_keeps_the_schedulers_word_and_its_own_duration() -> None:
    stuck = claim_vm("vm-a", claim="train-gpu", unschedulable_since="2026-08-01T00:00:00Z")
    stuck["status"]["conditions"][0]["message"] = (
        "0/3 nodes are available: 3 cannot allocate all claims."
    )
    objects = [on_dead_node(), omen2_slice(), train_claim(namespace="vms"), stuck]
    (finding,) = claims_on_dead_nodes(*objects)
    assert finding.since == datetime(2026, 8, 1, tzinfo=UTC)
    assert finding.chain.text == (
        "VirtualMachine vms/vm-a: ErrorUnschedulable for 90 days 12 hours (since 2026-08-01 "
        "00:00 UTC)"
    )
    assert finding.chain.children[-1].text == (
        "scheduler: 0/3 nodes are available: 3 cannot allocate all claims"
    )


def test_a_device_the_driver_no_longer_publishes_is_named_from_the_allocation() -> None:
    republished = held_on(on_dead_node(), gpu("gpu-vfio-0", type_="vfio"))
    (finding,) = claims_on_dead_nodes(*republished)
    assert "allocated on omen2 (gpu-0 (pool omen2: no longer published))" in finding.message


@pytest.mark.parametrize(
    ("pod_name", "vmi"),
    [
        ("virt-launcher-gpu-fedora-dra-x7k2p", "gpu-fedora-dra"),
        ("virt-launcher-gpu-fedora-x7k2p", "gpu-fedora"),
        ("virt-launcher-gpu-fedora-dra", None),
        ("train-gpu-fedora-dra-x7k2p", None),
    ],
)
def test_a_virt_launcher_pod_is_matched_to_its_vmi_by_kubevirts_naming(
    pod_name: str, vmi: str | None
) -> None:
    vmis = {name: project_vmi(claim_vmi(name)) for name in ("gpu-fedora", "gpu-fedora-dra")}
    found = launcher_vmi(pod_name, vmis)
    assert (found.name if found is not None else None) == vmi


# --- the recorded cluster ------------------------------------------------------------------------


@needs_fixtures
def test_the_recorded_pod_on_a_dead_omen2_is_reported_through_its_claim() -> None:
    items: list[Obj] = yaml.safe_load((DRA_FIXTURES / "objects.yaml").read_text())["items"]
    (finding,) = claims_on_dead_nodes(on_dead_node(swap=True, labels=PASSTHROUGH), *items)
    assert (finding.resource.kind, str(finding.resource)) == ("Pod", "ml/train-dra")
    assert finding.device == "ml/train-gpu:gpu"
    assert "allocated on omen2 (gpu-0 (pool omen2: no longer published))" in finding.message
    assert "omen2: swap is on: kubelet reports 32.0 GiB of swap" in finding.chain.flatten()


def test_nothing_is_reported_without_dra_objects() -> None:
    assert (
        claims_on_dead_nodes(
            on_dead_node(), vm("gpu-fedora", gpus=["nvidia.com/x"]), pod("p", "omen2")
        )
        == []
    )


def test_a_vm_with_a_named_claim_is_one_finding_whose_repair_names_its_launcher_pod() -> None:
    launcher = "virt-launcher-vm-a-q8w2n"
    objects = [
        on_dead_node(),
        omen2_slice(),
        train_claim(namespace="vms", reserved_for=[launcher]),
        claim_vm("vm-a", claim="train-gpu"),
        claim_vmi("vm-a", claim="train-gpu", node_name="omen2", owner="vm-a"),
        claim_pod(launcher, "omen2", namespace="vms", claim="train-gpu"),
    ]
    (finding,) = claims_on_dead_nodes(*objects)
    assert subjects([finding]) == ["VirtualMachine vms/vm-a"]
    assert "(gpus[gpu1], resourceClaims[gpu])" in finding.message  # the VM's own entry
    assert (
        f"kubectl delete pod -n vms {launcher} --grace-period=0 --force"
        in (finding.remediation[-1])
    )


def test_it_declares_everything_it_asks_of_the_state() -> None:
    """The examples hold no claim on a NotReady node, so the coverage test never saw it ask:
    who waits for the claim reads the VMs to run and their providers too, so a state without
    VMs leaves it out rather than finding only the pods."""
    recording = Recording(state_of(*pod_on_dead_omen2(), claim_vm("gpu-fedora-dra")))
    list(CLAIM_ON_NOT_READY_NODE_DIAGNOSIS.diagnose(AuditView(recording.view), NOW))
    assert {VIRTUAL_MACHINE, POD} <= recording.kinds <= CLAIM_ON_NOT_READY_NODE_DIAGNOSIS.reads

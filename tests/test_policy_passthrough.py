"""passthrough-without-ready-provider: a VM asking for a device no healthy node provides."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import pytest

from policies.rules.passthrough_provider import POLICY, audit, check
from policies.state.cluster import ClusterState
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import (
    Obj,
    dead_node,
    instancetype,
    judged_by,
    kubevirt,
    node,
    request,
    state_of,
    vm,
    vmi,
)

RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
RTX_5090_RAW = "nvidia.com/2b85"
T4 = "nvidia.com/TU104GL_TESLA_T4"
DEAD_SINCE = datetime(2026, 7, 10, 3, 12, 41, tzinfo=UTC)
OMEN2_DEAD = (
    "omen2 advertises it but is NotReady since 2026-07-10 (Kubelet stopped posting node status.)"
)

Review = Callable[[Sequence[str], Sequence[str]], AdmissionRequest]


def vm_create(gpus: Sequence[str], host_devices: Sequence[str] = ()) -> AdmissionRequest:
    return request("CREATE", vm("gpu-fedora", gpus=gpus, host_devices=host_devices))


def vm_update(gpus: Sequence[str], host_devices: Sequence[str] = ()) -> AdmissionRequest:
    new = vm("gpu-fedora", gpus=gpus, host_devices=host_devices)
    old = vm("gpu-fedora", gpus=gpus, host_devices=host_devices, run_strategy="Halted")
    return request("UPDATE", new, old)


def vmi_create(gpus: Sequence[str], host_devices: Sequence[str] = ()) -> AdmissionRequest:
    return request("CREATE", vmi("gpu-fedora", gpus=gpus, host_devices=host_devices, phase=""))


REVIEWS = [
    pytest.param(vm_create, id="VM CREATE"),
    pytest.param(vm_update, id="VM UPDATE"),
    pytest.param(vmi_create, id="VMI CREATE"),
]


def judge(review: AdmissionRequest, *objects: Obj) -> list[Finding]:
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


def messages(review: AdmissionRequest, *objects: Obj) -> list[str]:
    return [f.message for f in judge(review, *objects)]


# --- healthy and unhealthy providers --------------------------------------------------------------


@pytest.mark.parametrize("make", REVIEWS)
@pytest.mark.parametrize(
    "objects",
    [
        pytest.param(
            [node("omen2", allocatable={RTX_5090: "1"})], id="a healthy node advertises it"
        ),
        pytest.param(
            [
                dead_node("omen2", allocatable={RTX_5090: "1"}),
                node("omen3", allocatable={RTX_5090: "2"}),
            ],
            id="one healthy provider is enough when another is dead",
        ),
        pytest.param(
            [
                node(
                    "omen2",
                    allocatable={RTX_5090: "1"},
                    taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                )
            ],
            id="an unrelated taint does not make the provider unhealthy",
        ),
    ],
)
def test_no_finding_when_a_healthy_node_provides_the_device(
    make: Review, objects: list[Obj]
) -> None:
    assert messages(make([RTX_5090], ()), *objects) == []


@pytest.mark.parametrize("make", REVIEWS)
@pytest.mark.parametrize(
    ("provider", "why"),
    [
        pytest.param(
            dead_node("omen2", allocatable={RTX_5090: "1"}),
            OMEN2_DEAD,
            id="the only provider is NotReady with stale allocatable",
        ),
        pytest.param(
            node(
                "omen2",
                ready="False",
                reason="KubeletNotReady",
                message="PLEG is not healthy",
                since="2026-06-01T00:00:00Z",
                allocatable={RTX_5090: "1"},
            ),
            "omen2 advertises it but is NotReady since 2026-06-01 (PLEG is not healthy)",
            id="the only provider reports Ready False",
        ),
        pytest.param(
            node("omen2", unschedulable=True, allocatable={RTX_5090: "1"}),
            "omen2 advertises it but is cordoned",
            id="the only provider is cordoned",
        ),
        pytest.param(
            node(
                "omen2",
                allocatable={RTX_5090: "1"},
                taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}],
            ),
            "omen2 advertises it but is tainted node.kubernetes.io/unreachable:NoSchedule",
            id="the only provider is tainted unreachable",
        ),
    ],
)
def test_an_unhealthy_only_provider_is_named_with_why(
    make: Review, provider: Obj, why: str
) -> None:
    (message,) = messages(make([RTX_5090], ()), provider)
    assert message.startswith(f"{RTX_5090} (")
    assert why in message
    assert message.endswith("the VM stays unschedulable until a provider is Ready")


def test_the_finding_for_the_incident_reads_as_the_chain_of_causes() -> None:
    (finding,) = judge(vm_create([RTX_5090]), dead_node("omen2", allocatable={RTX_5090: "1"}))
    assert finding.message == (
        f"{RTX_5090} (gpus[gpu1]): {OMEN2_DEAD}; "
        "the VM stays unschedulable until a provider is Ready"
    )
    assert finding.chain == (
        f"needs {RTX_5090}",
        "omen2: NotReady since 2026-07-10 (Kubelet stopped posting node status.)",
    )
    assert finding.since == DEAD_SINCE
    assert finding.remediation == (
        "find why omen2 is not Ready (journalctl -u kubelet there), fix it",
    )
    assert finding.device == RTX_5090
    assert POLICY.default_action == Action.WARN


def test_no_provider_at_all_is_the_chains_last_link() -> None:
    (finding,) = judge(vm_create([RTX_5090]))
    assert finding.chain == (f"needs {RTX_5090}", "no node advertises it")
    assert finding.device == RTX_5090


@pytest.mark.parametrize("make", REVIEWS)
@pytest.mark.parametrize(
    "objects",
    [
        pytest.param([], id="there are no nodes"),
        pytest.param(
            [node("omen2", allocatable={RTX_5090: "0"})], id="a node advertises a count of 0"
        ),
        pytest.param(
            [node("omen2", allocatable={"nvidia.com/gpu": "2"})],
            id="nodes advertise other resources",
        ),
    ],
)
def test_no_node_advertises_it(make: Review, objects: list[Obj]) -> None:
    (message,) = messages(make([RTX_5090], ()), *objects)
    assert message == f"{RTX_5090} (gpus[gpu1]): no node advertises it"


def test_more_than_three_unhealthy_providers_are_counted() -> None:
    providers = [dead_node(f"omen{i}", allocatable={RTX_5090: "1"}) for i in range(1, 6)]
    (message,) = messages(vm_create([RTX_5090]), *providers)
    for name in ("omen1", "omen2", "omen3"):
        assert f"{name} advertises it but is NotReady" in message
    assert "omen4" not in message
    assert "omen5" not in message
    assert "2 more providers are unhealthy too" in message


def test_three_unhealthy_providers_are_all_named_without_a_count() -> None:
    providers = [dead_node(f"omen{i}", allocatable={RTX_5090: "1"}) for i in range(1, 4)]
    (message,) = messages(vm_create([RTX_5090]), *providers)
    assert message.count("advertises it but is NotReady") == 3
    assert "more providers" not in message


# --- did you mean ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asked", "objects", "suggestion"),
    [
        pytest.param(
            "nvidia.com/GB202_GeForce_RTX_5090",
            [node("omen2", allocatable={RTX_5090: "1"})],
            RTX_5090,
            id="a case mismatch with an advertised name",
        ),
        pytest.param(
            "nvidia.com/TU104GL_Tesla_T4",
            [kubevirt([("10de:1eb8", T4)])],
            T4,
            id="a case mismatch with a name KubeVirt permits",
        ),
        pytest.param(
            RTX_5090_RAW,
            [node("omen2", allocatable={RTX_5090: "1"})],
            RTX_5090,
            id="a raw PCI id name when the pci.ids name is advertised",
        ),
        pytest.param(
            RTX_5090,
            [node("omen2", allocatable={RTX_5090_RAW: "1"})],
            RTX_5090_RAW,
            id="a pci.ids name when the raw PCI id name is advertised",
        ),
    ],
)
def test_did_you_mean(asked: str, objects: list[Obj], suggestion: str) -> None:
    (finding,) = judge(vm_create([asked]), *objects)
    assert (
        f"no node advertises it; did you mean {suggestion}? (names are case-sensitive)"
        in finding.message
    )
    assert f"set deviceName to {suggestion}" in finding.remediation


def test_no_suggestion_when_nothing_alike_is_advertised() -> None:
    (finding,) = judge(
        vm_create([RTX_5090]), node("omen3", allocatable={"nvidia.com/GA102_GEFORCE_RTX_3090": "1"})
    )
    assert "did you mean" not in finding.message
    assert finding.remediation == (
        f"check the deviceName, or add a node whose hardware provides {RTX_5090}",
    )


# --- KubeVirt permissions -------------------------------------------------------------------------


NOT_PERMITTED = "not in permittedHostDevices, so KubeVirt will refuse to start it"
NO_GATE = "hostDevices need the HostDevices feature gate, which KubeVirt lacks"


@pytest.mark.parametrize(
    ("gpus", "host_devices", "objects", "remarks"),
    [
        pytest.param(
            [RTX_5090],
            [],
            [kubevirt([("10de:2204", "nvidia.com/GA102_GEFORCE_RTX_3090")])],
            [NOT_PERMITTED],
            id="a KubeVirt CR that lacks the name is remarked on",
        ),
        pytest.param(
            [RTX_5090],
            [],
            [kubevirt([("10de:2b85", RTX_5090)])],
            [],
            id="a KubeVirt CR that permits the name raises no remark",
        ),
        pytest.param([RTX_5090], [], [], [], id="without a KubeVirt CR there is nothing to remark"),
        pytest.param(
            [],
            [RTX_5090],
            [kubevirt([("10de:2b85", RTX_5090)], feature_gates=())],
            [NO_GATE],
            id="hostDevices without the HostDevices gate are remarked on",
        ),
        pytest.param(
            [],
            [RTX_5090],
            [kubevirt([("10de:2b85", RTX_5090)], feature_gates=("HostDevices",))],
            [],
            id="hostDevices with the HostDevices gate raise no remark",
        ),
        pytest.param(
            [RTX_5090],
            [],
            [kubevirt([("10de:2b85", RTX_5090)], feature_gates=())],
            [],
            id="gpus need no feature gate",
        ),
        pytest.param(
            [],
            [RTX_5090],
            [kubevirt([], feature_gates=())],
            [NOT_PERMITTED, NO_GATE],
            id="both remarks together",
        ),
    ],
)
def test_permission_remarks(
    gpus: list[str], host_devices: list[str], objects: list[Obj], remarks: list[str]
) -> None:
    (message,) = messages(vm_create(gpus, host_devices), *objects)
    for remark in (NOT_PERMITTED, NO_GATE):
        assert (remark in message) is (remark in remarks)
    if remarks:
        assert message.startswith(f"{RTX_5090} (") and "no node advertises it; " in message


# --- which VMs are judged -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run_strategy", "running", "judged"),
    [
        pytest.param("Always", None, True, id="an Always VM is judged"),
        pytest.param("RerunOnFailure", None, True, id="a RerunOnFailure VM is judged"),
        pytest.param("Once", None, True, id="a Once VM is judged"),
        pytest.param("Halted", None, False, id="a Halted VM is not judged"),
        pytest.param("Manual", None, False, id="a Manual VM is not judged"),
        pytest.param(None, False, False, id="a running false VM is not judged"),
        pytest.param(None, True, True, id="a running true VM is judged"),
        pytest.param(None, None, False, id="a VM with neither field is not judged"),
    ],
)
def test_only_vms_meant_to_run_are_judged(
    run_strategy: str | None, running: bool | None, judged: bool
) -> None:
    obj = vm("gpu-fedora", gpus=[RTX_5090], run_strategy=run_strategy, running=running)
    findings = judge(request("CREATE", obj), dead_node("omen2", allocatable={RTX_5090: "1"}))
    assert bool(findings) is judged


@pytest.mark.parametrize(
    ("phase", "judged"),
    [
        pytest.param("", True, id="a new VMI is judged"),
        pytest.param("Pending", True, id="a pending VMI is judged"),
        pytest.param("Succeeded", False, id="a succeeded VMI is not judged"),
        pytest.param("Failed", False, id="a failed VMI is not judged"),
    ],
)
def test_only_live_vmis_are_judged(phase: str, judged: bool) -> None:
    findings = judge(request("CREATE", vmi("v", gpus=[RTX_5090], phase=phase)))
    assert bool(findings) is judged


def test_a_vm_without_devices_is_never_judged() -> None:
    assert judge(vm_create([])) == []


def test_duplicate_device_names_give_one_finding() -> None:
    findings = judge(
        vm_create([RTX_5090, RTX_5090], [RTX_5090]), dead_node("omen2", allocatable={RTX_5090: "1"})
    )
    assert len(findings) == 1


def test_each_missing_device_name_gives_its_own_finding() -> None:
    findings = judge(
        vm_create([RTX_5090, T4], [RTX_5090]),
        node("omen3", allocatable={T4: "1"}),
        dead_node("omen2"),
    )
    assert [f.message.split(" ")[0] for f in findings] == [RTX_5090]
    findings = judge(vm_create([RTX_5090, T4]))
    assert [f.message.split(" ")[0] for f in findings] == [RTX_5090, T4]
    findings = judge(vm_create([RTX_5090, RTX_5090, T4]))
    assert [f.device for f in findings] == [RTX_5090, T4]


# --- since ----------------------------------------------------------------------------------------


def test_since_comes_from_the_vms_pod_scheduled_false_condition() -> None:
    obj = vm("gpu-fedora", gpus=[RTX_5090], unschedulable_since="2026-03-21T08:00:00Z")
    (finding,) = judge(request("UPDATE", obj, obj), dead_node("omen2", allocatable={RTX_5090: "1"}))
    assert finding.since == datetime(2026, 3, 21, 8, 0, tzinfo=UTC)


def test_since_falls_back_to_the_providers_not_ready_time() -> None:
    (finding,) = judge(vm_create([RTX_5090]), dead_node("omen2", allocatable={RTX_5090: "1"}))
    assert finding.since == DEAD_SINCE


def test_since_is_the_earliest_not_ready_time_among_providers() -> None:
    later = node(
        "omen3",
        ready="False",
        reason="KubeletNotReady",
        message="x",
        since="2026-08-01T00:00:00Z",
        allocatable={RTX_5090: "1"},
    )
    (finding,) = judge(
        vm_create([RTX_5090]), later, dead_node("omen2", allocatable={RTX_5090: "1"})
    )
    assert finding.since == DEAD_SINCE


def test_since_is_unknown_when_no_node_advertises_and_the_vm_has_no_condition() -> None:
    (finding,) = judge(vm_create([RTX_5090]))
    assert finding.since is None


# --- audit ----------------------------------------------------------------------------------------


def test_audit_lists_running_intent_vms_and_ownerless_vmis_only() -> None:
    state: ClusterState = state_of(
        dead_node("omen2", allocatable={RTX_5090: "1"}),
        node("omen3", allocatable={T4: "1"}),
        vm("gpu-fedora", gpus=[RTX_5090]),
        vm("rhel9-gpu-vm", gpus=[RTX_5090], run_strategy="RerunOnFailure"),
        vm("halted", gpus=[RTX_5090], run_strategy="Halted"),
        vm("manual", gpus=[RTX_5090], run_strategy="Manual"),
        vm("healthy", gpus=[T4]),
        vm("no-devices"),
        vmi("gpu-fedora", gpus=[RTX_5090], owner="gpu-fedora"),
        vmi("bare", gpus=[RTX_5090]),
        vmi("bare-done", gpus=[RTX_5090], phase="Succeeded"),
        vmi("bare-healthy", gpus=[T4]),
    )
    listed = [(ref.kind, str(ref)) for ref, _ in audit(state)]
    assert listed == [
        ("VirtualMachine", "vms/gpu-fedora"),
        ("VirtualMachine", "vms/rhel9-gpu-vm"),
        ("VirtualMachineInstance", "vms/bare"),
    ]
    refs = [ref for ref, _ in audit(state)]
    assert {ref.api_version for ref in refs} == {"kubevirt.io/v1"}


def test_audit_uses_the_vms_unschedulable_since() -> None:
    state = state_of(
        dead_node("omen2", allocatable={RTX_5090: "1"}),
        vm("gpu-fedora", gpus=[RTX_5090], unschedulable_since="2026-03-21T08:00:00Z"),
    )
    ((_, finding),) = list(audit(state))
    assert finding.since == datetime(2026, 3, 21, 8, 0, tzinfo=UTC)


# --- scope ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("review", "applies"),
    [
        pytest.param(request("CREATE", vm("v")), True, id="VM CREATE is judged"),
        pytest.param(request("UPDATE", vm("v"), vm("v")), True, id="VM UPDATE is judged"),
        pytest.param(request("DELETE", None, vm("v")), False, id="VM DELETE is not"),
        pytest.param(
            request("UPDATE", vm("v"), vm("v"), sub_resource="status"),
            True,
            id="the VM status subresource is judged (virtctl start writes a Start there)",
        ),
        pytest.param(request("CREATE", vmi("v")), True, id="VMI CREATE is judged"),
        pytest.param(request("UPDATE", vmi("v"), vmi("v")), False, id="VMI UPDATE is not"),
        pytest.param(request("CREATE", node("n")), False, id="a Node is not"),
    ],
)
def test_scope(review: AdmissionRequest, applies: bool) -> None:
    assert judged_by(POLICY, review) is applies


# --- a VM's instancetype (KubeVirt copies its gpus[] and hostDevices[] into the VM) -------------

GPU_5090_TYPE = instancetype("gpu-5090", gpus=[RTX_5090])
GPU_5090_TYPE["metadata"].update(uid="u1", generation=2)


@pytest.mark.parametrize(
    ("matcher", "status", "message", "remediation"),
    [
        (
            {"name": "h100"},
            {},
            "VirtualMachineClusterInstancetype h100 (spec.instancetype) is not in gpu-guard's "
            "view: the gpus and hostDevices it gives go unjudged. Check that it exists and that "
            "gpu-guard can read it.",
            "kubectl get virtualmachineclusterinstancetypes.instancetype.kubevirt.io h100",
        ),
        (
            {"kind": "VirtualMachineInstancetype", "name": "gpu-5090"},
            {},
            "VirtualMachineInstancetype gpu-5090 (spec.instancetype) is not in gpu-guard's view",
            "kubectl get virtualmachineinstancetypes.instancetype.kubevirt.io gpu-5090",
        ),
        (
            {"kind": "Flavor", "name": "big"},
            {},
            "Flavor big (spec.instancetype) is not in gpu-guard's view",
            "kubectl get flavor big",
        ),
        (
            {"name": "gpu-5090"},
            {"instancetypeRef": {"controllerRevisionRef": {"name": "v-gpu-5090-v1beta1-u1-1"}}},
            "VirtualMachineClusterInstancetype gpu-5090 changed after KubeVirt copied it for this "
            "VM (ControllerRevision v-gpu-5090-v1beta1-u1-1): the gpus and hostDevices the VM "
            "runs with go unjudged. Check them in that revision.",
            "kubectl get controllerrevision v-gpu-5090-v1beta1-u1-1 -o yaml",
        ),
    ],
    ids=[
        "a cluster instancetype gpu-guard does not see",
        "a namespaced one of a name only the cluster kind has",
        "a kind KubeVirt does not know",
        "a copy KubeVirt made before the instancetype changed",
    ],
)
def test_a_vm_whose_instancetypes_devices_cannot_be_told_is_warned_so_in_check_and_audit(
    matcher: Obj, status: Obj, message: str, remediation: str
) -> None:
    named = {**vm("typed", instancetype=matcher), "status": status}
    state = state_of(node("omen1", allocatable={RTX_5090: "1"}), GPU_5090_TYPE, named)
    for finding in [*check(request("UPDATE", named, named), state), *(f for _, f in audit(state))]:
        assert finding.message.startswith(message)
        assert finding.remediation == (remediation,)
    assert len(check(request("UPDATE", named, named), state)) == 1
    assert [ref.name for ref, _ in audit(state)] == ["typed"]


def test_a_vm_running_with_the_current_copy_of_its_instancetype_is_judged_by_its_devices() -> None:
    named = vm("typed", instancetype={"name": "gpu-5090"})
    named["status"] = {
        "instancetypeRef": {"controllerRevisionRef": {"name": "typed-gpu-5090-v1beta1-u1-2"}}
    }
    state = state_of(dead_node("omen2", allocatable={RTX_5090: "1"}), GPU_5090_TYPE)
    findings = check(request("UPDATE", named, named), state)
    assert [f.message.split(":")[0] for f in findings] == [f"{RTX_5090} (gpus[gpu1])"]
    healthy = state_of(node("omen1", allocatable={RTX_5090: "1"}), GPU_5090_TYPE)
    assert check(request("UPDATE", named, named), healthy) == []

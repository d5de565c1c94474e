"""device-not-permitted: a device healthy nodes advertise but the KubeVirt CR does not permit."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.rules.device_not_permitted import POLICY, audit, check
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
from webhook.engine import Engine

RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
TOWER1 = node("tower1", allocatable={RTX_3090: "1"})
ONLY_5090 = kubevirt([("10de:2b85", RTX_5090)])
BOTH = kubevirt([("10de:2b85", RTX_5090), ("10de:2204", RTX_3090)])
BOTH_NO_GATE = kubevirt([("10de:2b85", RTX_5090), ("10de:2204", RTX_3090)], feature_gates=())
NOT_PERMITTED = "does not permit it (permittedHostDevices)"
NO_GATE = "lacks the HostDevices feature gate hostDevices[] need"


def findings(review: AdmissionRequest, objects: Sequence[Obj]) -> list[Finding]:
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


@pytest.mark.parametrize(
    ("obj", "objects", "reasons"),
    [
        pytest.param(
            vm("v", gpus=[RTX_3090]), [TOWER1, ONLY_5090], [NOT_PERMITTED], id="a VM's GPU"
        ),
        pytest.param(
            vmi("v", gpus=[RTX_3090], phase=""),
            [TOWER1, ONLY_5090],
            [NOT_PERMITTED],
            id="a new VMI's GPU",
        ),
        pytest.param(
            vm("v", host_devices=[RTX_3090]),
            [TOWER1, BOTH_NO_GATE],
            [NO_GATE],
            id="a permitted hostDevice without the gate",
        ),
        pytest.param(
            vm("v", host_devices=[RTX_3090]),
            [TOWER1, kubevirt([("10de:2b85", RTX_5090)], feature_gates=())],
            [NOT_PERMITTED, NO_GATE],
            id="both at once",
        ),
        pytest.param(
            vm("v", gpus=[RTX_3090], run_strategy="RerunOnFailure"),
            [TOWER1, dead_node("tower2", allocatable={RTX_3090: "1"}), ONLY_5090],
            [NOT_PERMITTED],
            id="one healthy provider among dead ones is enough to be the only problem",
        ),
    ],
)
def test_a_device_only_permission_stands_in_the_way_of_is_warned(
    obj: Obj, objects: list[Obj], reasons: list[str]
) -> None:
    (finding,) = findings(request("CREATE", obj), objects)
    for reason in (NOT_PERMITTED, NO_GATE):
        assert (reason in finding.message) is (reason in reasons)
    assert POLICY.default_action == Action.WARN


@pytest.mark.parametrize(
    ("obj", "objects"),
    [
        pytest.param(vm("v", gpus=[RTX_3090]), [TOWER1, BOTH], id="a permitted device"),
        pytest.param(
            vm("v", host_devices=["kubevirt.io/stick"]),
            [
                node("tower1", allocatable={"kubevirt.io/stick": "1"}),
                kubevirt(usb=[("0951:1666", "kubevirt.io/stick")]),
            ],
            id="a USB device permitted in permittedHostDevices.usb",
        ),
        pytest.param(vm("v", gpus=[RTX_3090]), [TOWER1], id="no KubeVirt CR to judge by"),
        pytest.param(
            vm("v", gpus=[RTX_3090]),
            [dead_node("tower1", allocatable={RTX_3090: "1"}), ONLY_5090],
            id="no healthy provider: passthrough-without-ready-provider's case",
        ),
        pytest.param(
            vm("v", gpus=[RTX_3090], run_strategy="Halted"),
            [TOWER1, ONLY_5090],
            id="a halted VM",
        ),
        pytest.param(
            vmi("v", gpus=[RTX_3090], phase="Succeeded"),
            [TOWER1, ONLY_5090],
            id="a finished VMI",
        ),
        pytest.param(
            vm("v", gpus=[RTX_3090]), [TOWER1, BOTH_NO_GATE], id="gpus need no feature gate"
        ),
        pytest.param(vm("v"), [TOWER1, ONLY_5090], id="a VM without devices"),
    ],
)
def test_everything_else_is_allowed(obj: Obj, objects: list[Obj]) -> None:
    assert findings(request("CREATE", obj), objects) == []


def test_the_message_names_the_device_the_kubevirt_cr_and_the_fix() -> None:
    (finding,) = findings(
        request("CREATE", vm("v", gpus=[RTX_3090, RTX_3090])), [TOWER1, ONLY_5090]
    )
    assert finding.message == (
        f"{RTX_3090} (gpus[gpu1]): healthy nodes advertise it, but KubeVirt kubevirt/kubevirt "
        f"{NOT_PERMITTED}, so it will refuse to start the VM. Fix the KubeVirt CR first."
    )
    assert len(f"[{POLICY.id}] {finding.message}") <= 256
    assert finding.remediation == (
        f"add {{pciVendorSelector: 10de:2204, resourceName: {RTX_3090}, "
        "externalResourceProvider: true} to spec.configuration.permittedHostDevices."
        "pciHostDevices of KubeVirt kubevirt/kubevirt",
    )
    assert finding.chain == ()  # no HyperConverged between the user and the KubeVirt CR


def test_the_gate_remediation() -> None:
    (finding,) = findings(
        request("CREATE", vm("v", host_devices=[RTX_3090])), [TOWER1, BOTH_NO_GATE]
    )
    assert finding.remediation == (
        "add HostDevices to spec.configuration.developerConfiguration.featureGates of KubeVirt "
        "kubevirt/kubevirt, or move the device to gpus[]",
    )


def test_audit_lists_vms_meant_to_run_and_ownerless_live_vmis() -> None:
    state = state_of(
        TOWER1,
        ONLY_5090,
        vm("win11", gpus=[RTX_3090]),
        vm("halted", gpus=[RTX_3090], run_strategy="Halted"),
        vm("fine", gpus=[RTX_5090]),
        vmi("win11", node_name="tower1", gpus=[RTX_3090], owner="win11"),
        vmi("bare", node_name="tower1", gpus=[RTX_3090]),
        vmi("gone", gpus=[RTX_3090], phase="Failed"),
    )
    assert [(ref.kind, str(ref)) for ref, _ in audit(state)] == [
        ("VirtualMachine", "vms/win11"),
        ("VirtualMachineInstance", "vms/bare"),
    ]


@pytest.mark.parametrize(
    ("review", "applies"),
    [
        pytest.param(request("CREATE", vm("v")), True, id="VM CREATE is judged"),
        pytest.param(request("UPDATE", vm("v"), vm("v")), True, id="VM UPDATE is judged"),
        pytest.param(
            request("UPDATE", vm("v"), vm("v"), sub_resource="status"),
            True,
            id="the VM status subresource is judged (virtctl start writes a Start there)",
        ),
        pytest.param(request("CREATE", vmi("v")), True, id="VMI CREATE is judged"),
        pytest.param(request("DELETE", None, vm("v")), False, id="VM DELETE is not"),
    ],
)
def test_scope(review: AdmissionRequest, applies: bool) -> None:
    assert judged_by(POLICY, review) is applies


def test_the_engine_warns_by_default() -> None:
    decision = Engine().evaluate(
        request("CREATE", vm("v", gpus=[RTX_3090])), state_of(TOWER1, ONLY_5090)
    )
    assert decision.allowed
    assert [(v.policy, v.action) for v in decision.verdicts] == [(POLICY.id, Action.WARN)]


def test_both_reasons_are_said_in_one_sentence() -> None:
    lacking = kubevirt([("10de:2b85", RTX_5090)], feature_gates=())
    (finding,) = findings(request("CREATE", vm("v", host_devices=[RTX_3090])), [TOWER1, lacking])
    assert finding.message.startswith(
        f"{RTX_3090} (hostDevices[hd1]): healthy nodes advertise it, but KubeVirt "
        f"kubevirt/kubevirt {NOT_PERMITTED} and {NO_GATE}, so it will refuse to start the VM."
    )


def test_a_device_the_pci_database_does_not_know_gets_a_selector_to_fill_in() -> None:
    custom = "example.com/CUSTOM_ACCELERATOR"
    objects = [node("tower1", allocatable={custom: "1"}), ONLY_5090]
    (finding,) = findings(request("CREATE", vm("v", gpus=[custom])), objects)
    assert finding.remediation == (
        f"add {{pciVendorSelector: <vendor:device>, resourceName: {custom}, "
        "externalResourceProvider: true} to spec.configuration.permittedHostDevices."
        "pciHostDevices of KubeVirt kubevirt/kubevirt",
    )


T4 = "nvidia.com/TU104GL_TESLA_T4"
WITH_T4 = node("tower1", allocatable={RTX_3090: "1", RTX_5090: "1", T4: "1"})


@pytest.mark.parametrize(
    ("gpus", "named"),
    [
        pytest.param([RTX_5090, T4], [T4], id="after a permitted device"),
        pytest.param(["nvidia.com/NOWHERE", T4], [T4], id="after one no node provides"),
        pytest.param([RTX_3090, RTX_3090, T4], [RTX_3090, T4], id="after a device named twice"),
    ],
)
def test_every_device_of_a_vm_is_judged_whatever_came_before_it(
    gpus: list[str], named: list[str]
) -> None:
    told = findings(request("CREATE", vm("v", gpus=gpus)), [WITH_T4, ONLY_5090])
    assert [f.message.split(" ")[0] for f in told] == named


# --- on an OpenShift cluster, where HCO writes the KubeVirt CR from a HyperConverged: the finding
# is traced to the HyperConverged's entry (examples/openshift, changed as HCO would have it) ---

OPENSHIFT = Path(__file__).resolve().parents[1] / "examples" / "openshift" / "cluster.yaml"


def openshift_objects(disable_a10: bool = False, t4_disabled: bool = False) -> list[Obj]:
    """examples/openshift as HCO would have it after the HyperConverged changed: the A10 entry
    set disabled (and gone from the KubeVirt CR), or a disabled T4 entry no node has."""
    objects: list[Obj] = list(yaml.safe_load_all(OPENSHIFT.read_text()))
    for obj in objects:
        if obj["kind"] == "HyperConverged":
            entries = obj["spec"]["virtualization"]["permittedHostDevices"]["pciHostDevices"]
            if disable_a10:
                entries[0]["disabled"] = True
            if t4_disabled:
                entries.append(
                    {
                        "pciDeviceSelector": "10DE:1EB8",
                        "resourceName": "nvidia.com/T4",
                        "disabled": True,
                    }
                )
        if obj["kind"] == "KubeVirt" and disable_a10:
            obj["spec"]["configuration"]["permittedHostDevices"].pop("pciHostDevices")
    return objects


def audit_of(objects: list[Obj]) -> list[Any]:
    return Engine().audit(state_of(*objects), datetime(2026, 10, 30, 12, tzinfo=UTC)).findings


def test_a_vm_whose_device_the_hyperconverged_disables_is_traced_to_that_entry() -> None:
    findings = [f for f in audit_of(openshift_objects(disable_a10=True))]
    (refused,) = [f.verdict for f in findings if f.verdict.policy == POLICY.id]
    assert refused.resource.name == "trainer"
    assert refused.chain[1] == (
        "HyperConverged openshift-cnv/kubevirt-hyperconverged: spec.virtualization."
        "permittedHostDevices.pciHostDevices[0] has disabled: true (HCO leaves it out)"
    )
    assert refused.remediation == (
        "remove disabled: true from spec.virtualization.permittedHostDevices.pciHostDevices[0] "
        "of HyperConverged openshift-cnv/kubevirt-hyperconverged",
    )
    assert "Fix HyperConverged openshift-cnv/kubevirt-hyperconverged first" in refused.message


def test_a_vm_whose_device_the_hyperconverged_lacks_is_told_where_to_add_it() -> None:
    objects = openshift_objects()
    for obj in objects:
        if obj["kind"] in ("HyperConverged", "KubeVirt"):
            holder = obj["spec"].get("virtualization") or obj["spec"]["configuration"]
            holder["permittedHostDevices"].pop("pciHostDevices")
    (refused,) = [f.verdict for f in audit_of(objects) if f.verdict.policy == POLICY.id]
    assert refused.chain == (
        "hostDevices[a10]: nvidia.com/GA102GL_A10",
        "HyperConverged openshift-cnv/kubevirt-hyperconverged: no entry for "
        "nvidia.com/GA102GL_A10 in spec.virtualization.permittedHostDevices",
        "KubeVirt openshift-cnv/kubevirt-kubevirt-hyperconverged: does not permit it",
    )
    assert refused.remediation == (
        "add {pciDeviceSelector: 10de:2236, resourceName: nvidia.com/GA102GL_A10, "
        "externalResourceProvider: true} to spec.virtualization.permittedHostDevices."
        "pciHostDevices of HyperConverged openshift-cnv/kubevirt-hyperconverged (HCO writes it "
        "onto the KubeVirt CR)",
    )


def test_a_disabled_entry_for_hardware_no_node_has_gets_no_finding() -> None:
    findings = audit_of(openshift_objects(t4_disabled=True))
    assert [f.verdict.policy for f in findings] == ["sole-provider"]


def test_a_vm_taking_its_gpu_from_an_instancetype_is_judged_by_that_gpu() -> None:
    typed = vm("v", instancetype={"name": "gpu-3090"})
    gpu_3090 = instancetype("gpu-3090", gpus=[RTX_3090])
    (finding,) = findings(request("CREATE", typed), [TOWER1, ONLY_5090, gpu_3090])
    assert finding.message.startswith(f"{RTX_3090} (gpus[gpu1]): healthy nodes advertise it")
    assert findings(request("CREATE", typed), [TOWER1, BOTH, gpu_3090]) == []

"""claim-without-dra-feature-gate: a VM takes a device from a claim the KubeVirt CR forbids."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from policies.rules.claim_gate import POLICY, audit, check
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import Obj, judged_by, kubevirt, request, state_of, vm
from tests.dra_builders import claim_vm, claim_vmi, needs_fixtures, recorded_object, review
from webhook.admission.review import parse_review
from webhook.engine import Engine

ROOT = Path(__file__).resolve().parents[1]
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
GPU_VM = claim_vm("gpu-fedora-dra", template="rtx5090-vfio")
HOST_DEVICE_VMI = claim_vmi("rhel9-dra-vmi", claim="tower1-3090", phase="")
ALL_GATES = ("HostDevices", "GPUsWithDRA", "HostDevicesWithDRA")
#: A KubeVirt before 1.9, where every DRA gate is Alpha: on only when listed.
KUBEVIRT_1_8 = "v1.8.2"


def gates(*names: str) -> Obj:
    return kubevirt(feature_gates=names, version=KUBEVIRT_1_8)


def both_fields() -> Obj:
    """A VM whose gpus[] and hostDevices[] both take devices from claims."""
    obj = claim_vm("mixed", template="rtx5090-vfio")
    devices = obj["spec"]["template"]["spec"]["domain"]["devices"]
    devices["hostDevices"] = [{"name": "hd1", "claimName": "gpu", "requestName": "gpu"}]
    return obj


def findings(obj: Obj, objects: Sequence[Obj]) -> list[Finding]:
    review = request("CREATE", obj)
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


def recorded(name: str) -> AdmissionRequest:
    return parse_review(json.dumps(review(name)).encode())


@pytest.mark.parametrize(
    ("obj", "kubevirt_cr", "lacks", "to_add", "step"),
    [
        pytest.param(
            GPU_VM,
            gates("HostDevices"),
            "GPUsWithDRA",
            "GPUsWithDRA",
            "add it there first.",
            id="gpus[] without GPUsWithDRA",
        ),
        pytest.param(
            HOST_DEVICE_VMI,
            gates("HostDevices", "GPUsWithDRA"),
            "HostDevicesWithDRA",
            "HostDevicesWithDRA",
            "add it there first.",
            id="a new VMI's hostDevices[] without HostDevicesWithDRA",
        ),
        pytest.param(
            HOST_DEVICE_VMI,
            gates("GPUsWithDRA", "HostDevicesWithDRA"),
            "HostDevices",
            "HostDevices",
            "add it there first.",
            id="hostDevices[] from a claim need HostDevices like any hostDevices[]",
        ),
        pytest.param(
            both_fields(),
            gates(),
            "GPUsWithDRA, HostDevicesWithDRA and HostDevices",
            "GPUsWithDRA, HostDevicesWithDRA, HostDevices",
            "add them there first.",
            id="both fields and no gate at all",
        ),
        pytest.param(
            both_fields(),
            gates("HostDevices", "HostDevicesWithDRA"),
            "GPUsWithDRA",
            "GPUsWithDRA",
            "add it there first.",
            id="only the gate one field lacks",
        ),
        pytest.param(
            claim_vm("v", claim="train-gpu", run_strategy="RerunOnFailure"),
            gates("HostDevices"),
            "GPUsWithDRA",
            "GPUsWithDRA",
            "add it there first.",
            id="a VM that runs under another strategy",
        ),
    ],
)
def test_a_claim_entry_without_its_gate_is_warned_naming_the_missing_gates(
    obj: Obj, kubevirt_cr: Obj, lacks: str, to_add: str, step: str
) -> None:
    (finding,) = findings(obj, [kubevirt_cr])
    assert f" lacks {lacks} in featureGates," in finding.message
    assert finding.message.endswith(f"so KubeVirt rejects the VMI: {step}")
    assert finding.remediation == (
        f"add {to_add} to spec.configuration.developerConfiguration.featureGates of "
        "KubeVirt kubevirt/kubevirt",
    )
    assert len(f"[{POLICY.id}] {finding.message}") <= 256


@pytest.mark.parametrize(
    ("obj", "objects"),
    [
        pytest.param(GPU_VM, [gates(*ALL_GATES)], id="every gate on"),
        pytest.param(GPU_VM, [gates("GPUsWithDRA")], id="gpus[] need only GPUsWithDRA"),
        pytest.param(GPU_VM, [], id="no KubeVirt CR to judge by"),
        pytest.param(
            claim_vm("v", template="rtx5090-vfio", run_strategy="Halted"),
            [gates()],
            id="a halted VM",
        ),
        pytest.param(claim_vmi("v", claim="c", phase="Succeeded"), [gates()], id="a finished VMI"),
        pytest.param(
            vm("v", gpus=[RTX_3090]), [gates()], id="a deviceName: the device plugin's path"
        ),
        pytest.param(
            vm("v", host_devices=[RTX_3090]),
            [gates()],
            id="a deviceName in hostDevices[]: device-not-permitted's HostDevices case",
        ),
        pytest.param(vm("v"), [gates()], id="a VM without devices"),
    ],
)
def test_everything_else_is_allowed(obj: Obj, objects: list[Obj]) -> None:
    assert findings(obj, objects) == []


def test_an_entry_with_both_a_device_name_and_a_claim_is_the_device_plugins() -> None:
    # KubeVirt treats it as a device-plugin entry (IsGPUDRA wants no deviceName) and rejects the
    # pair as a structural mistake itself; the DRA gates have no say in it.
    obj = vm("v", gpus=[RTX_3090])
    obj["spec"]["template"]["spec"]["domain"]["devices"]["gpus"][0]["claimName"] = "gpu"
    assert findings(obj, [gates()]) == []


def test_the_message_names_the_fields_the_kubevirt_cr_and_the_fix() -> None:
    (finding,) = findings(GPU_VM, [gates("HostDevices")])
    assert finding.message == (
        "gpus[] use DRA claims but KubeVirt kubevirt/kubevirt lacks GPUsWithDRA in featureGates, "
        "so KubeVirt rejects the VMI: add it there first."
    )
    assert finding.chain == (
        "gpus[gpu1] takes a device from claim gpu",
        "KubeVirt kubevirt/kubevirt: no GPUsWithDRA in "
        "spec.configuration.developerConfiguration.featureGates",
        "KubeVirt rejects the VMI: the VM never starts",
    )


def test_many_entries_keep_the_message_within_what_the_api_server_keeps() -> None:
    obj = both_fields()
    devices = obj["spec"]["template"]["spec"]["domain"]["devices"]
    devices["gpus"] = [
        {"name": f"gpu{i}", "claimName": "gpu", "requestName": f"gpu{i}"} for i in range(8)
    ]
    cr = kubevirt(feature_gates=(), version=KUBEVIRT_1_8)
    cr["metadata"] = {"name": "kubevirt-kubevirt-hyperconverged", "namespace": "openshift-cnv"}
    (finding,) = findings(obj, [cr])
    assert finding.message.startswith("gpus[] and hostDevices[] use DRA claims")
    assert len(f"[{POLICY.id}] {finding.message}") <= 256
    assert len(finding.chain) == 8 + 1 + 2  # every entry is named in the chain


@needs_fixtures
@pytest.mark.parametrize(
    ("name", "missing"),
    [
        pytest.param("017", "GPUsWithDRA", id="the recorded VM with a GPU from a template"),
        pytest.param("018", "HostDevicesWithDRA", id="the recorded VMI with a claimed host device"),
    ],
)
def test_the_recorded_reviews_against_a_kubevirt_cr_without_the_dra_gates(
    name: str, missing: str
) -> None:
    (finding,) = check(recorded(name), state_of(gates("HostDevices")))
    assert f"lacks {missing} in featureGates," in finding.message


@needs_fixtures
def test_the_recorded_kubevirt_cr_turns_on_the_dra_gates_but_not_host_devices() -> None:
    # The recorded CR (016) lists GPUsWithDRA and HostDevicesWithDRA only: its VM is fine, its
    # VMI's hostDevices[] still need HostDevices (validateHostDevicesWithPassthroughEnabled).
    state = state_of(recorded_object("016"))
    assert check(recorded("017"), state) == []
    (finding,) = check(recorded("018"), state)
    assert "lacks HostDevices in featureGates," in finding.message


def test_audit_lists_vms_meant_to_run_and_ownerless_live_vmis() -> None:
    state = state_of(
        gates("HostDevices"),
        GPU_VM,
        claim_vm("halted", template="rtx5090-vfio", run_strategy="Halted"),
        claim_vmi("gpu-fedora-dra", claim="c", node_name="omen2", owner="gpu-fedora-dra"),
        claim_vmi("bare", claim="c", node_name="omen2"),
        claim_vmi("gone", claim="c", phase="Failed"),
        vm("plugin", gpus=[RTX_3090]),
    )
    assert [(ref.kind, str(ref)) for ref, _ in audit(state)] == [
        ("VirtualMachine", "vms/gpu-fedora-dra"),
        ("VirtualMachineInstance", "vms/bare"),
    ]


@pytest.mark.parametrize(
    ("review_", "applies"),
    [
        pytest.param(request("CREATE", GPU_VM), True, id="VM CREATE is judged"),
        pytest.param(request("UPDATE", GPU_VM, GPU_VM), True, id="VM UPDATE is judged"),
        pytest.param(request("CREATE", HOST_DEVICE_VMI), True, id="VMI CREATE is judged"),
        pytest.param(
            request("UPDATE", HOST_DEVICE_VMI, HOST_DEVICE_VMI), False, id="VMI UPDATE is not"
        ),
        pytest.param(request("DELETE", None, GPU_VM), False, id="VM DELETE is not"),
        pytest.param(
            request("UPDATE", GPU_VM, GPU_VM, sub_resource="status"),
            True,
            id="the VM status subresource is judged (virtctl start writes a Start there)",
        ),
        pytest.param(
            request("UPDATE", gates(), gates("GPUsWithDRA")),
            False,
            id="a KubeVirt CR update is permitted-device-in-use-removed's",
        ),
    ],
)
def test_scope(review_: AdmissionRequest, applies: bool) -> None:
    assert judged_by(POLICY, review_) is applies


def test_the_engine_warns_by_default() -> None:
    decision = Engine().evaluate(request("CREATE", GPU_VM), state_of(gates("HostDevices")))
    assert decision.allowed
    # (whether the claim's template exists is another policy's question)
    mine = [(v.policy, v.action) for v in decision.verdicts if v.policy == POLICY.id]
    assert mine == [(POLICY.id, Action.WARN)]
    assert POLICY.default_action == Action.WARN


# --- the gates as the CR's KubeVirt version reads them --------------------------------------------

CR = "KubeVirt kubevirt/kubevirt"
FEATURE_GATES = "spec.configuration.developerConfiguration.featureGates"
DISABLED = "spec.configuration.developerConfiguration.disabledFeatureGates"
UNKNOWN = (
    "(its version is unknown, read as before 1.9; on KubeVirt 1.9 and later this gate is Beta "
    "and on unless disabled)"
)


def at(version: str, listed: Sequence[str] = (), disabled: Sequence[str] = ()) -> Obj:
    return kubevirt(feature_gates=listed, disabled_gates=disabled, version=version)


@pytest.mark.parametrize(
    ("obj", "kubevirt_cr", "message", "remediation"),
    [
        pytest.param(
            GPU_VM,
            at("v1.8.2", ("HostDevices",)),
            f"gpus[] use DRA claims but {CR} lacks GPUsWithDRA in featureGates, so KubeVirt "
            "rejects the VMI: add it there first.",
            (f"add GPUsWithDRA to {FEATURE_GATES} of {CR}",),
            id="1.8 unlisted: warned",
        ),
        pytest.param(
            GPU_VM,
            at("v1.9.0", ("HostDevices",), ("GPUsWithDRA",)),
            f"gpus[] use DRA claims but {CR} lists GPUsWithDRA in disabledFeatureGates, so "
            "KubeVirt rejects the VMI: remove GPUsWithDRA from disabledFeatureGates first.",
            (f"remove GPUsWithDRA from {DISABLED} of {CR}",),
            id="1.9 disabled: warned, and only un-disabling is asked",
        ),
        pytest.param(
            GPU_VM,
            at("v1.8.2", (), ("GPUsWithDRA",)),
            f"gpus[] use DRA claims but {CR} lists GPUsWithDRA in disabledFeatureGates, so "
            "KubeVirt rejects the VMI: move GPUsWithDRA from disabledFeatureGates to "
            "featureGates first.",
            (
                f"remove GPUsWithDRA from {DISABLED} of {CR}",
                f"add GPUsWithDRA to {FEATURE_GATES} of {CR}",
            ),
            id="1.8 disabled: out of one list and into the other",
        ),
        pytest.param(
            GPU_VM,
            at("", ("HostDevices",)),
            f"gpus[] use DRA claims but {CR} lacks GPUsWithDRA in featureGates {UNKNOWN}, so "
            "KubeVirt rejects the VMI: add it there first.",
            (f"add GPUsWithDRA to {FEATURE_GATES} of {CR}",),
            id="unknown version unlisted: warned with what 1.9 would do",
        ),
        pytest.param(
            GPU_VM,
            at("", ("HostDevices",), ("GPUsWithDRA",)),
            f"gpus[] use DRA claims but {CR} lists GPUsWithDRA in disabledFeatureGates, so "
            "KubeVirt rejects the VMI: move GPUsWithDRA from disabledFeatureGates to "
            "featureGates first.",
            (
                f"remove GPUsWithDRA from {DISABLED} of {CR}",
                f"add GPUsWithDRA to {FEATURE_GATES} of {CR}",
            ),
            id="unknown version disabled: off on 1.9 too, so no note",
        ),
        pytest.param(
            HOST_DEVICE_VMI,
            at("v1.9.0", (), ("HostDevicesWithDRA",)),
            f"hostDevices[] use DRA claims but {CR} lacks HostDevices in featureGates and lists "
            "HostDevicesWithDRA in disabledFeatureGates, so KubeVirt rejects the VMI: remove "
            "HostDevicesWithDRA from disabledFeatureGates and add HostDevices to featureGates "
            "first.",
            (
                f"remove HostDevicesWithDRA from {DISABLED} of {CR}",
                f"add HostDevices to {FEATURE_GATES} of {CR}",
            ),
            id="1.9 hostDevices[]: the Alpha gate to list, the Beta one to un-disable",
        ),
    ],
)
def test_each_reading_of_the_gates_is_warned_with_its_own_fix(
    obj: Obj, kubevirt_cr: Obj, message: str, remediation: tuple[str, ...]
) -> None:
    (finding,) = findings(obj, [kubevirt_cr])
    assert finding.message == message
    assert finding.remediation == remediation


@pytest.mark.parametrize(
    ("obj", "kubevirt_cr"),
    [
        pytest.param(GPU_VM, at("v1.9.0"), id="1.9 unlisted: the Beta gate is on"),
        pytest.param(GPU_VM, at("v1.9.0-12-gabcdef"), id="a 1.9 development build"),
        pytest.param(
            HOST_DEVICE_VMI,
            at("v1.9.0", ("HostDevices",)),
            id="1.9 hostDevices[] need HostDevices only",
        ),
        pytest.param(
            GPU_VM,
            at("v1.9.0", ("GPUsWithDRA",), ("GPUsWithDRA",)),
            id="a gate in both lists reads as on (feature-gate-in-both-lists says the rest)",
        ),
        pytest.param(
            GPU_VM, at("v1.8.2", ("GPUsWithDRA",), ("GPUsWithDRA",)), id="in both lists on 1.8"
        ),
    ],
)
def test_a_claim_entry_whose_gate_the_version_turns_on_is_allowed(
    obj: Obj, kubevirt_cr: Obj
) -> None:
    assert findings(obj, [kubevirt_cr]) == []


def test_an_unknown_version_is_said_in_the_chain_too() -> None:
    (finding,) = findings(GPU_VM, [at("", ("HostDevices",))])
    assert finding.chain[1] == (
        f"{CR}: no GPUsWithDRA in {FEATURE_GATES} (its version is unknown, read as before 1.9)"
    )


def test_a_disabled_gate_is_named_in_the_chain_with_its_list() -> None:
    (finding,) = findings(GPU_VM, [at("v1.9.0", (), ("GPUsWithDRA",))])
    assert finding.chain[1] == f"{CR}: GPUsWithDRA in {DISABLED}"


def test_the_recorded_hco_kubevirt_cr_disables_the_dra_gates() -> None:
    # HCO 1.19+ writes the Beta gates it does not enable into disabledFeatureGates
    # (tests/fixtures/hco 026, recorded without a status: the version is unknown).
    path = next(
        (ROOT / "tests" / "fixtures" / "hco" / "admission-reviews").glob("026-validate-*.json")
    )
    hco_cr = json.loads(path.read_text())["request"]["object"]
    (finding,) = findings(GPU_VM, [hco_cr])
    assert finding.message == (
        "gpus[] use DRA claims but KubeVirt kubevirt-hyperconverged/"
        "kubevirt-kubevirt-hyperconverged lists GPUsWithDRA in disabledFeatureGates, so KubeVirt "
        "rejects the VMI: move GPUsWithDRA from disabledFeatureGates to featureGates first."
    )


def test_a_vm_whose_instancetype_takes_a_gpu_from_a_claim_is_held_to_the_gate() -> None:
    dra_type = {
        "apiVersion": "instancetype.kubevirt.io/v1beta1",
        "kind": "VirtualMachineClusterInstancetype",
        "metadata": {"name": "dra-gpu"},
        "spec": {"gpus": [{"name": "gpu1", "claimName": "gpu", "requestName": "gpu"}]},
    }
    typed = vm("typed", instancetype={"name": "dra-gpu"})
    found = findings(typed, [gates("HostDevices"), dra_type])
    assert [("GPUsWithDRA" in f.message, "gpus[]" in f.message) for f in found] == [(True, True)]
    assert findings(typed, [gates(*ALL_GATES), dra_type]) == []

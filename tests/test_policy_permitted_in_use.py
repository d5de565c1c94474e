"""permitted-device-in-use-removed: a KubeVirt CR update that takes away what VMs use."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import pytest

from policies.rules.permitted_in_use import POLICY, check
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import Obj, judged_by, kubevirt, request, state_of, vm, vmi
from tests.dra_builders import claim_vm, claim_vmi
from tests.test_hco_jsonpatch import PCI, annotated
from tests.test_hyperconverged import A10, hco_world, recorded_object
from webhook.engine import Engine

RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
RTX_3090_MIXED = "nvidia.com/GA102_GeForce_RTX_3090"
GRID = "nvidia.com/GRID_A100-1-5C"
BOTH = [("10de:2b85", RTX_5090), ("10DE:2204", RTX_3090)]
BEFORE = kubevirt(BOTH, mdevs=[("GRID A100-1-5C", GRID)])
ONLY_5090 = kubevirt([("10de:2b85", RTX_5090)], mdevs=[("GRID A100-1-5C", GRID)])
RUNNING = vm("win11-gaming", gpus=[RTX_3090])
HALTED = vm("old-ci-runner", host_devices=[RTX_3090], run_strategy="Halted")
DRA_VM = claim_vm("gpu-fedora-dra", template="rtx5090-vfio")
DRA_VMI = claim_vmi("rhel9-dra-vmi", claim="tower1-3090", node_name="tower1")


def update(new: Obj, old: Obj = BEFORE) -> AdmissionRequest:
    return request("UPDATE", new, old)


def findings(review: AdmissionRequest, objects: Sequence[Obj]) -> list[Finding]:
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


#: A KubeVirt before 1.9, where every DRA gate is Alpha: on only when listed.
KUBEVIRT_1_8 = "v1.8.2"


def with_dra_gates(*gates: str) -> Obj:
    return kubevirt(BOTH, feature_gates=gates, version=KUBEVIRT_1_8)


def with_mdevs(mdevs: Sequence[tuple[str, str]], gates: Sequence[str] = ("HostDevices",)) -> Obj:
    return kubevirt(BOTH, mdevs=mdevs, feature_gates=gates)


@pytest.mark.parametrize(
    ("review", "objects", "said"),
    [
        pytest.param(
            update(ONLY_5090), [RUNNING], f"removes {RTX_3090}", id="an entry a running VM uses"
        ),
        pytest.param(
            update(ONLY_5090),
            [vmi("bare", node_name="tower1", gpus=[RTX_3090])],
            f"removes {RTX_3090}",
            id="an entry a live VMI without a VM uses",
        ),
        pytest.param(
            update(kubevirt([("10de:2b85", RTX_5090), ("10de:2204", "nvidia.com/RTX3090")])),
            [RUNNING],
            f"renames {RTX_3090} to nvidia.com/RTX3090",
            id="a renamed entry, selectors compared case-insensitively",
        ),
        pytest.param(
            update(kubevirt([("10de:2b85", RTX_5090), ("10de:2204", RTX_3090_MIXED)])),
            [RUNNING],
            f"re-cases {RTX_3090} to {RTX_3090_MIXED}",
            id="a re-cased name: names are case-sensitive",
        ),
        pytest.param(
            update(with_mdevs([])),
            [vm("vgpu-vm", gpus=[GRID])],
            f"removes {GRID}",
            id="a mediated device entry",
        ),
        pytest.param(
            update(with_mdevs([("GRID A100-1-5C", GRID)], gates=())),
            [vm("nic", host_devices=["intel.com/qat"])],
            "removes the HostDevices feature gate",
            id="the HostDevices gate under a VM with hostDevices",
        ),
        pytest.param(
            update(with_mdevs([("GRID A100-1-5C", GRID)], gates=())),
            [vmi("bare", node_name="tower1", host_devices=[RTX_3090])],
            "removes the HostDevices feature gate",
            id="the HostDevices gate under a live VMI with hostDevices",
        ),
        pytest.param(
            update(with_dra_gates(), with_dra_gates("GPUsWithDRA")),
            [DRA_VM],
            "removes the GPUsWithDRA feature gate",
            id="the GPUsWithDRA gate under a VM whose GPU comes from a claim",
        ),
        pytest.param(
            update(
                with_dra_gates("HostDevices"), with_dra_gates("HostDevices", "HostDevicesWithDRA")
            ),
            [DRA_VMI],
            "removes the HostDevicesWithDRA feature gate",
            id="the HostDevicesWithDRA gate under a live VMI whose host device comes from a claim",
        ),
        pytest.param(
            update(
                with_dra_gates("HostDevicesWithDRA"),
                with_dra_gates("HostDevices", "HostDevicesWithDRA"),
            ),
            [DRA_VMI],
            "removes the HostDevices feature gate",
            id="the HostDevices gate under hostDevices from a claim: they need it too",
        ),
    ],
)
def test_taking_away_what_running_vms_use_is_denied(
    review: AdmissionRequest, objects: list[Obj], said: str
) -> None:
    (finding,) = findings(review, objects)
    assert finding.message.startswith(f"this update {said} while ")
    assert finding.max_action is None
    assert POLICY.default_action == Action.DENY


@pytest.mark.parametrize(
    ("review", "objects"),
    [
        pytest.param(update(ONLY_5090), [HALTED], id="an entry only a halted VM uses"),
        pytest.param(
            update(with_mdevs([("GRID A100-1-5C", GRID)], gates=())),
            [HALTED],
            id="the HostDevices gate only a halted VM needs",
        ),
        pytest.param(
            update(with_dra_gates(), with_dra_gates("GPUsWithDRA")),
            [claim_vm("later", template="rtx5090-vfio", run_strategy="Halted")],
            id="the GPUsWithDRA gate only a halted VM needs",
        ),
    ],
)
def test_what_only_stopped_vms_use_is_only_warned(
    review: AdmissionRequest, objects: list[Obj]
) -> None:
    (finding,) = findings(review, objects)
    assert finding.max_action == Action.WARN
    assert finding.message.startswith("this update ")
    assert finding.message.endswith(". (only stopped VMs use it)")


@pytest.mark.parametrize(
    ("review", "objects"),
    [
        pytest.param(update(ONLY_5090), [], id="an entry nobody uses"),
        pytest.param(
            update(ONLY_5090),
            [vmi("done", node_name="tower1", gpus=[RTX_3090], phase="Succeeded")],
            id="an entry only a finished VMI used",
        ),
        pytest.param(update(ONLY_5090), [vm("other", gpus=[RTX_5090])], id="VMs use other entries"),
        pytest.param(update(BEFORE), [RUNNING, HALTED], id="an update that keeps every entry"),
        pytest.param(
            update(kubevirt([("10de:2b85", RTX_5090), ("10de:2204", RTX_3090)])),
            [RUNNING],
            id="re-casing a selector: PCI ids are hex, case does not matter",
        ),
        pytest.param(
            update(kubevirt([("10de:2b85", RTX_5090), ("10de:2206", RTX_3090)])),
            [RUNNING],
            id="a changed selector that keeps the name",
        ),
        pytest.param(
            update(
                kubevirt([("10de:2b85", RTX_5090), ("10de:2208", RTX_3090)]),
                kubevirt([*BOTH, ("10de:2208", RTX_3090)]),
            ),
            [RUNNING],
            id="another entry still permits the name",
        ),
        pytest.param(
            update(kubevirt([*BOTH, ("10de:2330", "nvidia.com/H100")])),
            [RUNNING],
            id="an added entry",
        ),
        pytest.param(
            update(with_mdevs([("GRID A100-1-5C", GRID)], gates=())),
            [RUNNING],
            id="the HostDevices gate when VMs use gpus only",
        ),
        pytest.param(
            update(with_dra_gates(), with_dra_gates("GPUsWithDRA", "HostDevicesWithDRA")),
            [RUNNING, vm("nic", host_devices=["intel.com/qat"])],
            id="the DRA gates when no VM uses a claim",
        ),
        pytest.param(
            update(
                with_dra_gates("GPUsWithDRA"), with_dra_gates("GPUsWithDRA", "HostDevicesWithDRA")
            ),
            [DRA_VM],
            id="the hostDevices DRA gate when claims feed gpus[] only",
        ),
        pytest.param(
            update(with_dra_gates(), with_dra_gates("GPUsWithDRA")),
            [claim_vmi("done", claim="c", phase="Succeeded"), vm("old", gpus=[RTX_3090])],
            id="the GPUsWithDRA gate when only a finished VMI used a claim",
        ),
    ],
)
def test_everything_else_is_allowed(review: AdmissionRequest, objects: list[Obj]) -> None:
    assert findings(review, objects) == []


def test_the_message_names_the_entry_the_vms_and_the_safe_step() -> None:
    objects = [
        RUNNING,
        vmi("win11-gaming", node_name="tower1", gpus=[RTX_3090], owner="win11-gaming"),
        HALTED,
        vm("a", gpus=[RTX_3090]),
        vm("b", gpus=[RTX_3090]),
    ]
    (finding,) = findings(update(ONLY_5090), objects)
    assert finding.message == (
        f"this update removes {RTX_3090} while vms/a, vms/b, vms/old-ci-runner and 1 more use it: "
        "KubeVirt refuses their next start. Keep it until no VM uses it."
    )
    assert len(f"[{POLICY.id}] {finding.message}") <= 256
    assert finding.remediation == (
        f"keep 10de:2204 permitted as {RTX_3090} until no VM or VMI uses it",
    )


def test_the_rename_remediation_keeps_both_names_while_the_vms_move() -> None:
    renamed = kubevirt([("10de:2b85", RTX_5090), ("10de:2204", RTX_3090_MIXED)])
    (finding,) = findings(update(renamed), [RUNNING])
    assert finding.message.endswith("Keep the old name too, or move the VMs first.")
    assert finding.remediation == (
        f"permit 10de:2204 under both names, set deviceName: {RTX_3090_MIXED} in the VMs, "
        f"then drop {RTX_3090}",
    )


def test_each_lost_name_and_the_gate_get_their_own_finding() -> None:
    bare = kubevirt([], feature_gates=())
    objects = [RUNNING, vm("fedora", gpus=[RTX_5090]), vm("nic", host_devices=["intel.com/qat"])]
    messages = [f.message for f in findings(update(bare), objects)]
    assert [m.split(" while ")[0] for m in messages] == [
        f"this update removes {RTX_3090}",
        f"this update removes {RTX_5090}",
        "this update removes the HostDevices feature gate",
    ]


def test_a_lost_dra_gate_names_the_vms_and_what_keeps_them_starting() -> None:
    (finding,) = findings(update(with_dra_gates(), with_dra_gates("GPUsWithDRA")), [DRA_VM])
    assert finding.message == (
        "this update removes the GPUsWithDRA feature gate while vms/gpu-fedora-dra uses it: "
        "KubeVirt refuses to start VMs with gpus[] from claims. Keep the gate while they use "
        "claims."
    )
    assert finding.remediation == (
        "keep GPUsWithDRA in spec.configuration.developerConfiguration.featureGates until no VM "
        "uses gpus[] from claims (vms/gpu-fedora-dra)",
    )


@pytest.mark.parametrize(
    ("review", "applies"),
    [
        pytest.param(update(ONLY_5090), True, id="a KubeVirt update is judged"),
        pytest.param(request("CREATE", ONLY_5090), False, id="a KubeVirt create is not"),
        pytest.param(request("DELETE", None, BEFORE), False, id="a KubeVirt delete is not"),
        pytest.param(
            request("UPDATE", ONLY_5090, BEFORE, sub_resource="status"),
            False,
            id="the status subresource is not",
        ),
    ],
)
def test_scope(review: AdmissionRequest, applies: bool) -> None:
    assert judged_by(POLICY, review) is applies


@pytest.mark.parametrize(
    ("objects", "allowed", "action"),
    [
        pytest.param([RUNNING], False, Action.DENY, id="a running VM: denied"),
        pytest.param([HALTED], True, Action.WARN, id="a halted VM only: warned"),
    ],
)
def test_the_engine_applies_the_default_and_the_cap(
    objects: list[Obj], allowed: bool, action: Action
) -> None:
    decision = Engine().evaluate(update(ONLY_5090), state_of(*objects))
    ours = [v for v in decision.verdicts if v.policy == POLICY.id]
    assert [v.action for v in ours] == [action]
    assert decision.allowed is allowed


# --- the gates as the CR's KubeVirt version reads them --------------------------------------------

DRA = "GPUsWithDRA"
BETA = "on KubeVirt 1.9 and later this gate is Beta and on unless disabled"


def gates_at(version: str, listed: Sequence[str], disabled: Sequence[str] = ()) -> Obj:
    return kubevirt(BOTH, feature_gates=listed, disabled_gates=disabled, version=version)


@pytest.mark.parametrize(
    ("new", "old", "said", "max_action"),
    [
        pytest.param(
            gates_at("v1.8.2", ()),
            gates_at("v1.8.2", (DRA,)),
            "removes the GPUsWithDRA feature gate",
            None,
            id="1.8 unlisting the Alpha gate: denied",
        ),
        pytest.param(
            gates_at("v1.9.0", (), (DRA,)),
            gates_at("v1.9.0", ()),
            "disables the GPUsWithDRA feature gate",
            None,
            id="1.9 disabling the unlisted Beta gate: denied",
        ),
        pytest.param(
            gates_at("v1.9.0", (), (DRA,)),
            gates_at("v1.9.0", (DRA,)),
            "removes and disables the GPUsWithDRA feature gate",
            None,
            id="1.9 moving it from featureGates to disabledFeatureGates: denied",
        ),
        pytest.param(
            gates_at("", ()),
            gates_at("", (DRA,)),
            "removes the GPUsWithDRA feature gate (its version is unknown, read as before 1.9; "
            f"{BETA})",
            Action.WARN,
            id="unknown version unlisting: off before 1.9 only, so warned",
        ),
        pytest.param(
            gates_at("", (), (DRA,)),
            gates_at("", ()),
            f"disables the GPUsWithDRA feature gate (its version is unknown; {BETA}, and this "
            "turns it off)",
            Action.WARN,
            id="unknown version disabling: off from 1.9 only, so warned",
        ),
        pytest.param(
            gates_at("", (), (DRA,)),
            gates_at("", (DRA,)),
            "removes and disables the GPUsWithDRA feature gate",
            None,
            id="unknown version unlisting and disabling: off either way, denied",
        ),
        pytest.param(
            gates_at("v1.9.0", ()),
            kubevirt(BOTH, feature_gates=(DRA,)),
            "",
            None,
            id="the stored CR's version is missing: the update's is used",
        ),
    ],
)
def test_a_dra_gate_is_turned_off_as_the_crs_version_reads_it(
    new: Obj, old: Obj, said: str, max_action: Action | None
) -> None:
    found = findings(update(new, old), [DRA_VM])
    if not said:
        assert found == []
        return
    (finding,) = found
    assert finding.message.startswith(f"this update {said} while vms/gpu-fedora-dra uses it: ")
    assert finding.max_action is max_action


@pytest.mark.parametrize(
    ("new", "old"),
    [
        pytest.param(gates_at("v1.9.0", ()), gates_at("v1.9.0", (DRA,)), id="1.9 unlisting Beta"),
        pytest.param(
            gates_at("v1.9.0", (DRA,), (DRA,)),
            gates_at("v1.9.0", (DRA,)),
            id="1.9 into both lists: still on (virt-operator refuses it anyway)",
        ),
        pytest.param(
            gates_at("v1.8.2", (), (DRA,)),
            gates_at("v1.8.2", ()),
            id="1.8 disabling a gate that was off already",
        ),
        pytest.param(
            gates_at("v1.9.0", ()),
            gates_at("v1.9.0", (), (DRA,)),
            id="1.9 un-disabling turns it on",
        ),
    ],
)
def test_a_gate_change_that_leaves_it_on_or_off_is_allowed(new: Obj, old: Obj) -> None:
    assert findings(update(new, old), [DRA_VM]) == []


def test_disabling_a_gate_asks_to_keep_it_out_of_the_disabled_list() -> None:
    (finding,) = findings(update(gates_at("v1.9.0", (), (DRA,)), gates_at("v1.9.0", ())), [DRA_VM])
    assert finding.remediation == (
        "keep GPUsWithDRA out of spec.configuration.developerConfiguration.disabledFeatureGates "
        "until no VM uses gpus[] from claims (vms/gpu-fedora-dra)",
    )


def test_disabling_host_devices_under_a_vm_that_needs_it_is_denied_on_1_9() -> None:
    review = update(gates_at("v1.9.0", (), ("HostDevices",)), gates_at("v1.9.0", ("HostDevices",)))
    decision = Engine().evaluate(review, state_of(vm("nic", host_devices=[RTX_3090])))
    (ours,) = [v for v in decision.verdicts if v.policy == POLICY.id]
    assert ours.action is Action.DENY
    assert ours.message.startswith("this update removes and disables the HostDevices feature gate")


STICK = "kubevirt.io/stick"


@pytest.mark.parametrize(
    ("after", "said", "step"),
    [
        pytest.param(
            kubevirt(),
            f"this update removes {STICK} while vms/v uses it",
            f"keep 0951:1666 permitted as {STICK} until no VM or VMI uses it",
            id="removed",
        ),
        pytest.param(
            kubevirt(usb=[("0951:1666", "kubevirt.io/usb-stick")]),
            f"this update renames {STICK} to kubevirt.io/usb-stick while vms/v uses it",
            "permit 0951:1666 under both names, set deviceName: kubevirt.io/usb-stick in the "
            f"VMs, then drop {STICK}",
            id="renamed",
        ),
    ],
)
def test_a_usb_resource_in_use_is_kept_by_its_vendor_and_product(
    after: Obj, said: str, step: str
) -> None:
    before = kubevirt(usb=[("0951:1666", STICK)])
    (finding,) = findings(request("UPDATE", after, before), [vm("v", host_devices=[STICK])])
    assert finding.message.startswith(f"{said}: KubeVirt refuses their next start.")
    assert finding.remediation == (step,)


def test_the_gate_step_names_every_vm_that_needs_the_gate() -> None:
    second = claim_vm("second", template="rtx5090-vfio")
    (finding,) = findings(
        update(gates_at("v1.9.0", (), (DRA,)), gates_at("v1.9.0", ())), [DRA_VM, second]
    )
    assert finding.remediation[0].endswith(
        "until no VM uses gpus[] from claims (vms/gpu-fedora-dra, vms/second)"
    )


def test_a_usb_resource_permitted_by_two_selectors_is_kept_by_both() -> None:
    before = kubevirt(usb=[("0951:1666", STICK)])
    usb = before["spec"]["configuration"]["permittedHostDevices"]["usb"]
    usb[0]["selectors"].append({"vendor": "0951", "product": "1667"})
    (finding,) = findings(request("UPDATE", kubevirt(), before), [vm("v", host_devices=[STICK])])
    assert finding.remediation == (
        f"keep 0951:1666, 0951:1667 permitted as {STICK} until no VM or VMI uses it",
    )


def hco_update(change: Callable[[Obj], None]) -> AdmissionRequest:
    """An update of the recorded v1 HyperConverged (018: the A10 and the H100 permitted)."""
    old = recorded_object("018")
    new = copy.deepcopy(old)
    change(new)
    return request("UPDATE", new, old)


def disable_the_a10(hc: Obj) -> None:
    hc["spec"]["virtualization"]["permittedHostDevices"]["pciHostDevices"][0]["disabled"] = True


A10_VM = vm("a10-vm", namespace="openshift-cnv", gpus=[A10])


def test_a_hyperconverged_disabling_a_device_vms_use_is_refused_naming_the_entry() -> None:
    (finding,) = check(hco_update(disable_the_a10), hco_world(A10_VM))
    assert finding.message == (
        f"this update disables {A10} (spec.virtualization.permittedHostDevices.pciHostDevices[0] "
        "disabled: true: HCO drops it) while openshift-cnv/a10-vm uses it: KubeVirt refuses "
        "their next start. Keep it until no VM uses it."
    )
    assert finding.remediation == (f"keep 10de:2236 permitted as {A10} until no VM or VMI uses it",)


def test_a_hyperconverged_whose_translation_cannot_be_told_is_not_judged_here() -> None:
    """What HCO writes from it is unknown (kubevirt-config-reverted-by-hco warns so)."""
    copied = [{"op": "copy", "from": "/spec/configuration/network", "path": PCI}]
    review = request("UPDATE", annotated(copied), recorded_object("018"))
    assert list(check(review, hco_world(A10_VM))) == []

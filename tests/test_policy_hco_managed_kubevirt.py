"""kubevirt-config-reverted-by-hco: a direct edit of the KubeVirt CR HCO owns, and a jsonpatch
annotation HCO cannot apply, judged by the rule alone on the recorded HCO objects."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from policies.rules.hco_managed_kubevirt import POLICY, audit, check
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import Obj, judged_by, request, state_of
from tests.test_hyperconverged import recorded_object

HCO_SA = "system:serviceaccount:kubevirt-hyperconverged:hyperconverged-cluster-operator"
HC_KEY = "HyperConverged kubevirt-hyperconverged/kubevirt-hyperconverged"


def hco_kubevirt() -> Obj:
    """The KubeVirt CR HCO wrote from the v1beta1 HyperConverged (review 028)."""
    return copy.deepcopy(recorded_object("028"))


def hyperconverged() -> Obj:
    """The v1beta1 HyperConverged it was written from (review 004)."""
    return copy.deepcopy(recorded_object("004"))


def edited(change: Callable[[dict[str, Any]], None]) -> tuple[Obj, Obj]:
    """(new, old) for an edit of HCO's KubeVirt CR that applies ``change`` to the new spec."""
    old = hco_kubevirt()
    new = copy.deepcopy(old)
    change(new["spec"])
    return new, old


def drop_pci(spec: dict[str, Any]) -> None:
    spec["configuration"]["permittedHostDevices"]["pciHostDevices"] = []


def add_gate(spec: dict[str, Any]) -> None:
    dev = spec["configuration"].setdefault("developerConfiguration", {})
    dev.setdefault("featureGates", []).append("GPUsWithDRA")


def set_eviction(spec: dict[str, Any]) -> None:
    spec["configuration"]["evictionStrategy"] = "LiveMigrate"


def relabel_only(spec: dict[str, Any]) -> None:
    spec["configuration"]["vmRolloutStrategy"] = "Stage"


def findings(new: Obj, old: Obj, *objects: Obj, user: str = "admin") -> list[Finding]:
    review = request("UPDATE", new, old, user=user)
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


@pytest.mark.parametrize(
    ("change", "what", "field"),
    [
        pytest.param(drop_pci, "permittedHostDevices", "spec.permittedHostDevices", id="devices"),
        pytest.param(add_gate, "the feature gates", "spec.featureGates", id="gates"),
        pytest.param(set_eviction, "evictionStrategy", "spec.evictionStrategy", id="eviction"),
    ],
)
def test_a_direct_edit_of_hcos_kubevirt_cr_names_the_hyperconverged_field_to_set_instead(
    change: Callable[[dict[str, Any]], None], what: str, field: str
) -> None:
    new, old = edited(change)
    (finding,) = findings(new, old, hyperconverged(), old)
    assert finding.message == (
        f"HCO reverts this edit of {what}: it writes this KubeVirt CR from {HC_KEY}. "
        f"Set {field} there instead, or its jsonpatch annotation."
    )
    assert finding.chain == (
        "KubeVirt kubevirt-hyperconverged/kubevirt-kubevirt-hyperconverged: labelled as HCO's",
        f"{HC_KEY}: what HCO writes onto it",
    )
    assert finding.remediation[0] == f"edit {HC_KEY}: {field}"
    assert finding.remediation[1] == (
        f"or set the kubevirt.kubevirt.io/jsonpatch annotation of {HC_KEY} to a JSON Patch of "
        "the KubeVirt CR"
    )


def test_an_edit_of_several_settings_names_each_and_each_field() -> None:
    def both(spec: dict[str, Any]) -> None:
        drop_pci(spec)
        add_gate(spec)

    new, old = edited(both)
    (finding,) = findings(new, old, hyperconverged(), old)
    assert "this edit of permittedHostDevices and the feature gates" in finding.message
    assert "Set spec.permittedHostDevices, spec.featureGates there" in finding.message


def unlabelled(obj: Obj) -> Obj:
    obj["metadata"]["labels"] = {}
    return obj


@pytest.mark.parametrize(
    ("case", "user", "with_hyperconverged", "labelled", "change"),
    [
        ("HCO's own write", HCO_SA, True, True, drop_pci),
        ("no HyperConverged in the namespace", "admin", False, True, drop_pci),
        ("a KubeVirt CR without HCO's labels", "admin", True, False, drop_pci),
        ("an edit of nothing the policies read", "admin", True, True, relabel_only),
    ],
)
def test_edits_hco_does_not_revert_or_that_change_nothing_read_are_not_reported(
    case: str,
    user: str,
    with_hyperconverged: bool,
    labelled: bool,
    change: Callable[[dict[str, Any]], None],
) -> None:
    new, old = edited(change)
    if not labelled:
        new, old = unlabelled(new), unlabelled(old)
    objects = [old, *([hyperconverged()] if with_hyperconverged else [])]
    review = request("UPDATE", new, old, user=user)
    assert list(check(review, state_of(*objects))) == [], case


def test_a_jsonpatch_annotation_that_does_not_apply_says_hco_writes_no_kubevirt_cr() -> None:
    old = hyperconverged()
    new = copy.deepcopy(old)
    patch = [{"op": "remove", "path": "/spec/configuration/permittedHostDevices/usb/9"}]
    new["metadata"]["annotations"] = {
        "kubevirt.kubevirt.io/jsonpatch": orjson.dumps(patch).decode()
    }
    (finding,) = findings(new, old, old, hco_kubevirt())
    assert "operation 0 (remove /spec/configuration/permittedHostDevices/usb/9)" in finding.message
    assert finding.message.endswith(
        ", so HCO writes no KubeVirt CR from this HyperConverged. Correct or remove the annotation."
    )
    assert finding.remediation == ("correct the kubevirt.kubevirt.io/jsonpatch annotation",)


def test_a_hyperconverged_whose_patch_applies_is_not_reported() -> None:
    old = hyperconverged()
    new = copy.deepcopy(old)
    patch = [
        {
            "op": "add",
            "path": "/spec/configuration/developerConfiguration/featureGates/-",
            "value": "Sidecar",
        }
    ]
    new["metadata"]["annotations"] = {
        "kubevirt.kubevirt.io/jsonpatch": orjson.dumps(patch).decode()
    }
    assert findings(new, old, old, hco_kubevirt()) == []


COPY_OVER_DEVICES = [
    {
        "op": "copy",
        "from": "/spec/configuration/network",
        "path": "/spec/configuration/permittedHostDevices",
    }
]
"""An operation gpu-guard cannot apply (the translation has no network) that writes devices."""
CANNOT_TELL = (
    "jsonpatch annotation: cannot tell whether operation 0 (copy "
    "/spec/configuration/permittedHostDevices) applies (it needs a field of the KubeVirt CR that "
    "gpu-guard does not model) and it writes permitted devices or feature gates, so no policy "
    "judges what HCO writes from {whose}. Check the annotation by hand against the KubeVirt CR "
    "HCO wrote."
)


def test_a_jsonpatch_annotation_whose_effect_cannot_be_told_says_so_with_its_index() -> None:
    old = hyperconverged()
    new = copy.deepcopy(old)
    new["metadata"]["annotations"] = {
        "kubevirt.kubevirt.io/jsonpatch": orjson.dumps(COPY_OVER_DEVICES).decode()
    }
    (finding,) = findings(new, old, old, hco_kubevirt())
    assert finding.message == CANNOT_TELL.format(whose="this HyperConverged")
    assert finding.remediation == ("kubectl get kubevirt -n kubevirt-hyperconverged -o yaml",)


def test_the_audit_says_when_it_cannot_tell_what_hco_writes_and_compares_nothing() -> None:
    hc = hyperconverged()
    hc["metadata"]["annotations"] = {
        "kubevirt.kubevirt.io/jsonpatch": orjson.dumps(COPY_OVER_DEVICES).decode()
    }
    ((ref, finding),) = list(audit(state_of(hc, hco_kubevirt())))
    assert str(ref) == HC_REF
    assert finding.message == CANNOT_TELL.format(whose="it")


def test_a_patch_that_needs_an_unmodelled_field_elsewhere_is_left_to_hcos_webhook() -> None:
    old = hyperconverged()
    new = copy.deepcopy(old)
    patch = [{"op": "replace", "path": "/spec/configuration/migrations/bandwidthPerMigration"}]
    patch[0]["value"] = "1Gi"
    new["metadata"]["annotations"] = {
        "kubevirt.kubevirt.io/jsonpatch": orjson.dumps(patch).decode()
    }
    assert findings(new, old, old, hco_kubevirt()) == []


def test_the_policy_warns_by_default_and_never_denies_on_failure() -> None:
    assert (POLICY.default_action, POLICY.failure_action) == (Action.WARN, Action.WARN)


# --- the audit: each HyperConverged against the KubeVirt CR in force -------------------------


def in_force(change: Callable[[dict[str, Any]], None] | None = None) -> Obj:
    """HCO's KubeVirt CR (028) without the patched-in GPUsWithDRA: what HCO writes from 004."""
    obj = hco_kubevirt()
    obj["spec"]["configuration"]["developerConfiguration"]["featureGates"].remove("GPUsWithDRA")
    if change is not None:
        change(obj["spec"])
    return obj


def swap_devices(spec: dict[str, Any]) -> None:
    pci = spec["configuration"]["permittedHostDevices"]["pciHostDevices"]
    pci.pop(0)  # the A10
    pci.append({"pciVendorSelector": "10DE:1EB8", "resourceName": "nvidia.com/TU104GL_Tesla_T4"})


def add_t4(spec: dict[str, Any]) -> None:
    pci = spec["configuration"]["permittedHostDevices"]["pciHostDevices"]
    pci.append({"pciVendorSelector": "10DE:1EB8", "resourceName": "nvidia.com/TU104GL_Tesla_T4"})


def drop_a10(spec: dict[str, Any]) -> None:
    spec["configuration"]["permittedHostDevices"]["pciHostDevices"].pop(0)


def gate_off(gate: str) -> Callable[[dict[str, Any]], None]:
    def change(spec: dict[str, Any]) -> None:
        spec["configuration"]["developerConfiguration"]["featureGates"].remove(gate)

    return change


def gate_on(gate: str) -> Callable[[dict[str, Any]], None]:
    def change(spec: dict[str, Any]) -> None:
        dev = spec["configuration"]["developerConfiguration"]
        dev["featureGates"].append(gate)
        dev["disabledFeatureGates"].remove(gate)

    return change


def drop_a10_and_turn_gpus_with_dra_on(spec: dict[str, Any]) -> None:
    drop_a10(spec)
    gate_on("GPUsWithDRA")(spec)


def audit_messages(*objects: Obj) -> list[tuple[str, str]]:
    return [(str(ref), f.message) for ref, f in audit(state_of(*objects))]


KV = "KubeVirt kubevirt-hyperconverged/kubevirt-kubevirt-hyperconverged"
HC_REF = "kubevirt-hyperconverged/kubevirt-hyperconverged"
THEN = (
    ": KubeVirt does what the CR says. Make the HyperConverged what you want HCO to write, then "
    "check its conditions."
)


@pytest.mark.parametrize(
    ("case", "objects", "said"),
    [
        ("the CR is what HCO writes", lambda: [hyperconverged(), in_force()], []),
        ("no KubeVirt CR written yet", lambda: [hyperconverged()], []),
        (
            "a gate turned on in the CR alone",
            lambda: [hyperconverged(), hco_kubevirt()],
            [
                f"{KV} in force has GPUsWithDRA on where HCO would write it off "
                f"(HCO has not reconciled it yet, or could not){THEN}"
            ],
        ),
        (
            "devices permitted in the CR alone and lacking there",
            lambda: [hyperconverged(), in_force(swap_devices)],
            [
                f"{KV} in force permits nvidia.com/TU104GL_Tesla_T4 that HCO would not; lacks "
                "nvidia.com/GA102GL_A10 that HCO would permit "
                f"(HCO has not reconciled it yet, or could not){THEN}"
            ],
        ),
        (
            "a device the CR alone permits, and nothing more",
            lambda: [hyperconverged(), in_force(add_t4)],
            [
                f"{KV} in force permits nvidia.com/TU104GL_Tesla_T4 that HCO would not "
                f"(HCO has not reconciled it yet, or could not){THEN}"
            ],
        ),
        (
            "a device the CR lacks, and nothing more",
            lambda: [hyperconverged(), in_force(drop_a10)],
            [
                f"{KV} in force lacks nvidia.com/GA102GL_A10 that HCO would permit "
                f"(HCO has not reconciled it yet, or could not){THEN}"
            ],
        ),
        (
            "devices and a gate, said in that order",
            lambda: [hyperconverged(), in_force(drop_a10_and_turn_gpus_with_dra_on)],
            [
                f"{KV} in force lacks nvidia.com/GA102GL_A10 that HCO would permit; has "
                "GPUsWithDRA on where HCO would write it off "
                f"(HCO has not reconciled it yet, or could not){THEN}"
            ],
        ),
        (
            "HostDevices turned off in the CR alone",
            lambda: [hyperconverged(), in_force(gate_off("HostDevices"))],
            [
                f"{KV} in force has HostDevices off where HCO would write it on "
                f"(HCO has not reconciled it yet, or could not){THEN}"
            ],
        ),
        (
            "HostDevicesWithDRA turned on in the CR alone",
            lambda: [hyperconverged(), in_force(gate_on("HostDevicesWithDRA"))],
            [
                f"{KV} in force has HostDevicesWithDRA on where HCO would write it off "
                f"(HCO has not reconciled it yet, or could not){THEN}"
            ],
        ),
        (
            "the patch puts a gate in both lists, which virt-operator refuses",
            lambda: [recorded_object("006"), in_force()],
            [
                f"{KV} in force has GPUsWithDRA off where HCO would write it on "
                f"(virt-operator refuses GPUsWithDRA in both gate lists){THEN}"
            ],
        ),
    ],
)
def test_the_audit_says_where_the_kubevirt_cr_in_force_is_not_what_hco_would_write(
    case: str, objects: Callable[[], list[Obj]], said: list[str]
) -> None:
    assert audit_messages(*objects()) == [(HC_REF, s) for s in said], case


def test_the_audits_finding_names_both_objects_in_order_and_how_to_read_the_conditions() -> None:
    ((_, finding),) = list(audit(state_of(hyperconverged(), hco_kubevirt())))
    assert finding.chain == (
        f"{HC_KEY}: what HCO would write",
        f"{KV}: what KubeVirt does now",
    )
    assert finding.remediation == (
        "kubectl get hyperconverged -n kubevirt-hyperconverged kubevirt-hyperconverged -o yaml",
    )


def test_the_audit_reports_a_patch_that_does_not_apply_and_nothing_else_of_it() -> None:
    hc = hyperconverged()
    patch = [{"op": "remove", "path": "/spec/configuration/permittedHostDevices/usb/9"}]
    hc["metadata"]["annotations"] = {"kubevirt.kubevirt.io/jsonpatch": orjson.dumps(patch).decode()}
    ((ref, finding),) = list(audit(state_of(hc, hco_kubevirt())))
    assert str(ref) == HC_REF
    assert "operation 0 (remove /spec/configuration/permittedHostDevices/usb/9)" in finding.message
    assert finding.message.endswith(
        ", so HCO writes no KubeVirt CR from it. Correct or remove the annotation."
    )
    assert finding.remediation == ("correct the kubevirt.kubevirt.io/jsonpatch annotation",)


def moved(obj: Obj, namespace: str) -> Obj:
    obj["metadata"]["namespace"] = namespace
    return obj


def test_each_hyperconverged_is_audited_whatever_the_ones_before_it_say() -> None:
    """One namespace each: a quiet one, one with no CR yet, one whose patch fails, then one whose
    CR in force differs: the last is still reported."""
    bad = moved(hyperconverged(), "c-patch")
    patch = [{"op": "remove", "path": "/spec/configuration/permittedHostDevices/usb/9"}]
    bad["metadata"]["annotations"] = {
        "kubevirt.kubevirt.io/jsonpatch": orjson.dumps(patch).decode()
    }
    objects = [
        moved(hyperconverged(), "a-quiet"),
        moved(in_force(), "a-quiet"),
        moved(hyperconverged(), "b-no-cr"),
        bad,
        moved(hco_kubevirt(), "c-patch"),
        moved(hyperconverged(), "d-differs"),
        moved(hco_kubevirt(), "d-differs"),
    ]
    refs = [str(ref) for ref, _ in audit(state_of(*objects))]
    assert refs == ["c-patch/kubevirt-hyperconverged", "d-differs/kubevirt-hyperconverged"]

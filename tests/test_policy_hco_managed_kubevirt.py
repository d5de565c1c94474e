"""kubevirt-config-reverted-by-hco: a direct edit of the KubeVirt CR HCO owns, and a jsonpatch
annotation HCO cannot apply, judged by the rule alone on the recorded HCO objects."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from policies.rules.hco_managed_kubevirt import POLICY, check
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
    assert "kubevirt.kubevirt.io/jsonpatch annotation" in finding.remediation[1]


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


def test_the_policy_warns_by_default_and_never_denies_on_failure() -> None:
    assert (POLICY.default_action, POLICY.failure_action) == (Action.WARN, Action.WARN)

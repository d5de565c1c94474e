"""feature-gate-in-both-lists: a KubeVirt CR lists a feature gate as on and as off."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path

import pytest

from policies.rules.gates_in_both_lists import POLICY, audit, check
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import Obj, judged_by, kubevirt, request, state_of, vm
from tests.test_hco_jsonpatch import PCI, annotated
from tests.test_hyperconverged import hco_world, recorded_object
from webhook.admission.review import parse_review
from webhook.engine import Engine

DRA = "GPUsWithDRA"
HOST_DRA = "HostDevicesWithDRA"
#: As HyperConverged 1.19 and later write it on KubeVirt 1.9.
HCO = kubevirt(feature_gates=("HostDevices",), disabled_gates=(DRA, HOST_DRA), version="v1.9.0")


def cr(listed: Sequence[str], disabled: Sequence[str] = (DRA, HOST_DRA)) -> Obj:
    return kubevirt(feature_gates=listed, disabled_gates=disabled, version="v1.9.0")


def findings(review: AdmissionRequest) -> list[Finding]:
    assert judged_by(POLICY, review)
    return list(check(review, state_of(HCO)))


REFUSED = "virt-operator will refuse it; the configuration in force stays the previous one."
NEW = (
    "virt-operator does not check a new CR, so KubeVirt reads it as on (featureGates wins) "
    "and virt-operator will refuse every later change of the gates that keeps it in both."
)
STORED = (
    "KubeVirt reads it as on (featureGates wins), and virt-operator refuses every change of "
    "the gates that keeps it in both."
)
KEEP = "Keep it in featureGates to turn it on, or in disabledFeatureGates to turn it off."


@pytest.mark.parametrize(
    ("review", "fate", "max_action"),
    [
        pytest.param(
            request("UPDATE", cr(("HostDevices", DRA)), HCO),
            REFUSED,
            None,
            id="an update that adds a disabled gate to featureGates is refused by virt-operator",
        ),
        pytest.param(
            request("UPDATE", cr(("HostDevices", DRA)), cr((DRA, "HostDevices"))),
            REFUSED,
            None,
            id="reordering the lists is a change to virt-operator too",
        ),
        pytest.param(
            request("CREATE", cr(("HostDevices", DRA))),
            NEW,
            None,
            id="a new CR is not checked, so the conflict is stored",
        ),
        pytest.param(
            request("UPDATE", cr(("HostDevices", DRA)), cr(("HostDevices", DRA))),
            STORED,
            Action.WARN,
            id="an update that leaves the lists as they were is only told",
        ),
    ],
)
def test_a_gate_in_both_lists_is_warned_with_what_virt_operator_does(
    review: AdmissionRequest, fate: str, max_action: Action | None
) -> None:
    (finding,) = findings(review)
    assert finding.message == (
        "GPUsWithDRA is in both featureGates and disabledFeatureGates of KubeVirt "
        f"kubevirt/kubevirt: {fate[:-1]}. {KEEP}"
    )
    assert finding.max_action is max_action
    assert finding.remediation == (
        "to keep GPUsWithDRA on: remove it from "
        "spec.configuration.developerConfiguration.disabledFeatureGates of KubeVirt "
        "kubevirt/kubevirt",
        "to turn GPUsWithDRA off: remove it from "
        "spec.configuration.developerConfiguration.featureGates of KubeVirt kubevirt/kubevirt "
        "instead",
    )
    assert finding.chain == (
        "KubeVirt kubevirt/kubevirt: GPUsWithDRA in "
        "spec.configuration.developerConfiguration.featureGates and in "
        "spec.configuration.developerConfiguration.disabledFeatureGates",
        "virt-operator (validateFeatureGates): feature gate GPUsWithDRA exists on both "
        '"FeatureGates" and "DisabledFeatureGates"',
    )


def test_several_gates_in_both_lists_are_named_together() -> None:
    (finding,) = findings(request("UPDATE", cr((DRA, HOST_DRA, DRA)), HCO))
    assert finding.message.startswith(
        "GPUsWithDRA and HostDevicesWithDRA are in both featureGates and disabledFeatureGates"
    )
    assert finding.message.endswith(
        "Keep them in featureGates to turn them on, or in disabledFeatureGates to turn them off."
    )
    assert finding.remediation[0].startswith(
        "to keep GPUsWithDRA, HostDevicesWithDRA on: remove them from "
    )


def test_an_update_without_its_old_object_is_judged_as_a_new_cr() -> None:
    (finding,) = check(request("UPDATE", cr(("HostDevices", DRA)), None), state_of())
    assert "virt-operator does not check a new CR" in finding.message


@pytest.mark.parametrize(
    "review",
    [
        pytest.param(request("UPDATE", cr(("HostDevices",), (HOST_DRA,)), HCO), id="un-disabling"),
        pytest.param(
            request("UPDATE", cr(("HostDevices", DRA), (HOST_DRA,)), HCO),
            id="moving a gate from one list to the other",
        ),
        pytest.param(request("CREATE", cr((DRA,), ())), id="a new CR with one list"),
        pytest.param(request("UPDATE", cr((), ()), HCO), id="an update emptying both lists"),
        pytest.param(
            request("UPDATE", cr(("hostdevices",), ("HostDevices",)), HCO),
            id="gate names are case-sensitive",
        ),
        pytest.param(request("DELETE", None, HCO), id="a delete is no one's business here"),
    ],
)
def test_each_gate_in_one_list_is_allowed(review: AdmissionRequest) -> None:
    assert list(check(review, state_of(HCO))) == []


def test_a_stored_conflict_is_an_audit_finding_on_the_kubevirt_cr() -> None:
    stored = cr(("HostDevices", DRA))
    ((ref, finding),) = list(audit(state_of(stored, vm("v"))))
    assert (ref.kind, str(ref)) == ("KubeVirt", "kubevirt/kubevirt")
    assert finding.message.endswith(f": {STORED[:-1]}. {KEEP}")
    assert list(audit(state_of(HCO))) == []


@pytest.mark.parametrize(
    ("review", "applies"),
    [
        pytest.param(request("CREATE", HCO), True, id="KubeVirt CREATE is judged"),
        pytest.param(request("UPDATE", HCO, HCO), True, id="KubeVirt UPDATE is judged"),
        pytest.param(request("DELETE", None, HCO), False, id="KubeVirt DELETE is not"),
        pytest.param(request("CREATE", vm("v")), False, id="a VM is not"),
    ],
)
def test_scope(review: AdmissionRequest, applies: bool) -> None:
    assert judged_by(POLICY, review) is applies


def test_the_engine_warns_by_default_and_never_denies() -> None:
    review = request("UPDATE", cr(("HostDevices", DRA)), HCO)
    decision = Engine().evaluate(review, state_of(HCO))
    assert decision.allowed
    mine = [(v.policy, v.action) for v in decision.verdicts if v.policy == POLICY.id]
    assert mine == [(POLICY.id, Action.WARN)]
    assert (POLICY.default_action, POLICY.failure_action) == (Action.WARN, Action.WARN)


#: KubeVirt CR reviews recorded from a real API server while HCO wrote the CR (tests/fixtures/hco).
HCO_REVIEWS = Path(__file__).resolve().parent / "fixtures" / "hco" / "admission-reviews"


def recorded(number: str) -> AdmissionRequest:
    (path,) = sorted(HCO_REVIEWS.glob(f"{number}-validate-*-kubevirts-*.json"))
    return parse_review(path.read_bytes())


@pytest.mark.parametrize(
    "number",
    [
        pytest.param("027", id="the dry run of the HyperConverged edit"),
        pytest.param("028", id="the update itself"),
    ],
)
def test_the_recorded_hco_jsonpatch_that_only_adds_gpuswithdra_is_warned_as_refused(
    number: str,
) -> None:
    # HCO computed disabledFeatureGates (GPUsWithDRA among them) before it applied the
    # annotation's patch, which appends GPUsWithDRA to featureGates.
    review = recorded(number)
    assert judged_by(POLICY, review)
    (finding,) = check(review, state_of())
    assert finding.message.startswith(
        "GPUsWithDRA is in both featureGates and disabledFeatureGates of KubeVirt "
        "kubevirt-hyperconverged/kubevirt-kubevirt-hyperconverged: virt-operator will refuse it;"
    )


def test_the_recorded_kubevirt_cr_hco_created_lists_each_gate_once() -> None:
    assert list(check(recorded("026"), state_of())) == []


def test_a_hyperconverged_whose_jsonpatch_puts_a_gate_in_both_is_told_to_fix_the_annotation() -> (
    None
):
    """Review 024: the HyperConverged's annotation adds GPUsWithDRA, which HCO also disables;
    judged by what HCO would write onto its KubeVirt CR (review 028's, in the HyperConverged's
    namespace)."""
    (path,) = sorted(HCO_REVIEWS.glob("024-validate-*-hyperconvergeds-*.json"))
    review = parse_review(path.read_bytes())
    assert judged_by(POLICY, review)
    written = copy.deepcopy(recorded_object("028"))
    written["metadata"]["namespace"] = "openshift-cnv"
    (finding,) = check(review, state_of(written))
    assert finding.message == (
        "GPUsWithDRA is in both featureGates and disabledFeatureGates of the KubeVirt CR HCO "
        "writes from HyperConverged openshift-cnv/kubevirt-hyperconverged: HCO would write it "
        "so, and virt-operator refuses that update of the KubeVirt CR. In the "
        "kubevirt.kubevirt.io/jsonpatch annotation, also remove it from disabledFeatureGates."
    )


def test_a_hyperconverged_whose_translation_cannot_be_told_is_not_judged_here() -> None:
    """A jsonpatch copying an unmodelled field over what the policies read: nobody can say what
    HCO writes (kubevirt-config-reverted-by-hco warns so), and this policy says nothing."""
    copied = [{"op": "copy", "from": "/spec/configuration/network", "path": PCI}]
    review = request("UPDATE", annotated(copied), recorded_object("018"))
    assert judged_by(POLICY, review)
    assert list(check(review, hco_world())) == []

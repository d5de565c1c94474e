"""HCO's kubevirt.kubevirt.io/jsonpatch annotation, applied as HCO applies it: every operation in
order on the KubeVirt CR it writes (controllers/operands/operand.go ``applyAnnotationPatch``).

What the translation cannot apply for want of a field HCO writes is "cannot tell" with the
operation's index, never "does not apply"; a patch that removes permitted devices in two steps
is judged as the removal it is.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from policies.cluster.hco_translation import translate
from policies.cluster.hyperconverged import project_hyperconverged
from tests.builders import Obj, request, vm
from tests.test_hyperconverged import A10, hco_kubevirt, hco_world, recorded_object
from webhook.engine import Decision, Engine

PCI = "/spec/configuration/permittedHostDevices/pciHostDevices"
STASH = "/spec/configuration/stash"
TWO_STEP: list[dict[str, Any]] = [
    {"op": "add", "path": STASH, "value": []},
    {"op": "move", "from": STASH, "path": PCI},
]
"""The issue's patch: an empty list put aside, then moved over the permitted PCI devices."""
MIGRATIONS = "/spec/configuration/migrations/bandwidthPerMigration"
"""A field HCO writes (``spec.configuration.migrations``) that the translation does not model."""


def annotated(patch: list[dict[str, Any]] | str) -> Obj:
    """The recorded v1 HyperConverged (018, an A10 and an H100 permitted) with the annotation."""
    obj = copy.deepcopy(recorded_object("018"))
    text = patch if isinstance(patch, str) else json.dumps(patch)
    obj["metadata"].setdefault("annotations", {})["kubevirt.kubevirt.io/jsonpatch"] = text
    return obj


def pci_names(patch: list[dict[str, Any]]) -> list[str]:
    translation = translate(project_hyperconverged(annotated(patch)), hco_kubevirt())
    return [d.resource_name for d in translation.kubevirt.pci_devices]


@pytest.mark.parametrize(
    ("patch", "problem", "cannot_tell", "known"),
    [
        pytest.param(TWO_STEP, "", "", True, id="the two steps apply in order"),
        pytest.param(
            [{"op": "replace", "path": MIGRATIONS, "value": "1Gi"}],
            "",
            "cannot tell whether operation 0 (replace " + MIGRATIONS + ") applies",
            True,
            id="a field the translation lacks, written nowhere the policies read",
        ),
        pytest.param(
            [
                {"op": "test", "path": "/spec/configuration/network", "value": {}},
                {"op": "remove", "path": f"{PCI}/0"},
            ],
            "",
            "cannot tell whether operation 0 (test /spec/configuration/network) applies",
            True,
            id="a test on a field the translation lacks, then a removal still applied",
        ),
        pytest.param(
            [{"op": "copy", "from": "/spec/configuration/network", "path": PCI}],
            "",
            "cannot tell whether operation 0 (copy " + PCI + ") applies",
            False,
            id="a copy from a field the translation lacks over the permitted devices",
        ),
        pytest.param(
            [
                {"op": "add", "path": STASH, "value": []},
                {"op": "move", "from": "/spec/configuration/elsewhere", "path": STASH},
                {"op": "move", "from": STASH, "path": PCI},
            ],
            "",
            "cannot tell whether operation 1 (move " + STASH + ") applies",
            True,
            id="a failed move between fields the policies do not read is not the last word",
        ),
        pytest.param(
            [{"op": "remove", "path": f"{PCI}/5"}],
            "operation 0 (remove " + PCI + "/5) does not apply: no such path",
            "",
            True,
            id="a removal past the end of a list the translation writes exactly",
        ),
        pytest.param(
            [{"op": "add", "path": "/metadata/labels/x", "value": "y"}],
            "operation 0 (add /metadata/labels/x): HCO modifies only spec fields",
            "",
            True,
            id="an operation outside the spec: HCO refuses the whole patch",
        ),
        pytest.param(
            [*TWO_STEP, {"op": "add", "path": "/status/x", "value": 1}],
            "operation 2 (add /status/x): HCO modifies only spec fields",
            "",
            True,
            id="HCO checks every path before applying any",
        ),
        pytest.param(
            [{"op": "add", "path": STASH}],
            "operation 0 (add " + STASH + ") is not a JSON Patch operation",
            "",
            True,
            id="an add without a value",
        ),
    ],
)
def test_the_annotation_is_applied_in_order_and_what_cannot_be_told_says_so(
    patch: list[dict[str, Any]], problem: str, cannot_tell: str, known: bool
) -> None:
    translation = translate(project_hyperconverged(annotated(patch)), hco_kubevirt())
    assert (problem in translation.patch_problem) and bool(problem) == bool(
        translation.patch_problem
    ), translation.patch_problem
    assert (cannot_tell in translation.cannot_tell) and bool(cannot_tell) == bool(
        translation.cannot_tell
    ), translation.cannot_tell
    assert "does not apply" not in translation.cannot_tell
    assert translation.known is known


def test_two_steps_empty_the_permitted_pci_devices_and_a_removal_after_an_unsure_one_counts() -> (
    None
):
    assert pci_names([]) == [A10, "nvidia.com/GH100_H100_SXM5_80GB"]
    assert pci_names(TWO_STEP) == []
    unsure_then_removal: list[dict[str, Any]] = [
        {"op": "test", "path": "/spec/configuration/network", "value": {}},
        {"op": "remove", "path": f"{PCI}/0"},
    ]
    assert pci_names(unsure_then_removal) == ["nvidia.com/GH100_H100_SXM5_80GB"]


def decided(new: Obj) -> Decision:
    """An admin's update of the HyperConverged to ``new``, with a VM using the A10 running."""
    old = recorded_object("018")
    user = vm("a10-vm", namespace="openshift-cnv", gpus=[A10])
    review = request("UPDATE", new, old, user="admin")
    return Engine().evaluate(review, hco_world(user))


def removed_directly() -> Obj:
    new = copy.deepcopy(recorded_object("018"))
    new["spec"]["virtualization"]["permittedHostDevices"]["pciHostDevices"] = []
    return new


@pytest.mark.parametrize(
    "new",
    [
        pytest.param(removed_directly(), id="directly"),
        pytest.param(annotated(TWO_STEP), id="jsonpatch"),
    ],
)
def test_the_two_step_patch_is_denied_under_a_running_vm_as_the_direct_removal_is(new: Obj) -> None:
    decision = decided(new)
    assert decision.allowed is False
    denied = [v for v in decision.verdicts if v.policy == "permitted-device-in-use-removed"]
    assert denied and A10 in denied[0].message


def test_a_patch_whose_effect_cannot_be_told_is_warned_with_its_index_and_judged_by_none() -> None:
    copied = [{"op": "copy", "from": "/spec/configuration/network", "path": PCI}]
    decision = decided(annotated(copied))
    assert decision.allowed is True
    (warning,) = [v for v in decision.verdicts if v.policy == "kubevirt-config-reverted-by-hco"]
    assert "cannot tell whether operation 0 (copy" in warning.message
    assert "no policy judges what HCO writes" in warning.message
    assert "does not apply" not in warning.message
    assert all(v.policy != "permitted-device-in-use-removed" for v in decision.verdicts)


def test_leaving_a_patch_that_cannot_be_told_is_judged_against_the_kubevirt_cr_in_force() -> None:
    """Plant an annotation gpu-guard cannot tell, then drop it and the A10 in one update: the
    old object's configuration is the KubeVirt CR HCO wrote, which permits the A10."""
    copied = [{"op": "copy", "from": "/spec/configuration/network", "path": PCI}]
    user = vm("a10-vm", namespace="openshift-cnv", gpus=[A10])
    review = request("UPDATE", removed_directly(), annotated(copied), user="admin")
    decision = Engine().evaluate(review, hco_world(user))
    assert decision.allowed is False
    assert any(v.policy == "permitted-device-in-use-removed" for v in decision.verdicts)

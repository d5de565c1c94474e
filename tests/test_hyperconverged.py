"""OpenShift Virtualization's HyperConverged: its projection and HCO's translation, and the
AdmissionReviews a real kube-apiserver sent for it (tests/fixtures/hco), answered over real TLS.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest

from policies.cluster.hco_translation import translate
from policies.cluster.hyperconverged import project_hyperconverged
from policies.cluster.kubevirt import KubeVirtInfo, entry_field, project_kubevirt
from policies.cluster.kubevirt_config import is_hco_operator_request
from policies.state.cluster import ClusterState
from policies.vocabulary.fields import ObjectError
from tests import FIXTURES, test_server
from tests.builders import Obj, node, request, state_of, vm
from tests.conftest import fixtures_missing
from tests.test_server import StartWebhook
from webhook.admission.pipeline import Admission
from webhook.engine import Engine

# The server tests' fixtures: a TLS bundle and a webhook started on it.
material = test_server.material
bundle = test_server.bundle
start_webhook = test_server.start_webhook

HCO_DIR = FIXTURES / "hco" / "admission-reviews"
HCO_FILES = sorted(HCO_DIR.glob("*.json"))


def recorded(number: str) -> dict[str, Any]:
    matches = sorted(HCO_DIR.glob(f"{number}-*.json"))
    if len(matches) != 1:
        fixtures_missing(f"{HCO_DIR}/{number}-*.json")
    review: dict[str, Any] = orjson.loads(matches[0].read_bytes())
    return review


def recorded_object(number: str) -> Obj:
    obj: Obj = recorded(number)["request"]["object"]
    return obj


def hco_kubevirt() -> KubeVirtInfo:
    """The KubeVirt CR HCO wrote (028), as the translation reads it."""
    return project_kubevirt(recorded_object("028"))


# --- the projection and the translation -------------------------------------------------------


@pytest.mark.parametrize(
    ("number", "layout", "fields", "disabled"),
    [
        (
            "002",
            "v1beta1",
            [
                "spec.permittedHostDevices.pciHostDevices[0]",
                "spec.permittedHostDevices.pciHostDevices[1]",
            ],
            ["spec.permittedHostDevices.pciHostDevices[2]"],
        ),
        (
            "018",
            "v1",
            [
                "spec.virtualization.permittedHostDevices.pciHostDevices[0]",
                "spec.virtualization.permittedHostDevices.pciHostDevices[1]",
            ],
            ["spec.virtualization.permittedHostDevices.pciHostDevices[2]"],
        ),
        (
            "020",
            "v1",
            [f"spec.virtualization.permittedHostDevices.pciHostDevices[{i}]" for i in range(3)],
            [],
        ),
        # a v1beta1 request sent as v1 to an Equivalent webhook, without HCO's converter: the
        # body keeps the v1beta1 layout, and is read so
        (
            "001",
            "v1beta1",
            [
                "spec.permittedHostDevices.pciHostDevices[0]",
                "spec.permittedHostDevices.pciHostDevices[1]",
            ],
            ["spec.permittedHostDevices.pciHostDevices[2]"],
        ),
    ],
)
def test_a_hyperconverged_is_read_in_its_own_layout_and_disabled_entries_are_dropped(
    number: str, layout: str, fields: list[str], disabled: list[str]
) -> None:
    hc = project_hyperconverged(recorded_object(number))
    assert hc.layout == layout
    kubevirt = translate(hc, hco_kubevirt()).kubevirt
    assert [entry_field(d) for d in kubevirt.pci_devices] == fields
    assert [d.field for d in hc.disabled] == disabled
    assert [d.selector for d in kubevirt.pci_devices][:2] == ["10DE:2236", "10DE:2330"]
    assert {m.resource_name for m in kubevirt.mediated_devices} == {"nvidia.com/NVIDIA_A10-12Q"}


def test_usb_host_devices_become_kubevirts_usb_entries() -> None:
    hc = project_hyperconverged(recorded_object("020"))
    (usb,) = translate(hc, hco_kubevirt()).kubevirt.usb_devices
    assert usb.field == "spec.virtualization.permittedHostDevices.usbHostDevices[0]"
    assert usb.resource_name == "kubevirt.io/peripherals"
    assert usb.selectors


def test_the_translation_is_what_hco_wrote_onto_the_kubevirt_cr() -> None:
    """028 is the KubeVirt CR as HCO composes it from the v1beta1 HyperConverged with its
    jsonpatch annotation (006): same permitted devices, same gates in the same lists."""
    written = hco_kubevirt()
    kubevirt = translate(project_hyperconverged(recorded_object("006")), written).kubevirt
    assert [(d.selector, d.resource_name) for d in kubevirt.pci_devices] == [
        (d.selector, d.resource_name) for d in written.pci_devices
    ]
    assert set(kubevirt.gates.enabled) == set(written.gates.enabled)
    assert set(kubevirt.gates.disabled) == set(written.gates.disabled)
    assert kubevirt.gates.in_both == ("GPUsWithDRA",)


def test_hco_always_sets_host_devices_and_the_hyperconvergeds_gates_map_onto_kubevirts() -> None:
    hc = project_hyperconverged(recorded_object("018"))  # downwardMetrics on, decentralized off
    gates = translate(hc, None).kubevirt.gates
    assert gates.read("HostDevices").on
    assert "DownwardMetrics" in gates.enabled
    assert "DecentralizedLiveMigration" not in gates.enabled


@pytest.mark.parametrize(
    ("patch", "problem"),
    [
        (
            '[{"op": "add", "path": "/spec/configuration/migrations/bandwidthPerMigration", '
            '"value": "1Gi"}]',
            "",
        ),  # a field the policies do not read: not ours to judge
        (
            '[{"op": "remove", "path": "/spec/configuration/permittedHostDevices/usb/0"}]',
            "operation 0 (remove /spec/configuration/permittedHostDevices/usb/0) does not apply",
        ),
        ('{"op": "add"}', "is not a JSON Patch"),
        ("not json", "is not JSON"),
        (
            '[{"op": "test", "path": "/spec/configuration/developerConfiguration/featureGates/0", '
            '"value": "Nope"}]',
            "its test fails",
        ),
    ],
)
def test_a_jsonpatch_annotation_that_does_not_apply_is_reported(patch: str, problem: str) -> None:
    obj = copy.deepcopy(recorded_object("018"))
    obj["metadata"].setdefault("annotations", {})["kubevirt.kubevirt.io/jsonpatch"] = patch
    translation = translate(project_hyperconverged(obj), hco_kubevirt())
    if problem:
        assert problem in translation.patch_problem
        assert [d.selector for d in translation.kubevirt.pci_devices][:1] == ["10DE:2236"]
    else:
        assert translation.patch_problem == ""


def test_a_patch_that_replaces_the_permitted_devices_is_named_as_the_kubevirt_field() -> None:
    obj = copy.deepcopy(recorded_object("018"))
    obj["metadata"]["annotations"]["kubevirt.kubevirt.io/jsonpatch"] = orjson.dumps(
        [
            {
                "op": "replace",
                "path": "/spec/configuration/permittedHostDevices/pciHostDevices",
                "value": [{"pciVendorSelector": "10DE:1234", "resourceName": "nvidia.com/X"}],
            }
        ]
    ).decode()
    translation = translate(project_hyperconverged(obj), hco_kubevirt())
    (entry,) = translation.kubevirt.pci_devices
    assert (entry.selector, entry_field(entry)) == ("10DE:1234", "pciHostDevices[0]")
    assert translation.patched


def test_a_malformed_entry_is_an_object_error_naming_the_users_field() -> None:
    obj = copy.deepcopy(recorded_object("018"))
    obj["spec"]["virtualization"]["permittedHostDevices"]["pciHostDevices"][1]["disabled"] = "yes"
    with pytest.raises(ObjectError, match=r"permittedHostDevices\.pciHostDevices\[1\]\.disabled"):
        project_hyperconverged(obj)


HCO_CR = "kubevirt-kubevirt-hyperconverged"


@pytest.mark.parametrize(
    ("namespace", "name", "user", "groups", "own"),
    [
        pytest.param("openshift-cnv", HCO_CR, "openshift-cnv", None, True, id="OpenShift's HCO"),
        pytest.param(
            "kubevirt-hyperconverged",
            HCO_CR,
            "kubevirt-hyperconverged",
            None,
            True,
            id="upstream HCO",
        ),
        pytest.param("openshift-cnv", "kubevirt", "openshift-cnv", None, False, id="another CR"),
        pytest.param(
            "openshift-cnv", HCO_CR, "kubevirt-hyperconverged", None, False, id="the other HCO"
        ),
        pytest.param("default", HCO_CR, "default", None, False, id="not one of HCO's namespaces"),
        pytest.param(
            "openshift-cnv",
            HCO_CR,
            "openshift-cnv",
            ("system:masters",),
            False,
            id="its username without its ServiceAccount group",
        ),
    ],
)
def test_hco_writes_unjudged_only_the_kubevirt_cr_its_hyperconverged_owns_as_itself(
    namespace: str, name: str, user: str, groups: tuple[str, ...] | None, own: bool
) -> None:
    metadata = {"name": name, "namespace": namespace}
    cr: Obj = {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": metadata}
    account = f"system:serviceaccount:{user}:hyperconverged-cluster-operator"
    review = request("UPDATE", cr, cr, user=account, groups=groups)
    assert is_hco_operator_request(review) is own


# --- the recorded reviews over TLS ------------------------------------------------------------

A10 = "nvidia.com/GA102GL_A10"


def hco_world(*extra: Obj) -> ClusterState:
    """gpu-a10-1 as recorded (vGPU, 2x A10-12Q), an A10 passthrough node, HCO's KubeVirt CR in
    each namespace and the v1beta1 HyperConverged it was written from."""
    vgpu = recorded_object("030")
    passthrough = node(
        "gpu-a10-2",
        labels={
            "nvidia.com/gpu.workload.config": "vm-passthrough",
            "feature.node.kubernetes.io/pci-0302_10de_2236.present": "true",
        },
        allocatable={A10: "1"},
    )
    on_openshift = copy.deepcopy(recorded_object("028"))  # the v1 object's, in openshift-cnv
    on_openshift["metadata"]["namespace"] = "openshift-cnv"
    return state_of(
        vgpu, passthrough, recorded_object("028"), on_openshift, recorded_object("004"), *extra
    )


def warnings_of(response: dict[str, Any]) -> list[str]:
    return [str(w) for w in response.get("warnings", [])]


@pytest.mark.parametrize("path", HCO_FILES, ids=[p.stem for p in HCO_FILES])
async def test_every_recorded_hco_review_gets_a_well_formed_answer(
    start_webhook: StartWebhook, path: Path
) -> None:
    hook = await start_webhook(Admission(Engine(), hco_world()))
    body = path.read_bytes()
    response = await hook.review(body)
    assert response["allowed"] is True


@pytest.mark.parametrize(
    ("number", "said"),
    [
        (
            "002",  # v1beta1 create: the H100 no node has; the disabled T4 is not judged
            [
                "[permitted-device-without-hardware] spec.permittedHostDevices.pciHostDevices[1] "
                "10de:2330"
            ],
        ),
        (
            "018",  # the same through v1, named as written there
            [
                "[permitted-device-without-hardware] spec.virtualization.permittedHostDevices."
                "pciHostDevices[1] 10de:2330"
            ],
        ),
        (
            "022",  # the dry run removing the H100: what is left was there before, only mentioned
            ["[permitted-device-without-hardware]"],
        ),
        (
            "024",  # the jsonpatch adds GPUsWithDRA, which HCO also disables
            [
                "[permitted-device-without-hardware]",
                "[permitted-device-without-hardware]",
                "[feature-gate-in-both-lists] GPUsWithDRA is in both",
            ],
        ),
        ("026", []),  # HCO's own create of the KubeVirt CR: never judged
        ("027", []),  # HCO's dry-run update (its webhook's checkOperands)
        ("028", []),  # and the update for real, with a gate in both lists
    ],
)
async def test_the_recorded_hco_reviews_get_the_expected_verdicts(
    start_webhook: StartWebhook, number: str, said: list[str]
) -> None:
    hook = await start_webhook(Admission(Engine(), hco_world()))
    response = await hook.review(orjson.dumps(recorded(number)))
    warnings = warnings_of(response)
    assert len(warnings) >= len(said), warnings
    for prefix in said:
        assert any(w.startswith(prefix) for w in warnings), (prefix, warnings)
    if not said:
        assert warnings == []
    if number == "022":
        assert all("10de:2330" not in w for w in warnings)
        assert "already there before this change" in " ".join(warnings)


def as_admin(number: str) -> bytes:
    review = recorded(number)
    review["request"]["userInfo"] = {"username": "admin", "groups": ["system:masters"]}
    return orjson.dumps(review)


async def test_an_admins_direct_edit_of_hcos_kubevirt_cr_is_warned_that_hco_reverts_it(
    start_webhook: StartWebhook,
) -> None:
    hook = await start_webhook(Admission(Engine(), hco_world()))
    response = await hook.review(as_admin("028"))
    assert response["allowed"] is True
    (reverted,) = [w for w in warnings_of(response) if w.startswith("[kubevirt-config-reverted")]
    assert "HCO reverts this edit of the feature gates" in reverted
    assert "HyperConverged kubevirt-hyperconverged/kubevirt-hyperconverged" in reverted


async def test_no_policy_denies_an_edit_of_hcos_kubevirt_cr_not_even_one_removing_a_device_in_use(
    start_webhook: StartWebhook,
) -> None:
    review = recorded("028")
    review["request"]["userInfo"] = {"username": "admin"}
    old = review["request"]["oldObject"]
    new = copy.deepcopy(old)
    new["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"] = []
    review["request"]["object"] = new
    user = vm("a10-vm", namespace="kubevirt-hyperconverged", gpus=[A10])
    hook = await start_webhook(Admission(Engine(), hco_world(user)))
    response = await hook.review(orjson.dumps(review))
    assert response["allowed"] is True
    in_use = [w for w in warnings_of(response) if w.startswith("[permitted-device-in-use-removed]")]
    assert in_use and "not denied: HCO owns this KubeVirt CR" in " ".join(in_use)
    # the same edit of a KubeVirt CR HCO does not own is denied
    for obj in (new, old):
        obj["metadata"]["labels"] = {}
    hook2 = await start_webhook(Admission(Engine(), hco_world(user)))
    denied = await hook2.review(orjson.dumps(review))
    assert denied["allowed"] is False

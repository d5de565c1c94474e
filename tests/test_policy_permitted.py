"""permitted-device-without-hardware: KubeVirt permits a device no node has or advertises."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies.cluster.hardware import (
    SOURCE_ALLOCATABLE,
    SOURCE_DRA,
    SOURCE_GFD,
    SOURCE_NFD_LABEL,
    SOURCE_NODE_FEATURE,
)
from policies.cluster.pciids import PciId
from policies.rules.permitted_hardware import POLICY, audit, check
from policies.state.cluster import ClusterState
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import (
    Obj,
    dead_node,
    judged_by,
    kubevirt,
    node,
    node_feature,
    request,
    state_of,
)
from tests.dra_builders import gpu, resource_slice
from webhook.state.pciids import PCI_IDS_ENV, default_database

RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
H100 = "nvidia.com/GH100_H100_SXM5_80GB"
A10_24Q = "nvidia.com/NVIDIA_A10-24Q"
# A resource some other provider (KubeVirt's own, externalResourceProvider: false) advertises:
# not an nvidia.com name, so it adds no hardware of its own.
LAB_3090 = "homelab.io/rtx3090"
NFD_5090 = "feature.node.kubernetes.io/pci-0300_10de_2b85.present"
#: NVIDIA's DRA driver publishing omen2's RTX 5090 for passthrough, as fixture 020 recorded it.
DRA_5090_ON_OMEN2 = resource_slice(
    "omen2-gpu.nvidia.com-7x2kq",
    "omen2",
    [
        gpu(
            "gpu-vfio-0",
            type_="vfio",
            extra={"vendorID": {"string": "0x10de"}, "deviceID": {"string": "0x2b85"}},
        )
    ],
    generation=2,
)


def judge(review: AdmissionRequest, *objects: Obj) -> list[Finding]:
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


def created(cr: Obj, *objects: Obj) -> list[Finding]:
    return judge(request("CREATE", cr), *objects)


# --- hardware from each source --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "external", "objects", "pci", "source"),
    [
        pytest.param(
            ("10de:2b85", LAB_3090),
            False,
            [node("omen2", labels={NFD_5090: "true"}, allocatable={LAB_3090: "1"})],
            "2b85",
            SOURCE_NFD_LABEL,
            id="an NFD device-level label alone is hardware",
        ),
        pytest.param(
            ("10de:2b85", LAB_3090),
            False,
            [
                node(
                    "omen2",
                    labels={"feature.node.kubernetes.io/pci-10de_2b85.present": "true"},
                    allocatable={LAB_3090: "1"},
                )
            ],
            "2b85",
            SOURCE_NFD_LABEL,
            id="an NFD vendor-device label alone is hardware",
        ),
        pytest.param(
            ("10de:2b85", LAB_3090),
            False,
            [
                node("omen2", allocatable={LAB_3090: "1"}),
                node_feature("omen2", [("0300", "10de", "2b85")]),
            ],
            "2b85",
            SOURCE_NODE_FEATURE,
            id="an NFD NodeFeature pci.device alone is hardware",
        ),
        pytest.param(
            ("10de:2204", LAB_3090),
            False,
            [
                node(
                    "omen",
                    labels={"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3090"},
                    allocatable={LAB_3090: "1"},
                )
            ],
            "2204",
            SOURCE_GFD,
            id="a GFD gpu.product label alone is hardware",
        ),
        pytest.param(
            ("10de:2b85", RTX_5090),
            True,
            [node("omen2", allocatable={RTX_5090: "1"})],
            "2b85",
            SOURCE_ALLOCATABLE,
            id="a sandbox resource in allocatable alone is hardware",
        ),
        pytest.param(
            ("10de:2b85", RTX_5090),
            True,
            [dead_node("omen2", allocatable={RTX_5090: "1"})],
            "2b85",
            SOURCE_ALLOCATABLE,
            id="a sandbox resource on a dead node is still hardware",
        ),
        pytest.param(
            ("10DE:2B85", RTX_5090),
            True,
            [node("omen2", allocatable={RTX_5090: "1"})],
            "2b85",
            SOURCE_ALLOCATABLE,
            id="a selector in upper case matches",
        ),
        pytest.param(
            ("10de:2b85", LAB_3090),
            False,
            [node("omen2", allocatable={LAB_3090: "1"}), DRA_5090_ON_OMEN2],
            "2b85",
            SOURCE_DRA,
            id="a device the DRA driver publishes alone is hardware",
        ),
        pytest.param(
            ("10de:2b85", LAB_3090),
            False,
            [dead_node("omen2", allocatable={LAB_3090: "1"}), DRA_5090_ON_OMEN2],
            "2b85",
            SOURCE_DRA,
            id="the slices of a NotReady node are still hardware",
        ),
    ],
)
def test_an_entry_with_hardware_and_an_advertised_resource_is_fine(
    entry: tuple[str, str], external: bool, objects: list[Obj], pci: str, source: str
) -> None:
    state = state_of(*objects)
    # The hardware is known through this one source and no other.
    assert {n: set(s) for n, s in state.nodes_with_hardware(PciId("10de", pci)).items()} == {
        objects[0]["metadata"]["name"]: {source}
    }
    review = request("CREATE", kubevirt([entry], external=external))
    assert judged_by(POLICY, review)
    assert list(check(review, state)) == []


def test_an_entry_without_hardware_names_the_device_from_pci_ids() -> None:
    # A node advertises the resourceName, but nothing shows the device itself.
    cr = kubevirt([("10de:2330", "homelab.io/h100")], external=False)
    (finding,) = created(cr, node("omen2", allocatable={"homelab.io/h100": "1"}))
    assert finding.message.startswith("pciHostDevices[0] 10de:2330 ")
    assert default_database().describe(PciId("10de", "2330")) in finding.message
    assert "H100 SXM5 80GB" in finding.message
    assert "no node has this device" in finding.message
    assert "no node advertises" not in finding.message


def test_no_hardware_and_no_advertiser_says_both() -> None:
    (finding,) = created(kubevirt([("10de:2330", H100)]))
    db = default_database()
    assert finding.message == (
        f"pciHostDevices[0] {db.describe(PciId('10de', '2330'))}: no node has this device; "
        f"no node advertises {H100}; VMs using it never schedule"
    )
    assert finding.max_action is None
    assert finding.remediation == ("remove or correct pciHostDevices[0]",)
    assert POLICY.default_action == Action.WARN


def test_an_entry_without_hardware_lists_what_hardware_was_seen() -> None:
    (finding,) = created(
        kubevirt([("10de:2330", H100)]),
        node("omen2", labels={NFD_5090: "true"}),
        node("omen", labels={"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3090"}),
    )
    assert "no node has this device (seen: 10de:2204 and 10de:2b85)" in finding.message


@pytest.mark.parametrize(
    ("seen", "said"),
    [
        pytest.param(
            ["0300_10de_2204", "0403_10de_1aef"],
            "(seen: 10de:2204)",
            id="a GPU's audio function is not a GPU",
        ),
        pytest.param(
            [f"0300_10de_{d}" for d in ("2204", "2b85", "2331", "2230", "1eb8")],
            "(seen: 10de:1eb8, 10de:2204, 10de:2230, 10de:2331 and 1 more)",
            id="four named, the rest counted",
        ),
    ],
)
def test_the_hardware_seen_lists_gpus_only_and_four_at_most(seen: list[str], said: str) -> None:
    nodes = [
        node(f"n{i}", labels={f"feature.node.kubernetes.io/pci-{d}.present": "true"})
        for i, d in enumerate(seen)
    ]
    (finding,) = created(kubevirt([("10de:2330", H100)]), *nodes)
    assert f"no node has this device {said}; " in finding.message


def test_a_resource_name_no_node_advertises_is_a_finding_even_with_hardware() -> None:
    (finding,) = created(
        kubevirt([("10de:2b85", RTX_5090)]), node("omen2", labels={NFD_5090: "true"})
    )
    assert f"no node advertises {RTX_5090}" in finding.message
    assert "no node has this device" not in finding.message


@pytest.mark.parametrize(
    ("objects", "hint"),
    [
        pytest.param([DRA_5090_ON_OMEN2], True, id="only a slice shows the GPU"),
        pytest.param(
            [DRA_5090_ON_OMEN2, node("omen3", labels={NFD_5090: "true"})],
            False,
            id="another node has it outside DRA",
        ),
        pytest.param(
            [node("omen2", labels={NFD_5090: "true"}), DRA_5090_ON_OMEN2],
            False,
            id="the same node shows it through NFD too",
        ),
    ],
)
def test_a_gpu_only_dra_publishes_is_there_but_says_how_vms_reach_it(
    objects: list[Obj], hint: bool
) -> None:
    (finding,) = created(kubevirt([("10de:2b85", RTX_5090)]), *objects)
    assert "no node has this device" not in finding.message
    assert f"no node advertises {RTX_5090}" in finding.message
    assert (
        f"no node advertises {RTX_5090} (only the DRA driver publishes it: VMs take it from a "
        "claim); VMs using it never schedule" in finding.message
    ) is hint
    assert len(f"[{POLICY.id}] {finding.message}") <= 256


def test_a_zero_count_is_not_advertising() -> None:
    (finding,) = created(
        kubevirt([("10de:2b85", RTX_5090)]),
        node("omen2", labels={NFD_5090: "true"}, allocatable={RTX_5090: "0"}),
    )
    assert f"no node advertises {RTX_5090}" in finding.message


@pytest.mark.usefixtures("committed_pci_ids")
def test_an_external_entry_with_the_wrong_name_says_what_the_plugin_calls_it() -> None:
    (finding,) = created(
        kubevirt([("10de:1eb8", "nvidia.com/TU104GL_Tesla_T4")]),
        node("t4", labels={"feature.node.kubernetes.io/pci-0302_10de_1eb8.present": "true"}),
    )
    assert (
        "no node advertises nvidia.com/TU104GL_Tesla_T4 "
        "(the sandbox device plugin would call it nvidia.com/TU104GL_TESLA_T4)"
    ) in finding.message


@pytest.mark.parametrize(
    "selector",
    [
        pytest.param("10de-2b85", id="a dash"),
        pytest.param("0x10de:0x2b85", id="0x prefixes"),
        pytest.param("10de:2b8", id="a short device id"),
        pytest.param("", id="an empty selector"),
    ],
)
def test_a_malformed_selector_is_a_finding(selector: str) -> None:
    (finding,) = created(
        kubevirt([(selector, RTX_5090)]), node("omen2", allocatable={RTX_5090: "1"})
    )
    assert finding.message.startswith(
        f"pciHostDevices[0] {selector!r}: pciVendorSelector is not a vendor:device id in hex; "
    )


def test_each_dead_entry_gets_its_own_finding_with_its_index() -> None:
    findings = created(
        kubevirt([("10de:2b85", RTX_5090), ("10de:2330", H100), ("10de:2204", RTX_3090)]),
        node("omen2", allocatable={RTX_5090: "1"}),
    )
    assert [f.message.split(" ")[0] for f in findings] == ["pciHostDevices[1]", "pciHostDevices[2]"]


# --- mediated devices -----------------------------------------------------------------------------


def test_an_mdev_entry_with_no_advertised_resource_is_a_finding() -> None:
    (finding,) = created(kubevirt(mdevs=[("NVIDIA A10-24Q", A10_24Q)]))
    assert finding.message == (
        f"mediatedDevices[0] 'NVIDIA A10-24Q': no node advertises {A10_24Q}; "
        "no node offers a vGPU profile (none is in vm-vgpu mode); VMs using it never schedule"
    )


def test_an_mdev_entry_with_an_advertised_resource_is_fine() -> None:
    assert (
        created(
            kubevirt(mdevs=[("NVIDIA A10-24Q", A10_24Q)]), node("a10", allocatable={A10_24Q: "4"})
        )
        == []
    )


# --- did you mean ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cr", "advertised", "entry"),
    [
        pytest.param(
            kubevirt([("10de:2b85", "nvidia.com/gb202_geforce_rtx_5090")], external=False),
            RTX_5090,
            "pciHostDevices[0]",
            id="a pci entry whose resourceName differs only in case",
        ),
        pytest.param(
            kubevirt(mdevs=[("NVIDIA A10-24Q", "nvidia.com/nvidia_a10-24q")]),
            A10_24Q,
            "mediatedDevices[0]",
            id="an mdev entry whose resourceName differs only in case",
        ),
    ],
)
def test_did_you_mean_for_a_case_only_mismatch(cr: Obj, advertised: str, entry: str) -> None:
    (finding,) = created(
        cr, node("omen2", labels={NFD_5090: "true"}, allocatable={advertised: "1"})
    )
    assert finding.message.startswith(entry)
    assert f"(did you mean {advertised}? resource names are case-sensitive)" in finding.message


# --- UPDATE: old dead entries are only mentioned --------------------------------------------------


def test_on_update_an_entry_already_there_is_capped_at_warn_and_a_new_one_is_not() -> None:
    old = kubevirt([("10de:2330", H100)])
    new = kubevirt([("10de:2330", H100), ("10de:2331", "nvidia.com/GH100_H100_PCIE")])
    findings = judge(request("UPDATE", new, old))
    assert [(f.message.split(" ")[0], f.max_action) for f in findings] == [
        ("pciHostDevices[0]", Action.WARN),
        ("pciHostDevices[1]", None),
    ]
    assert findings[0].message.endswith("(already there before this change)")
    assert "already there" not in findings[1].message


@pytest.mark.parametrize(
    ("old_entry", "new_entry", "capped"),
    [
        pytest.param(
            ("10de:2330", H100), ("10de:2330", H100), True, id="an unchanged entry is capped"
        ),
        pytest.param(
            ("10DE:2330", H100),
            ("10de:2330", H100),
            True,
            id="an entry whose selector only changed case is capped",
        ),
        pytest.param(
            ("10de:2330", H100),
            ("10de:2330", "nvidia.com/H100"),
            False,
            id="an entry whose resourceName changed is not capped",
        ),
        pytest.param(
            ("10de:2331", H100),
            ("10de:2330", H100),
            False,
            id="an entry whose selector changed is not capped",
        ),
    ],
)
def test_on_update_which_entries_count_as_already_there(
    old_entry: tuple[str, str], new_entry: tuple[str, str], capped: bool
) -> None:
    (finding,) = judge(request("UPDATE", kubevirt([new_entry]), kubevirt([old_entry])))
    assert (finding.max_action == Action.WARN) is capped
    assert finding.message.endswith("(already there before this change)") is capped


def test_on_update_an_entry_whose_external_flag_changed_is_not_capped() -> None:
    old = kubevirt([("10de:2330", H100)], external=False)
    (finding,) = judge(request("UPDATE", kubevirt([("10de:2330", H100)], external=True), old))
    assert finding.max_action is None


def test_on_update_an_mdev_entry_already_there_is_capped() -> None:
    cr = kubevirt(mdevs=[("NVIDIA A10-24Q", A10_24Q)])
    (finding,) = judge(request("UPDATE", cr, cr))
    assert finding.max_action == Action.WARN
    assert finding.message.endswith("(already there before this change)")


def test_create_caps_nothing() -> None:
    (finding,) = created(kubevirt([("10de:2330", H100)]))
    assert finding.max_action is None


# --- audit and scope ------------------------------------------------------------------------------


def test_audit_judges_every_kubevirt_cr_uncapped() -> None:
    state: ClusterState = state_of(
        kubevirt([("10de:2330", H100)]), node("omen2", allocatable={RTX_5090: "1"})
    )
    ((ref, finding),) = list(audit(state))
    assert (ref.api_version, ref.kind, str(ref)) == (
        "kubevirt.io/v1",
        "KubeVirt",
        "kubevirt/kubevirt",
    )
    assert finding.max_action is None
    assert "no node has this device (seen: 10de:2b85)" in finding.message


def test_a_malformed_kubevirt_cr_raises_an_object_error_naming_the_field() -> None:
    cr = kubevirt([("10de:2b85", RTX_5090)])
    cr["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"][0]["resourceName"] = 5
    with pytest.raises(ObjectError) as caught:
        check(request("CREATE", cr), state_of())
    assert (
        caught.value.path
        == "spec.configuration.permittedHostDevices.pciHostDevices[0].resourceName"
    )


@pytest.mark.parametrize(
    ("review", "applies"),
    [
        pytest.param(request("CREATE", kubevirt()), True, id="KubeVirt CREATE is judged"),
        pytest.param(
            request("UPDATE", kubevirt(), kubevirt()), True, id="KubeVirt UPDATE is judged"
        ),
        pytest.param(request("DELETE", None, kubevirt()), False, id="KubeVirt DELETE is not"),
        pytest.param(
            request("UPDATE", kubevirt(), kubevirt(), sub_resource="status"),
            False,
            id="the KubeVirt status subresource is not",
        ),
    ],
)
def test_scope(review: AdmissionRequest, applies: bool) -> None:
    assert judged_by(POLICY, review) is applies


# --- devices of other vendors and kinds -----------------------------------------------------------

QAT = "intel.com/qat"
USB_STICK = "kubevirt.io/stick"


@pytest.mark.usefixtures("committed_pci_ids")
@pytest.mark.parametrize(
    ("cr", "objects", "expected"),
    [
        pytest.param(
            kubevirt(usb=[("0951:1666", USB_STICK)]),
            [node("omen2")],
            f"usb[0] (0951:1666): no node advertises {USB_STICK}; VMs using it never schedule",
            id="a usb resourceName no node advertises is dead configuration",
        ),
        pytest.param(
            kubevirt(usb=[("0951:1666", USB_STICK)]),
            [node("omen2", allocatable={USB_STICK: "0"})],
            f"usb[0] (0951:1666): no node advertises {USB_STICK}; VMs using it never schedule",
            id="a usb resource advertised with count zero is not advertised",
        ),
        pytest.param(
            kubevirt(usb=[("0951:1666", USB_STICK)]),
            [node("omen2", allocatable={USB_STICK: "1"})],
            None,
            id="a usb resource some node advertises is fine",
        ),
        pytest.param(
            kubevirt([("8086:6f54", QAT)]),
            [
                node("omen2", allocatable={QAT: "1"}),
                node_feature("omen2", [("0b40", "8086", "6f54")]),
            ],
            None,
            id="another vendor's device that a node has and advertises is fine",
        ),
        pytest.param(
            kubevirt([("8086:6f54", QAT)]),
            [node("omen2")],
            "pciHostDevices[0] 8086:6f54 (Intel Corporation, not an NVIDIA device): no node has "
            f"this device; no node advertises {QAT}; VMs using it never schedule",
            id="another vendor's device is not called missing from pci.ids nor named by nvidia",
        ),
    ],
)
def test_other_vendors_and_usb_entries_are_checked_against_what_nodes_have_and_advertise(
    cr: Obj, objects: list[Obj], expected: str | None
) -> None:
    findings = created(cr, *objects)  # the committed files name vendor 8086, not device 6f54
    assert [f.message for f in findings] == ([expected] if expected else [])
    if expected is not None:
        (finding,) = findings
        field = expected.split(" ", 1)[0]
        assert finding.remediation == (f"remove or correct {field}",)


def test_another_vendors_device_is_named_as_the_system_pci_ids_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    system = tmp_path / "pci.ids"
    system.write_text("8086  Intel Corporation\n\t6f54  QuickAssist (a small pci.ids)\n")
    monkeypatch.setenv(PCI_IDS_ENV, str(system))
    (finding,) = created(kubevirt([("8086:6f54", QAT)]), node("omen2"))
    assert finding.message.startswith(
        "pciHostDevices[0] 8086:6f54 QuickAssist (a small pci.ids) (not an NVIDIA device): "
    )


def test_on_update_a_usb_entry_already_there_is_only_mentioned() -> None:
    old = kubevirt(usb=[("0951:1666", USB_STICK)])
    new = kubevirt(usb=[("0951:1666", USB_STICK), ("046d:c52b", "kubevirt.io/receiver")])
    findings = judge(request("UPDATE", new, old), node("omen2"))
    assert [(f.message.split(" ")[0], f.max_action) for f in findings] == [
        ("usb[0]", Action.WARN),
        ("usb[1]", None),
    ]
    assert findings[0].message.endswith("(already there before this change)")


@pytest.mark.parametrize(
    ("selectors", "label"),
    [
        pytest.param(
            [{"vendor": "0951", "product": "1666"}, {"vendor": "0951", "product": "1667"}],
            "(0951:1666, 0951:1667)",
            id="every selector named",
        ),
        pytest.param([], "(no selectors)", id="none said so"),
    ],
)
def test_a_usb_entry_is_named_by_its_selectors(selectors: list[Obj], label: str) -> None:
    cr = kubevirt(usb=[("0951:1666", USB_STICK)])
    cr["spec"]["configuration"]["permittedHostDevices"]["usb"][0]["selectors"] = selectors
    (finding,) = created(cr, node("omen2"))
    assert finding.message.startswith(f"usb[0] {label}: no node advertises {USB_STICK}; ")

"""KubeVirt feature gates, read as the CR's KubeVirt version reads them (feature_gates.py)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from policies.cluster.device_providers import permission_problems, permission_steps
from policies.cluster.feature_gates import (
    GATE_TABLE,
    TABLE_RELEASES,
    Maturity,
    Release,
    read_gate,
    release_of,
)
from policies.cluster.kinds import KUBEVIRT
from policies.cluster.kubevirt import project_kubevirt, project_vm
from policies.diagnoses.vms import VM_UNSCHEDULABLE
from policies.reference import reference_text
from policies.registry import diagnose_all
from tests.builders import Obj, kubevirt, node, state_of, vm
from webhook.wire.decode import decode_object

ROOT = Path(__file__).resolve().parents[1]
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
DRA = "GPUsWithDRA"


def cr(
    listed: Sequence[str] = (), disabled: Sequence[str] = (), version: str = "", **status: str
) -> Obj:
    obj = kubevirt(feature_gates=listed, disabled_gates=disabled, version=version)
    if status:
        obj["status"] = dict(status)
    return obj


@pytest.mark.parametrize(
    ("version", "listed", "disabled", "gate", "on"),
    [
        # KubeVirt 1.9: IsEnabled
        pytest.param("v1.9.0", (), (), DRA, True, id="1.9 an unlisted Beta gate is on"),
        pytest.param("v1.9.0", (), (DRA,), DRA, False, id="1.9 a disabled Beta gate is off"),
        pytest.param("v1.9.0", (DRA,), (), DRA, True, id="1.9 a listed Beta gate is on"),
        pytest.param(
            "v1.9.0", (DRA,), (DRA,), DRA, True, id="1.9 a gate in both lists reads as listed"
        ),
        pytest.param(
            "v1.9.0", (), (), "HostDevicesWithDRA", True, id="1.9 HostDevicesWithDRA is Beta too"
        ),
        pytest.param(
            "v1.9.0", (), (), "HostDevices", False, id="1.9 HostDevices is still Alpha and off"
        ),
        pytest.param(
            "v1.9.0", ("HostDevices",), (), "HostDevices", True, id="1.9 a listed Alpha gate is on"
        ),
        pytest.param("v1.9.0", (), ("GPU",), "GPU", True, id="1.9 a GA gate cannot be disabled"),
        pytest.param("v1.10.3", (), (), DRA, True, id="a later minor reads as 1.9"),
        # before 1.9: listed or off
        pytest.param("v1.8.2", (), (), DRA, False, id="1.8 an unlisted DRA gate is off"),
        pytest.param("v1.8.2", (DRA,), (), DRA, True, id="1.8 a listed DRA gate is on"),
        pytest.param("v1.8.2", (), (DRA,), DRA, False, id="1.8 a disabled DRA gate is off"),
        pytest.param(
            "v1.8.2", (DRA,), (DRA,), DRA, True, id="1.8 a gate in both lists reads as listed"
        ),
        pytest.param("v1.6.0", (), (), DRA, False, id="1.6 an unlisted DRA gate is off"),
        pytest.param("v1.4.0", (DRA,), (), DRA, True, id="an older minor reads as 1.6"),
        pytest.param("v1.7.0", (), (), "GPU", True, id="1.7 GPU is GA and on unlisted"),
        # no version: before 1.9
        pytest.param("", (), (), DRA, False, id="no version an unlisted DRA gate is off"),
        pytest.param("", (DRA,), (), DRA, True, id="no version a listed gate is on"),
        pytest.param("", (), (), "GPU", True, id="no version GPU is GA"),
        pytest.param("devel", (), (), DRA, False, id="a version that does not parse is unknown"),
        pytest.param("1.9.0-rc.1", (), (), DRA, True, id="a 1.9 release candidate is 1.9"),
        pytest.param("v1.9.0-12-gabcdef", (), (), DRA, True, id="a git-describe build is 1.9"),
        # a gate the table does not know: on only when listed, whatever the version
        pytest.param("v1.9.0", ("Snapshot",), (), "Snapshot", True, id="an unknown gate listed"),
        pytest.param("v1.9.0", (), (), "Snapshot", False, id="an unknown gate unlisted"),
    ],
)
def test_a_gate_reads_as_kubevirts_is_enabled_for_the_crs_version(
    version: str, listed: tuple[str, ...], disabled: tuple[str, ...], gate: str, on: bool
) -> None:
    info = project_kubevirt(cr(listed, disabled, version))
    reading = info.gates.read(gate)
    assert reading.on is on
    assert (reading.listed, reading.disabled) == (gate in listed, gate in disabled)


@pytest.mark.parametrize(
    ("status", "release"),
    [
        pytest.param({"observedKubeVirtVersion": "v1.9.0"}, (1, 9), id="the observed version"),
        pytest.param(
            {"observedKubeVirtVersion": "v1.8.2", "operatorVersion": "v1.9.0"},
            (1, 8),
            id="mid-upgrade the deployed version wins over the operator's",
        ),
        pytest.param({"operatorVersion": "v1.9.1"}, (1, 9), id="else the operator's version"),
        pytest.param(
            {"observedKubeVirtVersion": "", "operatorVersion": "1.9.0"},
            (1, 9),
            id="an empty observed version falls back too",
        ),
        pytest.param({"phase": "Deployed"}, None, id="no version at all"),
    ],
)
def test_the_version_is_the_observed_one_else_the_operators(
    status: dict[str, str], release: Release | None
) -> None:
    assert project_kubevirt(cr(**status)).gates.release == release


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("v1.9.0", (1, 9)),
        ("1.9.0", (1, 9)),
        ("1.9.0-rc.1", (1, 9)),
        ("v1.9.0-12-gabcdef", (1, 9)),
        (" v1.8.4 ", (1, 8)),
        ("v1.10", (1, 10)),
        ("v2", (2, 0)),
        ("", None),
        ("latest", None),
        ("v1.9.x", None),
    ],
)
def test_a_version_text_gives_its_minor(text: str, release: Release | None) -> None:
    assert release_of(text) == release


def test_a_version_of_the_wrong_type_names_its_field() -> None:
    with pytest.raises(ValueError, match=r"^status\.observedKubeVirtVersion: expected a string"):
        project_kubevirt(cr(observedKubeVirtVersion=19))  # type: ignore[arg-type]


def test_a_disabled_gate_that_is_not_a_string_names_its_field() -> None:
    obj = cr(disabled=(DRA,))
    obj["spec"]["configuration"]["developerConfiguration"]["disabledFeatureGates"].append(3)
    with pytest.raises(
        ValueError,
        match=r"^spec\.configuration\.developerConfiguration\.disabledFeatureGates\[1\]: ",
    ):
        project_kubevirt(obj)


def test_the_lists_keep_their_order_and_a_gate_in_both_is_named_once() -> None:
    gates = project_kubevirt(cr(("B", "A", "B", "C"), ("C", "B"))).gates
    assert gates.enabled == ("B", "A", "B", "C")
    assert gates.disabled == ("C", "B")
    assert gates.in_both == ("B", "C")


@pytest.mark.parametrize(
    ("version", "listed", "disabled", "note", "listing"),
    [
        pytest.param("", (), (), True, True, id="unknown, unlisted: 1.9 would read it on"),
        pytest.param("", (), (DRA,), False, True, id="unknown, disabled: off on 1.9 too"),
        pytest.param("v1.8.2", (), (), False, True, id="1.8: no doubt, listing turns it on"),
        pytest.param("v1.9.0", (), (DRA,), False, False, id="1.9: un-disabling is enough"),
    ],
)
def test_what_an_off_reading_tells_the_messages(
    version: str, listed: tuple[str, ...], disabled: tuple[str, ...], note: bool, listing: bool
) -> None:
    reading = read_gate(DRA, listed, disabled, release_of(version))
    assert not reading.on
    assert reading.beta_on_later is note
    assert reading.needs_listing is listing


# --- the table, its documents and its wire form ---------------------------------------------------


def documented_table(text: str) -> dict[str, dict[Release, Maturity]]:
    """The gate rows of a Markdown table whose header names "KubeVirt 1.x" columns."""
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| gate | KubeVirt "))
    columns = [c.strip() for c in lines[header].strip("|").split("|")]
    minors = [
        tuple(int(n) for n in m.group(1).split("."))
        for c in columns
        if (m := re.fullmatch(r"KubeVirt (\d+\.\d+)", c))
    ]
    table: dict[str, dict[Release, Maturity]] = {}
    for line in lines[header + 2 :]:
        if not line.startswith("| `"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        gate = cells[0].strip("`")
        table[gate] = {
            (m[0], m[1]): Maturity(cell) for m, cell in zip(minors, cells[1:], strict=False)
        }
    return table


def as_dicts() -> dict[str, dict[Release, Maturity]]:
    return {gate: dict(by_release) for gate, by_release in GATE_TABLE.items()}


@pytest.mark.parametrize(
    "document",
    [ROOT / "docs" / "feature-gates.md", ROOT / "docs" / "policies.md"],
    ids=["docs/feature-gates.md", "docs/policies.md"],
)
def test_the_documented_gate_table_is_the_one_the_code_reads(document: Path) -> None:
    assert documented_table(document.read_text()) == as_dicts()


def test_the_table_says_what_the_issue_and_the_upstream_code_say() -> None:
    assert TABLE_RELEASES == ((1, 6), (1, 7), (1, 8), (1, 9))
    assert set(GATE_TABLE["GPU"].values()) == {Maturity.GA}
    assert set(GATE_TABLE["HostDevices"].values()) == {Maturity.ALPHA}
    for gate in ("GPUsWithDRA", "HostDevicesWithDRA"):
        assert [GATE_TABLE[gate][r] for r in TABLE_RELEASES] == [Maturity.ALPHA] * 3 + [
            Maturity.BETA
        ]


def test_gpu_guard_policies_prints_the_reading_rules_and_the_table() -> None:
    text = reference_text()
    assert "# KubeVirt feature gates" in text
    assert "a gate listed in `featureGates` is on; one listed in `disabledFeatureGates` is off" in (
        text
    )
    assert "| `GPUsWithDRA` | Alpha | Alpha | Alpha | Beta |" in text


def test_the_gate_fields_survive_pruning_on_the_wire() -> None:
    whole = cr(("HostDevices",), (DRA, "HostDevicesWithDRA"), "v1.9.0")
    pruned = decode_object(KUBEVIRT, orjson.dumps(whole))
    assert project_kubevirt(pruned) == project_kubevirt(whole)
    assert project_kubevirt(pruned).gates.disabled == (DRA, "HostDevicesWithDRA")
    assert project_kubevirt(pruned).gates.release == (1, 9)


# --- HostDevices where device-plugin entries need it ----------------------------------------------


@pytest.mark.parametrize(
    ("kubevirt_cr", "problem", "steps"),
    [
        pytest.param(
            kubevirt([("10de:2204", RTX_3090)], feature_gates=(), version="v1.9.0"),
            "hostDevices need the HostDevices feature gate, which KubeVirt lacks",
            [
                "add HostDevices to spec.configuration.developerConfiguration.featureGates of "
                "KubeVirt kubevirt/kubevirt"
            ],
            id="unlisted on 1.9: HostDevices is Alpha",
        ),
        pytest.param(
            kubevirt(
                [("10de:2204", RTX_3090)],
                feature_gates=(),
                disabled_gates=("HostDevices",),
                version="v1.9.0",
            ),
            "hostDevices need the HostDevices feature gate, which KubeVirt disables",
            [
                "remove HostDevices from spec.configuration.developerConfiguration."
                "disabledFeatureGates of KubeVirt kubevirt/kubevirt",
                "add HostDevices to spec.configuration.developerConfiguration.featureGates of "
                "KubeVirt kubevirt/kubevirt",
            ],
            id="disabled: out of one list, into the other",
        ),
    ],
)
def test_a_host_device_without_its_gate_is_told_how_to_turn_it_on(
    kubevirt_cr: Obj, problem: str, steps: list[str]
) -> None:
    info = project_kubevirt(kubevirt_cr)
    (device,) = project_vm(vm("rhel9", host_devices=[RTX_3090])).devices
    assert permission_problems(device, info) == [problem]
    assert permission_steps(device, info) == steps


def test_the_audits_vm_chain_tells_a_stuck_vm_to_turn_the_gate_on_not_to_permit_it() -> None:
    stuck = vm("rhel9", host_devices=[RTX_3090], unschedulable_since="2026-10-30T06:00:00Z")
    cr_ = kubevirt(
        [("10de:2204", RTX_3090)],
        feature_gates=(),
        disabled_gates=("HostDevices",),
        version="v1.9.0",
    )
    state = state_of(node("tower1", allocatable={RTX_3090: "1"}), stuck, cr_)
    (finding,) = diagnose_all(state, datetime(2026, 10, 30, 12, 0, tzinfo=UTC))[VM_UNSCHEDULABLE]
    assert "which KubeVirt disables" in finding.message
    assert not any(step.startswith("permit ") for step in finding.remediation)
    assert (
        "remove HostDevices from spec.configuration.developerConfiguration.disabledFeatureGates "
        "of KubeVirt kubevirt/kubevirt"
    ) in finding.remediation

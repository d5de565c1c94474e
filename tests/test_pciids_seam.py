"""The machine's pci.ids: how it joins the committed files, and the one seam that finds it
(``$GPU_GUARD_PCI_IDS``, else the usual paths). Every test here points the seam at a file it
brings, or at none: no test reads or edits the machine's own database."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies.cluster.pciids import (
    PciDatabase,
    PciId,
    bundled_database,
    database,
    other_vendors_devices,
)
from policies.state.cluster import ClusterState
from webhook.state import pciids as seam
from webhook.state.feeding import new_state
from webhook.state.pciids import PCI_IDS_ENV, default_database, system_pci_ids

QAT = PciId("8086", "6f54")
QAT_NAME = "Xeon Processor D Family QuickAssist Technology"
INTEL = {"8086": "Intel Corporation"}
#: A small system pci.ids: another vendor's device (with a subsystem line), an NVIDIA device in
#: another spelling than ours, and a device-class section.
SMALL_PCI_IDS = (
    f"8086  Intel Corporation\n\t6f54  {QAT_NAME}\n\t\t8086 0001  a subsystem\n"
    "10de  NVIDIA Corporation\n\t2204  GA102 [GeForce RTX 3090] (system spelling)\n"
    "C 03  Display controller\n\t00  VGA compatible controller\n"
)


def nvidia(device: str) -> PciId:
    return PciId("10de", device)


@pytest.fixture
def small_pci_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The seam pointed at ``SMALL_PCI_IDS``."""
    path = tmp_path / "pci.ids"
    path.write_text(SMALL_PCI_IDS, encoding="utf-8")
    monkeypatch.setenv(PCI_IDS_ENV, str(path))
    return path


def test_a_system_pci_ids_comes_first_but_the_committed_files_fill_its_gaps() -> None:
    db = database(
        "8086  Intel Corp. (system spelling)\n"
        "\t56a0  DG2 [Arc A770 Graphics]\n"
        "10de  NVIDIA Corporation\n"
        "\t2330  GH100 [H100 SXM5 80GB]\n"
        "\t2204  GA102 [GeForce RTX 3090] (system spelling)\n"
    )
    assert db.device_name(nvidia("2204")) == "GA102 [GeForce RTX 3090] (system spelling)"
    assert db.sandbox_resource_name(nvidia("2330")) == "nvidia.com/GH100_H100_SXM5_80GB"
    assert db.device_name(nvidia("2b85")) == "GB202 [GeForce RTX 5090]"  # supplement
    assert db.device_name(nvidia("1eb8")) == "TU104GL [Tesla T4]"  # snapshot
    assert db.vendor_name("8086") == "Intel Corp. (system spelling)"
    assert db.device_name(PciId("8086", "56a0")) is None  # only NVIDIA devices are kept


@pytest.mark.parametrize(
    ("vendors", "system", "expected"),
    [
        pytest.param(
            {}, None, "8086:6f54 (not an NVIDIA device)", id="an unknown vendor is just not NVIDIA"
        ),
        pytest.param(
            INTEL,
            None,
            "8086:6f54 (Intel Corporation, not an NVIDIA device)",
            id="a known vendor is named when no system pci.ids is installed",
        ),
        pytest.param(
            INTEL,
            {},
            "8086:6f54 (Intel Corporation, not an NVIDIA device)",
            id="a known vendor is named when the system pci.ids lacks the device",
        ),
        pytest.param(
            INTEL,
            {QAT: QAT_NAME},
            f"8086:6f54 {QAT_NAME} (not an NVIDIA device)",
            id="the system pci.ids names another vendor's device",
        ),
    ],
)
def test_another_vendors_id_is_described_as_not_nvidia_never_as_missing_from_pci_ids(
    vendors: dict[str, str], system: dict[PciId, str] | None, expected: str
) -> None:
    db = PciDatabase(vendors, {}, other_vendors=None if system is None else lambda: system)
    assert db.describe(QAT) == expected


def test_other_vendors_names_are_loaded_only_when_a_message_needs_one() -> None:
    loads: list[int] = []

    def load() -> dict[PciId, str]:
        loads.append(1)
        return {QAT: QAT_NAME}

    db = PciDatabase({}, {nvidia("2b85"): "GB202 [GeForce RTX 5090]"}, other_vendors=load)
    assert db.sandbox_resource_name(nvidia("2b85")) == "nvidia.com/GB202_GEFORCE_RTX_5090"
    assert db.describe(nvidia("2b85")) == "10de:2b85 GB202 [GeForce RTX 5090]"
    assert db.describe(nvidia("abcd")) == "10de:abcd (not in pci.ids)"
    assert loads == []
    assert db.describe(QAT).startswith(f"8086:6f54 {QAT_NAME}")
    assert loads == [1]


def test_other_vendors_devices_are_their_device_lines_alone() -> None:
    assert other_vendors_devices(SMALL_PCI_IDS) == {QAT: QAT_NAME}  # no NVIDIA, subsystem, class


def test_the_file_the_seam_names_joins_the_database_and_is_read_once(small_pci_ids: Path) -> None:
    db = default_database()
    assert db.device_name(nvidia("2204")) == "GA102 [GeForce RTX 3090] (system spelling)"
    assert db.describe(QAT) == f"8086:6f54 {QAT_NAME} (not an NVIDIA device)"
    assert db.device_name(QAT) is None  # indexes and lookups stay NVIDIA's
    small_pci_ids.unlink()
    assert db.describe(QAT) == f"8086:6f54 {QAT_NAME} (not an NVIDIA device)"
    assert default_database() is db  # a state per command or test costs no second parse


def test_a_state_the_guard_builds_answers_with_the_database_the_seam_finds(
    small_pci_ids: Path,
) -> None:
    assert new_state().pci_database is default_database()


def test_the_domain_state_alone_answers_with_the_committed_files_whatever_the_seam_says(
    small_pci_ids: Path,
) -> None:
    assert ClusterState().pci_database is bundled_database()
    assert ClusterState().pci_database.describe(QAT) == (
        "8086:6f54 (Intel Corporation, not an NVIDIA device)"  # no word of the seam's file
    )


@pytest.mark.parametrize(
    "value",
    ["", "/nonexistent/pci.ids"],
    ids=["set but empty", "naming no file"],
)
def test_the_seam_set_to_nothing_means_the_committed_files_alone(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PCI_IDS_ENV, value)
    db = default_database()
    assert db.describe(QAT) == "8086:6f54 (Intel Corporation, not an NVIDIA device)"
    assert db.device_name(nvidia("2204")) == "GA102 [GeForce RTX 3090]"  # the snapshot's


@pytest.mark.parametrize(
    ("present", "expected"),
    [
        pytest.param(["misc", "hwdata"], "misc", id="the first usual path wins"),
        pytest.param(["hwdata"], "hwdata", id="a later usual path when the first is absent"),
        pytest.param([], None, id="no usual path: no system database"),
    ],
)
def test_unset_the_seam_takes_the_first_usual_path_that_exists(
    present: list[str], expected: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = {name: tmp_path / name / "pci.ids" for name in ("misc", "hwdata")}
    for name in present:
        paths[name].parent.mkdir()
        paths[name].write_text(SMALL_PCI_IDS, encoding="utf-8")
    monkeypatch.setattr(seam, "USUAL_PATHS", (paths["misc"], paths["hwdata"]))
    assert system_pci_ids({}) == (paths[expected] if expected else None)


def test_the_seam_named_wins_over_the_usual_paths(tmp_path: Path) -> None:
    assert system_pci_ids({PCI_IDS_ENV: str(tmp_path / "x")}) == tmp_path / "x"
    assert system_pci_ids({PCI_IDS_ENV: ""}) is None

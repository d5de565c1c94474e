"""PCI id database: selectors, names, sandbox resource names, GFD products, precedence."""

from __future__ import annotations

import pytest

from policies.pciids import (
    NVIDIA_SNAPSHOT,
    SUPPLEMENT,
    PciDatabase,
    PciId,
    bundled_database,
    parse_pci_id,
)

# The ids and names docs/field-guide.md lists under "Hardware inventory".
FIELD_GUIDE_IDS = """\
10de  NVIDIA Corporation
\t1eb8  TU104GL [Tesla T4]
\t20b5  GA100 [A100 PCIe 80GB]
\t2204  GA102 [GeForce RTX 3090]
\t2236  GA102GL [A10]
\t2330  GH100 [H100 SXM5 80GB]
\t2331  GH100 [H100 PCIe]
\t2684  AD102 [GeForce RTX 4090]
\t26b9  AD102GL [L40S]
\t2b85  GB202 [GeForce RTX 5090]
"""

# Shapes the parser and the naming rule must cope with, several from the sandbox device
# plugin's own test (NVIDIA/kubevirt-gpu-device-plugin device_plugin_test.go).
TRICKY_IDS = """\
# comment line
8086  Intel Corporation
\t2331  DH89xxCC Chap Counter
10de  NVIDIA Corporation
\t118a  GK104GL [GRID K520]
\t\t10de 100a  Subsystem line that must not become a device
\t118d  gk104gl [grid k520]
\t118e  gk104.gl [grid/k./520]
\t1eb9  TU104GL
\t1ebe  TU104GL
\t20b1  GA100 [A100 PCIe 40GB]
\t20f1  GA100 [A100 PCIe 40GB]
\t2330  GH100[H100 SXM5 80GB]
\t2331  GH100 [H100 PCIe]
\t9990  X  \t Y
\t9991  Straße [Über GPU]
\t9992  [+++]
\t9993  Plain Name Without Brackets
C 03  Display controller
\t00  VGA compatible controller
\t02  3D controller
"""


def nvidia(device: str) -> PciId:
    return PciId("10de", device)


@pytest.fixture(scope="module")
def field_guide() -> PciDatabase:
    return PciDatabase.from_texts(FIELD_GUIDE_IDS)


@pytest.fixture(scope="module")
def tricky() -> PciDatabase:
    return PciDatabase.from_texts(TRICKY_IDS)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10de:2b85", nvidia("2b85")),
        ("10DE:2B85", nvidia("2b85")),
        ("10De:2b8A", nvidia("2b8a")),
        (" 10de:2b85 ", nvidia("2b85")),
        ("\t10de:2b85\n", nvidia("2b85")),
        ("8086:56a0", PciId("8086", "56a0")),
    ],
)
def test_a_selector_parses_whatever_its_case_and_surrounding_whitespace(
    text: str, expected: PciId
) -> None:
    assert parse_pci_id(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "10de",
        "10de:",
        ":2b85",
        "10de:2b8",
        "10de:2b855",
        "010de:2b85",
        "0x10de:0x2b85",
        "10de-2b85",
        "10de 2b85",
        "10de : 2b85",
        "10de:2b85:00",
        "g0de:2b85",
        "10de:2b85 extra",
        "\uff11\uff10de:2b85",  # full-width digits are not hex
    ],
)
def test_a_malformed_selector_parses_to_none(text: str) -> None:
    assert parse_pci_id(text) is None


def test_a_pci_id_prints_as_vendor_colon_device() -> None:
    assert str(nvidia("2b85")) == "10de:2b85"


def test_pci_ids_sort_by_vendor_then_device() -> None:
    ids = [nvidia("2b85"), PciId("8086", "0001"), nvidia("1eb8")]
    assert sorted(ids) == [nvidia("1eb8"), nvidia("2b85"), PciId("8086", "0001")]


@pytest.mark.parametrize(
    ("vendor", "device"), [("10DE", "2b85"), ("10de", "2B85"), ("10d", "2b85")]
)
def test_a_non_canonical_pci_id_is_refused(vendor: str, device: str) -> None:
    with pytest.raises(ValueError):
        PciId(vendor, device)


@pytest.mark.parametrize(
    ("pci", "expected"),
    [
        (nvidia("2b85"), "10de:2b85 GB202 [GeForce RTX 5090]"),
        (nvidia("1eb8"), "10de:1eb8 TU104GL [Tesla T4]"),
        (nvidia("abcd"), "10de:abcd (not in pci.ids)"),
        (PciId("8086", "56a0"), "8086:56a0 (not an NVIDIA device)"),
    ],
)
def test_describe_gives_the_id_and_its_name_or_says_it_is_unknown(
    field_guide: PciDatabase, pci: PciId, expected: str
) -> None:
    assert field_guide.describe(pci) == expected


def test_device_name_is_the_pci_ids_name_or_none(field_guide: PciDatabase) -> None:
    assert field_guide.device_name(nvidia("2b85")) == "GB202 [GeForce RTX 5090]"
    assert field_guide.device_name(nvidia("abcd")) is None


@pytest.mark.parametrize(
    ("vendor", "expected"),
    [("10de", "NVIDIA Corporation"), ("10DE", "NVIDIA Corporation"), ("8086", None)],
)
def test_vendor_name_resolves_known_vendors(
    field_guide: PciDatabase, vendor: str, expected: str | None
) -> None:
    assert field_guide.vendor_name(vendor) == expected


@pytest.mark.parametrize(
    ("device", "resource"),
    [
        ("2b85", "nvidia.com/GB202_GEFORCE_RTX_5090"),
        ("2204", "nvidia.com/GA102_GEFORCE_RTX_3090"),
        ("2684", "nvidia.com/AD102_GEFORCE_RTX_4090"),
        ("20b5", "nvidia.com/GA100_A100_PCIE_80GB"),
        ("2330", "nvidia.com/GH100_H100_SXM5_80GB"),
        ("2331", "nvidia.com/GH100_H100_PCIE"),
        ("26b9", "nvidia.com/AD102GL_L40S"),
        ("2236", "nvidia.com/GA102GL_A10"),
        ("1eb8", "nvidia.com/TU104GL_TESLA_T4"),
    ],
)
def test_the_sandbox_resource_name_of_each_field_guide_gpu_round_trips(
    field_guide: PciDatabase, device: str, resource: str
) -> None:
    assert field_guide.sandbox_resource_name(nvidia(device)) == resource
    assert field_guide.ids_for_resource_name(resource) == {nvidia(device)}


@pytest.mark.parametrize(
    ("device", "resource"),
    [
        ("118a", "nvidia.com/GK104GL_GRID_K520"),  # brackets dropped, spaces to "_"
        ("118d", "nvidia.com/GK104GL_GRID_K520"),  # upper-cased
        ("118e", "nvidia.com/GK104_GL_GRID_K__520"),  # "/" and "." to "_", never collapsed
        ("2330", "nvidia.com/GH100H100_SXM5_80GB"),  # no space before "[": nothing inserted
        ("9990", "nvidia.com/X_Y"),  # one "_" per whitespace run
        ("9991", "nvidia.com/STRAE_BER_GPU"),  # non-ASCII letters dropped, not transliterated
        ("9992", "nvidia.com/9992"),  # nothing survives: the plugin falls back to the raw id
        ("9993", "nvidia.com/PLAIN_NAME_WITHOUT_BRACKETS"),
    ],
)
def test_the_sandbox_resource_name_follows_the_plugins_rule_to_the_letter(
    tricky: PciDatabase, device: str, resource: str
) -> None:
    assert tricky.sandbox_resource_name(nvidia(device)) == resource


def test_an_unknown_id_gets_the_raw_device_id_as_resource_name(field_guide: PciDatabase) -> None:
    assert field_guide.sandbox_resource_name(nvidia("abcd")) == "nvidia.com/abcd"


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        ("nvidia.com/abcd", {nvidia("abcd")}),  # unknown id, raw name
        ("nvidia.com/2b85", {nvidia("2b85")}),  # known id, but the plugin's pci.ids lacked it
        ("nvidia.com/9992", {nvidia("9992")}),  # name sanitised to nothing
        ("nvidia.com/TU104GL", {nvidia("1eb9"), nvidia("1ebe")}),  # one name, several ids
        ("nvidia.com/GK104GL_GRID_K520", {nvidia("118a"), nvidia("118d")}),
    ],
)
def test_a_resource_name_maps_back_to_every_id_it_can_stand_for(
    tricky: PciDatabase, resource: str, expected: set[PciId]
) -> None:
    assert tricky.ids_for_resource_name(resource) == expected


@pytest.mark.parametrize(
    "resource",
    [
        "nvidia.com/TU104GL_Tesla_T4",  # KubeVirt docs' spelling; resource names are case-sensitive
        "nvidia.com/tu104gl_tesla_t4",
        "nvidia.com/2B85",  # sysfs ids are lower-case, so the plugin never registers this
        "nvidia.com/2b8",
        "nvidia.com/gpu",
        "nvidia.com/",
        "example.com/TU104GL_TESLA_T4",
        "TU104GL_TESLA_T4",
        "",
    ],
)
def test_a_resource_name_that_no_device_can_have_maps_to_nothing(
    field_guide: PciDatabase, resource: str
) -> None:
    assert field_guide.ids_for_resource_name(resource) == frozenset()


def test_another_vendors_device_never_answers_for_an_nvidia_resource_name(
    tricky: PciDatabase,
) -> None:
    assert tricky.device_name(PciId("8086", "2331")) == "DH89xxCC Chap Counter"
    assert tricky.ids_for_resource_name("nvidia.com/DH89XXCC_CHAP_COUNTER") == frozenset()
    assert tricky.ids_for_resource_name("nvidia.com/GH100_H100_PCIE") == {nvidia("2331")}


def test_subsystem_and_device_class_lines_are_not_devices(tricky: PciDatabase) -> None:
    assert tricky.device_name(nvidia("100a")) is None
    assert tricky.device_name(nvidia("118a")) == "GK104GL [GRID K520]"
    assert tricky.ids_for_resource_name("nvidia.com/VGA_COMPATIBLE_CONTROLLER") == frozenset()


@pytest.mark.parametrize(
    ("product", "expected"),
    [
        ("NVIDIA-GeForce-RTX-5090", {"2b85"}),
        ("NVIDIA-GeForce-RTX-3090", {"2204"}),
        ("NVIDIA-GeForce-RTX-4090-SHARED", {"2684"}),
        ("Tesla-T4", {"1eb8"}),  # older NVML names carry no "NVIDIA"
        ("Tesla-T4-SHARED", {"1eb8"}),
        ("NVIDIA-A100-PCIE-80GB", {"20b5"}),
        ("NVIDIA-A100-PCIE-80GB-SHARED", {"20b5"}),
        ("NVIDIA-A100-PCIE-80GB-MIG-1g.10gb", {"20b5"}),
        ("NVIDIA-A100-PCIE-80GB-MIG-1g.10gb-SHARED", {"20b5"}),
        ("NVIDIA-A100-80GB-PCIe", {"20b5"}),  # NVML's word order differs from pci.ids
        ("nvidia-a100-pcie-80gb", {"20b5"}),
        ("NVIDIA-H100-PCIe", {"2331"}),
        ("NVIDIA-H100-SXM5-80GB", {"2330"}),
        ("NVIDIA-L40S", {"26b9"}),
        ("NVIDIA-A10", {"2236"}),
        (" NVIDIA-A10 ", {"2236"}),
    ],
)
def test_a_gfd_product_maps_to_the_ids_with_that_marketing_name(
    field_guide: PciDatabase, product: str, expected: set[str]
) -> None:
    assert field_guide.ids_for_gfd_product(product) == {nvidia(d) for d in expected}


@pytest.mark.parametrize(
    "product",
    [
        "NVIDIA-H100-80GB-HBM3",  # NVML's name for 2330 shares too few words with pci.ids
        "NVIDIA-A1",
        "NVIDIA-GeForce-RTX-5090-Ti",
        "NVIDIA",
        "SHARED",
        "-MIG-1g.10gb",
        "",
    ],
)
def test_an_unknown_gfd_product_maps_to_nothing(field_guide: PciDatabase, product: str) -> None:
    assert field_guide.ids_for_gfd_product(product) == frozenset()


def test_a_gfd_product_may_stand_for_several_ids(tricky: PciDatabase) -> None:
    assert tricky.ids_for_gfd_product("NVIDIA-A100-PCIE-40GB") == {nvidia("20b1"), nvidia("20f1")}


def test_a_gfd_product_matches_a_whole_name_when_there_are_no_brackets(
    tricky: PciDatabase,
) -> None:
    assert tricky.ids_for_gfd_product("Plain-Name-Without-Brackets") == {nvidia("9993")}


OLD = """\
10de  NVIDIA Corporation
\t2330  GH100[H100 SXM5 80GB]
\t2331  GH100 [H100 PCIe]
"""
NEW = """\
10de  NVIDIA Corp. (newer spelling)
\t2330  GH100 [H100 SXM5 80GB]
\t2b85  GB202 [GeForce RTX 5090]
"""


@pytest.mark.parametrize(
    ("texts", "pci", "name"),
    [
        ((OLD, NEW), nvidia("2330"), "GH100[H100 SXM5 80GB]"),  # earlier text wins
        ((NEW, OLD), nvidia("2330"), "GH100 [H100 SXM5 80GB]"),
        ((OLD, NEW), nvidia("2b85"), "GB202 [GeForce RTX 5090]"),  # later text fills the gap
        ((NEW, OLD), nvidia("2331"), "GH100 [H100 PCIe]"),
    ],
)
def test_earlier_texts_take_precedence_and_later_ones_fill_gaps(
    texts: tuple[str, ...], pci: PciId, name: str
) -> None:
    assert PciDatabase.from_texts(*texts).device_name(pci) == name


def test_the_earliest_text_names_the_vendor_too() -> None:
    assert PciDatabase.from_texts(OLD, NEW).vendor_name("10de") == "NVIDIA Corporation"


def test_the_sandbox_resource_name_comes_from_the_winning_text_only() -> None:
    db = PciDatabase.from_texts(OLD, NEW)
    assert db.sandbox_resource_name(nvidia("2330")) == "nvidia.com/GH100H100_SXM5_80GB"


@pytest.mark.parametrize(
    "resource", ["nvidia.com/GH100H100_SXM5_80GB", "nvidia.com/GH100_H100_SXM5_80GB"]
)
def test_reverse_lookups_know_every_spelling_any_text_gives(resource: str) -> None:
    assert PciDatabase.from_texts(OLD, NEW).ids_for_resource_name(resource) == {nvidia("2330")}


def test_no_texts_make_an_empty_database() -> None:
    db = PciDatabase.from_texts()
    assert db.device_name(nvidia("2b85")) is None
    assert db.sandbox_resource_name(nvidia("2b85")) == "nvidia.com/2b85"
    assert db.ids_for_gfd_product("NVIDIA-GeForce-RTX-5090") == frozenset()


def test_the_committed_debian_snapshot_lacks_the_rtx_5090() -> None:
    snapshot = PciDatabase.from_texts(NVIDIA_SNAPSHOT.read_text(encoding="utf-8"))
    assert snapshot.device_name(nvidia("2204")) == "GA102 [GeForce RTX 3090]"
    assert snapshot.device_name(nvidia("2b85")) is None


def test_the_committed_snapshot_holds_only_nvidia_device_lines() -> None:
    lines = NVIDIA_SNAPSHOT.read_text(encoding="utf-8").splitlines()
    assert not [line for line in lines if line.startswith("\t\t")]
    vendor = None
    for line in lines:
        if line and not line.startswith(("#", "\t")):
            vendor = line[:4]
        elif line.startswith("\t"):
            assert vendor == "10de", line


@pytest.mark.parametrize(
    ("device", "name", "resource"),
    [
        ("2b85", "GB202 [GeForce RTX 5090]", "nvidia.com/GB202_GEFORCE_RTX_5090"),
        ("26b9", "AD102GL [L40S]", "nvidia.com/AD102GL_L40S"),
        ("2204", "GA102 [GeForce RTX 3090]", "nvidia.com/GA102_GEFORCE_RTX_3090"),
        ("1eb8", "TU104GL [Tesla T4]", "nvidia.com/TU104GL_TESLA_T4"),
    ],
)
def test_the_committed_files_know_gpus_newer_than_the_debian_snapshot(
    device: str, name: str, resource: str
) -> None:
    db = bundled_database()
    assert db.device_name(nvidia(device)) == name
    assert db.sandbox_resource_name(nvidia(device)) == resource
    assert nvidia(device) in db.ids_for_resource_name(resource)


def test_the_committed_files_map_the_rtx_5090_gfd_product() -> None:
    assert nvidia("2b85") in bundled_database().ids_for_gfd_product("NVIDIA-GeForce-RTX-5090")


@pytest.mark.parametrize(
    "resource", ["nvidia.com/GH100H100_SXM5_80GB", "nvidia.com/GH100_H100_SXM5_80GB"]
)
def test_the_committed_files_know_both_spellings_of_the_h100_sxm5(resource: str) -> None:
    assert nvidia("2330") in bundled_database().ids_for_resource_name(resource)


def test_the_committed_files_still_name_other_vendors() -> None:
    assert bundled_database().vendor_name("8086") == "Intel Corporation"


def test_the_committed_database_is_built_once() -> None:
    assert bundled_database() is bundled_database()


def test_every_supplement_id_is_nvidia_and_named() -> None:
    supplement = PciDatabase.from_texts(SUPPLEMENT.read_text(encoding="utf-8"))
    lines = [
        ln for ln in SUPPLEMENT.read_text(encoding="utf-8").splitlines() if ln.startswith("\t")
    ]
    assert lines
    for line in lines:
        pci = nvidia(line[1:5])
        assert supplement.device_name(pci) == line[5:].strip()

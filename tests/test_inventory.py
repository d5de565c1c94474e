"""``gpu-guard inventory``: one row per GPU node on the home lab and on its DRA form, in each
output format; bad input exits 2."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import orjson
import pytest

from policies.cluster.pciids import bundled_database
from policies.prediction.inventory import DEVICE_CLASS_PREFIX, Inventory, InventoryRow, inventory
from tests.builders import Obj, cordoned, dead_node, node, state_of, tainted
from webhook.cli import main
from webhook.render.inventory import render_inventory_markdown, render_inventory_table
from webhook.state.files import load_state

ROOT = Path(__file__).resolve().parents[1]
HOMELAB = str(ROOT / "examples" / "homelab" / "cluster.yaml")
DRA = str(ROOT / "examples" / "dra" / "cluster.yaml")
NOW_TEXT = "2026-10-30T12:00:00Z"
NOW = datetime(2026, 10, 30, 12, 0, tzinfo=UTC)
RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"


@cache
def rows_of(path: str) -> dict[str, InventoryRow]:
    """Cached for the module, so on the committed pci.ids: tests read device names in it."""
    state = load_state([path], bundled_database())
    return {row.node: row for row in inventory(state, NOW).nodes}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- the model ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "state, node, health, since, mode",
    [
        (HOMELAB, "omen1", "Ready", None, "container"),
        (
            HOMELAB,
            "omen2",
            "NotReady",
            datetime(2026, 7, 10, 3, 12, 41, tzinfo=UTC),
            "vm-passthrough",
        ),
        (HOMELAB, "tower1", "Ready", None, "vm-passthrough"),
        (DRA, "omen2", "NotReady", datetime(2026, 7, 10, 3, 12, 41, tzinfo=UTC), "vm-passthrough"),
        (DRA, "omen3", "Ready", None, "container"),
    ],
)
def test_each_gpu_node_says_its_health_since_when_and_its_mode(
    state: str, node: str, health: str, since: datetime | None, mode: str
) -> None:
    row = rows_of(state)[node]
    assert (row.health, row.since, row.mode) == (health, since, mode)


def test_only_gpu_nodes_have_a_row() -> None:
    assert set(rows_of(HOMELAB)) == {"omen1", "omen2", "omen3", "tower1", "tower2", "tower3"}
    assert set(rows_of(DRA)) == {"omen1", "omen2", "omen3", "tower1", "dgx1"}


@pytest.mark.parametrize(
    "state, node, pci, model, source",
    [
        (HOMELAB, "omen2", "10de:2b85", "GB202 [GeForce RTX 5090]", "allocatable"),
        (HOMELAB, "omen1", "10de:2204", "GA102 [GeForce RTX 3090]", "GFD gpu.product"),
        (HOMELAB, "tower1", "10de:2204", "GA102 [GeForce RTX 3090]", "NFD label"),
        (DRA, "omen2", "10de:2b85", "GB202 [GeForce RTX 5090]", "DRA ResourceSlice"),
        (DRA, "omen3", "10de:2684", "AD102 [GeForce RTX 4090]", "DRA ResourceSlice"),
    ],
)
def test_gpus_are_named_by_model_and_pci_id_with_each_source_that_shows_them(
    state: str, node: str, pci: str, model: str, source: str
) -> None:
    gpus = {g.pci: g for g in rows_of(state)[node].gpus}
    assert gpus[pci].name == model
    assert source in gpus[pci].sources


def test_allocatable_lists_device_plugin_resources_and_dra_devices() -> None:
    assert rows_of(HOMELAB)["omen2"].allocatable == ((RTX_5090, 1),)
    assert rows_of(HOMELAB)["omen1"].allocatable == (("nvidia.com/gpu", 4),)
    tower1 = rows_of(DRA)["tower1"]
    assert tower1.allocatable == ()
    assert [d.split(" ")[0] for d in tower1.dra_devices] == ["gpu-vfio-0", "gpu-vfio-1"]


def test_the_users_are_the_gpu_pods_the_running_vmis_and_the_allocated_claims() -> None:
    omen1 = rows_of(HOMELAB)["omen1"]
    assert omen1.pods == (
        "ml/jupyter-alice (nvidia.com/gpu: 1)",
        "ml/train-llama-0 (nvidia.com/gpu: 1)",
    )
    tower1 = rows_of(HOMELAB)["tower1"]
    assert [(v.vmi, v.devices) for v in tower1.vmis] == [("vms/win11-gaming", (RTX_3090,))]
    dra_tower1 = rows_of(DRA)["tower1"]
    assert [(c.devices, c.pods) for c in dra_tower1.claims] == [
        (("gpu-vfio-0",), ("vms/virt-launcher-win11-gaming-x7k2p",))
    ]


def test_a_claim_its_pod_already_names_is_said_once_in_the_users() -> None:
    omen1 = rows_of(DRA)["omen1"]
    assert [c.claim for c in omen1.claims] == ["ml/train-llama-gpu"]
    assert omen1.in_use == ("ml/train-llama-0 (claim ml/train-llama-gpu: gpu-0)",)


def test_the_dead_node_is_named_by_the_vms_that_wait_for_it() -> None:
    assert rows_of(HOMELAB)["omen2"].vms_waiting == ("vms/gpu-fedora", "vms/rhel9-gpu-vm")


@pytest.mark.parametrize(
    "state, node, sole",
    [
        (HOMELAB, "omen1", ("nvidia.com/gpu",)),  # omen3, tower2 and tower3 are NotReady
        (HOMELAB, "tower1", (RTX_3090,)),
        (HOMELAB, "omen2", ()),  # the 5090's only provider, but not a healthy one
        (DRA, "omen1", ()),  # omen3 provides nvidia.com/gpu and gpu.nvidia.com too
        (DRA, "tower1", (DEVICE_CLASS_PREFIX + "vfio.gpu.nvidia.com",)),  # omen2 is NotReady
    ],
)
def test_the_resources_a_node_alone_provides_healthily_are_named(
    state: str, node: str, sole: tuple[str, ...]
) -> None:
    assert rows_of(state)[node].sole_provider == sole


def gpu_host(name: str, **kwargs: Any) -> Obj:
    return node(name, allocatable={"nvidia.com/gpu": "2"}, **kwargs)


@pytest.mark.parametrize(
    "second, sole",
    [
        (None, ("nvidia.com/gpu",)),
        (gpu_host("b"), ()),
        (dead_node("b", allocatable={"nvidia.com/gpu": "2"}), ("nvidia.com/gpu",)),
        (cordoned(gpu_host("b")), ("nvidia.com/gpu",)),
        (tainted(gpu_host("b"), "node.kubernetes.io/not-ready", "NoExecute"), ("nvidia.com/gpu",)),
    ],
    ids=["alone", "a Ready second", "a NotReady second", "a cordoned second", "a tainted second"],
)
def test_a_node_is_sole_provider_unless_a_second_healthy_one_exists(
    second: Obj | None, sole: tuple[str, ...]
) -> None:
    objects = [gpu_host("a")] + ([second] if second is not None else [])
    rows = {row.node: row for row in inventory(state_of(*objects), NOW).nodes}
    assert rows["a"].sole_provider == sole


# --- outputs --------------------------------------------------------------------------------------


def test_json_carries_each_node_with_its_duration_measured_to_now() -> None:
    data: dict[str, Any] = inventory(load_state([HOMELAB]), NOW).to_json()
    assert data["now"] == NOW_TEXT
    omen2 = next(n for n in data["nodes"] if n["node"] == "omen2")
    assert omen2["since"] == "2026-07-10T03:12:41Z"
    assert omen2["duration"] == "112 days"
    assert omen2["gpus"][0]["pci"] == "10de:2b85"
    assert omen2["allocatable"] == {RTX_5090: 1}
    assert omen2["vmsWaiting"] == ["vms/gpu-fedora", "vms/rhel9-gpu-vm"]


@pytest.mark.usefixtures("committed_pci_ids")
def test_the_table_has_an_overview_line_per_node_then_its_details() -> None:
    text = render_inventory_table(inventory(load_state([HOMELAB]), NOW), width=100)
    lines = text.splitlines()
    assert lines[0] == "gpu-guard inventory at 2026-10-30T12:00:00Z: 6 GPU nodes, 2 Ready"
    overview = next(line for line in lines if line.startswith(" omen2 "))
    assert overview.split()[:5] == ["omen2", "NotReady", "112d", "8h", "vm-passthrough"]
    assert "10de:2b85 GB202 [GeForce RTX 5090]" in overview
    block = lines[lines.index("omen2") :]
    assert block[2].split() == ["health", "NotReady", "for", "112d", "8h"]
    assert "vm vms/gpu-fedora waits for it" in "\n".join(block[:10])
    assert all(len(line) <= 100 for line in lines)


@pytest.mark.usefixtures("committed_pci_ids")
def test_the_markdown_is_a_github_table_with_one_row_per_node() -> None:
    report: Inventory = inventory(load_state([DRA]), NOW)
    lines = render_inventory_markdown(report).splitlines()
    rows = [
        line for line in lines if line.startswith("| ") and not line.startswith(("| node", "| ---"))
    ]
    assert len(rows) == len(report.nodes)
    header = next(line for line in lines if line.startswith("| node"))
    assert all(row.count(" | ") == header.count(" | ") for row in rows)
    tower1 = next(row for row in rows if row.startswith("| tower1<br>vm-passthrough |"))
    assert "gpu-vfio-0 (vfio, NVIDIA GeForce RTX 3090)<br>" in tower1
    assert "\\[GeForce RTX 3090\\]" in tower1  # brackets escaped: no link syntax on GitHub


@pytest.mark.parametrize("output", ["table", "json", "markdown"])
def test_each_output_format_exits_0_and_names_the_dead_node(
    capsys: pytest.CaptureFixture[str], output: str
) -> None:
    code, out, _ = run(capsys, "inventory", "--state", HOMELAB, "--now", NOW_TEXT, "-o", output)
    assert code == 0
    assert "omen2" in out
    if output == "json":
        assert [n["node"] for n in orjson.loads(out)["nodes"]][1] == "omen2"


@pytest.mark.parametrize(
    "argv",
    [
        ["inventory", "--state", HOMELAB, "-o", "yaml"],
        ["inventory", "--frobnicate"],
    ],
    ids=["an output it does not have", "an unknown flag"],
)
def test_a_bad_flag_exits_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--now", "yesterday"], "--now"),
        (["--now", "2026-01-01T00:00:00Z"], "earlier than the state's newest timestamp"),
    ],
)
def test_a_bad_now_exits_2_in_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    code, out, err = run(capsys, "inventory", "--state", HOMELAB, *argv)
    assert (code, out) == (2, "")
    assert said in err


def test_a_missing_state_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "inventory", "--state", str(tmp_path / "absent.yaml"))
    assert code == 2
    assert err.startswith("gpu-guard: ")


def test_durations_follow_now() -> None:
    later = inventory(load_state([HOMELAB]), NOW + timedelta(days=10)).to_json()
    omen2 = next(n for n in later["nodes"] if n["node"] == "omen2")
    assert omen2["duration"] == "122 days"


# --- vGPU nodes ------------------------------------------------------------------------------

A10_12Q = "nvidia.com/NVIDIA_A10-12Q"


def vgpu_rows(*objects: Obj) -> dict[str, InventoryRow]:
    return {row.node: row for row in inventory(state_of(*objects), NOW).nodes}


@pytest.mark.parametrize(
    ("labels", "allocatable", "config", "state", "mdevs"),
    [
        pytest.param(
            {"nvidia.com/vgpu.config": "A10-12Q", "nvidia.com/vgpu.config.state": "success"},
            {A10_12Q: "2"},
            "A10-12Q",
            "success",
            ((A10_12Q, 2),),
            id="a profile applied",
        ),
        pytest.param(
            {"nvidia.com/vgpu.config": "A10-4Q", "nvidia.com/vgpu.config.state": "failed"},
            {A10_12Q: "1"},
            "A10-4Q",
            "failed",
            ((A10_12Q, 1),),
            id="a profile that failed, with what is left",
        ),
        pytest.param({}, {}, None, "", (), id="no profile label: the default applies"),
    ],
)
def test_a_vgpu_node_shows_its_profile_its_state_label_and_its_mdev_resources(
    labels: dict[str, str],
    allocatable: dict[str, str],
    config: str | None,
    state: str,
    mdevs: tuple[tuple[str, int], ...],
) -> None:
    vgpu = node(
        "gpu-a10-1",
        labels={
            "nvidia.com/gpu.workload.config": "vm-vgpu",
            "nvidia.com/gpu.present": "true",
            **labels,
        },
        allocatable=allocatable,
    )
    row = vgpu_rows(vgpu)["gpu-a10-1"]
    assert row.vgpu is not None
    assert (row.vgpu.config, row.vgpu.state, row.vgpu.mdevs) == (config, state, mdevs)
    assert row.to_json(NOW)["vgpu"] == {"config": config, "state": state, "mdevs": dict(mdevs)}


def test_the_vgpu_profile_reads_in_the_table_and_the_markdown() -> None:
    vgpu = node(
        "gpu-a10-1",
        labels={
            "nvidia.com/gpu.workload.config": "vm-vgpu",
            "nvidia.com/vgpu.config": "A10-12Q",
            "nvidia.com/vgpu.config.state": "success",
        },
        allocatable={A10_12Q: "2"},
    )
    nodes = inventory(state_of(vgpu), NOW)
    table = render_inventory_table(nodes)
    assert "vGPU                      profile A10-12Q (success)\n" in table
    assert f"                          {A10_12Q}: 2\n" in table
    markdown = render_inventory_markdown(nodes)
    assert "| gpu-a10-1<br>vm-vgpu<br>vGPU profile A10-12Q (success)<br>" in markdown


def test_nodes_of_other_modes_carry_no_vgpu_section() -> None:
    for path in (HOMELAB, DRA):
        for row in rows_of(path).values():
            assert row.vgpu is None
            assert "vgpu" not in row.to_json(NOW)

"""``gpu-guard inventory -o table|markdown``: one row per GPU node (JSON is the model's own)."""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from policies.prediction.inventory import Inventory, InventoryRow
from policies.vocabulary.text import heading_time, plural, short_duration
from webhook.render.markdown import md_row, md_text
from webhook.render.table import buffered_console

#: The Markdown table's columns, as ``_columns`` fills them.
HEADERS = ("node / mode", "health", "GPUs", "allocatable", "in use by", "sole healthy provider of")


def _health(row: InventoryRow, inventory: Inventory) -> list[str]:
    """ "NotReady for 112d 8h", "since 2026-07-10", "Kubelet stopped posting node status." """
    lines = [", ".join(p for p in row.problems if not p.startswith("tainted ")) or row.health]
    if row.since is not None:
        lines[0] += f" for {short_duration(inventory.now - row.since)}"
        lines.append(f"since {row.since.date().isoformat()}")
    return lines + ([row.reason] if row.reason else [])


def _gpus(row: InventoryRow) -> list[str]:
    return [f"{g.describe()} ({', '.join(g.sources)})" for g in row.gpus]


def _allocatable(row: InventoryRow) -> list[str]:
    dra = [f"DRA {d}" for d in row.dra_devices] + [f"counters {c}" for c in row.counters]
    return [f"{r}: {n}" for r, n in row.allocatable] + dra


def _users(row: InventoryRow) -> list[str]:
    waiting = [f"vm {vm} waits for it" for vm in row.vms_waiting]
    return list(row.in_use) + waiting


def _vgpu(row: InventoryRow) -> list[str]:
    """ "vGPU profile A10-12Q (success)", "nvidia.com/NVIDIA_A10-12Q: 2" """
    if row.vgpu is None:
        return []
    head, *mdevs = row.vgpu.describe()
    return [f"vGPU {head}", *mdevs]


def _columns(row: InventoryRow, inventory: Inventory) -> list[list[str]]:
    """Each cell's facts, one a line: node and mode, health, GPUs, allocatable, users, sole."""
    return [
        [row.node, row.mode, *(_vgpu(row))],
        _health(row, inventory),
        _gpus(row),
        _allocatable(row),
        _users(row),
        list(row.sole_provider),
    ]


def _summary(inventory: Inventory) -> str:
    healthy = sum(1 for row in inventory.nodes if row.health == "Ready")
    return (
        f"gpu-guard inventory at {heading_time(inventory.now)}: "
        f"{plural(len(inventory.nodes), 'GPU node')}, {healthy} Ready"
    )


def _overview(inventory: Inventory) -> Table:
    """One line a node: the facts one looks at first."""
    table = Table(box=box.SIMPLE_HEAD, expand=False, pad_edge=False)
    for header in ("NODE", "HEALTH", "FOR", "MODE", "GPUS", "USERS", "SOLE"):
        table.add_column(header, overflow="fold", no_wrap=header in ("FOR", "USERS", "SOLE"))
    for row in inventory.nodes:
        age = short_duration(inventory.now - row.since) if row.since is not None else ""
        style = "green" if row.health == "Ready" else "red"
        models = ", ".join(g.describe() for g in row.gpus) or ", ".join(row.dra_devices)
        table.add_row(
            row.node,
            Text(row.health, style=style),
            age,
            row.mode,
            models,
            str(len(row.in_use)) if row.in_use else "",
            str(len(row.sole_provider)) if row.sole_provider else "",
        )
    return table


_LABELS = ("health", "GPUs", "allocatable", "in use by", "sole healthy provider of")


def _details(row: InventoryRow, inventory: Inventory) -> Table:
    """Everything about one node, a fact a line under its label."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, style="bold", min_width=len(_LABELS[-1]))
    grid.add_column(overflow="fold")
    columns = _columns(row, inventory)[1:]  # the node and its mode head the block
    grid.add_row(Text(row.node, style="bold"), "")
    grid.add_row("mode", row.mode)
    if row.vgpu is not None:
        grid.add_row("vGPU", "\n".join(row.vgpu.describe()))
    for label, lines in zip(_LABELS, columns, strict=True):
        if lines:
            grid.add_row(label, "\n".join(lines))
    return grid


def render_inventory_table(
    inventory: Inventory, width: int = 100, color: bool = False, encoding: str = "utf-8"
) -> str:
    """``-o table``: an overview line a node, then each node's details; no colour unless
    ``color``."""
    console, buffer = buffered_console(width, color, encoding)
    console.print(Text(_summary(inventory), style="bold"))
    if inventory.nodes:
        console.print()
        console.print(_overview(inventory))
    for row in inventory.nodes:
        console.print()
        console.print(_details(row, inventory))
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())


def render_inventory_markdown(inventory: Inventory) -> str:
    """``-o markdown``: a GitHub table; several facts in a cell are separated by <br>."""
    out = [f"# {_summary(inventory)}", ""]
    if inventory.nodes:
        out += [md_row(list(HEADERS)), md_row(["---"] * len(HEADERS))]
        for row in inventory.nodes:
            cells = [
                "<br>".join(md_text(item) for item in items) for items in _columns(row, inventory)
            ]
            out.append(md_row(cells))
    return "\n".join(out) + "\n"

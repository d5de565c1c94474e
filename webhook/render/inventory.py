"""``gpu-guard inventory -o table|markdown``: one row per GPU node (JSON is the model's own)."""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from policies.inventory import Inventory, InventoryRow
from policies.text import heading_time, plural, short_duration
from webhook.render.markdown import _md, _row
from webhook.render.table import _console

HEADERS = ("NODE", "HEALTH", "MODE", "GPUS", "ALLOCATABLE", "IN USE BY", "ONLY HEALTHY PROVIDER OF")


def _health(row: InventoryRow, inventory: Inventory) -> str:
    """ "Ready", or "NotReady for 112d 8h (since 2026-07-10): Kubelet stopped posting ..." """
    text = ", ".join(p for p in row.problems if not p.startswith("tainted ")) or row.health
    if row.since is not None:
        age = short_duration(inventory.now - row.since)
        text += f" for {age} (since {row.since.date().isoformat()})"
    return text + (f": {row.reason}" if row.reason else "")


def _gpus(row: InventoryRow) -> list[str]:
    return [f"{g.describe()} ({', '.join(g.sources)})" for g in row.gpus]


def _allocatable(row: InventoryRow) -> list[str]:
    return [f"{r}: {n}" for r, n in row.allocatable] + [f"DRA {d}" for d in row.dra_devices]


def _users(row: InventoryRow) -> list[str]:
    waiting = [f"waiting for it: vm {vm}" for vm in row.vms_waiting]
    return list(row.in_use) + waiting


def _head(row: InventoryRow, inventory: Inventory) -> tuple[str, str, str]:
    """The one-line cells: node, health, mode."""
    return row.node, _health(row, inventory), row.mode


def _lists(row: InventoryRow) -> list[list[str]]:
    """The cells with one fact a line: GPUs, allocatable, users, sole-provider resources."""
    return [_gpus(row), _allocatable(row), _users(row), list(row.sole_provider)]


def _summary(inventory: Inventory) -> str:
    healthy = sum(1 for row in inventory.nodes if row.health == "Ready")
    return (
        f"gpu-guard inventory at {heading_time(inventory.now)}: "
        f"{plural(len(inventory.nodes), 'GPU node')}, {healthy} Ready"
    )


def render_inventory_table(
    inventory: Inventory, width: int = 100, color: bool = False, encoding: str = "utf-8"
) -> str:
    """``-o table``: rich, one line per fact in a cell, no colour unless ``color``."""
    console, buffer = _console(width, color, encoding)
    console.print(Text(_summary(inventory), style="bold"))
    if inventory.nodes:
        table = Table(box=box.SIMPLE_HEAD, expand=False, pad_edge=False, show_lines=True)
        for header in HEADERS:
            table.add_column(header, overflow="fold")
        for row in inventory.nodes:
            node, health, mode = _head(row, inventory)
            style = "green" if row.health == "Ready" else "red"
            cells = ("\n".join(items) for items in _lists(row))
            table.add_row(node, Text(health, style=style), mode, *cells)
        console.print()
        console.print(table)
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())


def render_inventory_markdown(inventory: Inventory) -> str:
    """``-o markdown``: a GitHub table; several facts in a cell are separated by <br>."""
    out = [f"# {_summary(inventory)}", ""]
    if inventory.nodes:
        out += [_row([h.lower() for h in HEADERS]), _row(["---"] * len(HEADERS))]
        for row in inventory.nodes:
            cells = [_md(cell) for cell in _head(row, inventory)]
            cells += ["<br>".join(_md(item) for item in items) for items in _lists(row)]
            out.append(_row(cells))
    return "\n".join(out) + "\n"

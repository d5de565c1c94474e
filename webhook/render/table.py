"""``gpu-guard audit -o table``: rich overview tables and one block per finding."""

from __future__ import annotations

import io
from datetime import datetime

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from policies.vocabulary.audit import Link
from policies.vocabulary.text import short_duration
from policies.vocabulary.verdicts import Action, Severity
from webhook.audit.report import AuditFinding, AuditReport
from webhook.render.plans import Plan, plans
from webhook.render.text import subject_line, summary_line

_ACTION_STYLE = {Action.DENY: "bold red", Action.WARN: "yellow", Action.AUDIT: "cyan"}
_SEVERITY_STYLE = {
    Severity.CRITICAL: "bold red",
    Severity.HIGH: "red",
    Severity.MEDIUM: "yellow",
    Severity.LOW: "cyan",
    Severity.INFO: "dim",
}


class _Buffer(io.StringIO):
    """A string buffer that tells rich which encoding the real output has (box characters)."""

    def __init__(self, encoding: str) -> None:
        super().__init__()
        self._encoding = encoding

    @property
    def encoding(self) -> str:  # type: ignore[override]  # read-only in io, writable in typeshed
        return self._encoding


def buffered_console(width: int, color: bool, encoding: str) -> tuple[Console, _Buffer]:
    buffer = _Buffer(encoding)
    console = Console(
        file=buffer,
        width=width,
        force_terminal=color,
        color_system="auto" if color else None,
        no_color=not color,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=False,
        legacy_windows=False,
    )
    return console, buffer


def _tree(link: Link) -> Tree:
    tree = Tree(Text(link.text, style="bold"), guide_style="dim")
    stack = [(tree, link)]
    while stack:
        node, at = stack.pop()
        for child in at.children:
            stack.append((node.add(Text(child.text)), child))
    return tree


def _gpu_nodes_table(report: AuditReport) -> Table:
    table = Table(
        title="GPU nodes", title_justify="left", box=box.SIMPLE_HEAD, expand=False, pad_edge=False
    )
    table.add_column("NODE", overflow="fold")
    table.add_column("MODE", overflow="fold")
    table.add_column("HEALTH", overflow="fold")
    table.add_column("FOR", no_wrap=True)
    table.add_column("GPUS", overflow="fold")
    table.add_column("OPERAND PODS", overflow="fold")
    table.add_column("VMS", justify="right", no_wrap=True)
    for node in report.gpu_nodes:
        since = short_duration(report.now - node.since) if node.since is not None else ""
        health = Text(node.health, style="green" if node.health == "Ready" else "red")
        if node.trapped:
            health.append(" (trap)", style="bold red")
        table.add_row(
            node.name,
            node.mode,
            health,
            since,
            ", ".join(node.gpus)
            or ", ".join(f"{r}: {n}" for r, n in node.resources)
            or ", ".join(node.dra_devices),
            node.operands_text(),
            str(node.vms_waiting) if node.vms_waiting else "",
        )
    return table


def _findings_table(report: AuditReport) -> Table:
    table = Table(
        title="Findings", title_justify="left", box=box.SIMPLE_HEAD, expand=False, pad_edge=False
    )
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("ACTION", no_wrap=True)
    table.add_column("SEVERITY", no_wrap=True)
    table.add_column("POLICY", no_wrap=True, overflow="ellipsis")
    table.add_column("RESOURCE", overflow="fold")
    table.add_column("FOR", no_wrap=True)
    for i, f in enumerate(report.findings, start=1):
        v = f.verdict
        table.add_row(
            str(i),
            Text(v.action.label, style=_ACTION_STYLE.get(v.action, "")),
            Text(f.severity.label, style=_SEVERITY_STYLE[f.severity]),
            v.policy,
            f"{v.resource.kind} {v.resource}",
            short_duration(report.now - v.since) if v.since is not None else "",
        )
    return table


def _steps(plan: Plan) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(overflow="fold")
    if plan.reference:
        grid.add_row(f"{plan.shared}.", Text(plan.reference))
    for i, step in plan.steps:
        grid.add_row(f"{i}.", Text(step))
    return grid


def _details(i: int, f: AuditFinding, plan: Plan, now: datetime) -> RenderableType:
    v = f.verdict
    head = Text(f"{i}. ")
    head.append(v.action.label.upper(), style=_ACTION_STYLE.get(v.action, ""))
    head.append(f" [{f.severity.label}] ", style=_SEVERITY_STYLE[f.severity])
    head.append(v.policy, style="bold")
    parts: list[RenderableType] = [
        head,
        Padding(Text(subject_line(f, now), style="bold"), (0, 0, 0, 3)),
        Padding(Text(v.message), (0, 0, 0, 3)),
    ]
    if f.chain.children:
        parts.append(Padding(Text("why:", style="bold"), (0, 0, 0, 3)))
        parts.append(Padding(_tree(f.chain), (0, 0, 0, 3)))
    if v.remediation:
        parts.append(Padding(Text("fix, in this order:", style="bold"), (0, 0, 0, 3)))
        parts.append(Padding(_steps(plan), (0, 0, 0, 3)))
    return Group(*parts)


def render_table(
    report: AuditReport, width: int = 100, color: bool = False, encoding: str = "utf-8"
) -> str:
    """``-o table``: overview tables and one block per finding, wrapped to ``width`` columns.

    No colour unless ``color`` (the caller passes whether stdout is a terminal). ``encoding`` is
    the output's: anything but UTF-8 gets ASCII guides and boxes.
    """
    console, buffer = buffered_console(width, color, encoding)
    for line in report.not_judged():
        console.print(Text(line, style="bold yellow"))
    console.print(Text(summary_line(report), style="bold"))
    if not report.findings:
        console.print(
            f"nothing found: every policy {'judged ' if report.unseen else ''}passes on this state"
        )
    if report.gpu_nodes:
        console.print()
        console.print(_gpu_nodes_table(report))
    if report.findings:
        console.print()
        console.print(_findings_table(report))
        numbered = enumerate(zip(report.findings, plans(report.findings), strict=True), 1)
        for i, (f, plan) in numbered:
            console.print()
            console.print(_details(i, f, plan, report.now))
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())

"""``gpu-guard audit``: the engine over everything that exists, plus the diagnosis, and renderers.

Durations are measured from the objects' own timestamps to ``now`` (``--now``, else the clock),
so an audit of a saved dump reads the same tomorrow as today.

``run_audit`` merges two sources: the admission policies' audit verdicts (``Engine.audit``) and
the audit-only diagnoses of ``policies.diagnosis`` (recovery trap, NotReady GPU nodes, stuck VMs,
case-mismatched names, unhealthy operands). A diagnosis that explains a policy's verdict on the
same VM and device enriches that verdict (chain, remediation, since) instead of adding a second
finding. Renderers: ``render_text`` (plain, the demo's), ``render_table`` (rich, ``-o table``),
``render_markdown`` (with a Mermaid flowchart per causal chain), ``AuditReport.to_json`` (``-o
json``/``yaml``); ``webhook.reports`` renders PolicyReports.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO, TypeVar

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from policies.diagnosis import (
    CLUSTER,
    ClusterDiagnosis,
    Diagnosis,
    GpuNodeStatus,
    Link,
    Severity,
    Track,
    diagnose,
    severity_of,
    untracked,
)
from policies.model import Action, ObjectRef, Verdict
from policies.text import plural, split_duration
from policies.view import ClusterView
from webhook.config import GuardConfig
from webhook.engine import Engine

__all__ = [
    "AuditFinding",
    "AuditReport",
    "Track",
    "exit_code",
    "format_duration",
    "parse_now",
    "progress_bar",
    "render_markdown",
    "render_table",
    "render_text",
    "run_audit",
    "untracked",
]

_T = TypeVar("_T")
log = logging.getLogger("gpu-guard.audit")
#: The id under which a diagnosis that raised is reported (the policies' audits still count).
DIAGNOSIS_FAILED = "audit-diagnosis"


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class AuditFinding:
    """A verdict as the audit reports it: with a severity and its causal chain as a tree."""

    verdict: Verdict
    severity: Severity
    chain: Link
    """Root: the resource itself; below it what explains it (``verdict.chain``, flattened)."""

    def to_json(self, now: datetime) -> dict[str, Any]:
        entry = self.verdict.to_json()
        entry["severity"] = self.severity.label
        if self.verdict.since is not None:
            entry["durationSeconds"] = max(0, int((now - self.verdict.since).total_seconds()))
            entry["duration"] = format_duration(now - self.verdict.since)
        return entry


@dataclass(frozen=True)
class AuditReport:
    now: datetime
    findings: tuple[AuditFinding, ...]
    gpu_nodes: tuple[GpuNodeStatus, ...] = ()
    namespaces: tuple[str, ...] = ()
    """Namespaces whose objects were audited (VMs, VMIs, KubeVirt CRs, findings): one
    PolicyReport each, an empty one when clean, so a background audit updates them in place."""

    @property
    def verdicts(self) -> tuple[Verdict, ...]:
        return tuple(f.verdict for f in self.findings)

    @property
    def worst(self) -> Action:
        return max((f.verdict.action for f in self.findings), default=Action.OFF)

    def counts(self) -> dict[str, int]:
        return {
            a.label: sum(1 for f in self.findings if f.verdict.action == a)
            for a in (Action.DENY, Action.WARN, Action.AUDIT)
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "now": _iso(self.now),
            "summary": self.counts(),
            "findings": [f.to_json(self.now) for f in self.findings],
            "gpuNodes": [_gpu_node_json(n, self.now) for n in self.gpu_nodes],
        }


def _gpu_node_json(node: GpuNodeStatus, now: datetime) -> dict[str, Any]:
    out: dict[str, Any] = {"name": node.name, "mode": node.mode, "health": node.health}
    if node.since is not None:
        out["since"] = _iso(node.since)
        out["duration"] = format_duration(now - node.since)
    out["gpus"] = list(node.gpus)
    out["resources"] = dict(node.resources)
    out["operands"] = {"ok": node.operands_ok, **dict(node.operand_problems)}
    out["gpuPods"] = node.gpu_pods
    out["vmsWaiting"] = node.vms_waiting
    out["recoveryTrap"] = node.trapped
    return out


def parse_now(text: str | None) -> datetime:
    """``--now``: an RFC 3339 time with a zone; None means the clock."""
    if text is None:
        return datetime.now(UTC)
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--now: not an RFC 3339 time: {text!r}") from None
    if value.tzinfo is None:
        raise ValueError(f"--now: give a zone, e.g. {text}Z")
    return value


# --- the audit ------------------------------------------------------------------------------------


def _device_of(verdict: Verdict) -> str:
    """The deviceName a passthrough-without-ready-provider message starts with."""
    return verdict.message.split(" ", 1)[0]


def merge(
    verdicts: Iterable[Verdict], diagnoses: Iterable[Diagnosis], config: GuardConfig
) -> list[AuditFinding]:
    """Policy verdicts and diagnoses as one list of findings, each problem reported once.

    A diagnosis with ``enriches`` set explains the verdict of that policy on the same resource
    and device: the verdict keeps its id, action and message and takes the diagnosis' chain,
    remediation and (when it had none) since. A diagnosis nothing matched stands on its own,
    with the configured action for its id if any, and is skipped in exempt namespaces.
    """
    diagnoses = list(diagnoses)
    explaining = {(d.enriches, d.resource, d.device): d for d in diagnoses if d.enriches}
    used: set[tuple[str, ObjectRef, str]] = set()
    out: list[AuditFinding] = []
    for verdict in verdicts:
        key = (verdict.policy, verdict.resource, _device_of(verdict))
        found = explaining.get(key)
        if found is not None:
            used.add(key)
            verdict = replace(
                verdict,
                chain=found.chain.flatten(),
                remediation=found.remediation,
                since=verdict.since if verdict.since is not None else found.since,
            )
            chain = found.chain
        else:
            root = f"{verdict.resource.kind} {verdict.resource}"
            chain = Link.linear(root, verdict.chain)
        out.append(AuditFinding(verdict, severity_of(verdict.policy, verdict.action), chain))
    for diagnosis in diagnoses:
        if (
            diagnosis.enriches
            and (diagnosis.enriches, diagnosis.resource, diagnosis.device) in used
        ):
            continue
        if diagnosis.resource.namespace in config.exempt_namespaces:
            continue
        action = config.actions.get(diagnosis.policy, diagnosis.action)
        if action == Action.OFF:
            continue
        out.append(AuditFinding(diagnosis.verdict(action), diagnosis.severity, diagnosis.chain))
    return out


def _sort_key(f: AuditFinding) -> tuple[int, int, str, str, str, str]:
    v = f.verdict
    return (-v.action, -f.severity, v.policy, v.resource.kind, str(v.resource), v.message)


def _audited_namespaces(
    view: ClusterView, findings: Sequence[AuditFinding], config: GuardConfig
) -> tuple[str, ...]:
    names = {vm.namespace for vm in view.vms()}
    names.update(vmi.namespace for vmi in view.vmis())
    names.update(kv.namespace for kv in view.kubevirts())
    names.update(f.verdict.resource.namespace for f in findings)
    names.discard("")
    return tuple(sorted(names - config.exempt_namespaces))


def run_audit(
    engine: Engine, view: ClusterView, now: datetime, track: Track = untracked
) -> AuditReport:
    """Every policy's audit and every diagnosis over one snapshot; ``track`` shows progress."""
    verdicts: list[Verdict] = []
    for _ in track(["policies"], "policies"):
        verdicts.extend(engine.audit(view))
    try:
        diagnosis: ClusterDiagnosis = diagnose(view, now, track)
    except Exception:
        # Like a policy that raises: say so, and keep what the policies found.
        log.exception("the diagnosis raised during the audit")
        diagnosis = ClusterDiagnosis((), ())
        verdicts.append(
            Verdict(
                policy=DIAGNOSIS_FAILED,
                action=Action.WARN,
                resource=CLUSTER,
                message="gpu-guard could not evaluate this policy: the diagnosis raised, see "
                "the log; the policies' findings are complete",
            )
        )
    findings = sorted(merge(verdicts, diagnosis.findings, engine.config), key=_sort_key)
    return AuditReport(
        now,
        tuple(findings),
        diagnosis.gpu_nodes,
        _audited_namespaces(view, findings, engine.config),
    )


def exit_code(verdicts: Sequence[Verdict]) -> int:
    return 1 if any(v.action == Action.DENY for v in verdicts) else 0


# --- progress -------------------------------------------------------------------------------------


@contextmanager
def progress_bar(stream: TextIO, enabled: bool = True) -> Iterator[Track]:
    """A ``Track`` that draws a rich progress bar on ``stream`` (stderr) while the audit walks
    the cluster; a silent pass-through when disabled or when ``stream`` is not a terminal."""
    if not enabled or not stream.isatty():
        yield untracked
        return
    console = Console(file=stream, stderr=True)
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:

        def track(items: Sequence[_T], description: str) -> Iterable[_T]:
            return progress.track(items, total=len(items), description=f"auditing {description}")

        yield track


@contextmanager
def status(stream: TextIO, message: str, enabled: bool = True) -> Iterator[None]:
    """A spinner on ``stream`` for a step without a count (reading the cluster)."""
    if not enabled or not stream.isatty():
        yield
        return
    with Console(file=stream, stderr=True).status(message):
        yield


# --- durations ------------------------------------------------------------------------------------


def format_duration(delta: timedelta) -> str:
    """ "112 days", "3 days 4 hours", "5 hours", "12 minutes": as precise as a person needs."""
    days, hours, minutes = split_duration(delta.total_seconds())
    if days >= 30:
        return plural(days, "day")
    if days:
        return plural(days, "day") + (f" {plural(hours, 'hour')}" if hours else "")
    if hours:
        return plural(hours, "hour")
    return plural(minutes, "minute")


def short_duration(delta: timedelta) -> str:
    """ "112d 8h", "5h 3m", "12m": for table cells."""
    days, hours, minutes = split_duration(delta.total_seconds())
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m"


def _subject(f: AuditFinding, now: datetime) -> str:
    """ "VirtualMachine vms/gpu-fedora  for 112 days (since 2026-07-10)" """
    v = f.verdict
    when = ""
    if v.since is not None:
        when = f"  for {format_duration(now - v.since)} (since {v.since.date().isoformat()})"
    return f"{v.resource.kind} {v.resource}{when}"


def _summary_line(report: AuditReport) -> str:
    counts = report.counts()
    return (
        f"gpu-guard audit at {_iso(report.now)}: {len(report.findings)} findings "
        f"({counts['deny']} deny, {counts['warn']} warn, {counts['audit']} audit)"
    )


# --- plain text -----------------------------------------------------------------------------------


def _text_tree(link: Link, indent: str) -> list[str]:
    lines = []
    for child in link.children:
        lines.append(f"{indent}-> {child.text}")
        lines.extend(_text_tree(child, indent + "   "))
    return lines


def render_text(report: AuditReport) -> str:
    """Plain text, one block per finding: what ``gpu-guard demo`` prints."""
    lines = [_summary_line(report)]
    for f in report.findings:
        v = f.verdict
        lines.append("")
        lines.append(f"{v.action.label.upper():5} {v.policy}  {_subject(f, report.now)}")
        lines.append(f"      {v.message}")
        if f.chain.children:
            lines.append(f"      chain: {f.chain.text}")
            lines.extend(_text_tree(f.chain, "        "))
        for step, remedy in enumerate(v.remediation, start=1):
            lines.append(f"      fix {step}. {remedy}")
    if not report.findings:
        lines.append("nothing found: every policy passes on this state")
    return "\n".join(lines) + "\n"


# --- rich table -----------------------------------------------------------------------------------

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


def _console(width: int, color: bool, encoding: str) -> tuple[Console, _Buffer]:
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
            ", ".join(node.gpus) or ", ".join(f"{r}: {n}" for r, n in node.resources),
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


def _steps(steps: Sequence[str]) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(overflow="fold")
    for i, step in enumerate(steps, start=1):
        grid.add_row(f"{i}.", Text(step))
    return grid


def _details(i: int, f: AuditFinding, now: datetime) -> RenderableType:
    v = f.verdict
    head = Text(f"{i}. ")
    head.append(v.action.label.upper(), style=_ACTION_STYLE.get(v.action, ""))
    head.append(f" [{f.severity.label}] ", style=_SEVERITY_STYLE[f.severity])
    head.append(v.policy, style="bold")
    parts: list[RenderableType] = [
        head,
        Padding(Text(_subject(f, now), style="bold"), (0, 0, 0, 3)),
        Padding(Text(v.message), (0, 0, 0, 3)),
    ]
    if f.chain.children:
        parts.append(Padding(Text("why:", style="bold"), (0, 0, 0, 3)))
        parts.append(Padding(_tree(f.chain), (0, 0, 0, 3)))
    if v.remediation:
        parts.append(Padding(Text("fix, in this order:", style="bold"), (0, 0, 0, 3)))
        parts.append(Padding(_steps(v.remediation), (0, 0, 0, 3)))
    return Group(*parts)


def render_table(
    report: AuditReport, width: int = 100, color: bool = False, encoding: str = "utf-8"
) -> str:
    """``-o table``: overview tables and one block per finding, wrapped to ``width`` columns.

    No colour unless ``color`` (the caller passes whether stdout is a terminal). ``encoding`` is
    the output's: anything but UTF-8 gets ASCII guides and boxes.
    """
    console, buffer = _console(width, color, encoding)
    console.print(Text(_summary_line(report), style="bold"))
    if not report.findings:
        console.print("nothing found: every policy passes on this state")
    if report.gpu_nodes:
        console.print()
        console.print(_gpu_nodes_table(report))
    if report.findings:
        console.print()
        console.print(_findings_table(report))
        for i, f in enumerate(report.findings, start=1):
            console.print()
            console.print(_details(i, f, report.now))
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())


# --- markdown -------------------------------------------------------------------------------------


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|])")


def _md(text: str) -> str:
    """Plain text as Markdown that renders as itself, in a table cell too."""
    return _MD_SPECIAL.sub(r"\\\1", text.replace("\n", " "))


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


_MERMAID_ESCAPES = {'"': "#quot;", "<": "#lt;", ">": "#gt;", "#": "#35;"}


def _mermaid_label(text: str) -> str:
    return "".join(_MERMAID_ESCAPES.get(c, c) for c in text)


def mermaid(chain: Link) -> str:
    """A Mermaid flowchart of a causal chain, top-down, one box per link."""
    lines = ["flowchart TD"]
    counter = 0
    ids: list[tuple[str, Link]] = [("n0", chain)]
    lines.append(f'    n0["{_mermaid_label(chain.text)}"]')
    while ids:
        parent_id, link = ids.pop(0)
        for child in link.children:
            counter += 1
            child_id = f"n{counter}"
            lines.append(f'    {parent_id} --> {child_id}["{_mermaid_label(child.text)}"]')
            ids.append((child_id, child))
    return "\n".join(lines)


def render_markdown(report: AuditReport) -> str:
    """``-o markdown``: for an incident ticket or a wiki page; a Mermaid flowchart per chain."""
    counts = report.counts()
    out = [
        f"# gpu-guard audit, {_iso(report.now)}",
        "",
        f"{len(report.findings)} findings: {counts['deny']} deny, {counts['warn']} warn, "
        f"{counts['audit']} audit.",
    ]
    if report.gpu_nodes:
        out += [
            "",
            "## GPU nodes",
            "",
            "| node | mode | health | for | GPUs | operand pods | VMs waiting |",
            "|---|---|---|---|---|---|---|",
        ]
        for node in report.gpu_nodes:
            since = format_duration(report.now - node.since) if node.since is not None else ""
            health = node.health + (" (recovery trap)" if node.trapped else "")
            cells = [
                node.name,
                node.mode,
                health,
                since,
                ", ".join(node.gpus),
                node.operands_text(),
                str(node.vms_waiting),
            ]
            out.append(_row([_md(c) for c in cells]))
    if report.findings:
        out += [
            "",
            "## Findings",
            "",
            "| # | action | severity | policy | resource | for |",
            "|---|---|---|---|---|---|",
        ]
        for i, f in enumerate(report.findings, start=1):
            v = f.verdict
            since = format_duration(report.now - v.since) if v.since is not None else ""
            cells = [
                str(i),
                v.action.label,
                f.severity.label,
                f"`{v.policy}`",
                _md(f"{v.resource.kind} {v.resource}"),
                since,
            ]
            out.append(_row(cells))
    for i, f in enumerate(report.findings, start=1):
        v = f.verdict
        subject = _md(f"{v.resource.kind} {v.resource}")
        out += ["", f"### {i}. {v.action.label.upper()} `{v.policy}` {subject}"]
        out += ["", f"Severity **{f.severity.label}**."]
        if v.since is not None:
            out[-1] += f" Since {_iso(v.since)} ({format_duration(report.now - v.since)})."
        out += ["", _md(v.message)]
        if f.chain.children:
            out += ["", "```mermaid", mermaid(f.chain), "```"]
        if v.remediation:
            out += ["", "Fix, in this order:", ""]
            out += [f"{n}. {_md(step)}" for n, step in enumerate(v.remediation, start=1)]
    if not report.findings:
        out += ["", "Nothing found: every policy passes on this state."]
    return "\n".join(out) + "\n"

"""``gpu-guard audit -o markdown``: for a ticket or a wiki page, a Mermaid flowchart per chain."""

from __future__ import annotations

import re
from collections.abc import Sequence

from policies.vocabulary.audit import Link
from policies.vocabulary.text import format_duration, heading_time, plural, rfc3339
from webhook.audit.report import AuditReport
from webhook.render.plans import plans

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|])")


def md_text(text: str) -> str:
    """Plain text as Markdown that renders as itself, in a table cell too."""
    return _MD_SPECIAL.sub(r"\\\1", text.replace("\n", " "))


def md_row(cells: Sequence[str]) -> str:
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
    out = [f"# gpu-guard audit, {heading_time(report.now)}", ""]
    if report.unseen:
        out += ["## Not judged", "", *(f"- {md_text(line)}" for line in report.not_judged()), ""]
    out += [
        f"{plural(len(report.findings), 'finding')}: {counts['deny']} deny, {counts['warn']} warn, "
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
                ", ".join(node.gpus or node.dra_devices),
                node.operands_text(),
                str(node.vms_waiting),
            ]
            out.append(md_row([md_text(c) for c in cells]))
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
                md_text(f"{v.resource.kind} {v.resource}"),
                since,
            ]
            out.append(md_row(cells))
    for i, (f, plan) in enumerate(zip(report.findings, plans(report.findings), strict=True), 1):
        v = f.verdict
        subject = md_text(f"{v.resource.kind} {v.resource}")
        out += ["", f"### {i}. {v.action.label.upper()} `{v.policy}` {subject}"]
        out += ["", f"Severity **{f.severity.label}**."]
        if v.since is not None:
            out[-1] += f" Since {rfc3339(v.since)} ({format_duration(report.now - v.since)})."
        out += ["", md_text(v.message)]
        if f.chain.children:
            out += ["", "```mermaid", mermaid(f.chain), "```"]
        if v.remediation:
            out += ["", "Fix, in this order:", ""]
            if plan.reference:
                out += [f"- Steps {plan.shared}: {md_text(plan.reference)}"] + (
                    [""] if plan.steps else []
                )
            out += [f"{n}. {md_text(step)}" for n, step in plan.steps]
    if not report.findings:
        judged = "judged " if report.unseen else ""
        out += ["", f"Nothing found: every policy {judged}passes on this state."]
    return "\n".join(out) + "\n"

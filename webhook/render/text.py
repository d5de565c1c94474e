"""``gpu-guard audit -o text``: plain text, one block per finding (what ``gpu-guard demo``
prints)."""

from __future__ import annotations

from datetime import datetime

from policies.vocabulary.audit import Link
from policies.vocabulary.text import format_duration, heading_time, plural
from webhook.audit.report import AuditFinding, AuditReport
from webhook.render.plans import plans


def subject_line(f: AuditFinding, now: datetime) -> str:
    """ "VirtualMachine vms/gpu-fedora  for 112 days (since 2026-07-10)" """
    v = f.verdict
    when = ""
    if v.since is not None:
        when = f"  for {format_duration(now - v.since)} (since {v.since.date().isoformat()})"
    return f"{v.resource.kind} {v.resource}{when}"


def summary_line(report: AuditReport) -> str:
    counts = report.counts()
    return (
        f"gpu-guard audit at {heading_time(report.now)}: {plural(len(report.findings), 'finding')} "
        f"({counts['deny']} deny, {counts['warn']} warn, {counts['audit']} audit)"
    )


def _text_tree(link: Link, indent: str) -> list[str]:
    lines = []
    for child in link.children:
        lines.append(f"{indent}-> {child.text}")
        lines.extend(_text_tree(child, indent + "   "))
    return lines


def render_text(report: AuditReport) -> str:
    """Plain text: one line per finding first, then one block per finding, each repair plan
    printed once (what ``gpu-guard demo`` prints)."""
    lines = [*report.not_judged(), summary_line(report)]
    for i, f in enumerate(report.findings, start=1):
        v = f.verdict
        lines.append(f"  {i}. {v.action.label.upper():5} {v.policy}  {subject_line(f, report.now)}")
    for i, (f, plan) in enumerate(zip(report.findings, plans(report.findings), strict=True), 1):
        v = f.verdict
        lines.append("")
        lines.append(f"{i}. {v.action.label.upper():5} {v.policy}  {subject_line(f, report.now)}")
        lines.append(f"      {v.message}")
        if f.chain.children:
            lines.append(f"      chain: {f.chain.text}")
            lines.extend(_text_tree(f.chain, "        "))
        if plan.reference:
            lines.append(f"      fix {plan.shared}. {plan.reference}")
        for step, remedy in plan.steps:
            lines.append(f"      fix {step}. {remedy}")
    if not report.findings:
        lines.append(
            f"nothing found: every policy {'judged ' if report.unseen else ''}passes on this state"
        )
    return "\n".join(lines) + "\n"

"""``gpu-guard audit -o text``: plain text, one block per finding (what ``gpu-guard demo``
prints)."""

from __future__ import annotations

from datetime import datetime

from policies.model import Link
from policies.text import format_duration, rfc3339
from webhook.audit.report import AuditFinding, AuditReport


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
        f"gpu-guard audit at {rfc3339(report.now)}: {len(report.findings)} findings "
        f"({counts['deny']} deny, {counts['warn']} warn, {counts['audit']} audit)"
    )


def _text_tree(link: Link, indent: str) -> list[str]:
    lines = []
    for child in link.children:
        lines.append(f"{indent}-> {child.text}")
        lines.extend(_text_tree(child, indent + "   "))
    return lines


def render_text(report: AuditReport) -> str:
    """Plain text, one block per finding: what ``gpu-guard demo`` prints."""
    lines = [summary_line(report)]
    for f in report.findings:
        v = f.verdict
        lines.append("")
        lines.append(f"{v.action.label.upper():5} {v.policy}  {subject_line(f, report.now)}")
        lines.append(f"      {v.message}")
        if f.chain.children:
            lines.append(f"      chain: {f.chain.text}")
            lines.extend(_text_tree(f.chain, "        "))
        for step, remedy in enumerate(v.remediation, start=1):
            lines.append(f"      fix {step}. {remedy}")
    if not report.findings:
        lines.append("nothing found: every policy passes on this state")
    return "\n".join(lines) + "\n"

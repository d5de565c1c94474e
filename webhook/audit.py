"""``gpu-guard audit``: the engine over everything that exists, with how long it has been wrong.

Durations are measured from the objects' own timestamps to ``now`` (``--now``, else the clock),
so an audit of a saved dump reads the same tomorrow as today.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from policies.model import Action, Verdict
from policies.view import ClusterView
from webhook.engine import Engine


@dataclass(frozen=True)
class AuditReport:
    now: datetime
    verdicts: tuple[Verdict, ...]

    @property
    def worst(self) -> Action:
        return max((v.action for v in self.verdicts), default=Action.OFF)

    def counts(self) -> dict[str, int]:
        return {
            a.label: sum(1 for v in self.verdicts if v.action == a)
            for a in (Action.DENY, Action.WARN, Action.AUDIT)
        }

    def to_json(self) -> dict[str, Any]:
        findings = []
        for verdict in self.verdicts:
            entry = verdict.to_json()
            if verdict.since is not None:
                entry["durationSeconds"] = int((self.now - verdict.since).total_seconds())
                entry["duration"] = format_duration(self.now - verdict.since)
            findings.append(entry)
        return {
            "now": self.now.isoformat().replace("+00:00", "Z"),
            "summary": self.counts(),
            "findings": findings,
        }


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


def run_audit(engine: Engine, view: ClusterView, now: datetime) -> AuditReport:
    verdicts = sorted(
        engine.audit(view),
        key=lambda v: (-v.action, v.policy, v.resource.kind, str(v.resource), v.message),
    )
    return AuditReport(now, tuple(verdicts))


def format_duration(delta: Any) -> str:
    """ "112 days", "3 days 4 hours", "5 hours", "12 minutes": as precise as a person needs."""
    seconds = max(0, int(delta.total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60

    def unit(n: int, word: str) -> str:
        return f"{n} {word}" if n == 1 else f"{n} {word}s"

    if days >= 30:
        return unit(days, "day")
    if days:
        return unit(days, "day") + (f" {unit(hours, 'hour')}" if hours else "")
    if hours:
        return unit(hours, "hour")
    return unit(minutes, "minute")


def render_text(report: AuditReport) -> str:
    counts = report.counts()
    head = (
        f"gpu-guard audit at {report.now.isoformat().replace('+00:00', 'Z')}: "
        f"{len(report.verdicts)} findings ({counts['deny']} deny, {counts['warn']} warn, "
        f"{counts['audit']} audit)"
    )
    lines = [head]
    for verdict in report.verdicts:
        resource = f"{verdict.resource.kind} {verdict.resource}"
        lines.append("")
        when = ""
        if verdict.since is not None:
            when = (
                f"  for {format_duration(report.now - verdict.since)} "
                f"(since {verdict.since.date().isoformat()})"
            )
        lines.append(f"{verdict.action.label.upper():5} {verdict.policy}  {resource}{when}")
        lines.append(f"      {verdict.message}")
        if verdict.chain:
            lines.append(f"      chain: {resource} -> {' -> '.join(verdict.chain)}")
        for step, remedy in enumerate(verdict.remediation, start=1):
            lines.append(f"      fix {step}. {remedy}")
    if not report.verdicts:
        lines.append("nothing found: every policy passes on this state")
    return "\n".join(lines) + "\n"


def exit_code(verdicts: Sequence[Verdict]) -> int:
    return 1 if any(v.action == Action.DENY for v in verdicts) else 0

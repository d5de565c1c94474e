"""Small helpers that keep policy messages short and alike."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def few(items: Sequence[str], limit: int = 3) -> str:
    """ "a, b, c and 4 more": names a few, then counts the rest."""
    shown = list(items[:limit])
    rest = len(items) - len(shown)
    if rest > 0:
        return f"{', '.join(shown)} and {rest} more"
    if len(shown) > 1:
        return f"{', '.join(shown[:-1])} and {shown[-1]}"
    return shown[0] if shown else ""


def drain_first(
    node: str, pod_keys: Sequence[str], daemonset_keys: Sequence[str] = ()
) -> tuple[str, ...]:
    """The steps that free a node's GPUs before a change that would kill their users. A
    DaemonSet's pod (in ``daemonset_keys`` too) survives cordon and drain: its DaemonSet must
    stop selecting the node first (docs/gpu-users.md section 3)."""
    others = [key for key in pod_keys if key not in daemonset_keys]
    steps = [f"kubectl cordon {node}"]
    if others:
        steps.append(f"drain or wait for: {', '.join(others)}")
    if daemonset_keys:
        steps.append(
            f"drain leaves DaemonSet pods {', '.join(daemonset_keys)}: give their DaemonSet a "
            f"nodeSelector or affinity {node} does not match, and wait for them to go"
        )
    return tuple(steps)


def printable(value: object) -> str:
    """A value fit for one line of a message or log: control characters escaped, so nothing
    read from a file or a request can break a message in two or forge a log line."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def split_duration(seconds: float) -> tuple[int, int, int]:
    """Whole days, hours and minutes of a duration (negative counts as zero)."""
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    return days, hours, rest // 60


def rfc3339(when: datetime) -> str:
    """A time as Kubernetes writes it (RFC 3339, UTC, ``Z``): JSON output, reports, headings."""
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def heading_time(when: datetime) -> str:
    """``rfc3339`` to the whole second: for headings, where the clock's microseconds are noise."""
    return rfc3339(when.replace(microsecond=0))


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

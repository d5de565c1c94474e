"""The "now" an audit measures durations to: ``--now`` parsed, and checked against the state.

``--now`` is an RFC 3339 time, told what it lacks when it is almost one; a ``--now`` earlier than
what the state itself records is refused, since every duration would read as zero. Apart from
the report so that the commands that take ``--now`` (audit, what-if, demo) share one reading.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

from policies.cluster.conditions import Condition
from policies.cluster.view import ClusterView
from policies.vocabulary.text import rfc3339


def parse_now(text: str | None) -> datetime:
    """``--now``: an RFC 3339 date-time (``T`` or ``t`` or a space between date and time, any
    number of fractional digits, ``Z``/``z`` or an offset); None means the clock. A text that is
    not one is told what it lacks."""
    if text is None:
        return datetime.now(UTC)
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(f"--now: {_what_is_wrong(text)}")
    year, month, day, hour, minute, second = (int(match[i]) for i in range(1, 7))
    fraction = int((match[7] or "0")[:6].ljust(6, "0"))
    if second == 60:  # a leap second: the last instant of its minute, as datetime has no :60
        second, fraction = 59, 999_999
    try:
        return datetime(year, month, day, hour, minute, second, fraction, _zone(match[8]))
    except ValueError as exc:
        raise ValueError(f"--now: not a valid time: {text!r} ({exc})") from None


_DATE = r"(\d{4})-(\d{2})-(\d{2})"
_TIME = r"(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
_ZONE = r"([Zz]|[+-]\d{2}:\d{2})"
_RFC3339 = re.compile(f"{_DATE}[Tt ]{_TIME}{_ZONE}")


def _zone(text: str) -> timezone:
    if text in ("Z", "z"):
        return UTC
    hours, minutes = int(text[1:3]), int(text[4:6])
    if hours > 23 or minutes > 59:
        raise ValueError(f"offset {text} out of range")
    offset = timedelta(hours=hours, minutes=minutes)
    return timezone(-offset if text[0] == "-" else offset)


def _what_is_wrong(text: str) -> str:
    """What an almost-RFC 3339 text lacks, with the nearest text that would do."""
    if re.fullmatch(f"{_DATE}{_ZONE}?", text):
        return f"{text!r} is a date alone: give a time and a zone too, e.g. {text[:10]}T00:00:00Z"
    if re.fullmatch(f"{_DATE}[Tt ]{_TIME}", text):
        return f"give a zone, e.g. {text}Z (UTC) or {text}+02:00"
    if re.fullmatch(f"{_DATE}[Tt ](\\d{{2}}):(\\d{{2}}){_ZONE}?", text):
        return f"give the seconds too, e.g. {text[:16]}:00Z"
    return f"not an RFC 3339 time: {text!r} (e.g. 2026-10-30T12:00:00Z or ...T14:00:00+02:00)"


def check_now_after_state(now: datetime, view: ClusterView) -> None:
    """A given ``--now`` before what the state itself records would measure every duration as
    zero ("for 0 minutes"): refused, naming the newest time the state holds."""
    newest = newest_timestamp(view)
    if newest is not None and now < newest[0]:
        when, where = newest
        raise ValueError(
            f"--now {rfc3339(now)} is earlier than the state's newest timestamp, "
            f"{rfc3339(when)} ({where}): give a later --now, or none for the clock"
        )


def newest_timestamp(view: ClusterView) -> tuple[datetime, str] | None:
    """The latest condition time of any node, VM or VMI (what durations are measured from), and
    whose it is."""
    subjects: list[tuple[str, tuple[Condition, ...]]] = [
        (f"Node {n.name}", n.conditions) for n in view.nodes()
    ]
    subjects += [(f"VirtualMachine {vm.key}", vm.conditions) for vm in view.vms()]
    subjects += [(f"VirtualMachineInstance {vmi.key}", vmi.conditions) for vmi in view.vmis()]
    times = [
        (when, f"{who} {c.type} lastTransitionTime")
        for who, conditions in subjects
        for c in conditions
        if (when := c.last_transition) is not None
    ]
    return max(times, key=lambda t: t[0], default=None)

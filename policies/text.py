"""Small helpers that keep policy messages short and alike."""

from __future__ import annotations

from collections.abc import Sequence


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


def drain_first(node: str, pod_keys: Sequence[str]) -> tuple[str, str]:
    """The two steps that free a node's GPUs before a change that would kill their users."""
    return (f"kubectl cordon {node}", f"drain or wait for: {', '.join(pod_keys)}")


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

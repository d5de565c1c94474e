"""Did-you-mean for DRA selectors: a simple equality whose value is a near miss of a published one.

``device.attributes["gpu.nvidia.com"].productName == "nvidia h100 nvl"`` matches nothing when the
driver publishes ``NVIDIA H100 NVL``: CEL compares strings exactly. Only the plain shape is read
(``device.driver`` or one attribute ``== 'literal'``, alone or ANDed at the top level of the
expression); a near miss differs in case, spaces, ``-`` or ``_`` only (the GPU Operator's node
label spells the same product ``NVIDIA-H100-NVL``). Anything cleverer is left alone: a wrong
guess costs more than none.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Sequence

from policies.cel.values import Device

EQUALITY = re.compile(
    r"""^\s*device\s*\.\s*(?:
        (?P<driver>driver)
      | attributes\s*\[\s*(?P<q1>['"])(?P<domain>[^'"]+)(?P=q1)\s*\]\s*
        (?:\.\s*(?P<ident>[A-Za-z_]\w*)|\[\s*(?P<q2>['"])(?P<name>[^'"]+)(?P=q2)\s*\])
    )\s*==\s*(?P<q3>['"])(?P<value>[^'"\\]*)(?P=q3)\s*$""",
    re.VERBOSE,
)
_LOOSE = re.compile(r"[\s_-]+")
#: The step for a selector that matches nothing or cannot be evaluated: read what is published.
COMPARE_WITH_DEVICES = "compare the selectors with the devices (kubectl get resourceslices -o yaml)"


def conjuncts(expression: str) -> list[str]:
    """The parts of ``a && b && c`` at the top level (outside quotes and brackets); the whole
    expression when it has a top-level ``||`` too (then no part holds alone)."""
    parts: list[str] = []
    depth, quote, start, i = 0, "", 0, 0
    while i < len(expression):
        char = expression[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 0 and expression.startswith("||", i):
            return [expression]
        elif depth == 0 and expression.startswith("&&", i):
            parts.append(expression[start:i])
            start = i + 2
            i += 1
        i += 1
    parts.append(expression[start:])
    return parts


def loose(value: str) -> str:
    """A value as a person reads it: no case, no spaces, dashes or underscores."""
    return _LOOSE.sub("", value.casefold())


def published_value(device: Device, key: str) -> str | None:
    """The string a device publishes under ``key`` (``"driver"`` or ``"<domain>/<name>"``)."""
    value = device.driver if key == "driver" else device.attributes.get(key)
    return value if isinstance(value, str) else None


def near_misses(expressions: Sequence[str], devices: Iterable[Device]) -> tuple[str, ...]:
    """Equalities in ``expressions`` rewritten with the published value they nearly name:
    ``productName == 'NVIDIA H100 NVL'``; () when none is a near miss."""
    listed = list(devices)

    def values_of(key: str) -> set[str]:
        return {v for v in (published_value(d, key) for d in listed) if v is not None}

    return near_misses_in(expressions, values_of)


def near_misses_in(
    expressions: Sequence[str], values_of: Callable[[str], Collection[str]]
) -> tuple[str, ...]:
    """``near_misses`` given the published values of each key (``"driver"`` or
    ``"<domain>/<name>"``): a state that keeps them need not list the devices."""
    wanted: list[tuple[str, str, str]] = []  # (key, as written, value)
    for expression in expressions:
        for part in conjuncts(expression):
            found = EQUALITY.match(part)
            if found is None:
                continue
            if found["driver"]:
                wanted.append(("driver", "device.driver", found["value"]))
            else:
                name = found["ident"] or found["name"]
                wanted.append((f"{found['domain']}/{name}", name, found["value"]))
    if not wanted:
        return ()
    published = {key: values_of(key) for key, _, _ in wanted}
    out: list[str] = []
    for key, written, value in wanted:
        if value in published[key]:
            continue
        for candidate in sorted(published[key]):
            if loose(candidate) == loose(value):
                out.append(f"{written} == {candidate!r}")
    return tuple(dict.fromkeys(out))

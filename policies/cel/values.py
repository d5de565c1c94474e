"""What a DRA selector reads of a device and what it answers: apart from ``selectors`` (compile,
evaluate, remember) and ``environment`` (cel-python), which both need it, so neither imports the
other at module level.

``Device`` is the device as a selector sees it: its driver, its attributes and capacities by
fully qualified name. The DRA projection (``policies.cluster.dra.DeviceInfo``) satisfies it, so
CEL needs nothing of the cluster model. ``Trace`` records each read of an evaluation (with its
value key), which ``selectors``' memo keys results on.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from policies.vocabulary.semver import Version

#: A device attribute's scalar value, as ResourceSlices publish them (string, int, bool, version).
AttributeScalar = str | int | bool | Version


@dataclass(frozen=True, slots=True)
class Unreadable:
    """An attribute whose value is of a type newer than this code (as the lists of KEP-5491 once
    were): kept, never dropped or refused; a selector that reads it cannot be decided."""

    kind: str
    """The value's type as published (its key), for the message."""


#: A device attribute's typed value: a scalar; a non-empty list of one scalar type (``ints``,
#: ``strings``, ``bools``, ``versions``: KEP-5491, alpha gate DRAListTypeAttributes from 1.36),
#: which CEL sees as a list; or ``Unreadable``.
AttributeValue = AttributeScalar | tuple[AttributeScalar, ...] | Unreadable


class Device(Protocol):
    """A device as a selector reads it (``device.driver``, ``.attributes``, ``.capacity``), and
    the fields it publishes that change what it can give and this code does not model."""

    @property
    def unmodelled(self) -> tuple[str, ...]:
        """E.g. "consumesCounters": while any, whether a selection of it holds cannot be told."""
        ...

    @property
    def driver(self) -> str: ...

    @property
    def attributes(self) -> Mapping[str, AttributeValue]:
        """Fully qualified name -> typed value."""
        ...

    @property
    def capacity(self) -> Mapping[str, Decimal]:
        """Fully qualified name -> quantity."""
        ...


#: The API server's limit on a selector's length (resourceapi.CELSelectorExpressionMaxLength).
MAX_EXPRESSION_LENGTH = 10 * 1024
#: Comprehensions (all, exists, map, ...) nested deeper than this are not run here: with the
#: length limit they bound the cost of one evaluation (cel-python has no cost accounting).
MAX_COMPREHENSION_DEPTH = 2


class Outcome(enum.Enum):
    MATCH = "match"
    NO_MATCH = "no match"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Selection:
    outcome: Outcome
    reason: str = ""
    """Why UNKNOWN: the compile or runtime error, or what this evaluator cannot run."""
    selector: int = -1
    """Which expression of the list decided (NO_MATCH, UNKNOWN); -1 for MATCH, and for a
    device that matched but publishes what this code does not model."""

    @property
    def matches(self) -> bool:
        return self.outcome is Outcome.MATCH


MATCH = Selection(Outcome.MATCH)
NO_MATCH = Selection(Outcome.NO_MATCH)

# --- reading a device the way an expression sees it ----------------------------------------------

MISSING = ("missing",)
KEYS = ("keys",)  # a path ending here reads the sorted names of a map
Path = tuple[str | tuple[str], ...]


def _split(name: str) -> tuple[str, str]:
    domain, _, ident = name.partition("/")
    return domain, ident


def value_key(value: object) -> object:
    """A hashable stand-in that tells apart what CEL tells apart (true is not 1)."""
    return MISSING if value is None else (type(value).__name__, value)


def read(device: Device, path: Path) -> object:
    """The value key at ``path`` of the device, as the recorded reads of an evaluation saw it."""
    if path == ("driver",):
        return value_key(device.driver)
    section = device.attributes if path[0] == "attributes" else device.capacity
    if path[1] == KEYS:
        return tuple(sorted({_split(name)[0] for name in section}))
    domain = str(path[1])
    if path[2] == KEYS:
        return tuple(sorted(i for d, i in map(_split, section) if d == domain))
    return value_key(section.get(f"{domain}/{path[2]}"))


class Trace:
    """The reads of one evaluation, in order; ``opaque`` when it looked at the device in a way
    the reads do not capture (then nothing is remembered for the expression)."""

    def __init__(self) -> None:
        self.reads: list[tuple[Path, object]] = []
        self.seen: set[Path] = set()
        self.opaque = False

    def record(self, path: Path, key: object) -> None:
        if path not in self.seen:
            self.seen.add(path)
            self.reads.append((path, key))

"""Semantic versions (semver 2.0.0) as DRA devices publish them in ``version`` attributes.

The API server accepts a version attribute only when it parses strictly (blang/semver ``Parse``:
``MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]``, no leading zeros), and CEL selectors compare them
with semver precedence (``isGreaterThan``, ``compareTo``): build metadata never counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import total_ordering

_NUMBER = r"(0|[1-9]\d*)"
_IDENT = r"(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)"
_STRICT = re.compile(
    rf"{_NUMBER}\.{_NUMBER}\.{_NUMBER}"
    rf"(?:-({_IDENT}(?:\.{_IDENT})*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)
#: What ``semver(text, true)`` accepts before it fills in the rest: a leading "v", a missing
#: minor or patch, leading zeros.
_LOOSE = re.compile(r"v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?")


@total_ordering
@dataclass(frozen=True, slots=True)
class Version:
    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...] = ()
    build: str = field(default="", compare=False)

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(str(p) for p in self.prerelease)
        return text + (f"+{self.build}" if self.build else "")

    def _precedence(self) -> tuple[object, ...]:
        # A release sorts after its prereleases; numeric identifiers sort before alphanumeric.
        pre = tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in self.prerelease)
        return (self.major, self.minor, self.patch, not self.prerelease, pre)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._precedence() < other._precedence()

    def compare(self, other: Version) -> int:
        return (self > other) - (self < other)


def parse_version(text: str) -> Version | None:
    """A strict semantic version, or None when ``text`` is not one."""
    match = _STRICT.fullmatch(text)
    if match is None:
        return None
    major, minor, patch, pre, build = match.groups()
    prerelease = tuple(int(p) if p.isdigit() else p for p in pre.split(".")) if pre else ()
    return Version(int(major), int(minor), int(patch), prerelease, build or "")


def normalize_version(text: str) -> Version | None:
    """``semver(text, true)``: "v1.2" means 1.2.0 and leading zeros are dropped."""
    match = _LOOSE.fullmatch(text)
    if match is None:
        return None
    major, minor, patch, pre, build = match.groups()
    rebuilt = f"{int(major)}.{int(minor or 0)}.{int(patch or 0)}{pre or ''}{build or ''}"
    return parse_version(rebuilt)

"""What the audit says: causal chains, diagnoses and their findings, findings with a severity.

Diagnoses are pure functions ``(AuditView, now) -> findings`` over what already exists
(``policies.diagnoses``); ``Diagnosis`` declares one, generic in the audit view it is given
(``Diagnosis[AuditView]``, ``policies.cluster.view``), so the vocabulary needs no cluster model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from policies.vocabulary.requests import GroupKind, ObjectRef
from policies.vocabulary.text import format_duration
from policies.vocabulary.verdicts import Action, Severity, Verdict

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Link:
    """One link of a causal chain; ``children`` are what explains it or follows from it."""

    text: str
    children: tuple[Link, ...] = ()

    def flatten(self) -> tuple[str, ...]:
        """Every link below this one, depth first: the ``chain`` of JSON output."""
        out: list[str] = []
        stack = list(reversed(self.children))
        while stack:
            link = stack.pop()
            out.append(link.text)
            stack.extend(reversed(link.children))
        return tuple(out)

    @staticmethod
    def linear(root: str, chain: Sequence[str]) -> Link:
        """A chain of plain strings (an admission policy's) as a straight line below ``root``."""
        tail: tuple[Link, ...] = ()
        for text in reversed(chain):
            tail = (Link(text, tail),)
        return Link(root, tail)


class Track(Protocol):
    """Wraps the sequences a long audit walks, so a caller can show progress (or not)."""

    def __call__(self, items: Sequence[_T], description: str) -> Iterable[_T]: ...


def untracked(items: Sequence[_T], description: str) -> Iterable[_T]:
    return items


@dataclass(frozen=True, slots=True)
class DiagnosisFinding:
    """What a diagnosis found about one subject, its causes as a tree (root: the subject).

    ``explains`` names a policy whose audit verdict on the same ``resource`` and ``device`` this
    finding explains: the audit then reports that verdict with this chain, not both.
    """

    resource: ObjectRef
    message: str
    chain: Link
    since: datetime | None = None
    remediation: tuple[str, ...] = ()
    severity: Severity | None = None
    """Worse (or milder) than the diagnosis' default for this case; None: the default."""
    device: str = ""
    explains: str = ""
    workloads: tuple[ObjectRef, ...] = ()
    """The workloads at stake (sole-provider: those that would strand), carried to
    ``Verdict.workloads`` so a metric counts them without reading the message."""

    @property
    def explained(self) -> tuple[str, ObjectRef, str]:
        """The verdict it explains, as ``Verdict.subject`` names it."""
        return (self.explains, self.resource, self.device)


#: The view a diagnosis is given: ``policies.cluster.view.AuditView`` for every diagnosis the
#: registry lists (``Diagnosis[AuditView]``), a type parameter for the reason ``Policy`` has one.
Audit = TypeVar("Audit")
DiagnosisCheck = Callable[[Audit, datetime], Iterable[DiagnosisFinding]]


@dataclass(frozen=True, slots=True)
class Diagnosis(Generic[Audit]):
    """An audit-only check: its identity, defaults and the pure function that looks.

    No admission request triggers it; the configuration sets its action like a policy's
    (``policies: {<id>: {action: ...}}``).
    """

    id: str
    summary: str
    default_action: Action
    default_severity: Severity
    reason: str
    diagnose: DiagnosisCheck[Audit]
    reads: frozenset[GroupKind] = frozenset()
    """Every kind it reads (``Policy.reads``): with a required one unseen it finds nothing."""


@dataclass(frozen=True)
class AuditFinding:
    """A verdict as the audit reports it: with a severity and its causal chain as a tree."""

    verdict: Verdict
    severity: Severity
    chain: Link
    """Root: the resource itself; below it what explains it (``verdict.chain``, flattened)."""

    def to_json(self, now: datetime) -> dict[str, Any]:
        entry = self.verdict.to_json()
        entry["severity"] = self.severity.label
        if self.verdict.since is not None:
            entry["durationSeconds"] = max(0, int((now - self.verdict.since).total_seconds()))
            entry["duration"] = format_duration(now - self.verdict.since)
        return entry

"""What a policy answers, and how the engine reports it: findings, actions, verdicts.

Policies are pure functions ``(AdmissionRequest, view) -> findings``; the engine turns them into
verdicts with the action the configuration gives them. ``Policy`` declares one: its identity,
scope, defaults and function. It is generic in the view its function is given
(``Policy[ClusterView]``, ``policies.cluster.view``), so the vocabulary needs no cluster model.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from policies.vocabulary.owners import Owner
from policies.vocabulary.requests import AdmissionRequest, GroupKind, ObjectRef
from policies.vocabulary.text import rfc3339


class Action(enum.IntEnum):
    """What a verdict does, ordered so that ``max`` picks the strongest."""

    OFF = 0
    AUDIT = 1
    WARN = 2
    DENY = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Action:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            choices = " | ".join(a.label for a in cls)
            raise ValueError(f"unknown action {text!r} (expected {choices})") from None


class Severity(enum.IntEnum):
    """How bad an audit finding is, in the wgpolicyk8s.io PolicyReport vocabulary."""

    INFO = 0
    LOW = 1
    MEDIUM = 2
    HIGH = 3
    CRITICAL = 4

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def of_action(cls, action: Action) -> Severity:
        """A verdict's severity when nothing declares one: as bad as what it does."""
        return _SEVERITY_OF_ACTION[action]


_SEVERITY_OF_ACTION = {
    Action.DENY: Severity.HIGH,
    Action.WARN: Severity.MEDIUM,
    Action.AUDIT: Severity.LOW,
    Action.OFF: Severity.INFO,
}


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem a policy saw. The engine decides the action; a policy may only cap it.

    ``max_action`` lets a policy mention a problem without blocking on it (a dead entry that was
    already there before this update). ``since``, ``chain`` and ``remediation`` feed the audit.
    """

    message: str
    max_action: Action | None = None
    since: datetime | None = None
    chain: tuple[str, ...] = ()
    remediation: tuple[str, ...] = ()
    confirm_pods_on: str = ""
    """A node whose pods this finding names: a live server re-reads them before denying."""
    device: str = ""
    """The deviceName this finding is about: what a diagnosis that explains it matches on."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """A finding with the action it got, as check, audit and the webhook report it."""

    policy: str
    action: Action
    resource: ObjectRef
    message: str
    since: datetime | None = None
    chain: tuple[str, ...] = ()
    remediation: tuple[str, ...] = ()
    confirm_pods_on: str = ""
    device: str = ""
    """The deviceName the finding is about (not in JSON: the message names it for people)."""
    workloads: tuple[ObjectRef, ...] = ()
    """The workloads a diagnosis finding says are at stake (sole-provider: those that would
    strand), as data for metrics to count; not in JSON: the message names them for people."""
    evaluated: bool = True
    """False when the policy could not judge (it raised, or there was no time): the message says
    why, and a PolicyReport calls the result an error rather than a verdict."""
    unseen: tuple[GroupKind, ...] = ()
    """The kinds it needed and the state never saw: "not judged" (``check`` exits 3)."""

    @property
    def text(self) -> str:
        return f"[{self.policy}] {self.message}"

    @property
    def subject(self) -> tuple[str, ObjectRef, str]:
        """Which policy said it of what (resource, device): what a diagnosis may explain."""
        return (self.policy, self.resource, self.device)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "policy": self.policy,
            "action": self.action.label,
            "resource": self.resource.to_json(),
            "message": self.message,
        }
        if self.since is not None:
            out["since"] = rfc3339(self.since)
        if self.chain:
            out["chain"] = list(self.chain)
        if self.remediation:
            out["remediation"] = list(self.remediation)
        if self.unseen:
            out["notJudged"] = {"unseen": [str(kind) for kind in self.unseen]}
        return out


#: The view a policy's functions are given: ``policies.cluster.view.ClusterView`` for every policy
#: the registry lists (``Policy[ClusterView]``). A type parameter, so that the vocabulary names no
#: room above it, not even for the type checker.
View = TypeVar("View")


@dataclass(frozen=True, slots=True)
class Policy(Generic[View]):
    """A policy's identity, scope and defaults, with the pure function that checks it.

    ``failure_action`` is what a request gets when ``check`` raises: DENY for policies that guard
    against irreversible damage (fail closed), WARN where a false block costs more than a miss.
    A policy about transitions (a label changing) has no ``audit``: there is no change to judge.
    """

    id: str
    summary: str
    scope: Mapping[GroupKind, frozenset[str]]
    """The kinds it reads and, per kind, the operations it judges."""
    default_action: Action
    default_reason: str
    failure_action: Action
    check: Callable[[AdmissionRequest, View], Sequence[Finding]]
    audit: Callable[[View], Iterable[tuple[ObjectRef, Finding]]] | None = None
    """The same judgement over objects that already exist, for ``gpu-guard audit``."""
    reads: frozenset[GroupKind] = frozenset()
    """Every kind of cluster state it may read (a test holds it to what it asks): stale
    knowledge of them downgrades a deny; unseen ones make an answer that needs them unknown,
    except the kinds whose absence means none, whoever reads them (ResourceClaims on a cluster
    without DRA): a fact of the kind, not of the policy (``policies.cluster.coverage``)."""
    audit_severity: Severity | None = None
    """How bad its audit verdicts are when the action alone says too little (None: from it)."""
    owners: tuple[Owner[View], ...] = ()
    """The controllers owning objects of the kinds in ``scope`` (``policies.vocabulary.owners``):
    their own writes are not judged, and a deny of an edit one reverts only warns."""

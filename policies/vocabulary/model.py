"""The vocabulary every policy, every diagnosis and every consumer of verdicts shares.

Policies are pure functions ``(AdmissionRequest, ClusterView) -> findings``; diagnoses are pure
functions ``(AuditView, now) -> findings`` over what already exists. The engine turns both into
verdicts with the action the configuration gives them. Nothing here does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from policies.vocabulary.text import format_duration, rfc3339

if TYPE_CHECKING:
    from policies.cluster.view import ClusterView

JSONObject = Mapping[str, Any]
T = TypeVar("T")
_T = TypeVar("_T")

CREATE = "CREATE"
UPDATE = "UPDATE"
DELETE = "DELETE"
CONNECT = "CONNECT"
OPERATIONS = frozenset({CREATE, UPDATE, DELETE, CONNECT})


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
class GroupKind:
    group: str
    kind: str

    def __str__(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """Names one Kubernetes object the way users and JSON output name it."""

    api_version: str
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def to_json(self) -> dict[str, str]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
        }


#: Findings about the cluster as a whole, not about one object (an ObjectRef of no real kind).
CLUSTER = ObjectRef("", "Cluster", "", "(cluster)")


@dataclass(frozen=True, slots=True)
class UserInfo:
    username: str = ""
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The parts of an AdmissionReview request that policies read, already type-checked."""

    uid: str
    group: str
    version: str
    kind: str
    operation: str
    namespace: str
    name: str
    obj: JSONObject | None
    old: JSONObject | None
    sub_resource: str = ""
    user: UserInfo = field(default_factory=UserInfo)
    dry_run: bool = False
    _memo: dict[Hashable, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    def once(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()`` the first time ``key`` is asked for on this request, then the same value:
        what several policies read of one object is read once ("parse once, look up once")."""
        if key not in self._memo:
            self._memo[key] = compute()
        value: T = self._memo[key]
        return value

    @property
    def group_kind(self) -> GroupKind:
        return GroupKind(self.group, self.kind)

    @property
    def current(self) -> JSONObject | None:
        """The object as it will be (CREATE/UPDATE) or as it was (DELETE)."""
        return self.obj if self.obj is not None else self.old

    @property
    def ref(self) -> ObjectRef:
        api_version = f"{self.group}/{self.version}" if self.group else self.version
        return ObjectRef(api_version, self.kind, self.namespace, self.name)


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
        return out


PolicyCheck = Callable[[AdmissionRequest, "ClusterView"], Sequence[Finding]]
PolicyAudit = Callable[["ClusterView"], Iterable[tuple[ObjectRef, Finding]]]


@dataclass(frozen=True, slots=True)
class Policy:
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
    check: PolicyCheck
    audit: PolicyAudit | None = None
    """The same judgement over objects that already exist, for ``gpu-guard audit``."""
    reads: frozenset[GroupKind] = frozenset()
    """The kinds of cluster state a deny rests on: stale knowledge of them downgrades it."""
    audit_severity: Severity | None = None
    """How bad its audit verdicts are when the action alone says too little (None: from it)."""


# --- the audit ------------------------------------------------------------------------------------


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


class AuditView:
    """One audit's snapshot: what several diagnoses (and the report's tables) read of it, such as
    the facts of every node, is computed once per audit (``once``), then shared."""

    __slots__ = ("_memo", "cluster", "track")

    def __init__(self, cluster: ClusterView, track: Track = untracked) -> None:
        self.cluster = cluster
        self.track = track
        self._memo: dict[Hashable, Any] = {}

    def once(self, key: Hashable, compute: Callable[[], T]) -> T:
        if key not in self._memo:
            self._memo[key] = compute()
        value: T = self._memo[key]
        return value


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


DiagnosisCheck = Callable[[AuditView, datetime], Iterable[DiagnosisFinding]]


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """An audit-only check: its identity, defaults and the pure function that looks.

    No admission request triggers it; the configuration sets its action like a policy's
    (``policies: {<id>: {action: ...}}``).
    """

    id: str
    summary: str
    default_action: Action
    default_severity: Severity
    reason: str
    diagnose: DiagnosisCheck


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

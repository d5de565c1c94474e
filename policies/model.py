"""The vocabulary every policy and every consumer of verdicts shares.

Policies are pure functions ``(AdmissionRequest, ClusterView) -> findings``; the engine turns
findings into verdicts with the action the configuration gives the policy. Nothing here does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from policies.text import rfc3339

if TYPE_CHECKING:
    from policies.view import ClusterView

JSONObject = Mapping[str, Any]
T = TypeVar("T")

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

    @property
    def text(self) -> str:
        return f"[{self.policy}] {self.message}"

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

    def applies_to(self, request: AdmissionRequest) -> bool:
        if request.sub_resource:
            return False
        return request.operation in self.scope.get(request.group_kind, frozenset())

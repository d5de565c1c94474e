"""What a policy is asked, and how the objects and kinds it talks about are named.

The parts of an AdmissionReview request a policy reads (``AdmissionRequest``, already
type-checked), the operations, ``GroupKind`` and ``ObjectRef``. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

JSONObject = Mapping[str, Any]


T = TypeVar("T")


CREATE = "CREATE"


UPDATE = "UPDATE"


DELETE = "DELETE"


CONNECT = "CONNECT"


OPERATIONS = frozenset({CREATE, UPDATE, DELETE, CONNECT})


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
class GroupVersionResource:
    """The REST resource a request was sent for (``request.resource``): what tells a pool's
    ``scale`` from a replica set's, whose object is the same autoscaling/v1 Scale."""

    group: str = ""
    version: str = ""
    resource: str = ""


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
    resource: GroupVersionResource = GroupVersionResource()
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

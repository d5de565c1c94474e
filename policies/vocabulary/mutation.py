"""Mutations: changes gpu-guard may make to an object on its way in, each opt-in and explained.

A mutation is a pure function like a policy. It returns JSON Patch operations (RFC 6902) and the
sentence the user sees as a warning, so nothing changes silently. A mutation must be idempotent:
run on its own output it returns nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from policies.vocabulary.requests import AdmissionRequest, GroupKind

PatchOp = Mapping[str, Any]
#: The view a mutation is given (``Mutation[ClusterView]``), as for ``Policy``.
View = TypeVar("View")


@dataclass(frozen=True, slots=True)
class Change:
    patch: tuple[PatchOp, ...]
    message: str


@dataclass(frozen=True, slots=True)
class Mutation(Generic[View]):
    id: str
    summary: str
    reason: str
    scope: Mapping[GroupKind, frozenset[str]]
    mutate: Callable[[AdmissionRequest, View], Sequence[Change]]
    """Called by the engine only for requests in ``scope`` that carry an object."""


def pointer(*parts: str) -> str:
    """A JSON Pointer (RFC 6901) from path parts, escaping ``~`` and ``/``."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)

"""Which policies and mutations a request reaches, and whether it is an owner's own write.

Built once from the declarations' ``scope`` (and the policies' ``owners``): one dict hit per
request. The one place that decides what applies to a request; validation, mutation and the
pipeline's gate ask here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

from policies.cluster.kinds import JUDGED_SUBRESOURCES, judged_as
from policies.cluster.view import ClusterView
from policies.vocabulary.mutation import Mutation
from policies.vocabulary.owners import Owner
from policies.vocabulary.requests import AdmissionRequest, GroupKind
from policies.vocabulary.verdicts import Policy


class _Scoped(Protocol):
    @property
    def scope(self) -> Mapping[GroupKind, frozenset[str]]: ...


_S = TypeVar("_S", bound=_Scoped)
_Index = Mapping[tuple[GroupKind, str], tuple[_S, ...]]


class Scope:
    """The registry's policies and mutations, by the kind and operation they judge."""

    def __init__(
        self, policies: Sequence[Policy[ClusterView]], mutations: Sequence[Mutation[ClusterView]]
    ) -> None:
        self.policies = tuple(policies)
        self.mutations = tuple(mutations)
        self._policies: _Index[Policy[ClusterView]] = _by_target(self.policies)
        self._mutations: _Index[Mutation[ClusterView]] = _by_target(self.mutations)
        owners: dict[GroupKind, dict[Owner[ClusterView], None]] = {}
        for owner in (owner for policy in self.policies for owner in policy.owners):
            owners.setdefault(owner.kind, {})[owner] = None
        self._owners = {kind: tuple(declared) for kind, declared in owners.items()}
        """Each kind's owners as the policies declare them, in registry order, once."""

    def policies_for(self, request: AdmissionRequest) -> tuple[Policy[ClusterView], ...]:
        """The policies that judge this request, in registry order (see ``_targeted``)."""
        return _targeted(self._policies, request)

    def mutations_for(self, request: AdmissionRequest) -> tuple[Mutation[ClusterView], ...]:
        """The mutations that may change this request's object (none without an object, nor
        through a subresource: its write keeps only its own part, never the spec they patch)."""
        if request.obj is None or request.sub_resource:
            return ()
        return _targeted(self._mutations, request)

    def own_write(self, request: AdmissionRequest) -> str | None:
        """Why ``request`` is its object's owner writing it (exempt whole), else None: asked
        only of the owners of its kind the policies declare."""
        for owner in self._owners.get(request.group_kind, ()):
            if owner.operations and request.operation not in owner.operations:
                continue
            if (why := owner.own_write(request)) is not None:
                return why
        return None


def _by_target(items: Sequence[_S]) -> dict[tuple[GroupKind, str], tuple[_S, ...]]:
    """Each (kind, operation) with the items whose scope names it, in their order."""
    index: dict[tuple[GroupKind, str], tuple[_S, ...]] = {}
    for item in items:
        for kind, operations in item.scope.items():
            for operation in operations:
                index[(kind, operation)] = (*index.get((kind, operation), ()), item)
    return index


def _targeted(index: _Index[_S], request: AdmissionRequest) -> tuple[_S, ...]:
    """What ``index`` holds for the request's kind and operation; a subresource only if writes
    through it change what the kind's policies read (``JUDGED_SUBRESOURCES``; a
    pool's or VMIRS's scale, judged as its parent: ``judged_as``)."""
    kind = judged_as(request)
    if request.sub_resource and (kind, request.sub_resource) not in JUDGED_SUBRESOURCES:
        return ()
    return index.get((kind, request.operation), ())

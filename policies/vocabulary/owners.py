"""The controllers that own what a policy judges, declared with the policy (``Policy.owners``).

A platform's controller writes its own objects (the kubelet its Node, HCO the KubeVirt CR its
HyperConverged owns), and one may revert whatever anyone else writes there. Both change what the
policy's answer should be, and both are facts of the platform, not of the engine: a policy names
the owners of the kinds it judges, and the engine reads every declaration the same way. An own
write is never judged (the request is exempt whole and answered at once); a deny of an edit the
owner will revert would only stand in the way, so it warns and says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from policies.vocabulary.requests import AdmissionRequest, GroupKind

#: The view ``reverts`` is given (``Owner[ClusterView]``), as for ``Policy``.
View = TypeVar("View")


@dataclass(frozen=True, slots=True)
class Owner(Generic[View]):
    """A controller that owns objects of a kind some policies judge."""

    kind: GroupKind
    """The kind it owns objects of: asked only of requests of that kind."""
    own_write: Callable[[AdmissionRequest], str | None]
    """Why a request is this controller writing its own object (never judged), else None. It
    recognises the identity the API server authenticated, whole, never a guess."""
    reverts: Callable[[AdmissionRequest, View], str | None] | None = None
    """Why a deny of this request would only stand in the way (the owner reverts the edit
    anyway), else None; asked only of a request some verdict denies."""
    operations: frozenset[str] = frozenset()
    """The operations whose writes it owns (what ends a pod owns its phase, an UPDATE, not its
    creation); empty: every one. Asked, and declared, only for those."""

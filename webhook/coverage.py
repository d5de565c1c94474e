"""What an answer could not see: the kinds a policy or diagnosis needs that the state never saw.

A kind is seen when a state file holds an object of it or a snapshot's record says it was listed
(``StateCoverage``), or, live, once its watch has synced since start, a 404 included
(``webhook.state.live.LiveState``). A policy that asked a question resting on an unseen kind
(``policies.cluster.coverage.Recording``) did not judge: from files it answers "not judged" with
the export that fills the gap (``check`` exits 3); live, before the first sync, a policy whose
action is deny denies ("retry in a moment") and the others warn as ``Engine.unevaluated`` does.
An audit leaves out whatever needs an unseen kind and lists those kinds first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from policies.cluster.coverage import EXPORT_NAME, Recording, kind_names, required
from policies.cluster.kinds import WATCHED, WATCHED_KINDS
from policies.cluster.view import ClusterView
from policies.vocabulary.requests import AdmissionRequest, GroupKind
from policies.vocabulary.verdicts import Action, Policy, Verdict

_NAMESPACED = {r.kind for r in WATCHED if r.namespaced}


class Freshness(Protocol):
    """How much the state can be trusted per kind: how stale (live watches), and which kinds
    it has never seen."""

    def stale_reasons(self, kinds: Iterable[GroupKind]) -> list[str]: ...

    def unseen(self, reads: Iterable[GroupKind]) -> list[GroupKind]:
        """Of ``reads``, the kinds not seen that an answer cannot go without."""
        ...


@dataclass(frozen=True)
class StateCoverage:
    """A state read from files: never stale; ``seen`` as the files showed it when loaded (what
    ``check`` adds afterwards is not evidence of the cluster). Kinds that may be absent
    (``MAY_BE_ABSENT``) are none when unseen."""

    seen: frozenset[GroupKind]

    def stale_reasons(self, kinds: Iterable[GroupKind]) -> list[str]:
        return []

    def unseen(self, reads: Iterable[GroupKind]) -> list[GroupKind]:
        return [k for k in required(reads) if k not in self.seen]

    @property
    def missing(self) -> list[GroupKind]:
        """Every watched kind not seen, in watch order (what an audit lists first)."""
        return [k for k in WATCHED_KINDS if k not in self.seen]


def export_command(kinds: Iterable[GroupKind]) -> str:
    """The ``kubectl get`` that exports exactly ``kinds`` (``-A`` when one is namespaced)."""
    kinds = list(kinds)
    every = " -A" if any(k in _NAMESPACED for k in kinds) else ""
    return f"kubectl get {','.join(EXPORT_NAME[k] for k in kinds)}{every} -o yaml"


def export_hint(kinds: Sequence[GroupKind]) -> str:
    """How to add ``kinds`` to a state: kubectl for the core kinds every cluster serves; for the
    others gpu-guard snapshot first, which records a kind the cluster does not serve as none
    (kubectl naming it fails there and writes nothing)."""
    if all(not k.group for k in kinds):
        return f"add them: {export_command(kinds)}, or gpu-guard snapshot"
    return f"add them: gpu-guard snapshot, or where the cluster serves them {export_command(kinds)}"


def gap_message(coverage: Freshness, unseen: Sequence[GroupKind]) -> str:
    """Why an answer is missing, and how to fill the gap."""
    if isinstance(coverage, StateCoverage):
        return f"not judged: the state has no {kind_names(list(unseen))} ({export_hint(unseen)})"
    return f"gpu-guard has not synced {kind_names(list(unseen))} yet; retry in a moment"


Run = Callable[[Policy[ClusterView], Action, AdmissionRequest, ClusterView], list[Verdict]]


def judged_with_gaps(
    policy: Policy[ClusterView],
    action: Action,
    request: AdmissionRequest,
    view: ClusterView,
    coverage: Freshness | None,
    run: Run,
) -> list[Verdict]:
    """``run`` of a policy, minding the kinds ``coverage`` has not seen. When it asked nothing
    resting on them (the request does not touch what it judges) its answer stands; else it did
    not judge: its denies stand (seen evidence), a "not judged" verdict replaces the rest."""
    if coverage is None or not (unseen := coverage.unseen(policy.reads)):
        return run(policy, action, request, view)
    recording = Recording(view)
    verdicts = run(policy, action, request, recording.view)
    missed = [k for k in unseen if k in recording.kinds]
    if not missed:
        return verdicts
    denies = [v for v in verdicts if v.action == Action.DENY]
    return [*denies, _not_judged(policy, action, request, coverage, missed)]


def _not_judged(
    policy: Policy[ClusterView],
    action: Action,
    request: AdmissionRequest,
    coverage: Freshness,
    missed: list[GroupKind],
) -> Verdict:
    message = gap_message(coverage, missed)
    if isinstance(coverage, StateCoverage):
        outcome = min(action, Action.WARN)  # check reports it (exit 3); nothing was denied
    elif action == Action.DENY:
        outcome = Action.DENY  # live before the first sync: no silent allow
    else:
        outcome = min(action, policy.failure_action)
        message = f"gpu-guard could not evaluate this policy: {message}; not checked"
    return Verdict(policy.id, outcome, request.ref, message, evaluated=False, unseen=tuple(missed))


def downgrade(verdict: Verdict, reasons: list[str]) -> Verdict:
    """A deny that rests on a stale view, as the warning it becomes."""
    if verdict.action != Action.DENY:
        return verdict
    why = "; ".join(reasons)
    return replace(
        verdict,
        action=Action.WARN,
        message=f"not denied: gpu-guard's view is stale ({why}): {verdict.message}",
    )


class _Reads(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def reads(self) -> frozenset[GroupKind]: ...


def left_out(
    items: Iterable[_Reads], coverage: Freshness | None
) -> dict[GroupKind, tuple[str, ...]]:
    """Each kind ``coverage`` never saw that a policy or diagnosis needs, with their ids (in
    watch order): what an audit leaves out rather than answer as if there were none."""
    if coverage is None:
        return {}
    needed: dict[GroupKind, list[str]] = {}
    for item in items:
        for kind in coverage.unseen(item.reads):
            needed.setdefault(kind, []).append(item.id)
    return {k: tuple(needed[k]) for k in WATCHED_KINDS if k in needed}

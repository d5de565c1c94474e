"""The one evaluator: policies on a request, and policies' audits with diagnoses on a snapshot.

Admission, ``check`` and ``audit`` all go through ``Engine``, split by what it serves:
``scope`` (which policies and mutations a request reaches, and an owner's own writes),
``validate`` (the policies' verdicts as a ``Decision``), ``mutate`` (the enabled mutations'
patch) and ``audit`` (policies' audits and diagnoses, with enrichment); ``verdicts`` is what
validation and the audit both say of a policy. Those modules are the engine's own: everything
else imports the names below from ``webhook.engine``.

The engine reads every declaration the same way: actions from the configuration, a finding's cap,
exempt namespaces, a policy's owners (``Policy.owners``), a check that raises isolated (the
request gets that policy's failure mode, never a 500; an audit reports what still worked).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from policies.cluster.view import AuditView, ClusterView
from policies.registry import ALL_DIAGNOSES, ALL_MUTATIONS, ALL_POLICIES
from policies.vocabulary.audit import Diagnosis, Track, untracked
from policies.vocabulary.mutation import Mutation
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Policy
from webhook.config import GuardConfig
from webhook.coverage import Freshness
from webhook.engine import audit, mutate, validate
from webhook.engine.audit import DIAGNOSIS_FAILED, Audit
from webhook.engine.mutate import MutationResult
from webhook.engine.scope import Scope
from webhook.engine.validate import Decision

__all__ = ["DIAGNOSIS_FAILED", "Audit", "Decision", "Engine", "Freshness", "MutationResult"]


class Engine:
    def __init__(
        self,
        config: GuardConfig | None = None,
        policies: Sequence[Policy[ClusterView]] = ALL_POLICIES,
        mutations: Sequence[Mutation[ClusterView]] = ALL_MUTATIONS,
        diagnoses: Sequence[Diagnosis[AuditView]] = ALL_DIAGNOSES,
    ):
        self.config = config if config is not None else GuardConfig()
        """Replaced whole when the configuration file changes: one request sees one config."""
        self.scope = Scope(policies, mutations)
        self.policies = self.scope.policies
        self.mutations = self.scope.mutations
        self.diagnoses = tuple(diagnoses)

    def policies_for(self, request: AdmissionRequest) -> tuple[Policy[ClusterView], ...]:
        """The policies that judge this request, in registry order."""
        return self.scope.policies_for(request)

    def mutations_for(self, request: AdmissionRequest) -> tuple[Mutation[ClusterView], ...]:
        """The mutations that may change this request's object (none without an object, nor
        through a subresource)."""
        return self.scope.mutations_for(request)

    def own_write(self, request: AdmissionRequest) -> str | None:
        """Why ``request`` is its object's owner writing it (never judged: answered at once,
        without waiting for a turn), else None."""
        return self.scope.own_write(request)

    def evaluate(
        self, request: AdmissionRequest, view: ClusterView, freshness: Freshness | None = None
    ) -> Decision:
        """Every applicable policy on one request. A deny that rests on stale knowledge
        (``freshness``) is downgraded to a warning that says how stale it is; a deny the object
        overrides (with a reason) becomes a warning naming who and why."""
        return validate.evaluate(self.config, self.scope, request, view, freshness)

    def unevaluated(self, request: AdmissionRequest, why: str) -> Decision:
        """The answer when there is no time to judge ``request``: each policy that would have
        judged it answers by its failure mode (fail-open policies allow with a warning)."""
        return validate.unevaluated(self.config, self.scope, request, why)

    def mutate(self, request: AdmissionRequest, view: ClusterView) -> MutationResult:
        """The enabled mutations' patch and the warnings that explain it; never a denial."""
        return mutate.mutate(self.config, self.scope, request, view)

    def unmutated(self, request: AdmissionRequest, why: str) -> MutationResult:
        """The answer when there is no time to mutate ``request``: no patch, and a warning from
        each mutation that would have run saying it was not applied and why (a mutation never
        denies, so there is no failure mode to choose)."""
        return mutate.unmutated(self.config, self.scope, request, why)

    def audit(
        self,
        view: ClusterView,
        now: datetime,
        track: Track = untracked,
        coverage: Freshness | None = None,
    ) -> Audit:
        """Every policy's audit and every diagnosis over one snapshot, configuration applied
        once: actions (``off`` drops a finding), exempt namespaces, and enrichment (a diagnosis
        that explains a policy's verdict gives it its chain and repair steps). Durations are
        measured to ``now``; ``track`` shows progress. What needs a kind ``coverage`` never saw
        is left out (``Audit.unseen``)."""
        return audit.audit(self.config, self.policies, self.diagnoses, view, now, track, coverage)

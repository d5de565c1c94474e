"""Mutation: the enabled mutations a request reaches, as one JSON patch and the warnings that
explain it. A mutation never denies: one that cannot run says so and the object goes in as sent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

from policies.cluster.view import ClusterView
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.mutation import Mutation, PatchOp
from policies.vocabulary.requests import AdmissionRequest
from webhook.config import GuardConfig
from webhook.engine.scope import Scope

log = logging.getLogger("gpu-guard.engine")


@dataclass
class MutationResult:
    patch: list[PatchOp] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)


def enabled(
    config: GuardConfig, scope: Scope, request: AdmissionRequest
) -> Iterator[Mutation[ClusterView]]:
    """The mutations the configuration turns on that may change this request (none for an
    exempt request)."""
    if config.exemptions.reason(request) is not None:
        return
    for mutation in scope.mutations_for(request):
        if mutation.id in config.mutations:
            yield mutation


def unmutated(
    config: GuardConfig, scope: Scope, request: AdmissionRequest, why: str
) -> MutationResult:
    """No patch, and a warning from each mutation that would have run (see ``Engine.unmutated``)."""
    return MutationResult(
        warnings=[f"[{m.id}] not applied: {why}" for m in enabled(config, scope, request)]
    )


def mutate(
    config: GuardConfig, scope: Scope, request: AdmissionRequest, view: ClusterView
) -> MutationResult:
    """The enabled mutations' patch and the warnings that explain it; never a denial."""
    result = MutationResult()
    for mutation in enabled(config, scope, request):
        try:
            changes = mutation.mutate(request, view)
        except ObjectError as exc:
            result.warnings.append(f"[{mutation.id}] not applied: cannot read {request.kind} {exc}")
            continue
        except Exception:
            log.exception(
                "mutation %s raised on %s %s (uid %s)",
                mutation.id,
                request.operation,
                request.kind,
                request.uid,
            )
            result.warnings.append(f"[{mutation.id}] not applied: internal error")
            continue
        for change in changes:
            result.patch.extend(change.patch)
            result.warnings.append(f"[{mutation.id}] {change.message}")
            result.applied.append(mutation.id)
    return result

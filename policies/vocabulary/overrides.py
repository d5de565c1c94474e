"""Per-object overrides: an admin's signed-off exception to named policies, never an anonymous one.

    metadata:
      annotations:
        gpu-guard.io/override: workload-switch-with-gpu-pods
        gpu-guard.io/override-reason: "INC-2231: jobs checkpointed, owner agreed"

A deny from a named policy becomes a warning that names the user and the reason. An override
without a reason, or naming an unknown policy, is itself refused.
"""

from __future__ import annotations

from collections.abc import Mapping

from policies.vocabulary.requests import JSONObject

OVERRIDE_ANNOTATION = "gpu-guard.io/override"
OVERRIDE_REASON_ANNOTATION = "gpu-guard.io/override-reason"
OVERRIDE_POLICY_ID = "override-without-reason"


def overrides_of(obj: JSONObject | None) -> tuple[tuple[str, ...], str]:
    """The policy ids an object overrides and the reason given ('' when none)."""
    if obj is None:
        return (), ""
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping):
        return (), ""
    named = annotations.get(OVERRIDE_ANNOTATION)
    reason = annotations.get(OVERRIDE_REASON_ANNOTATION)
    ids = tuple(p.strip() for p in named.split(",") if p.strip()) if isinstance(named, str) else ()
    return ids, reason.strip() if isinstance(reason, str) else ""

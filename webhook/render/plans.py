"""Each repair plan once in the human-readable audit outputs (text, table, Markdown).

The VMs waiting for a node's GPUs are repaired by repairing that node, so their remediation
repeats the node's plan step by step (JSON and PolicyReports keep every finding's full plan, for
machines). A finding whose leading steps repeat an earlier finding's plan refers to that finding
for them and shows only its own steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from policies.vocabulary.audit import AuditFinding

_LEAST_SHARED = 2
"""Fewer shared steps than this are shown again: a reference would be no shorter."""


@dataclass(frozen=True)
class Plan:
    """How one finding's remediation is shown."""

    reference: str
    """'' or "as in finding 1 ([policy] on Node omen2)": what ``shared`` repeats."""
    shared: str
    """The step numbers the reference stands for ("1-3"), '' when none."""
    steps: tuple[tuple[int, str], ...]
    """The steps shown in full, with their numbers in the finding's plan."""


def _shared_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    count = 0
    for left, right in zip(a, b, strict=False):
        if left != right:
            break
        count += 1
    return count


def plans(findings: Sequence[AuditFinding]) -> list[Plan]:
    """Each finding's plan, in order; a plan whose leading steps were printed in full before
    (by the first finding that printed them) refers to that finding instead."""
    out: list[Plan] = []
    for i, f in enumerate(findings):
        steps = f.verdict.remediation
        best, at = 0, -1
        for j in range(i):
            if out[j].reference:  # refer only to a plan printed in full
                continue
            length = _shared_prefix(steps, findings[j].verdict.remediation)
            if length > best:
                best, at = length, j
        if best < _LEAST_SHARED:
            out.append(Plan("", "", tuple(enumerate(steps, start=1))))
            continue
        source = findings[at].verdict
        shared = f"1-{best}"
        reference = (
            f"as in finding {at + 1} ([{source.policy}] on {source.resource.kind} "
            f"{source.resource})"
        )
        own = tuple((n, text) for n, text in enumerate(steps, start=1) if n > best)
        out.append(Plan(reference, shared, own))
    return out

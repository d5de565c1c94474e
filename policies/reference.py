"""The policy reference: what each policy guards, its scope, default action and why.

One text, two outlets: ``gpu-guard policies`` prints it, and ``docs/policies.md`` is generated
from it (``python -m policies.reference > docs/policies.md``; a test keeps the two equal).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from policies.cluster.feature_gates import GATE_TABLE, READING_RULES, TABLE_RELEASES
from policies.cluster.view import ClusterView
from policies.registry import ALL_DIAGNOSES, ALL_MUTATIONS, ALL_POLICIES
from policies.vocabulary.requests import GroupKind
from policies.vocabulary.verdicts import Policy

REGENERATE = "python -m policies.reference > docs/policies.md"


def _scope(policy: Policy[ClusterView]) -> str:
    return "; ".join(f"{kind} {', '.join(sorted(ops))}" for kind, ops in policy.scope.items())


def _reads(reads: frozenset[GroupKind], optional: frozenset[GroupKind]) -> str:
    """ "Node, Pod; absent means none: ResourceClaim.resource.k8s.io" """
    required = ", ".join(sorted(str(kind) for kind in reads - optional)) or "nothing"
    if not optional:
        return required
    return f"{required}; absent means none: {', '.join(sorted(str(k) for k in optional))}"


def reference_text(policies: Sequence[Policy[ClusterView]] = ALL_POLICIES) -> str:
    """The policy reference as Markdown: ids, scope, default action and why."""
    lines = [
        "# gpu-guard policies",
        "",
        f"Generated from `policies/registry.py` by `{REGENERATE}`;",
        "`gpu-guard policies` prints the same text. The configuration file changes a policy's",
        "action: `policies: {<id>: {action: deny|warn|audit|off}}`.",
        "",
        "| policy | default | applies to | audits existing objects |",
        "|---|---|---|---|",
    ]
    for policy in policies:
        audits = "yes" if policy.audit else "no"
        lines.append(
            f"| `{policy.id}` | {policy.default_action.label} | {_scope(policy)} | {audits} |"
        )
    lines.append("")
    for policy in policies:
        lines += [
            f"## `{policy.id}`",
            "",
            policy.summary,
            "",
            f"- applies to: {_scope(policy)}",
            f"- default action: **{policy.default_action.label}**: {policy.default_reason}",
            f"- when the policy itself fails: {policy.failure_action.label}",
            f"- reads (not judged without them, a deny rests on their fresh knowledge): "
            f"{_reads(policy.reads, policy.optional)}",
            f"- audits existing objects: {'yes' if policy.audit else 'no (it judges changes)'}",
            "",
        ]
    lines += [
        "# Audit diagnoses",
        "",
        "Found by `gpu-guard audit` over what already exists; no admission request "
        "triggers them. Their action is set the same way.",
        "",
    ]
    for diagnosis in ALL_DIAGNOSES:
        lines += [
            f"## `{diagnosis.id}`",
            "",
            diagnosis.summary,
            "",
            f"- default action: **{diagnosis.default_action.label}**, severity "
            f"{diagnosis.default_severity.label}: {diagnosis.reason}",
            f"- reads (left out without them): {_reads(diagnosis.reads, diagnosis.optional)}",
            "",
        ]
    lines += [
        "# Mutations",
        "",
        "Off unless the configuration switches them on: "
        "`mutations: {<id>: {enabled: true}}`. Each change is also a warning.",
        "",
    ]
    for mutation in ALL_MUTATIONS:
        lines += [f"## `{mutation.id}`", "", mutation.summary, "", f"- {mutation.reason}", ""]
    return "\n".join(lines + gates_section())


def gates_section() -> list[str]:
    """The KubeVirt feature gates the policies read, by KubeVirt minor, and how they read them."""
    minors = [f"{major}.{minor}" for major, minor in TABLE_RELEASES]
    lines = [
        "# KubeVirt feature gates",
        "",
        "Every policy reads a gate of the KubeVirt CR the way the KubeVirt it runs reads it "
        "(`policies/cluster/feature_gates.py`; the sources, line by line, are in "
        "[feature-gates.md](feature-gates.md)):",
        "",
        *(f"- {rule}" for rule in READING_RULES),
        "",
        "| gate | " + " | ".join(f"KubeVirt {m}" for m in minors) + " |",
        "|---|" + "---|" * len(minors),
    ]
    for gate, by_release in GATE_TABLE.items():
        row = " | ".join(by_release[r] for r in TABLE_RELEASES)
        lines.append(f"| `{gate}` | {row} |")
    return [*lines, ""]


if __name__ == "__main__":
    sys.stdout.write(reference_text())

"""The policy reference: what each policy guards, its scope, default action and why.

One text, two outlets: ``gpu-guard policies`` prints it, and ``docs/policies.md`` is generated
from it by ``make generate`` (tools/generate.py; a test keeps the two equal).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from policies.cluster.coverage import absent_means_none
from policies.cluster.feature_gates import GATE_TABLE, READING_RULES, TABLE_RELEASES
from policies.cluster.record import CARRIED
from policies.cluster.view import AuditView, ClusterView
from policies.registry import ALL_DIAGNOSES, ALL_MUTATIONS, ALL_POLICIES
from policies.vocabulary.audit import Diagnosis
from policies.vocabulary.mutation import Mutation
from policies.vocabulary.requests import GroupKind
from policies.vocabulary.verdicts import Policy

REGENERATE = "make generate"


def _scope(policy: Policy[ClusterView]) -> str:
    return "; ".join(f"{kind} {', '.join(sorted(ops))}" for kind, ops in policy.scope.items())


def _reads(reads: frozenset[GroupKind]) -> str:
    """ "Node, Pod; absent means none: ResourceClaim.resource.k8s.io" """
    optional = absent_means_none(reads)
    required = ", ".join(sorted(str(kind) for kind in reads - optional)) or "nothing"
    if not optional:
        return required
    return f"{required}; absent means none: {', '.join(sorted(str(k) for k in optional))}"


GENERATED_NOTE = (
    f"Generated from `policies/registry.py` by `{REGENERATE}`;\n"
    "`gpu-guard policies` prints the same text. "
)
"""For the maintainers reading docs/policies.md; ``gpu-guard policies`` leaves it out."""


def reference_text(
    policies: Sequence[Policy[ClusterView]] = ALL_POLICIES, *, generated_note: bool = True
) -> str:
    """The policy reference as Markdown: ids, scope, default action and why."""
    lines = [
        "# gpu-guard policies",
        "",
        (GENERATED_NOTE if generated_note else "") + "The configuration file changes a policy's\n"
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
        lines += _policy_section(policy)
    lines += [
        "# Audit diagnoses",
        "",
        "Found by `gpu-guard audit` over what already exists; no admission request "
        "triggers them. Their action is set the same way.",
        "",
    ]
    for diagnosis in ALL_DIAGNOSES:
        lines += _diagnosis_section(diagnosis)
    lines += [
        "# Mutations",
        "",
        "Off unless the configuration switches them on: "
        "`mutations: {<id>: {enabled: true}}`. Each change is also a warning.",
        "",
    ]
    for mutation in ALL_MUTATIONS:
        lines += _mutation_section(mutation)
    return "\n".join(lines + api_server_section() + gates_section())


def _policy_section(policy: Policy[ClusterView]) -> list[str]:
    return [
        f"## `{policy.id}`",
        "",
        policy.summary,
        "",
        f"- applies to: {_scope(policy)}",
        f"- default action: **{policy.default_action.label}**: {policy.default_reason}",
        f"- when the policy itself fails: {policy.failure_action.label}",
        f"- reads (not judged without them, a deny rests on their fresh knowledge): "
        f"{_reads(policy.reads)}",
        f"- audits existing objects: {'yes' if policy.audit else 'no (it judges changes)'}",
        "",
    ]


def _diagnosis_section(diagnosis: Diagnosis[AuditView]) -> list[str]:
    return [
        f"## `{diagnosis.id}`",
        "",
        diagnosis.summary,
        "",
        f"- default action: **{diagnosis.default_action.label}**, severity "
        f"{diagnosis.default_severity.label}: {diagnosis.reason}",
        f"- reads (left out without them): {_reads(diagnosis.reads)}",
        "",
    ]


def _mutation_section(mutation: Mutation[ClusterView]) -> list[str]:
    return [f"## `{mutation.id}`", "", mutation.summary, "", f"- {mutation.reason}", ""]


def entry_text(entry_id: str) -> str | None:
    """One policy's, diagnosis's or mutation's section of the reference; None if no such id."""
    for policy in ALL_POLICIES:
        if policy.id == entry_id:
            return "\n".join(_policy_section(policy))
    for diagnosis in ALL_DIAGNOSES:
        if diagnosis.id == entry_id:
            return "\n".join(_diagnosis_section(diagnosis))
    for mutation in ALL_MUTATIONS:
        if mutation.id == entry_id:
            return "\n".join(_mutation_section(mutation))
    return None


def entry_ids() -> list[str]:
    """Every id the reference describes, in its order."""
    return [
        *(p.id for p in ALL_POLICIES),
        *(d.id for d in ALL_DIAGNOSES),
        *(m.id for m in ALL_MUTATIONS),
    ]


def reference_entries() -> list[dict[str, object]]:
    """The reference as data (``gpu-guard policies -o json``): one object per id."""
    entries: list[dict[str, object]] = []
    for policy in ALL_POLICIES:
        entries.append(
            {
                "id": policy.id,
                "type": "policy",
                "summary": policy.summary,
                "appliesTo": {str(k): sorted(ops) for k, ops in policy.scope.items()},
                "defaultAction": policy.default_action.label,
                "reason": policy.default_reason,
                "failureAction": policy.failure_action.label,
                "denyRestsOn": sorted(str(kind) for kind in policy.reads),
                "absentMeansNone": sorted(str(kind) for kind in absent_means_none(policy.reads)),
                "auditsExisting": policy.audit is not None,
            }
        )
    for diagnosis in ALL_DIAGNOSES:
        entries.append(
            {
                "id": diagnosis.id,
                "type": "diagnosis",
                "summary": diagnosis.summary,
                "defaultAction": diagnosis.default_action.label,
                "severity": diagnosis.default_severity.label,
                "reason": diagnosis.reason,
                "reads": sorted(str(kind) for kind in diagnosis.reads),
                "absentMeansNone": sorted(str(kind) for kind in absent_means_none(diagnosis.reads)),
            }
        )
    for mutation in ALL_MUTATIONS:
        entries.append(
            {
                "id": mutation.id,
                "type": "mutation",
                "summary": mutation.summary,
                "reason": mutation.reason,
                "enabledByDefault": False,
            }
        )
    return entries


#: Policies whose admission check reads cluster state beyond the request, though their declared
#: reads could be taken for the audit of the kinds they judge, and what they read.
READS_BEYOND_THE_REQUEST = {
    "workload-label-invalid": (
        "the ClusterPolicy in force: its sandboxWorkloads.defaultWorkload is the mode an invalid "
        "label falls back to, which the warning names"
    ),
    "kubevirt-config-reverted-by-hco": (
        "the HyperConverged CR: a direct edit of HCO's KubeVirt CR is judged by what HCO "
        "writes back"
    ),
    "feature-gate-in-both-lists": (
        "the KubeVirt CR: a HyperConverged's gates are judged by the KubeVirt it translates onto"
    ),
}


def stateless_policies(policies: Sequence[Policy[ClusterView]] = ALL_POLICIES) -> list[str]:
    """The policies that need only the object, the old object and the request: the ones a
    ValidatingAdmissionPolicy could carry without a record. A policy may read the kinds it
    judges (its audit lists them); the exceptions read more at admission."""
    return [
        p.id for p in policies if p.reads <= set(p.scope) and p.id not in READS_BEYOND_THE_REQUEST
    ]


def api_server_section() -> list[str]:
    """What the API server enforces itself, with gpu-guard up or down (docs/security.md)."""
    stateless = stateless_policies()
    lines = [
        "# Enforced by the API server itself",
        "",
        "The node-label deny policies are carried into a ValidatingAdmissionPolicy "
        "(`gpu-guard-record`, `manifests/base/record.yaml`) that reads the record the audit "
        "leader keeps (`policies/cluster/record.py`): with gpu-guard down, the API server "
        "still denies what they deny, as of the record's time. "
        "[security.md](security.md#when-gpu-guard-is-down) has the failure-mode table.",
        "",
        *(f"- `{policy_id}`" for policy_id in CARRIED),
        "",
        "A policy that needs only the object, the old object and the request could be a "
        "ValidatingAdmissionPolicy of its own, with no record. "
        + (
            "These qualify, and `manifests/base/stateless.yaml` carries each as one, warning "
            "as they do: " + ", ".join(f"`{p}`" for p in stateless) + ". The others read "
            "cluster state beyond the request; these read it at admission though they judge it too:"
            if stateless
            else "None qualifies: every policy reads cluster state beyond the request; these "
            "read it at admission though they judge it too:"
        ),
        "",
        *(f"- `{pid}` reads {what}." for pid, what in READS_BEYOND_THE_REQUEST.items()),
        "",
    ]
    return lines


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

"""several-cluster-policies: the GPU Operator acts on one ClusterPolicy and ignores the rest.

Two ClusterPolicies are common (OLM's ``gpu-cluster-policy`` beside a Helm ``cluster-policy``).
The operator uses one (``objects.cluster_policy_in_force``) and marks the others ignored, so the
settings of those others — sandbox workloads, the default workload mode — do nothing, however
carefully they were written. Every policy and diagnosis judges by the one in force; this says
which it is, so nobody edits the wrong one.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from policies.kinds import CLUSTER_POLICY, object_ref
from policies.model import Action, AuditView, Diagnosis, DiagnosisFinding, Link, Severity
from policies.objects import ClusterPolicyInfo
from policies.text import few

SEVERAL_CLUSTER_POLICIES = "several-cluster-policies"


def _settings(policy: ClusterPolicyInfo) -> str:
    """What of a ClusterPolicy decides node modes, in words."""
    if not policy.sandbox_enabled:
        return "sandbox workloads off: every GPU node container"
    return f"sandbox workloads on, default {policy.default_workload}"


def _diagnose(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    policies = view.cluster.cluster_policies()
    used = view.cluster.cluster_policy()
    if len(policies) < 2 or used is None:
        return
    ignored = [p for p in policies if p.name != used.name]
    names = [p.name for p in ignored]
    resource = object_ref(CLUSTER_POLICY, "", used.name)
    differ = [p.name for p in ignored if _settings(p) != _settings(used)]
    message = (
        f"{len(policies)} ClusterPolicies exist; the GPU Operator acts on {used.name} "
        f"({_settings(used)}) and ignores {few(names)}"
    )
    if differ:
        message += f": the settings of {few(differ)} differ and have no effect"
    yield DiagnosisFinding(
        resource=resource,
        message=message,
        chain=Link(
            f"ClusterPolicy {used.name}: in force ({_settings(used)})",
            tuple(Link(f"ClusterPolicy {p.name}: ignored ({_settings(p)})") for p in ignored),
        ),
        remediation=(
            f"delete the ClusterPolicies the operator ignores ({', '.join(names)}), or move "
            f"the settings you meant into {used.name}",
        ),
    )


SEVERAL_CLUSTER_POLICIES_DIAGNOSIS = Diagnosis(
    id=SEVERAL_CLUSTER_POLICIES,
    summary=(
        "More than one ClusterPolicy exists: the GPU Operator acts on one (not marked ignored, "
        "then the oldest) and ignores the others' settings."
    ),
    default_action=Action.WARN,
    default_severity=Severity.MEDIUM,
    reason=(
        "A setting written into an ignored ClusterPolicy (sandbox workloads on, a default "
        "mode) silently does nothing; the guard judges by the one in force and says which."
    ),
    diagnose=_diagnose,
)

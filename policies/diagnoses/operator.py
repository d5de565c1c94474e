"""several-cluster-policies: the GPU Operator acts on one ClusterPolicy and ignores the rest.

Two ClusterPolicies are common (OLM's ``gpu-cluster-policy`` beside a Helm ``cluster-policy``).
The operator uses one and marks the others ignored, so the settings of those others — sandbox
workloads, the default workload mode — do nothing, however carefully they were written. Which
one is ``gpu_operator.cluster_policies_in_force``: from v26.7.0 the oldest; before, the first it
reconciled, in memory, so gpu-guard cannot know it and judges under each. This says which it is
(or that it is not known), so nobody edits the wrong one.

gpucluster-beside-clusterpolicy: GPU Operator 26.7's GPUCluster (the DRA driver) and a
ClusterPolicy (the device plugins) cannot coexist. The operator enforces it, not the API server:
each controller marks its CR notReady while the other exists and the node labeller maintains no
labels at all (gpu-operator v26.7.0 ``gpucluster_controller.go`` ``validatePrerequisites``,
``clusterpolicy_controller.go`` ``Reconcile``, ``nodelabeling_controller.go``; NVIDIA's DRA
install guide: "either a GPUCluster resource for DRA or a ClusterPolicy resource ... but not
both"; docs/vgpu.md section 7).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from policies.cluster.gpu_operator import GPU_CLUSTER_CONFLICT, ClusterPolicyInfo
from policies.cluster.kinds import CLUSTER_POLICY, GPU_CLUSTER, object_ref
from policies.cluster.policy_in_force import assumed_because
from policies.cluster.view import AuditView, ClusterView
from policies.vocabulary.audit import Diagnosis, DiagnosisFinding, Link
from policies.vocabulary.text import few
from policies.vocabulary.verdicts import Action, Severity

SEVERAL_CLUSTER_POLICIES = "several-cluster-policies"


def _settings(policy: ClusterPolicyInfo) -> str:
    """What of a ClusterPolicy decides node modes, in words."""
    if not policy.sandbox_enabled:
        return "sandbox workloads off: every GPU node container"
    return f"sandbox workloads on, default {policy.default_workload}"


def in_force_and_ignored(
    view: ClusterView,
) -> tuple[ClusterPolicyInfo, list[ClusterPolicyInfo]] | None:
    """The ClusterPolicy in force and the ones ignored, when there are several and the GPU
    Operator's version says which (v26.7.0 on: the oldest); else None."""
    policies = view.cluster_policies()
    in_force = view.cluster_policies_in_force()
    if len(policies) < 2 or len(in_force) != 1:
        return None
    used = in_force[0]
    return used, [p for p in policies if p.name != used.name]


def _unknown_choice(view: ClusterView) -> str | None:
    """When several ClusterPolicies exist and which one the operator acts on is in its memory:
    what gpu-guard does about it, in words; else None."""
    in_force = view.cluster_policies_in_force()
    if len(in_force) < 2:
        return None
    return (
        f"{len(in_force)} ClusterPolicies ({few([p.name for p in in_force])}): which one the GPU "
        f"Operator acts on is known only to it ({assumed_because(view)}), so each change is "
        "judged under each of them and denied if any would deny"
    )


def check_note(view: ClusterView) -> str | None:
    """What ``check`` says once when several ClusterPolicies exist: which one it judged by."""
    unknown = _unknown_choice(view)
    if unknown is not None:
        return unknown
    found = in_force_and_ignored(view)
    if found is None:
        return None
    used, ignored = found
    return (
        f"{len(ignored) + 1} ClusterPolicies: judged by {used.name}, the one the GPU Operator "
        f"acts on ({_settings(used)}); ignored: {few([p.name for p in ignored])}"
    )


def _diagnose(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    unknown = _unknown_choice(view.cluster)
    if unknown is not None:
        in_force = view.cluster.cluster_policies_in_force()
        message = unknown
        if len({_settings(p) for p in in_force}) > 1:
            message += "; their settings differ, so a node's mode depends on which"
        yield DiagnosisFinding(
            resource=object_ref(CLUSTER_POLICY, "", in_force[0].name),
            message=message,
            chain=Link(
                f"ClusterPolicy {in_force[0].name}",
                (
                    Link(
                        f"GPU Operator {view.cluster.gpu_operator_version() or '(version unknown)'}"
                        f": acts on one ClusterPolicy ({OPERATOR_RULES})",
                        tuple(
                            Link(f"ClusterPolicy {p.name}: {_settings(p)}{_marked(p)}")
                            for p in in_force
                        ),
                    ),
                ),
            ),
            remediation=(
                "set gpuOperator.version in gpu-guard's configuration to the operator's release "
                "(its image tag): from v26.7.0 the operator acts on the oldest",
                "keep one ClusterPolicy: delete the others once the one you keep holds the "
                "settings you mean",
            ),
        )
        return
    found = in_force_and_ignored(view.cluster)
    if found is None:
        return
    used, ignored = found
    policies = [used, *ignored]
    names = [p.name for p in ignored]
    resource = object_ref(CLUSTER_POLICY, "", used.name)
    differ = [p.name for p in ignored if _settings(p) != _settings(used)]
    message = (
        f"{len(policies)} ClusterPolicies exist; the GPU Operator acts on {used.name} "
        f"({_settings(used)}, the oldest) and ignores {few(names)}"
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


OPERATOR_RULES = "before v26.7.0 the first it reconciled, in memory; from v26.7.0 the oldest"


def _marked(policy: ClusterPolicyInfo) -> str:
    """What its status says, shown but not trusted (anyone with status rights writes it)."""
    return f"; status.state {policy.state} (not trusted)" if policy.state else ""


SEVERAL_CLUSTER_POLICIES_DIAGNOSIS = Diagnosis(
    id=SEVERAL_CLUSTER_POLICIES,
    summary=(
        "More than one ClusterPolicy exists: the GPU Operator acts on one (from v26.7.0 the "
        "oldest; before, the first it reconciled, kept in memory) and ignores the others' "
        "settings."
    ),
    default_action=Action.WARN,
    default_severity=Severity.MEDIUM,
    reason=(
        "A setting written into an ignored ClusterPolicy (sandbox workloads on, a default "
        "mode) silently does nothing; the guard judges by the one in force and says which, or, "
        "when only the operator knows, under each."
    ),
    diagnose=_diagnose,
    reads=frozenset({CLUSTER_POLICY}),
)


GPUCLUSTER_BESIDE_CLUSTERPOLICY = "gpucluster-beside-clusterpolicy"


def _state(state: str) -> str:
    return f"status.state {state}" if state else "not reconciled yet"


def _diagnose_both(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    clusters = view.cluster.gpu_clusters()
    policies = view.cluster.cluster_policies()
    if not clusters or not policies:
        return
    names = [p.name for p in policies]
    for cluster in clusters:
        yield DiagnosisFinding(
            resource=object_ref(GPU_CLUSTER, "", cluster.name),
            message=(
                f"GPUCluster {cluster.name} and ClusterPolicy {few(names)} both exist: "
                f'the GPU Operator refuses both ("{GPU_CLUSTER_CONFLICT}", gpu-operator '
                "v26.7.0): each is kept notReady and no node's GPU labels are maintained"
            ),
            chain=Link(
                f"GPUCluster {cluster.name}: DRA driver ({_state(cluster.state)})",
                tuple(
                    Link(f"ClusterPolicy {p.name}: device plugins ({_state(p.state)})")
                    for p in policies
                ),
            ),
            remediation=(
                "keep one: delete the GPUCluster to stay on the device plugins (kubectl delete "
                f"gpuclusters.nvidia.com {cluster.name}), or the ClusterPolicy "
                f"({', '.join(names)}) for DRA; NVIDIA supports no in-place migration from "
                "ClusterPolicy to GPUCluster (it asks for a new cluster)",
            ),
        )


GPUCLUSTER_BESIDE_CLUSTERPOLICY_DIAGNOSIS = Diagnosis(
    id=GPUCLUSTER_BESIDE_CLUSTERPOLICY,
    summary=(
        "A GPUCluster (GPU Operator 26.7, the DRA driver) and a ClusterPolicy both exist: the "
        "operator runs neither and maintains no node labels until one is deleted."
    ),
    default_action=Action.WARN,
    default_severity=Severity.HIGH,
    reason=(
        "Nothing the API server refuses, and deleting either is the user's choice; but "
        "until then the operator reconciles neither CR, so every GPU setting is on hold."
    ),
    diagnose=_diagnose_both,
    reads=frozenset({CLUSTER_POLICY, GPU_CLUSTER}),
)

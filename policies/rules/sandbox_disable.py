"""sandbox-disable-with-live-vms: a ClusterPolicy change that switches nodes' modes under them.

The ClusterPolicy decides the mode of many nodes at once: ``sandboxWorkloads.enabled: false``
makes every node container, and ``sandboxWorkloads.defaultWorkload`` is the mode of every GPU node
without a valid ``nvidia.com/gpu.workload.config`` label. A change that moves a node out of its
VM mode removes the sandbox device plugin and vfio-manager (whose preStop unbinds the GPUs) under
running GPU VMs; one that moves a node into a VM mode deploys vfio-manager, which binds every GPU
to vfio-pci under running CUDA pods. Both are the node-label hazards, reached cluster-wide.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.cluster.gpu_operator import ClusterPolicyInfo, project_cluster_policy
from policies.cluster.gpu_users import gpu_users_on, gpu_vmis_on, virtctl_stop
from policies.cluster.kinds import (
    CLUSTER_POLICY,
    NODE,
    POD,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
    VIRTUAL_MACHINE_INSTANCE,
)
from policies.cluster.view import ClusterView
from policies.cluster.workload import VM_MODES, WORKLOAD_LABEL, effective_mode
from policies.vocabulary.requests import UPDATE, AdmissionRequest
from policies.vocabulary.text import few, plural
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "sandbox-disable-with-live-vms"
SHOWN_NODES = 3


def describe_change(before: ClusterPolicyInfo, after: ClusterPolicyInfo) -> str:
    parts = []
    if before.sandbox_enabled != after.sandbox_enabled:
        parts.append(
            f"sandboxWorkloads.enabled {str(before.sandbox_enabled).lower()} -> "
            f"{str(after.sandbox_enabled).lower()}"
        )
    if before.default_workload != after.default_workload:
        parts.append(f"defaultWorkload {before.default_workload} -> {after.default_workload}")
    return " and ".join(parts)


def _may_be_in_force(name: str, view: ClusterView) -> bool:
    """Whether the GPU Operator may be acting on the ClusterPolicy ``name``: from v26.7.0 only
    the oldest counts; where the choice is in the operator's memory, each may (and with none
    known yet, this one is judged)."""
    in_force = [p.name for p in view.cluster_policies_in_force()]
    return not in_force or name in in_force


def affected_nodes(
    before: ClusterPolicyInfo, after: ClusterPolicyInfo, view: ClusterView
) -> list[str]:
    """The nodes whose mode the change can move, from the indexes: labelled VM-mode nodes when
    sandbox workloads are switched, and GPU nodes without a valid label when the default moves.
    Nodes labelled container stay container whatever the ClusterPolicy says."""
    names: set[str] = set()
    if before.sandbox_enabled != after.sandbox_enabled:
        for mode in sorted(VM_MODES):
            names.update(view.nodes_labelled(WORKLOAD_LABEL, mode))
    if effective_mode({}, before) != effective_mode({}, after):
        names.update(view.gpu_nodes_without_workload_label())
    return sorted(names)


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    if request.obj is None or request.old is None:
        return ()
    before = project_cluster_policy(request.old)
    after = project_cluster_policy(request.obj)
    change = describe_change(before, after)
    if not change or not _may_be_in_force(before.name, view):
        return ()
    leaving: list[tuple[str, str, str]] = []  # (node, from mode, to mode)
    entering: list[tuple[str, str, str]] = []
    for name in affected_nodes(before, after, view):
        node = view.node(name)
        if node is None:
            continue
        was, will = effective_mode(node.labels, before), effective_mode(node.labels, after)
        if was == will:
            continue
        if was in VM_MODES:
            leaving.append((name, was, will))
        if will in VM_MODES:
            entering.append((name, was, will))
    findings = []
    vm_finding = _vms_lose_their_gpus(change, leaving, after.sandbox_enabled, view)
    if vm_finding is not None:
        findings.append(vm_finding)
    findings.extend(_pods_lose_their_gpus(change, entering, view))
    return findings


def _vms_lose_their_gpus(
    change: str, leaving: list[tuple[str, str, str]], sandbox_after: bool, view: ClusterView
) -> Finding | None:
    hit = [(name, was, will, gpu_vmis_on(name, view)) for name, was, will in leaving]
    hit = [entry for entry in hit if entry[3]]
    if not hit:
        return None
    nodes = [f"{name} ({was} -> {will})" for name, was, will, _ in hit]
    vmis = [vmi for *_, on_node in hit for vmi in on_node]
    message = (
        f"{change} moves {few(nodes)} under live GPU VMs {few([v.key for v in vmis])}: the "
        "sandbox plugin goes, vfio-manager unbinds their GPUs. Stop the VMs first."
    )
    remediation = [virtctl_stop(v) for v in vmis]
    if sandbox_after:
        # The default moved: a label naming the node's mode keeps it where it is.
        remediation += [
            f"or pin each node's mode first: kubectl label node {name} {WORKLOAD_LABEL}={was}"
            for name, was, _, _ in hit
        ]
    return Finding(message, remediation=tuple(remediation))


def _pods_lose_their_gpus(
    change: str, entering: list[tuple[str, str, str]], view: ClusterView
) -> list[Finding]:
    """One finding per node for the first few (each names pods on one node, to confirm), then
    one for the rest."""
    hit = [(name, was, will, gpu_users_on(name, view)) for name, was, will in entering]
    hit = [entry for entry in hit if entry[3]]
    findings = []
    for name, was, will, pods in hit[:SHOWN_NODES]:
        users = few([p.label for p in pods])
        message = (
            f"{change} moves {name} ({was} -> {will}) under GPU pods {users}: "
            f"vfio-manager would bind its GPUs to vfio-pci, killing them. Label {name} {was} first."
        )
        findings.append(
            Finding(
                message,
                confirm_pods_on=name,
                remediation=(f"kubectl label node {name} {WORKLOAD_LABEL}={was}",),
            )
        )
    rest = hit[SHOWN_NODES:]
    if rest:
        names = [name for name, *_ in rest]
        count = sum(len(pods) for *_, pods in rest)
        findings.append(
            Finding(
                f"{change} also moves {plural(len(rest), 'more node')} into a VM mode under "
                f"{plural(count, 'GPU pod')}: {few(names)}. Label them with their mode first.",
                remediation=tuple(
                    f"kubectl label node {name} {WORKLOAD_LABEL}={was}" for name, was, *_ in rest
                ),
            )
        )
    return findings


POLICY = Policy(
    id=ID,
    summary=(
        "A ClusterPolicy update turns sandboxWorkloads.enabled true -> false while live VMIs with "
        "NVIDIA devices run on vm-passthrough/vm-vgpu nodes, or changes sandbox workloads or "
        "defaultWorkload so that GPU nodes without a workload label (or with VM labels) change "
        "mode under running GPU pods (into a VM mode) or live GPU VMs (out of one)."
    ),
    scope={CLUSTER_POLICY: frozenset({UPDATE})},
    default_action=Action.DENY,
    default_reason=(
        "One ClusterPolicy edit switches the mode of many nodes at once: GPUs are unbound under "
        "live VMs or rebound under CUDA jobs, irreversibly. Pinning the node labels first makes it "
        "safe. A policy error only warns: the ClusterPolicy carries unrelated settings too."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=frozenset(
        {NODE, POD, CLUSTER_POLICY, RESOURCE_CLAIM, RESOURCE_SLICE, VIRTUAL_MACHINE_INSTANCE}
    ),
    optional=frozenset({CLUSTER_POLICY, RESOURCE_CLAIM, RESOURCE_SLICE}),
)

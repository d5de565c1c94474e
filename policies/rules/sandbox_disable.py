"""sandbox-disable-with-live-vms: a ClusterPolicy change that switches nodes' modes under them.

The ClusterPolicy decides the mode of many nodes at once: ``sandboxWorkloads.enabled: false``
makes every node container, and ``sandboxWorkloads.defaultWorkload`` is the mode of every GPU node
without a valid ``nvidia.com/gpu.workload.config`` label. A change that moves a node out of its
VM mode removes the sandbox device plugin and vfio-manager (whose preStop unbinds the GPUs) under
running GPU VMs and Kata pods; one that moves a node into a VM mode deploys vfio-manager, which
binds every GPU to vfio-pci under running CUDA pods. Both are the node-label hazards, reached
cluster-wide. ``sandboxWorkloads.mode`` (kubevirt <-> kata) swaps the vm-passthrough nodes'
sandbox device plugin for the other (gpu-operator ``getEffectiveStateLabels``): the live GPU VMIs
(to kata) or the Kata pods (to kubevirt) lose the plugin that serves them, as in a switch.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.cluster.coverage import GPU_USERS_READS, VM_USERS_READS
from policies.cluster.gpu_operator import (
    KATA,
    ClusterPolicyInfo,
    acts_on_the_oldest,
    project_cluster_policy,
)
from policies.cluster.gpu_users import gpu_users_on, vm_users_noun, vm_users_on
from policies.cluster.kinds import (
    CLUSTER_POLICY,
    NODE,
)
from policies.cluster.policy_in_force import may_be_in_force, under_each_policy_in_force
from policies.cluster.view import ClusterView
from policies.cluster.workload import VM_MODES, VM_PASSTHROUGH, WORKLOAD_LABEL, effective_mode
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest
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
    if before.sandbox_mode != after.sandbox_mode:
        parts.append(f"sandboxWorkloads.mode {before.sandbox_mode} -> {after.sandbox_mode}")
    return " and ".join(parts)


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
    if effective_mode({}, before) != effective_mode({}, after) or (
        before.sandbox_mode != after.sandbox_mode and effective_mode({}, after) == VM_PASSTHROUGH
    ):
        names.update(view.gpu_nodes_without_workload_label())
    if before.sandbox_mode != after.sandbox_mode:
        names.update(view.nodes_labelled(WORKLOAD_LABEL, VM_PASSTHROUGH))
    return sorted(names)


def plugin_swapped(
    was: str, will: str, before: ClusterPolicyInfo, after: ClusterPolicyInfo
) -> bool:
    """A vm-passthrough node that stays so while the sandbox plugin changes (kubevirt <-> kata)."""
    return was == will == VM_PASSTHROUGH and before.sandbox_mode != after.sandbox_mode


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    if request.obj is None or (request.old is None and request.operation == UPDATE):
        return ()
    after = project_cluster_policy(request.obj)
    if request.old is None:
        return _created(request.name, after, view)
    before = project_cluster_policy(request.old)
    change = describe_change(before, after)
    if not change or not may_be_in_force(before.name, view):
        return ()
    return _moves(change, before, after, view)


def _created(name: str, after: ClusterPolicyInfo, view: ClusterView) -> Sequence[Finding]:
    """A ClusterPolicy created (deleted and re-created, or beside another): a change from each
    one that may be in force, the strictest answer standing, or from none, under which no node
    ran a VM mode. From v26.7.0 a new one beside another is never the oldest: it changes
    nothing."""
    if view.cluster_policies_in_force() and acts_on_the_oldest(view.gpu_operator_version()):
        return ()

    def judge(in_force: ClusterPolicyInfo | None) -> Sequence[Finding]:
        before = in_force or project_cluster_policy({})
        change = describe_change(before, after)
        return (
            _moves(f"a new ClusterPolicy {name} ({change})", before, after, view) if change else ()
        )

    return under_each_policy_in_force(view, judge)


def _moves(
    change: str, before: ClusterPolicyInfo, after: ClusterPolicyInfo, view: ClusterView
) -> list[Finding]:
    """What moving from ``before`` to ``after`` does to the affected nodes' GPU users."""
    leaving: list[tuple[str, str, str]] = []  # (node, from mode, to mode)
    entering: list[tuple[str, str, str]] = []
    swapped: list[str] = []
    for name in affected_nodes(before, after, view):
        node = view.node(name)
        if node is None:
            continue
        was, will = effective_mode(node.labels, before), effective_mode(node.labels, after)
        if plugin_swapped(was, will, before, after):
            swapped.append(name)
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
    swap_finding = _plugin_swapped_under_users(change, swapped, after.sandbox_mode, view)
    if swap_finding is not None:
        findings.append(swap_finding)
    findings.extend(_pods_lose_their_gpus(change, entering, view))
    return findings


def _vms_lose_their_gpus(
    change: str, leaving: list[tuple[str, str, str]], sandbox_after: bool, view: ClusterView
) -> Finding | None:
    hit = [(name, was, will, vm_users_on(name, view)) for name, was, will in leaving]
    hit = [entry for entry in hit if entry[3]]
    if not hit:
        return None
    nodes = [f"{name} ({was} -> {will})" for name, was, will, _ in hit]
    users = [user for *_, on_node in hit for user in on_node]
    message = (
        f"{change} moves {few(nodes)} under {vm_users_noun(users)} {few([u.key for u in users])}"
        ": the sandbox plugin goes, vfio-manager unbinds their GPUs. "
        + ("Stop them first." if any(u.kata for u in users) else "Stop the VMs first.")
    )
    remediation = [u.stop for u in users]
    if sandbox_after:
        # The default moved: a label naming the node's mode keeps it where it is.
        remediation += [
            f"or pin each node's mode first: kubectl label node {name} {WORKLOAD_LABEL}={was}"
            for name, was, _, _ in hit
        ]
    return Finding(message, remediation=tuple(remediation))


def _plugin_swapped_under_users(
    change: str, swapped: list[str], mode_after: str, view: ClusterView
) -> Finding | None:
    """The users the swapped-out plugin served: VMIs when it goes to kata, Kata pods back."""
    hit = []
    for name in swapped:
        users = [u for u in vm_users_on(name, view) if u.kata == (mode_after != KATA)]
        if users:
            hit.append((name, users))
    if not hit:
        return None
    users = [user for _, on_node in hit for user in on_node]
    message = (
        f"{change} swaps the sandbox device plugin of {few([n for n, _ in hit])} under "
        f"{vm_users_noun(users)} {few([u.describe() for u in users])}: the plugin serving them "
        "goes, and a restart finds no provider. Stop them first."
    )
    return Finding(message, remediation=tuple(u.stop for u in users))


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
        "A ClusterPolicy create (judged against each that may be in force, or none) or update "
        "turns sandboxWorkloads.enabled true -> false while live VMIs with "
        "NVIDIA devices run on vm-passthrough/vm-vgpu nodes, or changes sandbox workloads or "
        "defaultWorkload so that GPU nodes without a workload label (or with VM labels) change "
        "mode under running GPU pods (into a VM mode) or live GPU VMs and Kata pods (out of one), "
        "or changes sandboxWorkloads.mode (kubevirt <-> kata) under the VMs or Kata pods of the "
        "vm-passthrough nodes whose sandbox device plugin it swaps."
    ),
    scope={CLUSTER_POLICY: frozenset({CREATE, UPDATE})},
    default_action=Action.DENY,
    default_reason=(
        "One ClusterPolicy edit switches the mode of many nodes at once: GPUs are unbound under "
        "live VMs or rebound under CUDA jobs, irreversibly. Pinning the node labels first makes it "
        "safe. A policy error only warns: the ClusterPolicy carries unrelated settings too."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=GPU_USERS_READS | VM_USERS_READS | {NODE},
)

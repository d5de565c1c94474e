"""cc-mode-change-with-gpu-users: a node's confidential computing mode changed under its GPU users.

The GPU Operator's Confidential Computing Manager applies a node's desired CC mode
(``nvidia.com/cc.mode``, else the ClusterPolicy's ``ccManager.defaultMode``) wherever it runs
(VM-mode nodes, with ``ccManager.enabled``): it evicts the other operands, changes the mode and
resets the GPUs, and "does not drain user workloads. You must make sure that no user workloads
are running on the node before you change the mode" (NVIDIA cloud-native-docs
``confidential-containers/configure-cc-mode.rst``; docs/confidential-computing.md). The GPUs are
reset under the VMs, Kata pods and pods using them. Every route to a new mode is judged: the
node's label set, changed or removed (to the default); the manager arriving where the mode it
will apply is not the one in force (its deploy label, or ``gpu.deploy.operands``, back to
true); the ClusterPolicy's default changed, or the manager enabled, for the nodes it reaches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies.cluster.cc_mode import (
    CC_MODE_LABEL,
    CC_MODE_STATE_LABEL,
    cc_manager_runs,
    default_cc_mode,
    desired_cc_mode,
)
from policies.cluster.coverage import GPU_USERS_READS, VM_USERS_READS
from policies.cluster.gpu_operator import (
    ClusterPolicyInfo,
    project_cluster_policy,
    workload_label_ignored,
)
from policies.cluster.gpu_users import gpu_users_on, held_by_daemonsets, vm_users_on
from policies.cluster.identities import KUBELET
from policies.cluster.kinds import (
    CLUSTER_POLICY,
    GPU_CLUSTER,
    NODE,
)
from policies.cluster.policy_in_force import may_be_in_force, under_each_policy_in_force
from policies.cluster.view import ClusterView
from policies.cluster.workload import VM_MODES, WORKLOAD_LABEL, effective_mode
from policies.vocabulary.fields import request_labels
from policies.vocabulary.requests import UPDATE, AdmissionRequest
from policies.vocabulary.text import drain_first, few, plural
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "cc-mode-change-with-gpu-users"


def in_force(labels: Mapping[str, str], policy: ClusterPolicyInfo | None) -> str:
    """The mode the GPUs are in as far as the state tells: the desired one where the manager
    already runs (it applied it, or is at it), else what its state label last said ('' unknown)."""
    if cc_manager_runs(labels, policy):
        return desired_cc_mode(labels, policy)
    return labels.get(CC_MODE_STATE_LABEL, "")


def target(labels: Mapping[str, str], policy: ClusterPolicyInfo | None) -> str | None:
    """The mode the manager will apply to a node with these labels, None where it does not run."""
    return desired_cc_mode(labels, policy) if cc_manager_runs(labels, policy) else None


def _safe_order(
    node: str,
    users: Sequence[str],
    stops: Sequence[str],
    daemonsets: Sequence[str],
    change: str,
    mode: str,
) -> tuple[str, ...]:
    """Cordon, stop the VM-like users, free the pods, change, wait for the state, uncordon."""
    cordon, *free = drain_first(node, users, daemonsets)
    return (
        cordon,
        *stops,
        *free,
        change,
        f"wait for {CC_MODE_STATE_LABEL}={mode} on {node}, then kubectl uncordon {node}",
    )


def _users_finding(
    node: str, what: str, mode: str, change: str, view: ClusterView
) -> Finding | None:
    """A deny naming everything that uses ``node``'s GPUs, or None when nothing does."""
    vms = vm_users_on(node, view)
    pods = gpu_users_on(node, view)
    if not vms and not pods:
        return None
    named = [u.describe() for u in vms] + [p.describe() for p in pods]
    count = len(named)
    message = (
        f"{what} on {node} while {plural(count, 'GPU user')} {'runs' if count == 1 else 'run'} "
        f"there ({few(named)}): the CC manager resets its GPUs and drains no user workload. "
        "Stop them first."
    )
    return Finding(
        message,
        confirm_pods_on=node,
        remediation=_safe_order(
            node,
            [p.key for p in pods],
            [u.stop for u in vms],
            held_by_daemonsets(pods),
            change,
            mode,
        ),
    )


def _node_change(
    node: str, old: Mapping[str, str], new: Mapping[str, str], mode: str
) -> tuple[str, str]:
    """What the update does to the node's mode, and the command that does it."""
    label, was = new.get(CC_MODE_LABEL), old.get(CC_MODE_LABEL)
    if label == was:
        state = old.get(CC_MODE_STATE_LABEL) or "unknown"
        return (
            f"the CC manager arriving would apply mode {mode} (state {state})",
            "then apply this change",
        )
    if label:
        return (
            f"{CC_MODE_LABEL} {was or 'unset'} -> {label}",
            f"kubectl label node {node} {CC_MODE_LABEL}={label} --overwrite",
        )
    return (
        f"{CC_MODE_LABEL} {was} removed (default {mode})",
        f"kubectl label node {node} {CC_MODE_LABEL}-",
    )


def _check_node(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    return under_each_policy_in_force(view, lambda policy: _judge_node(request, view, policy))


def _judge_node(
    request: AdmissionRequest, view: ClusterView, policy: ClusterPolicyInfo | None
) -> Sequence[Finding]:
    new, old = request_labels(request), request_labels(request, old=True)
    if workload_label_ignored(policy, view.gpu_clusters()):
        return ()
    mode = target(new, policy)
    if mode is None or effective_mode(old, policy) != effective_mode(new, policy):
        return ()  # a mode switch: workload-switch and passthrough-to-container judge it
    if mode == in_force(old, policy):
        return ()
    what, change = _node_change(request.name, old, new, mode)
    finding = _users_finding(request.name, what, mode, change, view)
    return (finding,) if finding is not None else ()


def _reached(
    before: ClusterPolicyInfo, after: ClusterPolicyInfo, view: ClusterView
) -> list[tuple[str, str, str]]:
    """VM-mode GPU nodes the manager runs on after the change, whose mode it changes."""
    names: set[str] = set()
    for vm_mode in sorted(VM_MODES):
        names.update(view.nodes_labelled(WORKLOAD_LABEL, vm_mode))
    if effective_mode({}, after) in VM_MODES:
        names.update(view.gpu_nodes_without_workload_label())
    hit = []
    for name in sorted(names):
        node = view.node(name)
        if node is None:
            continue
        labels = node.labels
        will = target(labels, after)
        if will is None or effective_mode(labels, before) != effective_mode(labels, after):
            continue  # not reached, or a mode switch sandbox-disable judges
        now = in_force(labels, before)
        if will != now:
            hit.append((name, will, now))
    return hit


def _check_cluster_policy(
    before: ClusterPolicyInfo, after: ClusterPolicyInfo, view: ClusterView
) -> Sequence[Finding]:
    was, will = default_cc_mode(before), default_cc_mode(after)
    if was == will and before.cc_enabled == after.cc_enabled:
        return ()
    if not may_be_in_force(before.name, view):
        return ()  # the GPU Operator acts on another ClusterPolicy: this one moves nothing
    what = (
        f"ccManager.defaultMode {was} -> {will}"
        if was != will
        else f"ccManager.enabled true (defaultMode {will})"
    )
    findings = []
    for name, mode, now in _reached(before, after, view):
        finding = _users_finding(name, what, mode, "then apply this change", view)
        if finding is not None:
            pin = f"or pin its mode first: kubectl label node {name} {CC_MODE_LABEL}={now or was}"
            findings.append(
                Finding(
                    finding.message,
                    confirm_pods_on=name,
                    remediation=(*finding.remediation, pin),
                )
            )
    return findings


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    if request.obj is None or request.old is None:
        return ()
    if request.group_kind == CLUSTER_POLICY:
        before, after = project_cluster_policy(request.old), project_cluster_policy(request.obj)
        return _check_cluster_policy(before, after, view)
    return _check_node(request, view)


POLICY = Policy(
    id=ID,
    summary=(
        "A node's confidential computing mode would change (nvidia.com/cc.mode set, changed or "
        "removed; the CC manager arriving; ClusterPolicy ccManager.defaultMode changed or the "
        "manager enabled, for nodes without the label) where the CC manager runs, while GPU "
        "users run there: live GPU VMIs, Kata pods, or pods holding its GPUs."
    ),
    scope={NODE: frozenset({UPDATE}), CLUSTER_POLICY: frozenset({UPDATE})},
    owners=(KUBELET,),
    default_action=Action.DENY,
    default_reason=(
        "The CC manager resets the GPUs and drains no user workload (NVIDIA's own docs make it "
        "the user's job): VMs and jobs on them die. A policy error only warns, so node updates "
        "in a recovery are never blocked."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=GPU_USERS_READS | VM_USERS_READS | {GPU_CLUSTER, NODE},
)

"""cc-mode-not-applied: a node's confidential computing mode is not the one it should be.

The Confidential Computing Manager reports the mode it last applied in
``nvidia.com/cc.mode.state``: ``failed`` when the last change failed, and a value different from
the desired mode (``nvidia.com/cc.mode``, else ``ccManager.defaultMode``) while a change is under
way or blocked. NVIDIA's troubleshooting names the usual block: a user workload holding a GPU
on the node, with vfio-manager stuck Terminating ("Remove the workload to unblock the mode
transition"; cloud-native-docs ``confidential-containers/troubleshooting.rst``). So each finding
names the node's GPU users: what blocks the change, or what a retry would reset
(docs/confidential-computing.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from policies.cluster.cc_mode import (
    CC_MANAGER_APP,
    CC_MODE_FAILED,
    CC_MODE_LABEL,
    CC_MODE_STATE_LABEL,
    cc_manager_runs,
    describe_desired,
    desired_cc_mode,
)
from policies.cluster.coverage import GPU_USERS_READS, VM_USERS_READS
from policies.cluster.gpu_users import gpu_users_on, vm_users_on
from policies.cluster.kinds import (
    NODE,
    object_ref,
)
from policies.cluster.view import AuditView, ClusterView
from policies.vocabulary.audit import Diagnosis, DiagnosisFinding, Link
from policies.vocabulary.text import few, plural
from policies.vocabulary.verdicts import Action, Severity

CC_MODE_NOT_APPLIED_ID = "cc-mode-not-applied"


def _logs(node: str, cluster: ClusterView) -> str:
    managers = [p for p in cluster.pods_on(node) if p.app == CC_MANAGER_APP]
    if managers:
        return f"kubectl logs -n {managers[0].namespace} {managers[0].name}"
    return (
        f"kubectl get pods -A -l app={CC_MANAGER_APP} --field-selector spec.nodeName={node}, "
        "then kubectl logs of it"
    )


def _diagnose(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    cluster = view.cluster
    policy = cluster.cluster_policy()
    for node in cluster.nodes():
        labels = node.labels
        state = labels.get(CC_MODE_STATE_LABEL)
        if state is None or not (state == CC_MODE_FAILED or cc_manager_runs(labels, policy)):
            continue
        desired = desired_cc_mode(labels, policy)
        if state == desired:
            continue
        name = node.name
        users = [u.describe() for u in vm_users_on(name, cluster)]
        users += [u.describe() for u in gpu_users_on(name, cluster)]
        failed = state == CC_MODE_FAILED
        head = (
            f"{CC_MODE_STATE_LABEL}=failed on {name}: the CC manager could not apply mode "
            f"{describe_desired(labels, policy)}"
            if failed
            else f"{CC_MODE_STATE_LABEL}={state} on {name}, desired "
            f"{describe_desired(labels, policy)}: the change is under way or blocked"
        )
        if users:
            at_stake = f"{plural(len(users), 'GPU user')} there: {few(users)}"
            blocked = "GPU users hold the node's GPUs (they block the change; a retry resets them)"
        else:
            at_stake = "no GPU user runs there"
            blocked = "no GPU user holds the node's GPUs"
        yield DiagnosisFinding(
            resource=object_ref(NODE, "", name),
            message=f"{head}; {at_stake}",
            chain=Link(
                f"{name}: {CC_MODE_LABEL} {labels.get(CC_MODE_LABEL) or 'unset'}, desired "
                f"{desired}, state {state}",
                (Link(blocked, tuple(Link(u) for u in users)),),
            ),
            remediation=(
                f"read why: {_logs(name, cluster)}",
                *([f"stop or drain what uses {name}'s GPUs: {', '.join(users)}"] if users else []),
                f"then check: kubectl get node {name} --show-labels (the change is done when "
                f"{CC_MODE_STATE_LABEL} is {desired})",
            ),
            severity=Severity.HIGH if failed and users else None,
        )


CC_MODE_NOT_APPLIED_DIAGNOSIS = Diagnosis(
    id=CC_MODE_NOT_APPLIED_ID,
    summary=(
        "A node's nvidia.com/cc.mode.state is failed, or differs from its desired confidential "
        "computing mode (nvidia.com/cc.mode, else ccManager.defaultMode) where the CC manager "
        "runs: the change failed, is under way, or is blocked by the GPU users it names."
    ),
    default_action=Action.WARN,
    default_severity=Severity.MEDIUM,
    reason=(
        "A node whose CC mode is not the one asked for runs no confidential workload as asked, "
        "and a user workload is the usual block. High when the change failed with users there."
    ),
    diagnose=_diagnose,
    reads=GPU_USERS_READS | VM_USERS_READS | {NODE},
)

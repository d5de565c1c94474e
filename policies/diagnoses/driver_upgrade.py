"""driver-upgrade-stuck: a node the GPU Operator's driver upgrade cannot finish.

The upgrade controller labels each node with its step in ``nvidia.com/gpu-driver-upgrade-state``
(docs/driver-upgrades.md). ``upgrade-failed`` is where it stops: "If the upgrade fails for a
particular node, the node is labelled with the upgrade-failed state" (NVIDIA cloud-native-docs
``gpu-operator/gpu-driver-upgrades.rst``), and the node stays cordoned until its driver pod
runs in sync (k8s-operator-libs ``ProcessUpgradeFailedNodes`` then uncordons it). A node waiting
on its workloads (wait-for-jobs-required, pod-deletion-required, drain-required) under GPU users the
controller cannot free (pods without a GPU request, which pod deletion passes over; DaemonSets'
pods, which drain leaves) waits until its timeout fails it, or for ever with timeoutSeconds 0
(NVIDIA/gpu-operator#2570); one waiting for its jobs longer than ``WAIT_THRESHOLD`` (since the
node's wait-start annotation) is reported too. Each finding names the users that hold the GPUs.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from policies.cluster.coverage import GPU_USERS_READS
from policies.cluster.driver_upgrade import UPGRADE_FAILED, UPGRADE_STATE_LABEL, WAITING_STATES
from policies.cluster.gpu_users import GpuUser, gpu_users_on
from policies.cluster.kinds import NODE, object_ref
from policies.cluster.view import AuditView
from policies.vocabulary.audit import Diagnosis, DiagnosisFinding, Link
from policies.vocabulary.text import few, plural
from policies.vocabulary.verdicts import Action, Severity

DRIVER_UPGRADE_STUCK_ID = "driver-upgrade-stuck"
#: How long a node may wait for its jobs (wait-for-jobs-required) before the audit says so.
WAIT_THRESHOLD = timedelta(hours=1)
EVENTS = "kubectl get events -n default --sort-by=.lastTimestamp | grep GPUDriverUpgrade"


def _unfreeable(users: tuple[GpuUser, ...]) -> list[GpuUser]:
    """Users pod deletion passes over (no GPU request) or drain leaves (a DaemonSet's)."""
    return [u for u in users if u.pod.daemonset or not (u.pod.gpu or u.claims)]


def _why(user: GpuUser) -> str:
    return "a DaemonSet's: drain leaves it" if user.pod.daemonset else "no GPU request"


def _diagnose(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    cluster = view.cluster
    for node in cluster.nodes():
        state = node.labels.get(UPGRADE_STATE_LABEL, "")
        if state != UPGRADE_FAILED and state not in WAITING_STATES:
            continue
        name = node.name
        users = gpu_users_on(name, cluster)
        stuck = _unfreeable(users)
        since = node.upgrade_wait_since
        overdue = since is not None and now - since > WAIT_THRESHOLD
        if state != UPGRADE_FAILED and not stuck and not overdue:
            continue  # waiting on users it can delete, not for long: the controller is at it
        if state == UPGRADE_FAILED:
            head = f"{UPGRADE_STATE_LABEL}=upgrade-failed on {name}: the driver upgrade stopped"
        elif stuck:
            head = (
                f"{UPGRADE_STATE_LABEL}={state} on {name}: the driver upgrade waits on GPU users "
                "it cannot free"
            )
        else:
            head = (
                f"{UPGRADE_STATE_LABEL}={state} on {name}: the driver upgrade has waited for its "
                f"jobs for more than {WAIT_THRESHOLD.seconds // 3600} h"
            )
        at_stake = (
            f"{plural(len(users), 'GPU user')} there: {few([u.key for u in users])}"
            if users
            else "no GPU user there"
        )
        yield DiagnosisFinding(
            resource=object_ref(NODE, "", name),
            message=f"{head}; {at_stake}",
            chain=Link(
                f"{name}: {UPGRADE_STATE_LABEL} {state}",
                tuple(Link(f"{u.key} holds its GPUs ({_why(u)})") for u in stuck)
                or (Link("no GPU user the controller cannot free"),),
            ),
            remediation=(
                f"read why: {EVENTS}",
                *(
                    [f"stop what the controller cannot: {', '.join(u.key for u in stuck)}"]
                    if stuck
                    else []
                ),
                "then restart its driver pod: kubectl delete pod -A -l app=nvidia-driver-daemonset "
                f"--field-selector spec.nodeName={name}; once it runs in sync, the controller "
                "moves the node on and uncordons it",
            ),
            severity=Severity.HIGH if state == UPGRADE_FAILED else None,
            since=since if state in WAITING_STATES else None,
        )


DRIVER_UPGRADE_STUCK_DIAGNOSIS = Diagnosis(
    id=DRIVER_UPGRADE_STUCK_ID,
    summary=(
        "A node's nvidia.com/gpu-driver-upgrade-state is upgrade-failed, or a waiting state "
        "(wait-for-jobs, pod-deletion, drain) under GPU users the upgrade controller cannot free "
        "(no GPU request, DaemonSet pods), or waiting for its jobs for more than an hour: named, "
        "with what blocks it."
    ),
    default_action=Action.WARN,
    default_severity=Severity.MEDIUM,
    reason=(
        "A failed or blocked upgrade leaves the node cordoned and its driver old; nothing retries "
        "until someone frees the GPUs. High when the upgrade failed."
    ),
    diagnose=_diagnose,
    reads=GPU_USERS_READS | {NODE},
)

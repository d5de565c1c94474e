"""mig-reconfig-with-gpu-pods: a MIG layout change on a node whose GPUs pods are using.

The MIG manager applies ``nvidia.com/mig.config`` by tearing the GPUs' MIG layout down and
building the new one: it needs idle GPUs (docs/field-guide.md section 2). With GPU pods running, the
reconfiguration takes the GPUs from under them or fails, ``nvidia.com/mig.config.state`` can go
``failed``, and some GPUs need a node reboot to change mode.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.cluster.coverage import GPU_USERS_READS
from policies.cluster.gpu_users import held_by_daemonsets, label_edit_under_gpu_users
from policies.cluster.identities import KUBELET
from policies.cluster.kinds import NODE
from policies.cluster.view import ClusterView
from policies.cluster.workload import MIG_CONFIG_LABEL
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest
from policies.vocabulary.text import drain_first, few, plural
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "mig-reconfig-with-gpu-pods"


def _change(old: str | None, new: str | None) -> str:
    if old is None:
        return f"set to {new}"
    if new is None:
        return f"removed (was {old})"
    return f"{old} -> {new}"


def _changed(before: str | None, after: str | None) -> bool:
    return before != after


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    edit = label_edit_under_gpu_users(request, view, MIG_CONFIG_LABEL, _changed)
    if edit is None:
        return ()
    node, pods, before, after = edit.node, edit.users, edit.before, edit.after
    keys = [p.key for p in pods]
    named = [p.label for p in pods]
    verb = "runs" if len(pods) == 1 else "run"
    message = (
        f"{MIG_CONFIG_LABEL} {_change(before, after)} on {node} while "
        f"{plural(len(pods), 'GPU pod')} {verb} there ({few(named)}): the MIG manager needs idle "
        f"GPUs; the state can go failed, the node may reboot. Cordon {node} and drain them first."
    )
    return (
        Finding(
            message,
            confirm_pods_on=node,
            remediation=(
                *drain_first(node, keys, held_by_daemonsets(pods)),
                (
                    f"kubectl label node {node} {MIG_CONFIG_LABEL}={after} --overwrite"
                    if after is not None
                    else f"kubectl label node {node} {MIG_CONFIG_LABEL}-"
                ),
                f"kubectl uncordon {node} once nvidia.com/mig.config.state=success",
            ),
        ),
    )


POLICY = Policy(
    id=ID,
    summary=(
        "A node's nvidia.com/mig.config label is set, changed or removed while unfinished pods "
        "bound there hold NVIDIA GPUs (device-plugin resources or DRA gpu/mig devices)."
    ),
    scope={NODE: frozenset({CREATE, UPDATE})},
    owners=(KUBELET,),
    default_action=Action.DENY,
    default_reason=(
        "Reconfiguring MIG under running jobs kills them and can leave the GPU in a failed MIG "
        "state or reboot the node; draining first costs minutes. A policy error only warns."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=GPU_USERS_READS,
)

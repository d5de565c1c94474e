"""workload-label-invalid: a node's GPU workload label names a mode the GPU Operator does not know.

``nvidia.com/gpu.workload.config`` takes ``container``, ``vm-passthrough`` or ``vm-vgpu``
(docs/field-guide.md section 2; NVIDIA/gpu-operator ``controllers/state_manager.go``,
``getWorkloadConfig``). Any other value, a typo such as ``vm_passthrough`` or a wrong case
such as ``VM-Passthrough``, is logged by the operator and replaced by the ClusterPolicy's
``sandboxWorkloads.defaultWorkload``: the node silently runs a mode nobody asked for. The VMs
meant for it never find their device, or the node keeps its CUDA stack when the owner thought it
gone. The consequences of the mode it falls back to are judged by the switch policies; this one
says that the label itself did not do what it says.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping, Sequence

from policies.cluster.identities import KUBELET
from policies.cluster.kinds import CLUSTER_POLICY, NODE, object_ref
from policies.cluster.view import ClusterView
from policies.cluster.workload import MODES, WORKLOAD_LABEL, describe_mode
from policies.vocabulary.fields import request_labels
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest, ObjectRef
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "workload-label-invalid"
CLOSE_ENOUGH = 0.6
"""difflib ratio from which a mode counts as what the value meant (vm-passthru, vgpu)."""


def meant(value: str) -> str | None:
    """The mode a mistyped value most likely meant: same letters in another case or with ``_``
    or spaces for ``-``, else the closest mode by spelling."""
    normal = value.strip().lower().replace("_", "-").replace(" ", "-")
    if normal in MODES:
        return normal
    close = difflib.get_close_matches(normal, sorted(MODES), n=1, cutoff=CLOSE_ENOUGH)
    return close[0] if close else None


def judge(node: str, labels: Mapping[str, str], view: ClusterView) -> Finding | None:
    value = labels.get(WORKLOAD_LABEL)
    if value is None or value in MODES:
        return None
    mode = describe_mode(labels, view.cluster_policy())
    message = (
        f"{WORKLOAD_LABEL}={value!r} on {node} is not a mode ({', '.join(sorted(MODES))}): "
        f"the GPU Operator ignores it and runs {node} as {mode}."
    )
    remediation = []
    guess = meant(value)
    if guess is not None:
        message += f" Did you mean {guess}?"
        remediation.append(f"kubectl label node {node} {WORKLOAD_LABEL}={guess} --overwrite")
    default = f"kubectl label node {node} {WORKLOAD_LABEL}-"
    remediation.append(f"or, for the default mode on purpose: {default}" if guess else default)
    return Finding(message, remediation=tuple(remediation))


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    """Only when the update sets or changes the label: an invalid value that was already there
    is the audit's to report, so an unrelated node update never repeats it."""
    if request.obj is None or (request.old is None and request.operation == UPDATE):
        return ()
    labels = request_labels(request)
    if labels.get(WORKLOAD_LABEL) == request_labels(request, old=True).get(WORKLOAD_LABEL):
        return ()
    finding = judge(request.name, labels, view)
    return () if finding is None else (finding,)


def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
    for node in view.nodes():
        finding = judge(node.name, node.labels, view)
        if finding is not None:
            yield object_ref(NODE, "", node.name), finding


POLICY = Policy(
    id=ID,
    summary=(
        "A node's nvidia.com/gpu.workload.config is set to a value that is not container, "
        "vm-passthrough or vm-vgpu (a typo, another case, an empty value): the GPU Operator "
        "ignores it and applies the ClusterPolicy's defaultWorkload instead."
    ),
    scope={NODE: frozenset({CREATE, UPDATE})},
    owners=(KUBELET,),
    default_action=Action.WARN,
    default_reason=(
        "The label alone breaks nothing: the operator falls back to the default mode, and the "
        "policies on mode switches judge what that fallback does to running work. The owner asked "
        "for a mode they will not get and must hear it while the typo is fresh; a label that does "
        "nothing is not worth blocking node updates over."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=frozenset({CLUSTER_POLICY, NODE}),
    audit=audit,
)

"""Diagnoses of GPU nodes: the recovery trap, NotReady, unhealthy GPU operands."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime

from policies.cluster.kinds import (
    NODE,
    object_ref,
)
from policies.cluster.view import AuditView
from policies.cluster.workload import GPU_PRESENT_LABEL, VM_PASSTHROUGH, VM_VGPU, WORKLOAD_LABEL
from policies.diagnoses.chains import (
    condition_text,
    for_how_long,
    node_links,
    operand_summary,
    ready_text,
)
from policies.diagnoses.facts import NODE_FACTS_READS, NodeFacts, gpu_nodes_of
from policies.diagnoses.repair import repair_steps
from policies.diagnoses.workloads import WORKLOADS_READS, waiting_vms
from policies.vocabulary.audit import Diagnosis, DiagnosisCheck, DiagnosisFinding, Link
from policies.vocabulary.requests import ObjectRef
from policies.vocabulary.text import few, plural
from policies.vocabulary.verdicts import Action, Severity

RECOVERY_TRAP_PASSTHROUGH = "recovery-trap-vm-passthrough"
RECOVERY_TRAP_VGPU = "recovery-trap-vm-vgpu"
GPU_NODE_NOT_READY = "gpu-node-not-ready"
GPU_OPERAND_UNHEALTHY = "gpu-operand-unhealthy"


def _node_ref(name: str) -> ObjectRef:
    return object_ref(NODE, "", name)


def _trap_id(f: NodeFacts) -> str:
    return RECOVERY_TRAP_VGPU if f.mode == VM_VGPU else RECOVERY_TRAP_PASSTHROUGH


# --- the recovery trap ----------------------------------------------------------------------------


def _trap(f: NodeFacts, waiting: Sequence[str], now: datetime) -> DiagnosisFinding:
    n = f.name
    gpus = list(f.gpu_models) or list(f.nfd_gpu_labels)
    if f.mode == VM_VGPU:
        operand = "the vGPU manager"
        effect = f"replaces the GPU driver on {n} with the vGPU host driver"
    else:
        operand = "vfio-manager"
        effect = f"rebinds every NVIDIA GPU on {n} to vfio-pci"
    deploy = f.rebind_pin
    message = (
        f"{n} is NotReady and its GPU mode is still {f.mode_text} ({WORKLOAD_LABEL}), with "
        f"NVIDIA GPUs ({few(gpus, 2)}). When kubelet comes back, NFD labels the GPUs again, "
        f"the GPU Operator redeploys {operand} and it {effect}, killing whatever uses them, "
        "host CUDA jobs that no API object shows included. Relabel before restarting kubelet."
    )
    severity: Severity | None = None
    evidence: list[Link] = []
    if f.gpu_pods:
        severity = Severity.CRITICAL
        keys = [p.label for p in f.gpu_pods]
        message += f" {plural(len(keys), 'GPU pod')} still bound there: {few(keys)}."
        evidence.append(Link(f"GPU pods bound to {n}: {few(keys)}"))
    if f.container_traces:
        severity = Severity.CRITICAL
        message += (
            f" Container-mode labels remain ({few(list(f.container_traces), 2)}): CUDA "
            "workloads ran there."
        )
        evidence.append(Link(f"container-mode labels remain: {few(list(f.container_traces), 2)}"))
    kill = Link(
        f"{operand} {effect} ({few(gpus, 2)}): CUDA processes on them die, host jobs included",
        tuple(evidence),
    )
    operator = Link(f"the GPU Operator sets {deploy}=true and starts {operand}", (kill,))
    back = Link(
        f"kubelet returns: NFD labels the GPUs again, {GPU_PRESENT_LABEL}=true", (operator,)
    )
    stays = Link(
        f"mode {f.mode} stays: the operator never removes {WORKLOAD_LABEL}, and nothing "
        f"pins {deploy}=false",
        (back,),
    )
    return DiagnosisFinding(
        resource=_node_ref(n),
        message=message,
        chain=Link(f"Node {n}", (Link(ready_text(f, now), (stays,)),)),
        since=f.not_ready_since,
        remediation=repair_steps(f, waiting),
        severity=severity,
    )


def _traps(mode: str) -> DiagnosisCheck[AuditView]:
    """The trap of one VM mode (each mode has its own id, action and docs)."""

    def diagnose(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
        nodes = gpu_nodes_of(view)  # nodes first, then the VMs waiting for them
        waiting = waiting_vms(view)
        for f in nodes:
            if f.trapped and f.mode == mode:
                yield _trap(f, waiting.get(f.name, ()), now)

    return diagnose


# --- NotReady -------------------------------------------------------------------------------------


def _not_ready(f: NodeFacts, waiting: Sequence[str], now: datetime) -> DiagnosisFinding:
    since = f.not_ready_since
    n = f.name
    what = f"GPU node {n} has been NotReady{for_how_long(since, now)}"
    detail = f": {condition_text(f.ready_condition)}"
    extra: list[str] = []
    if f.gpus:
        extra.append(f"its GPUs are out of service ({few(list(f.gpu_models))})")
    if waiting:
        extra.append(f"{plural(len(waiting), 'VM')} wait for them")
    problems = f.operand_problems
    if problems:
        extra.append(f"{plural(len(problems), 'GPU operand pod')} unhealthy")
    message = what + detail + ("; " + "; ".join(extra) if extra else "")
    link = node_links(f, now)
    children = list(link.children)
    if waiting:
        children.append(Link(f"{plural(len(waiting), 'VM')} wait for its GPUs: {few(waiting)}"))
    if f.trapped:
        remediation: tuple[str, ...] = (
            f"repair {n} in the order of [{_trap_id(f)}] on Node {n}: relabel first, then fix "
            "kubelet, then restart it",
        )
    else:
        remediation = repair_steps(f, waiting)
    return DiagnosisFinding(
        resource=_node_ref(n),
        message=message,
        chain=Link(f"Node {n}", (Link(link.text, tuple(children)),)),
        since=since,
        remediation=remediation,
    )


def _diagnose_not_ready(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    nodes = gpu_nodes_of(view)
    waiting = waiting_vms(view)
    for f in nodes:
        if f.not_ready:
            yield _not_ready(f, waiting.get(f.name, ()), now)


# --- operands -------------------------------------------------------------------------------------


def _operands(f: NodeFacts) -> DiagnosisFinding:
    n = f.name
    problems = f.operand_problems
    lines = operand_summary(problems)
    message = (
        f"{plural(len(problems), 'GPU operand pod')} unhealthy on Ready GPU node {n}: "
        + "; ".join(lines)
    )
    first = problems[0]
    remediation = [
        f"kubectl -n {first.namespace} describe pod {first.name}; "
        f"kubectl -n {first.namespace} logs {first.name} --previous"
    ]
    if any(p.problem == "Terminating" for p in problems):
        remediation.append(
            f"a pod stuck Terminating on a Ready node waits for a finalizer or a volume: "
            f"kubectl -n {first.namespace} get pod <name> -o yaml"
        )
    ready = Link(f"Ready, GPU mode {f.mode_text}", tuple(Link(line) for line in lines))
    return DiagnosisFinding(
        resource=_node_ref(n),
        message=message,
        chain=Link(f"Node {n}", (ready,)),
        remediation=tuple(remediation),
    )


def _diagnose_operands(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    for f in gpu_nodes_of(view):
        if not f.not_ready and f.operand_problems:
            yield _operands(f)


# --- declarations ---------------------------------------------------------------------------------

#: What the recovery traps and the NotReady GPU node read: the node's mode (the ClusterPolicy
#: default), its GPU users (pods, DRA claims, VMs) and what marks it a GPU node; one question,
#: so one declaration.
_GPU_NODE_READS = NODE_FACTS_READS | WORKLOADS_READS


RECOVERY_TRAP_PASSTHROUGH_DIAGNOSIS = Diagnosis(
    id=RECOVERY_TRAP_PASSTHROUGH,
    summary=(
        "A NotReady node with NVIDIA GPUs whose effective mode is vm-passthrough: when kubelet "
        "returns, vfio-manager rebinds every NVIDIA GPU there to vfio-pci."
    ),
    default_action=Action.DENY,
    default_severity=Severity.HIGH,
    reason=(
        "The obvious repair (restart kubelet) kills every CUDA process on the node, host jobs "
        "no API object shows included, and cannot be undone. One safe, cheap command (relabel "
        "or pin vfio-manager=false) clears it, so it is the one audit finding that fails the "
        "audit (exit 1). Critical when GPU pods or container-mode labels show CUDA users there."
    ),
    diagnose=_traps(VM_PASSTHROUGH),
    reads=_GPU_NODE_READS,
)
RECOVERY_TRAP_VGPU_DIAGNOSIS = Diagnosis(
    id=RECOVERY_TRAP_VGPU,
    summary=(
        "A NotReady node with NVIDIA GPUs whose effective mode is vm-vgpu: when kubelet "
        "returns, the vGPU manager replaces the host GPU driver."
    ),
    default_action=Action.DENY,
    default_severity=Severity.HIGH,
    reason="Same trap as vm-passthrough, through the vGPU manager instead of vfio-manager.",
    diagnose=_traps(VM_VGPU),
    reads=_GPU_NODE_READS,
)
GPU_NODE_NOT_READY_DIAGNOSIS = Diagnosis(
    id=GPU_NODE_NOT_READY,
    summary=(
        "A GPU node is NotReady: for how long, why (conditions, taints, kubelet, swap) and what "
        "went with it (NFD labels, nvidia.com/gpu.present, operand pods, waiting VMs)."
    ),
    default_action=Action.WARN,
    default_severity=Severity.HIGH,
    reason=(
        "Its GPUs are out of service, but the fix is on the node, not in any object a guard "
        "could refuse."
    ),
    diagnose=_diagnose_not_ready,
    reads=_GPU_NODE_READS,
)
GPU_OPERAND_UNHEALTHY_DIAGNOSIS = Diagnosis(
    id=GPU_OPERAND_UNHEALTHY,
    summary=(
        "GPU Operator operand pods in Error, CrashLoopBackOff, Terminating, ... on a Ready GPU "
        "node (on a NotReady node they are part of gpu-node-not-ready)."
    ),
    default_action=Action.WARN,
    default_severity=Severity.MEDIUM,
    reason="The node's GPUs may be unusable or unmonitored while the node looks healthy.",
    diagnose=_diagnose_operands,
    reads=NODE_FACTS_READS,
)

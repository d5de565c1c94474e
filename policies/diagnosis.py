"""Diagnosis: what should run and cannot, since when, the chain of causes, the safe repair order.

The admission policies judge one object at a time; the audit also needs the story that connects
them (FIELD-GUIDE section 1): swap on a node -> kubelet down -> node NotReady -> NFD labels and
device plugin gone -> a passthrough VM with nowhere to go, for 112 days. This module builds those
stories from a ``ClusterView`` as causal chains (trees of links), with durations measured from
the objects' own timestamps to a ``now`` the caller passes in, and ordered remediation with real
node names in the commands.

Pure domain logic: no I/O, no clock reads. Every scan here is linear in the state (the audit is
not on the admission path, but it must stay fast at 5,000 nodes / 150,000 pods / 10,000 VMs):
each node is examined once, each VM once, each resource name once.

The findings are audit-only diagnoses, not admission policies: they have stable ids of the same
kebab form (``DIAGNOSES``), but no ``check``. A VM finding that explains an existing
``passthrough-without-ready-provider`` verdict says so (``Diagnosis.enriches``), so the audit
reports one finding per VM and device, not two.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar

from policies import passthrough_provider
from policies.hardware import is_gpu_function
from policies.health import UNHEALTHY_TAINTS, NodeHealth, node_health
from policies.model import Action, ObjectRef, Verdict
from policies.objects import (
    KUBEVIRT,
    NODE,
    VIRTUAL_MACHINE,
    VIRTUAL_MACHINE_INSTANCE,
    ClusterPolicyInfo,
    Condition,
    DeviceRequest,
    NodeInfo,
    PodInfo,
    VMIInfo,
    VMInfo,
    find_condition,
)
from policies.pciids import NVIDIA_VENDOR, PciId
from policies.resources import is_container_gpu_resource, is_nvidia_resource
from policies.text import few, plural, split_duration
from policies.view import ClusterView
from policies.workload import (
    CONTAINER,
    DEPLOY_LABEL_PREFIX,
    GPU_PRESENT_LABEL,
    GPU_PRODUCT_LABEL,
    OPERANDS_DEPLOY_LABEL,
    VFIO_MANAGER_DEPLOY_LABEL,
    VM_PASSTHROUGH,
    VM_VGPU,
    WORKLOAD_LABEL,
    describe_mode,
    effective_mode,
    is_gpu_node,
    is_gpu_operand,
)

# --- identities -----------------------------------------------------------------------------------

RECOVERY_TRAP_PASSTHROUGH = "recovery-trap-vm-passthrough"
RECOVERY_TRAP_VGPU = "recovery-trap-vm-vgpu"
GPU_NODE_NOT_READY = "gpu-node-not-ready"
VM_UNSCHEDULABLE = "vm-unschedulable"
RESOURCE_NAME_CASE_MISMATCH = "resource-name-case-mismatch"
GPU_OPERAND_UNHEALTHY = "gpu-operand-unhealthy"

#: Findings about the cluster as a whole, not about one object (ObjectRef of no real kind).
CLUSTER = ObjectRef("", "Cluster", "", "(cluster)")


class Severity(enum.IntEnum):
    """How bad a finding is, in the wgpolicyk8s.io PolicyReport vocabulary."""

    INFO = 0
    LOW = 1
    MEDIUM = 2
    HIGH = 3
    CRITICAL = 4

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class DiagnosisKind:
    """One kind of audit-only finding: its id, default action and severity, and why."""

    id: str
    summary: str
    action: Action
    severity: Severity
    reason: str


DIAGNOSES: tuple[DiagnosisKind, ...] = (
    DiagnosisKind(
        RECOVERY_TRAP_PASSTHROUGH,
        "A NotReady node with NVIDIA GPUs whose effective mode is vm-passthrough: when kubelet "
        "returns, vfio-manager rebinds every NVIDIA GPU there to vfio-pci.",
        Action.DENY,
        Severity.HIGH,
        "The obvious repair (restart kubelet) kills every CUDA process on the node, host jobs "
        "no API object shows included, and cannot be undone. One safe, cheap command (relabel "
        "or pin vfio-manager=false) clears it, so it is the one audit finding that fails the "
        "audit (exit 1). Critical when GPU pods or container-mode labels show CUDA users there.",
    ),
    DiagnosisKind(
        RECOVERY_TRAP_VGPU,
        "A NotReady node with NVIDIA GPUs whose effective mode is vm-vgpu: when kubelet "
        "returns, the vGPU manager replaces the host GPU driver.",
        Action.DENY,
        Severity.HIGH,
        "Same trap as vm-passthrough, through the vGPU manager instead of vfio-manager.",
    ),
    DiagnosisKind(
        GPU_NODE_NOT_READY,
        "A GPU node is NotReady: for how long, why (conditions, taints, kubelet, swap) and what "
        "went with it (NFD labels, nvidia.com/gpu.present, operand pods, waiting VMs).",
        Action.WARN,
        Severity.HIGH,
        "Its GPUs are out of service, but the fix is on the node, not in any object a guard "
        "could refuse.",
    ),
    DiagnosisKind(
        VM_UNSCHEDULABLE,
        "A VM that should run cannot be scheduled; the chain names the resource, the providers "
        "and their health. Reported under passthrough-without-ready-provider when that policy "
        "already flags the VM and device.",
        Action.WARN,
        Severity.HIGH,
        "The VM is down; the cause is usually elsewhere (a node, a name), so say where.",
    ),
    DiagnosisKind(
        RESOURCE_NAME_CASE_MISMATCH,
        "Resource names that differ only in case between VMs, the KubeVirt CR and node "
        "allocatable (kubelet resource names are case-sensitive).",
        Action.WARN,
        Severity.MEDIUM,
        "Dead configuration until a VM uses it, then a VM unschedulable forever.",
    ),
    DiagnosisKind(
        GPU_OPERAND_UNHEALTHY,
        "GPU Operator operand pods in Error, CrashLoopBackOff, Terminating, ... on a Ready GPU "
        "node (on a NotReady node they are part of gpu-node-not-ready).",
        Action.WARN,
        Severity.MEDIUM,
        "The node's GPUs may be unusable or unmonitored while the node looks healthy.",
    ),
)
DIAGNOSES_BY_ID = {kind.id: kind for kind in DIAGNOSES}

#: Severities of admission policies' audit verdicts, where the action alone says too little.
POLICY_SEVERITY: Mapping[str, Severity] = {
    passthrough_provider.ID: Severity.HIGH,
    "permitted-device-without-hardware": Severity.MEDIUM,
}
_SEVERITY_BY_ACTION = {
    Action.DENY: Severity.HIGH,
    Action.WARN: Severity.MEDIUM,
    Action.AUDIT: Severity.LOW,
    Action.OFF: Severity.INFO,
}


def severity_of(policy: str, action: Action) -> Severity:
    """A verdict's severity: the diagnosis' own, a known policy's, else from its action."""
    kind = DIAGNOSES_BY_ID.get(policy)
    if kind is not None:
        return kind.severity
    return POLICY_SEVERITY.get(policy, _SEVERITY_BY_ACTION[action])


# --- chains ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Link:
    """One link of a causal chain; ``children`` are what explains it or follows from it."""

    text: str
    children: tuple[Link, ...] = ()

    def flatten(self) -> tuple[str, ...]:
        """Every link below this one, depth first: the ``chain`` of JSON output."""
        out: list[str] = []
        stack = list(reversed(self.children))
        while stack:
            link = stack.pop()
            out.append(link.text)
            stack.extend(reversed(link.children))
        return tuple(out)

    @staticmethod
    def linear(root: str, chain: Sequence[str]) -> Link:
        """A chain of plain strings (an admission policy's) as a straight line below ``root``."""
        tail: tuple[Link, ...] = ()
        for text in reversed(chain):
            tail = (Link(text, tail),)
        return Link(root, tail)


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """One audit finding with its causal chain as a tree (root: the resource itself)."""

    policy: str
    action: Action
    severity: Severity
    resource: ObjectRef
    message: str
    since: datetime | None
    chain: Link
    remediation: tuple[str, ...]
    enriches: str = ""
    """An admission policy whose audit verdict on the same resource (and ``device``) this
    diagnosis explains: the audit then reports that verdict with this chain, not both."""
    device: str = ""

    def verdict(self, action: Action | None = None) -> Verdict:
        return Verdict(
            policy=self.policy,
            action=self.action if action is None else action,
            resource=self.resource,
            message=self.message,
            since=self.since,
            chain=self.chain.flatten(),
            remediation=self.remediation,
        )


# --- time -----------------------------------------------------------------------------------------


def age(delta: timedelta) -> str:
    """ "112 days 8 hours", "5 hours 3 minutes", "12 minutes": days and hours of a duration."""
    days, hours, minutes = split_duration(delta.total_seconds())
    if days:
        return plural(days, "day") + (f" {plural(hours, 'hour')}" if hours else "")
    if hours:
        return plural(hours, "hour") + (f" {plural(minutes, 'minute')}" if minutes else "")
    return plural(minutes, "minute")


def stamp(when: datetime) -> str:
    """ "2026-07-10 03:12 UTC" """
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def since_text(when: datetime, now: datetime) -> str:
    """ "since 2026-07-10 03:12 UTC (112 days 8 hours)" """
    return f"since {stamp(when)} ({age(now - when)})"


# --- progress -------------------------------------------------------------------------------------

_T = TypeVar("_T")


class Track(Protocol):
    """Wraps the sequences a long audit walks, so a caller can show progress (or not)."""

    def __call__(self, items: Sequence[_T], description: str) -> Iterable[_T]: ...


def untracked(items: Sequence[_T], description: str) -> Iterable[_T]:
    return items


# --- node facts -----------------------------------------------------------------------------------

NFD_PCI_PREFIX = "feature.node.kubernetes.io/pci-"
#: Labels only container mode leaves: GFD's, and the container operands' deploy labels.
CONTAINER_OPERANDS = (
    "driver",
    "gpu-feature-discovery",
    "container-toolkit",
    "device-plugin",
    "dcgm",
    "dcgm-exporter",
    "node-status-exporter",
    "operator-validator",
    "mig-manager",
)
GFD_LABELS = (
    GPU_PRODUCT_LABEL,
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.memory",
    "nvidia.com/gpu.family",
    "nvidia.com/cuda.driver.major",
)
VGPU_MANAGER_DEPLOY_LABEL = DEPLOY_LABEL_PREFIX + "vgpu-manager"
SCHEDULER_MESSAGE_LIMIT = 300


@dataclass(frozen=True, slots=True)
class KubeletCause:
    kind: str
    """"swap", "silent" (stopped posting status), "network", "runtime", "missing", "other"."""
    text: str


def kubelet_cause(node: NodeInfo) -> KubeletCause:
    """What the node's Ready condition says about kubelet, in words."""
    ready = node.condition("Ready")
    version = f"kubelet {node.kubelet_version}" if node.kubelet_version else "kubelet"
    if ready is None:
        return KubeletCause("missing", f"{version} never reported a Ready condition")
    message = ready.message
    folded = message.casefold()
    if "swap" in folded:
        return KubeletCause(
            "swap", f"{version} refuses to run with swap on (failSwapOn, the default)"
        )
    if ready.reason == "NodeStatusUnknown" or "stopped posting" in folded:
        return KubeletCause(
            "silent",
            f"{version} stopped posting node status: it is down, crash-looping, or cut off "
            "from the API server",
        )
    if "network" in folded or "cni" in folded:
        return KubeletCause(
            "network", f"{version} runs, but the container network (CNI plugin) is not ready"
        )
    if "pleg" in folded or "runtime" in folded:
        return KubeletCause("runtime", f"{version} runs, but the container runtime is not healthy")
    return KubeletCause("other", f"{version} runs and reports the node not ready")


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """Everything the audit says about one node, computed once per audit."""

    node: NodeInfo
    health: NodeHealth
    mode: str
    mode_text: str
    gpus: tuple[str, ...]
    """NVIDIA GPUs seen, described ("10de:2b85 GB202 [GeForce RTX 5090] (allocatable)")."""
    nfd_gpu_labels: tuple[str, ...]
    nvidia_allocatable: tuple[tuple[str, int], ...]
    operands: tuple[PodInfo, ...]
    gpu_pods: tuple[PodInfo, ...]
    container_traces: tuple[str, ...]
    """Labels container mode left on the node ("nvidia.com/gpu.deploy.device-plugin=true")."""

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def not_ready(self) -> bool:
        return "NotReady" in self.health.problems

    @property
    def ready_condition(self) -> Condition | None:
        return self.node.condition("Ready")

    @property
    def operand_problems(self) -> tuple[PodInfo, ...]:
        return tuple(p for p in self.operands if p.problem)

    @property
    def is_gpu_node(self) -> bool:
        """What admission calls a GPU node, widened by what only an audit looks at: hardware
        from any source, operand pods, a workload label (a dead node may have lost the rest)."""
        labels = self.node.labels
        return is_gpu_node(self.node) or bool(
            self.gpus
            or self.nfd_gpu_labels
            or self.operands
            or WORKLOAD_LABEL in labels
            or GPU_PRESENT_LABEL in labels
        )

    @property
    def has_nvidia_gpu(self) -> bool:
        return bool(self.gpus or self.nfd_gpu_labels)

    @property
    def rebind_blocked(self) -> bool:
        """A pinned deploy label keeps the VM-mode operand off when the node comes back."""
        labels = self.node.labels
        if labels.get(OPERANDS_DEPLOY_LABEL) == "false":
            return True
        pin = VGPU_MANAGER_DEPLOY_LABEL if self.mode == VM_VGPU else VFIO_MANAGER_DEPLOY_LABEL
        return labels.get(pin) == "false"

    @property
    def trapped(self) -> bool:
        """The recovery trap: NotReady, VM mode, NVIDIA GPUs, and nothing pins the rebind off."""
        return (
            self.not_ready
            and self.mode in (VM_PASSTHROUGH, VM_VGPU)
            and self.has_nvidia_gpu
            and not self.rebind_blocked
        )


def nvidia_gpus_by_node(view: ClusterView) -> dict[str, dict[PciId, frozenset[str]]]:
    """Node -> NVIDIA GPU ids seen there -> sources; one pass over the hardware index."""
    db = view.pci_database
    out: dict[str, dict[PciId, frozenset[str]]] = {}
    for pci in view.known_hardware(NVIDIA_VENDOR):
        if not is_gpu_function(pci, db):
            continue
        for node, sources in view.nodes_with_hardware(pci).items():
            out.setdefault(node, {})[pci] = sources
    return out


def node_facts(
    node: NodeInfo,
    view: ClusterView,
    hardware: Mapping[PciId, frozenset[str]],
    policy: ClusterPolicyInfo | None,
) -> NodeFacts:
    db = view.pci_database
    labels = node.labels
    gpus = tuple(
        f"{db.describe(pci)} ({', '.join(sorted(sources))})"
        for pci, sources in sorted(hardware.items())
    )
    nfd = tuple(
        sorted(
            label
            for label, value in labels.items()
            if label.startswith(NFD_PCI_PREFIX) and NVIDIA_VENDOR in label and value == "true"
        )
    )
    traces = [
        f"{DEPLOY_LABEL_PREFIX}{operand}={labels[DEPLOY_LABEL_PREFIX + operand]}"
        for operand in CONTAINER_OPERANDS
        if labels.get(DEPLOY_LABEL_PREFIX + operand) == "true"
    ]
    traces += [f"{label}={labels[label]}" for label in GFD_LABELS if label in labels]
    allocatable = tuple(
        sorted((r, n) for r, n in node.allocatable.items() if n > 0 and is_nvidia_resource(r))
    )
    pods = view.pods_on(node.name)
    return NodeFacts(
        node=node,
        health=node_health(node),
        mode=effective_mode(labels, policy),
        mode_text=describe_mode(labels, policy),
        gpus=gpus,
        nfd_gpu_labels=nfd,
        nvidia_allocatable=allocatable,
        operands=tuple(p for p in pods if is_gpu_operand(p)),
        gpu_pods=tuple(view.gpu_pods_on(node.name)),
        container_traces=tuple(traces),
    )


def _operand_summary(pods: Sequence[PodInfo]) -> list[str]:
    """ "3 GPU operand pods Terminating: gpu-operator/a, gpu-operator/b and gpu-operator/c"."""
    by_problem: dict[str, list[str]] = {}
    for pod in pods:
        by_problem.setdefault(pod.problem, []).append(pod.key)
    return [
        f"{plural(len(keys), 'GPU operand pod')} {problem}: {few(keys)}"
        for problem, keys in sorted(by_problem.items())
    ]


def _ready_text(f: NodeFacts, now: datetime) -> str:
    ready = f.ready_condition
    head = "NotReady"
    if ready is not None and ready.last_transition is not None:
        head += f" {since_text(ready.last_transition, now)}"
    return f"{head}: {_condition_text(ready)}"


def _condition_text(ready: Condition | None) -> str:
    """ "Ready=Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)" """
    if ready is None:
        return "no Ready condition"
    detail = ": ".join(p for p in (ready.reason, ready.message) if p)
    return f"Ready={ready.status or '?'}" + (f" ({detail})" if detail else "")


def _taint_text(f: NodeFacts) -> str:
    effects: dict[str, list[str]] = {}
    for taint in f.node.taints:
        if taint.key in UNHEALTHY_TAINTS:
            effects.setdefault(taint.key, []).append(taint.effect)
    parts = [f"{key} ({', '.join(sorted(e))})" for key, e in sorted(effects.items())]
    return f"tainted {'; '.join(parts)}: nothing new schedules there" if parts else ""


def node_links(f: NodeFacts, now: datetime, prefix: str = "") -> Link:
    """The node's health as a link: NotReady (or cordoned, tainted) with why and what followed."""
    if not f.not_ready:
        return Link(f"{prefix}{f.health.describe()}")
    cause = kubelet_cause(f.node)
    silent = cause.kind in ("silent", "missing")
    stale = " (stale: kubelet's last report)" if silent else ""
    children: list[Link] = [Link(prefix + cause.text)]
    if f.node.swap_capacity is not None:
        if f.node.swap_capacity > 0:
            size = f"{f.node.swap_capacity / 2**30:.1f} GiB"
            children.append(Link(f"{prefix}swap is on: kubelet reports {size} of swap"))
        elif silent:
            children.append(
                Link(
                    f"{prefix}swap capacity 0 at kubelet's last report (swap turned on after it "
                    "would not show here)"
                )
            )
        else:
            children.append(Link(f"{prefix}swap capacity 0 (reported by kubelet)"))
    taints = _taint_text(f)
    if taints:
        children.append(Link(prefix + taints))
    if f.node.unschedulable:
        children.append(Link(f"{prefix}cordoned (spec.unschedulable)"))
    if f.has_nvidia_gpu or f.is_gpu_node:
        if f.nfd_gpu_labels:
            children.append(
                Link(f"{prefix}NFD GPU labels still there{stale}: {few(f.nfd_gpu_labels, 2)}")
            )
        else:
            children.append(Link(f"{prefix}NFD GPU labels gone (no {NFD_PCI_PREFIX}*10de* label)"))
        present = f.node.labels.get(GPU_PRESENT_LABEL)
        if present is None:
            children.append(
                Link(f"{prefix}{GPU_PRESENT_LABEL} missing: the GPU Operator withdrew its operands")
            )
        elif present != "true":
            children.append(Link(f"{prefix}{GPU_PRESENT_LABEL}={present}"))
    for line in _operand_summary(f.operand_problems):
        children.append(Link(prefix + line))
    if f.nvidia_allocatable:
        listed = ", ".join(f"{r}: {n}" for r, n in f.nvidia_allocatable)
        children.append(Link(f"{prefix}allocatable still lists {listed}{stale}"))
    if f.gpu_pods:
        keys = [p.key for p in f.gpu_pods]
        children.append(Link(f"{prefix}{plural(len(keys), 'GPU pod')} still bound: {few(keys)}"))
    return Link(prefix + _ready_text(f, now), tuple(children))


# --- repair ---------------------------------------------------------------------------------------


def _fix_step(f: NodeFacts) -> str:
    n = f.name
    cause = kubelet_cause(f.node)
    if cause.kind == "swap":
        return f"on {n}: swapoff -a, then comment swap out of /etc/fstab so it stays off"
    if cause.kind == "network":
        return (
            f"on {n}: bring the container network up (the CNI pod on {n}, /etc/cni/net.d); "
            "journalctl -u kubelet -b says what kubelet waits for"
        )
    if cause.kind == "runtime":
        return f"on {n}: systemctl status containerd; journalctl -u kubelet -b; fix what they say"
    return (
        f"on {n}: find why kubelet is down: systemctl status kubelet; journalctl -u kubelet -b "
        "(if it says swap is not supported: swapoff -a and comment swap out of /etc/fstab)"
    )


def _relabel_step(f: NodeFacts) -> str:
    n = f.name
    pin = VGPU_MANAGER_DEPLOY_LABEL if f.mode == VM_VGPU else VFIO_MANAGER_DEPLOY_LABEL
    return (
        f"before kubelet returns: kubectl label node {n} {WORKLOAD_LABEL}={CONTAINER} "
        f"--overwrite (or keep the mode and block the rebind: kubectl label node {n} "
        f"{pin}=false --overwrite)"
    )


def _hand_back_step(f: NodeFacts, waiting: Sequence[str]) -> str:
    n = f.name
    pin = VGPU_MANAGER_DEPLOY_LABEL if f.mode == VM_VGPU else VFIO_MANAGER_DEPLOY_LABEL
    return (
        f"when nothing on {n} uses its GPUs (nvidia-smi there lists no processes), give them "
        f"back to {few(list(waiting))}: kubectl label node {n} {WORKLOAD_LABEL}={f.mode} "
        f"--overwrite (and kubectl label node {n} {pin}- if you pinned it)"
    )


def repair_steps(f: NodeFacts, waiting: Sequence[str] = ()) -> tuple[str, ...]:
    """The node's repair, in a safe order; ``waiting`` VMs get the GPU back at the end."""
    n = f.name
    steps: list[str] = []
    if f.trapped:
        steps.append(_relabel_step(f))
    if f.not_ready:
        steps.append(_fix_step(f))
        steps.append(
            f"on {n}: systemctl restart kubelet, then watch kubectl get node {n} -w until Ready"
        )
    if f.node.unschedulable:
        steps.append(f"kubectl uncordon {n}")
    if not f.not_ready:
        for taint in f.node.taints:
            if taint.key in UNHEALTHY_TAINTS:
                steps.append(f"kubectl taint node {n} {taint.key}:{taint.effect}-")
    if f.trapped and waiting:
        steps.append(_hand_back_step(f, waiting))
    return tuple(steps)


# --- VMs ------------------------------------------------------------------------------------------


def _stuck_condition(*condition_sets: tuple[Condition, ...]) -> Condition | None:
    """The earliest PodScheduled=False among the VM's and its VMI's conditions."""
    found: Condition | None = None
    for conditions in condition_sets:
        scheduled = find_condition(conditions, "PodScheduled")
        if scheduled is None or scheduled.status != "False":
            continue
        if found is None or (
            scheduled.last_transition is not None
            and (found.last_transition is None or scheduled.last_transition < found.last_transition)
        ):
            found = scheduled
    return found


def _scheduler_link(condition: Condition | None) -> list[Link]:
    if condition is None or not condition.message:
        return []
    message = condition.message.split(" preemption:", 1)[0].rstrip(". ")
    if len(message) > SCHEDULER_MESSAGE_LIMIT:
        message = message[: SCHEDULER_MESSAGE_LIMIT - 3] + "..."
    return [Link(f"scheduler: {message}")]


@dataclass(frozen=True, slots=True)
class _Workload:
    """A VM (or an ownerless VMI) that wants to run, with what the audit needs of it."""

    ref: ObjectRef
    status: str
    devices: tuple[DeviceRequest, ...]
    stuck: Condition | None
    node: str


@dataclass
class _Capacity:
    total: int = 0
    used: int = 0
    holders: list[str] = field(default_factory=list)


class _Diagnoser:
    def __init__(self, view: ClusterView, now: datetime, track: Track) -> None:
        self.view = view
        self.now = now
        self.track = track
        self.policy = view.cluster_policy()
        self.kubevirt = view.kubevirt()
        self.facts: dict[str, NodeFacts] = {}
        self.waiting: dict[str, list[str]] = {}
        self.capacity: dict[str, _Capacity] = {}

    # nodes

    def scan_nodes(self) -> None:
        hardware = nvidia_gpus_by_node(self.view)
        for node in self.track(self.view.nodes(), "nodes"):
            self.facts[node.name] = node_facts(
                node, self.view, hardware.get(node.name, {}), self.policy
            )

    # workloads

    def workloads(self) -> list[_Workload]:
        api_version = f"{VIRTUAL_MACHINE.group}/v1"
        owned: dict[tuple[str, str], VMIInfo] = {}
        out: list[_Workload] = []
        for vmi in self.view.vmis():
            if vmi.owner_vm:
                owned[(vmi.namespace, vmi.owner_vm)] = vmi
            elif vmi.live:
                ref = ObjectRef(api_version, VIRTUAL_MACHINE_INSTANCE.kind, vmi.namespace, vmi.name)
                stuck = _stuck_condition(vmi.conditions)
                out.append(_Workload(ref, vmi.phase or "Pending", vmi.devices, stuck, vmi.node))
        for vm in self.view.vms():
            vmi_of = owned.get((vm.namespace, vm.name))
            if not self._wants_to_run(vm, vmi_of):
                continue
            ref = ObjectRef(api_version, VIRTUAL_MACHINE.kind, vm.namespace, vm.name)
            conditions = (vm.conditions, vmi_of.conditions if vmi_of is not None else ())
            status = vm.printable_status or (vmi_of.phase if vmi_of is not None else "")
            node = vmi_of.node if vmi_of is not None else ""
            out.append(
                _Workload(
                    ref, status or "not running", vm.devices, _stuck_condition(*conditions), node
                )
            )
        out.sort(key=lambda w: (w.ref.namespace, w.ref.name, w.ref.kind))
        return out

    @staticmethod
    def _wants_to_run(vm: VMInfo, vmi: VMIInfo | None) -> bool:
        return (
            vm.should_run
            or vm.printable_status == "ErrorUnschedulable"
            or (vmi is not None and vmi.live)
        )

    def diagnose_workload(self, w: _Workload) -> list[Diagnosis]:
        """Per device without a healthy provider one diagnosis; else one if the VM is stuck."""
        out: list[Diagnosis] = []
        seen: set[str] = set()
        stuck_elsewhere: list[DeviceRequest] = []
        for device in w.devices:
            name = device.device_name
            if not name or name in seen:
                continue
            seen.add(name)
            if self.view.healthy_provider_count(name) == 0:
                out.append(self._no_healthy_provider(w, device))
            else:
                stuck_elsewhere.append(device)
        if not out and w.stuck is not None:
            out.append(self._stuck_anyway(w, stuck_elsewhere))
        return out

    def _root(self, w: _Workload, children: Sequence[Link]) -> Link:
        text = f"{w.ref.kind} {w.ref}: {w.status}"
        since = self._since(w)
        if since is not None:
            text += f" for {age(self.now - since)} (since {stamp(since)})"
        return Link(text, tuple(children) + tuple(_scheduler_link(w.stuck)))

    def _status_for(self, w: _Workload, since: datetime | None) -> str:
        """ "ErrorUnschedulable for 112 days 8 hours" """
        return w.status + (f" for {age(self.now - since)}" if since is not None else "")

    @staticmethod
    def _since(w: _Workload) -> datetime | None:
        return w.stuck.last_transition if w.stuck is not None else None

    def _no_healthy_provider(self, w: _Workload, device: DeviceRequest) -> Diagnosis:
        name = device.device_name
        providers = list(self.view.providers_of(name))
        where = f"{device.field}[{device.name}]"
        remediation: list[str]
        since = self._since(w)
        if providers:
            for provider in providers:
                self.waiting.setdefault(provider, []).append(str(w.ref))
            if len(providers) == 1:
                who = f"only {providers[0]} advertises it, and it is not a healthy provider"
            else:
                who = f"{few(providers)} advertise it, and none is a healthy provider"
            head = f"needs {name} ({where}): {who}; a passthrough VM cannot run anywhere else"
            node_links_: list[Link] = []
            for provider in providers[: passthrough_provider.SHOWN_PROVIDERS]:
                f = self.facts.get(provider)
                if f is not None:
                    node_links_.append(node_links(f, self.now, prefix=f"{provider}: "))
                    ready = f.ready_condition
                    if since is None and f.not_ready and ready is not None:
                        since = ready.last_transition
            if len(providers) > passthrough_provider.SHOWN_PROVIDERS:
                more = len(providers) - passthrough_provider.SHOWN_PROVIDERS
                node_links_.append(Link(f"{more} more unhealthy providers"))
            links = [Link(head, tuple(node_links_))]
            if len(providers) == 1 and providers[0] in self.facts:
                health = self.facts[providers[0]].health.describe()
                reason = f"only {providers[0]} advertises it, and {providers[0]} is {health}"
            else:
                reason = who
            remediation = list(self._provider_repair(w, name, providers))
        else:
            head = f"needs {name} ({where}): no node advertises it"
            suggestions = passthrough_provider.did_you_mean(name, self.view, self.kubevirt)
            children: list[Link] = []
            if suggestions:
                children.append(
                    Link(f"did you mean {few(suggestions)}? resource names are case-sensitive")
                )
                remediation = [f"set deviceName to {suggestions[0]} in {w.ref.kind} {w.ref}"]
            else:
                remediation = [
                    f"check the deviceName {name}: no node advertises it (a node with that GPU "
                    f"in {VM_PASSTHROUGH} mode runs the sandbox device plugin that would)"
                ]
            for problem in passthrough_provider.permission_problems(device, self.kubevirt):
                children.append(Link(f"{name}: {problem}"))
            links = [Link(head, tuple(children))]
            reason = "no node advertises it" + (
                f"; did you mean {few(suggestions)}?" if suggestions else ""
            )
        message = f"{self._status_for(w, since)}: needs {name}; {reason}"
        return Diagnosis(
            policy=VM_UNSCHEDULABLE,
            action=Action.WARN,
            severity=Severity.HIGH,
            resource=w.ref,
            message=message,
            since=since,
            chain=self._root(w, links),
            remediation=tuple(remediation),
            enriches=passthrough_provider.ID,
            device=name,
        )

    def _provider_repair(self, w: _Workload, name: str, providers: Sequence[str]) -> list[str]:
        known = [self.facts[p] for p in providers if p in self.facts]
        if not known:
            return [f"bring back a provider of {name}: {few(list(providers))}"]
        # The easiest provider to revive first: no trap to defuse, then by name.
        first = min(known, key=lambda f: (f.trapped, f.name))
        steps: list[str] = []
        if len(known) > 1:
            steps.append(f"any one of {few([f.name for f in known])} would do; {first.name}:")
        steps.extend(repair_steps(first, [str(w.ref)]))
        steps.append(
            f"{w.ref} then schedules by itself once {first.name} advertises {name} again; "
            f"watch: kubectl get vmi -n {w.ref.namespace} {w.ref.name} -w"
        )
        return steps

    def _capacity_of(self, name: str) -> _Capacity:
        cached = self.capacity.get(name)
        if cached is not None:
            return cached
        cap = _Capacity()
        for provider in self.view.providers_of(name):
            f = self.facts.get(provider)
            if f is None or not f.health.healthy:
                continue
            cap.total += f.node.allocatable.get(name, 0)
            for pod in self.view.pods_on(provider):
                held = pod.extended.get(name, 0)
                if held and not pod.finished:
                    cap.used += held
                    cap.holders.append(pod.key)
        self.capacity[name] = cap
        return cap

    def _stuck_anyway(self, w: _Workload, devices: Sequence[DeviceRequest]) -> Diagnosis:
        """Stuck although every device has a healthy provider: capacity, or something else."""
        links: list[Link] = []
        remediation: list[str] = []
        reasons: list[str] = []
        free: list[str] = []
        for device in devices:
            name = device.device_name
            cap = self._capacity_of(name)
            healthy = self.view.healthy_provider_count(name)
            if cap.total and cap.used >= cap.total:
                text = (
                    f"needs {name}: all {cap.total} units on {plural(healthy, 'healthy provider')}"
                    f" are in use ({few(cap.holders)})"
                )
                reasons.append(f"every {name} is in use")
                remediation.append(
                    f"free a unit of {name} (stop a VM that holds one) or add a node with one"
                )
            else:
                left = max(0, cap.total - cap.used)
                text = (
                    f"needs {name}: {plural(healthy, 'healthy provider')}, "
                    f"{left} of {cap.total} units free"
                )
                free.append(f"{name} has {left} free on {plural(healthy, 'healthy provider')}")
            permission = passthrough_provider.permission_problems(device, self.kubevirt)
            if permission:
                reasons.append(f"{name}: {'; '.join(permission)}")
                remediation.append(f"permit {name} in the KubeVirt CR's permittedHostDevices")
            links.append(Link(text, tuple(Link(f"{name}: {p}") for p in permission)))
        if not reasons:
            said = _scheduler_link(w.stuck)
            refusal = "the scheduler refuses it" + (
                f" ({said[0].text.removeprefix('scheduler: ')})" if said else ""
            )
            reasons.append("; ".join([*free, refusal]) if free else refusal)
            remediation.append(
                f"kubectl describe vmi -n {w.ref.namespace} {w.ref.name}: the scheduler's "
                "events say which constraint no node meets (node selectors, affinity, taints, "
                "CPU or memory)"
            )
        since = self._since(w)
        message = f"{self._status_for(w, since)}: {'; '.join(reasons)}"
        return Diagnosis(
            policy=VM_UNSCHEDULABLE,
            action=Action.WARN,
            severity=Severity.HIGH,
            resource=w.ref,
            message=message,
            since=since,
            chain=self._root(w, links),
            remediation=tuple(remediation),
        )

    # node findings

    def node_findings(self) -> list[Diagnosis]:
        out: list[Diagnosis] = []
        for name in sorted(self.facts):
            f = self.facts[name]
            if not f.is_gpu_node:
                continue
            waiting = sorted(set(self.waiting.get(name, [])))
            if f.trapped:
                out.append(self._trap(f, waiting))
            if f.not_ready:
                out.append(self._not_ready(f, waiting))
            elif f.operand_problems:
                out.append(self._operands(f))
        return out

    def _node_ref(self, name: str) -> ObjectRef:
        return ObjectRef("v1", NODE.kind, "", name)

    def _not_ready(self, f: NodeFacts, waiting: Sequence[str]) -> Diagnosis:
        ready = f.ready_condition
        since = ready.last_transition if ready is not None else None
        n = f.name
        what = f"GPU node {n} has been NotReady"
        if since is not None:
            what += f" for {age(self.now - since)} (since {stamp(since)})"
        detail = f": {_condition_text(ready)}"
        extra: list[str] = []
        if f.gpus:
            extra.append(f"its GPUs are out of service ({few([g.split(' (')[0] for g in f.gpus])})")
        if waiting:
            extra.append(f"{plural(len(waiting), 'VM')} wait for them")
        problems = f.operand_problems
        if problems:
            extra.append(f"{plural(len(problems), 'GPU operand pod')} unhealthy")
        message = what + detail + ("; " + "; ".join(extra) if extra else "")
        link = node_links(f, self.now)
        children = list(link.children)
        if waiting:
            children.append(Link(f"{plural(len(waiting), 'VM')} wait for its GPUs: {few(waiting)}"))
        chain = Link(f"Node {n}", (Link(link.text, tuple(children)),))
        if f.trapped:
            trap_id = RECOVERY_TRAP_VGPU if f.mode == VM_VGPU else RECOVERY_TRAP_PASSTHROUGH
            remediation: tuple[str, ...] = (
                f"repair {n} in the order of [{trap_id}] on Node {n}: relabel first, then fix "
                "kubelet, then restart it",
            )
        else:
            remediation = repair_steps(f, waiting)
        return Diagnosis(
            policy=GPU_NODE_NOT_READY,
            action=Action.WARN,
            severity=Severity.HIGH,
            resource=self._node_ref(n),
            message=message,
            since=since,
            chain=chain,
            remediation=remediation,
        )

    def _trap(self, f: NodeFacts, waiting: Sequence[str]) -> Diagnosis:
        n = f.name
        vgpu = f.mode == VM_VGPU
        policy = RECOVERY_TRAP_VGPU if vgpu else RECOVERY_TRAP_PASSTHROUGH
        ready = f.ready_condition
        since = ready.last_transition if ready is not None else None
        gpus = [g.split(" (")[0] for g in f.gpus] or list(f.nfd_gpu_labels)
        if vgpu:
            operand, deploy = "the vGPU manager", VGPU_MANAGER_DEPLOY_LABEL
            effect = f"replaces the GPU driver on {n} with the vGPU host driver"
        else:
            operand, deploy = "vfio-manager", VFIO_MANAGER_DEPLOY_LABEL
            effect = f"rebinds every NVIDIA GPU on {n} to vfio-pci"
        message = (
            f"{n} is NotReady and its GPU mode is still {f.mode_text} ({WORKLOAD_LABEL}), with "
            f"NVIDIA GPUs ({few(gpus, 2)}). When kubelet comes back, NFD labels the GPUs again, "
            f"the GPU Operator redeploys {operand} and it {effect}, killing whatever uses them, "
            "host CUDA jobs that no API object shows included. Relabel before restarting kubelet."
        )
        severity = Severity.HIGH
        evidence: list[Link] = []
        if f.gpu_pods:
            severity = Severity.CRITICAL
            keys = [p.key for p in f.gpu_pods]
            message += f" {plural(len(keys), 'GPU pod')} still bound there: {few(keys)}."
            evidence.append(Link(f"GPU pods bound to {n}: {few(keys)}"))
        if f.container_traces:
            severity = Severity.CRITICAL
            message += (
                f" Container-mode labels remain ({few(list(f.container_traces), 2)}): CUDA "
                "workloads ran there."
            )
            evidence.append(
                Link(f"container-mode labels remain: {few(list(f.container_traces), 2)}")
            )
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
        chain = Link(f"Node {n}", (Link(_ready_text(f, self.now), (stays,)),))
        return Diagnosis(
            policy=policy,
            action=Action.DENY,
            severity=severity,
            resource=self._node_ref(n),
            message=message,
            since=since,
            chain=chain,
            remediation=repair_steps(f, waiting),
        )

    def _operands(self, f: NodeFacts) -> Diagnosis:
        n = f.name
        problems = f.operand_problems
        lines = _operand_summary(problems)
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
        chain = Link(
            f"Node {n}",
            (
                Link(
                    f"Ready, GPU mode {f.mode_text}",
                    tuple(Link(line) for line in lines),
                ),
            ),
        )
        return Diagnosis(
            policy=GPU_OPERAND_UNHEALTHY,
            action=Action.WARN,
            severity=Severity.MEDIUM,
            resource=self._node_ref(n),
            message=message,
            since=None,
            chain=chain,
            remediation=tuple(remediation),
        )

    # names

    def case_mismatches(self) -> list[Diagnosis]:
        """Resource names equal but for case, across VMs/VMIs, the KubeVirt CR and allocatable."""
        where: dict[str, dict[str, set[str]]] = {}

        def note(name: str, source: str) -> None:
            if name:
                where.setdefault(name.casefold(), {}).setdefault(name, set()).add(source)

        for vm in self.view.vms():
            for device in vm.devices:
                note(device.device_name, f"VM {vm.key}")
        for vmi in self.view.vmis():
            if not vmi.owner_vm:
                for device in vmi.devices:
                    note(device.device_name, f"VMI {vmi.key}")
        permitted: set[str] = set()
        for kubevirt in self.view.kubevirts():
            for resource in kubevirt.permitted_resource_names:
                permitted.add(resource)
                note(resource, f"permitted by KubeVirt {kubevirt.namespace}/{kubevirt.name}")
        advertised: set[str] = set()
        for f in self.facts.values():
            for resource, count in f.node.allocatable.items():
                if count > 0 and not is_container_gpu_resource(resource):
                    advertised.add(resource)
                    note(resource, f"advertised by {f.name}")
        out: list[Diagnosis] = []
        for folded in sorted(where):
            spellings = where[folded]
            if len(spellings) < 2:
                continue
            out.append(self._case_finding(spellings, permitted, advertised))
        return out

    def _case_finding(
        self, spellings: Mapping[str, set[str]], permitted: set[str], advertised: set[str]
    ) -> Diagnosis:
        right = sorted(s for s in spellings if s in advertised)
        parts = []
        children = []
        for spelling in sorted(spellings):
            sources = sorted(spellings[spelling])
            parts.append(f"{spelling} ({few(sources, 2)})")
            children.append(Link(f"{spelling}: {few(sources, 4)}"))
        message = (
            "resource names differ only in case: "
            + "; ".join(parts)
            + ". Kubelet resource names are case-sensitive: only the advertised spelling "
            "schedules"
        )
        odd_permitted = any(s in permitted and s not in advertised for s in spellings)
        kubevirt = self.view.kubevirt()
        if kubevirt is not None and (odd_permitted or not right):
            resource = ObjectRef(
                f"{KUBEVIRT.group}/v1", KUBEVIRT.kind, kubevirt.namespace, kubevirt.name
            )
        else:
            resource = CLUSTER
        if right:
            remediation = (
                f"spell it {right[0]} everywhere (the device plugin's spelling): in VM "
                "deviceNames and in the KubeVirt CR's permittedHostDevices resourceName",
            )
        else:
            remediation = (
                "pick the spelling the device plugin will register (the sandbox plugin "
                "upper-cases pci.ids names) and use it in VMs and the KubeVirt CR",
            )
        return Diagnosis(
            policy=RESOURCE_NAME_CASE_MISMATCH,
            action=Action.WARN,
            severity=Severity.MEDIUM,
            resource=resource,
            message=message,
            since=None,
            chain=Link(
                f"{resource.kind} {resource}",
                (Link(f"{len(spellings)} spellings of one resource name", tuple(children)),),
            ),
            remediation=remediation,
        )

    # overview

    def gpu_nodes(self) -> tuple[GpuNodeStatus, ...]:
        out = []
        for name in sorted(self.facts):
            f = self.facts[name]
            if not f.is_gpu_node:
                continue
            ready = f.ready_condition
            problems: dict[str, int] = {}
            for pod in f.operand_problems:
                problems[pod.problem] = problems.get(pod.problem, 0) + 1
            out.append(
                GpuNodeStatus(
                    name=name,
                    mode=f.mode_text,
                    health=f.health.problems[0] if f.health.problems else "Ready",
                    since=ready.last_transition if (f.not_ready and ready is not None) else None,
                    gpus=tuple(g.split(" (")[0] for g in f.gpus),
                    resources=f.nvidia_allocatable,
                    operands_ok=len(f.operands) - len(f.operand_problems),
                    operand_problems=tuple(sorted(problems.items())),
                    gpu_pods=len(f.gpu_pods),
                    vms_waiting=len(set(self.waiting.get(name, []))),
                    trapped=f.trapped,
                )
            )
        return tuple(out)


@dataclass(frozen=True, slots=True)
class GpuNodeStatus:
    """One GPU node in the audit's overview."""

    name: str
    mode: str
    health: str
    since: datetime | None
    gpus: tuple[str, ...]
    resources: tuple[tuple[str, int], ...]
    operands_ok: int
    operand_problems: tuple[tuple[str, int], ...]
    gpu_pods: int
    vms_waiting: int
    trapped: bool

    def operands_text(self) -> str:
        parts = [f"{self.operands_ok} ok"] if self.operands_ok else []
        parts += [f"{count} {problem}" for problem, count in self.operand_problems]
        return ", ".join(parts) or "none"


@dataclass(frozen=True, slots=True)
class ClusterDiagnosis:
    findings: tuple[Diagnosis, ...]
    gpu_nodes: tuple[GpuNodeStatus, ...]


def diagnose(view: ClusterView, now: datetime, track: Track = untracked) -> ClusterDiagnosis:
    """Every diagnosis over the snapshot, with durations measured to ``now``.

    Order of work: nodes first (facts, once each), then VMs (which providers they wait on),
    then the node findings (which know the waiting VMs), then resource names.
    """
    d = _Diagnoser(view, now, track)
    d.scan_nodes()
    workloads = d.workloads()
    findings: list[Diagnosis] = []
    for w in track(workloads, "VMs"):
        findings.extend(d.diagnose_workload(w))
    findings.extend(d.node_findings())
    findings.extend(d.case_mismatches())
    return ClusterDiagnosis(tuple(findings), d.gpu_nodes())

"""What the audit knows of every node, computed once per audit: the diagnoses and the GPU nodes'
overview read the same facts (``node_facts_of``, ``gpu_node_statuses``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from policies.cluster.conditions import Condition
from policies.cluster.coverage import GPU_USERS_READS
from policies.cluster.dra import NVIDIA_DRIVER, PublishedDevice
from policies.cluster.gpu_operator import ClusterPolicyInfo
from policies.cluster.gpu_users import GpuUser, gpu_users_on
from policies.cluster.hardware import is_gpu_function
from policies.cluster.health import NOT_READY, NodeHealth, node_health
from policies.cluster.kinds import NODE, NODE_FEATURE
from policies.cluster.nodes import NodeInfo
from policies.cluster.pciids import NFD_LABEL_PREFIX, NVIDIA_VENDOR, PciId
from policies.cluster.pods import PodInfo
from policies.cluster.resources import is_nvidia_resource
from policies.cluster.view import AuditView, ClusterView
from policies.cluster.workload import (
    DEPLOY_LABEL_PREFIX,
    GPU_PRESENT_LABEL,
    GPU_PRODUCT_LABEL,
    OPERANDS_DEPLOY_LABEL,
    VM_PASSTHROUGH,
    VM_VGPU,
    WORKLOAD_LABEL,
    describe_mode,
    effective_mode,
    is_gpu_node,
    is_gpu_operand,
    rebind_pin_label,
)
from policies.diagnoses.workloads import waiting_vms

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
    gpu_pods: tuple[GpuUser, ...]
    """Pods holding its NVIDIA GPUs (device plugin or DRA claims), with what they hold."""
    container_traces: tuple[str, ...]
    """Labels container mode left on the node ("nvidia.com/gpu.deploy.device-plugin=true")."""
    dra_devices: tuple[PublishedDevice, ...] = ()
    """What NVIDIA's DRA driver publishes for the node (current pool generations; a NotReady
    node's slices stay, stale)."""

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def not_ready(self) -> bool:
        return NOT_READY in self.health.problems

    @property
    def ready_condition(self) -> Condition | None:
        return self.node.condition("Ready")

    @property
    def not_ready_since(self) -> datetime | None:
        """When the Ready condition last changed, if the node is NotReady."""
        ready = self.ready_condition
        return ready.last_transition if (self.not_ready and ready is not None) else None

    @property
    def operand_problems(self) -> tuple[PodInfo, ...]:
        return tuple(p for p in self.operands if p.problem)

    @property
    def gpu_models(self) -> tuple[str, ...]:
        """The GPUs without their sources: "10de:2b85 GB202 [GeForce RTX 5090]"."""
        return tuple(g.split(" (")[0] for g in self.gpus)

    @property
    def is_gpu_node(self) -> bool:
        """What admission calls a GPU node, widened by what only an audit looks at: hardware
        from any source, operand pods, a workload label (a dead node may have lost the rest)."""
        labels = self.node.labels
        return is_gpu_node(self.node) or bool(
            self.gpus
            or self.dra_devices
            or self.nfd_gpu_labels
            or self.operands
            or WORKLOAD_LABEL in labels
            or GPU_PRESENT_LABEL in labels
        )

    @property
    def has_nvidia_gpu(self) -> bool:
        return bool(self.gpus or self.nfd_gpu_labels)

    @property
    def rebind_pin(self) -> str:
        """The deploy label that keeps this mode's VM operand (vfio-manager, vGPU manager) off."""
        return rebind_pin_label(self.mode)

    @property
    def rebind_blocked(self) -> bool:
        """A pinned deploy label keeps the VM-mode operand off when the node comes back."""
        labels = self.node.labels
        if labels.get(OPERANDS_DEPLOY_LABEL) == "false":
            return True
        return labels.get(self.rebind_pin) == "false"

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
            if label.startswith(NFD_LABEL_PREFIX) and NVIDIA_VENDOR in label and value == "true"
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
        gpu_pods=gpu_users_on(node.name, view),
        container_traces=tuple(traces),
        dra_devices=tuple(view.devices_on(node.name, NVIDIA_DRIVER)),
    )


def describe_device(device: PublishedDevice) -> str:
    """ "gpu-0 (gpu, NVIDIA GeForce RTX 5090)": a published device, as the overview and the
    chains name it."""
    product = device.device.attribute("productName")
    details = [d for d in (device.device.type, product if isinstance(product, str) else "") if d]
    return device.device.name + (f" ({', '.join(details)})" if details else "")


#: What ``node_facts_of`` and ``gpu_nodes_of`` read: the nodes, their NVIDIA hardware (labels,
#: NodeFeatures, DRA devices), their mode and their GPU users.
NODE_FACTS_READS = GPU_USERS_READS | {NODE, NODE_FEATURE}


def node_facts_of(view: AuditView) -> Mapping[str, NodeFacts]:
    """Node name -> its facts, every node once per audit."""

    def scan() -> dict[str, NodeFacts]:
        cluster = view.cluster
        hardware = nvidia_gpus_by_node(cluster)
        policy = cluster.cluster_policy()
        return {
            node.name: node_facts(node, cluster, hardware.get(node.name, {}), policy)
            for node in view.track(cluster.nodes(), "nodes")
        }

    return view.once(node_facts_of, scan)


def gpu_nodes_of(view: AuditView) -> tuple[NodeFacts, ...]:
    """The GPU nodes' facts, by name: what the node diagnoses and the overview look at."""

    def select() -> tuple[NodeFacts, ...]:
        facts = node_facts_of(view)
        return tuple(facts[name] for name in sorted(facts) if facts[name].is_gpu_node)

    return view.once(gpu_nodes_of, select)


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
    dra_devices: tuple[str, ...] = ()
    """Devices NVIDIA's DRA driver publishes there, described ("gpu-0 (gpu, NVIDIA ...)")."""

    @property
    def not_ready(self) -> bool:
        """NotReady (its first health problem, as ``NodeFacts.not_ready`` finds it)."""
        return self.health == NOT_READY

    def operands_text(self) -> str:
        parts = [f"{self.operands_ok} ok"] if self.operands_ok else []
        parts += [f"{count} {problem}" for problem, count in self.operand_problems]
        return ", ".join(parts) or "none"


def gpu_node_statuses(view: AuditView) -> tuple[GpuNodeStatus, ...]:
    """The overview of every GPU node, from the facts the diagnoses used."""
    nodes = gpu_nodes_of(view)
    waiting = waiting_vms(view)
    out = []
    for f in nodes:
        problems: dict[str, int] = {}
        for pod in f.operand_problems:
            problems[pod.problem] = problems.get(pod.problem, 0) + 1
        out.append(
            GpuNodeStatus(
                name=f.name,
                mode=f.mode_text,
                health=f.health.problems[0] if f.health.problems else "Ready",
                since=f.not_ready_since,
                gpus=f.gpu_models,
                resources=f.nvidia_allocatable,
                operands_ok=len(f.operands) - len(f.operand_problems),
                operand_problems=tuple(sorted(problems.items())),
                gpu_pods=len(f.gpu_pods),
                vms_waiting=len(waiting.get(f.name, ())),
                trapped=f.trapped,
                dra_devices=tuple(describe_device(d) for d in f.dra_devices),
            )
        )
    return tuple(out)

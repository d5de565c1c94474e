"""How many of everything and where it runs (``Layout``), the hardware tables, and the small
deterministic helpers every kind's generator draws from its own random stream with."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import NamedTuple, Protocol

from bench.synthetic import draw
from bench.synthetic.draw import Obj
from policies.cluster.kinds import WATCHED_KINDS

DEFAULT_SEED = 7
KUBELET_VERSION = "v1.33.4"


class GpuModel(NamedTuple):
    """A container-mode whole-GPU node flavour."""

    prefix: str
    share: float  # of the whole-GPU container nodes
    product: str  # GFD's nvidia.com/gpu.product
    device: str  # PCI device id (vendor 10de)
    pci_class: str


class VfioModel(NamedTuple):
    """A vm-passthrough node flavour: its GPUs are advertised as one sandbox resource."""

    prefix: str
    share: float
    resource: str
    per_node: int
    device: str


GPU_MODELS = (
    GpuModel("gpu-h100", 0.5, "NVIDIA-H100-80GB-HBM3", "2330", "0302"),
    GpuModel("gpu-a100", 0.3, "NVIDIA-A100-SXM4-80GB", "20b2", "0302"),
    GpuModel("gpu-l40s", 0.2, "NVIDIA-L40S", "26b9", "0302"),
)
MIG_RESOURCE = "nvidia.com/mig-1g.10gb"
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
H100_PCIE = "nvidia.com/GH100_H100_PCIE"
VFIO_MODELS = (
    VfioModel("vfio-3090", 0.6, RTX_3090, 4, "2204"),
    VfioModel("vfio-h100", 0.4, H100_PCIE, 8, "2331"),
)


def words(text: str) -> tuple[str, ...]:
    """Whitespace-separated words: a table written as text."""
    return tuple(text.split())


def labels(prefix: str, text: str) -> dict[str, str]:
    """``key=value`` words as labels under ``prefix``, in the order written (a value may be empty:
    a slot the caller fills, keeping its place in the dict)."""
    return {prefix + key: value for key, _, value in (w.partition("=") for w in text.split())}


#: Application teams and services: namespaces, deployments and their images.
TEAMS = words(
    "payments search checkout identity ledger catalog pricing fraud notify media maps ads growth"
    " support billing infra data platform mobile-api reports"
)
SERVICES = words(
    "api worker frontend gateway indexer scheduler cache-warmer consumer exporter syncer auth"
    " webhook batch cron ingest stream"
)


def scaled(base: int, scale: float, minimum: int = 1) -> int:
    return max(minimum, round(base * scale))


def split_by(total: int, shares: list[float]) -> tuple[int, ...]:
    """``total`` split by ``shares``, every part at least 1 when total allows, summing to total."""
    parts = [max(1 if total >= len(shares) else 0, int(total * s)) for s in shares]
    parts[0] += total - sum(parts)
    return tuple(parts)


def numbered(prefixes: list[str], counts: tuple[int, ...]) -> list[tuple[str, int]]:
    """(``prefix-0001``..., index of its model) for ``counts[m]`` nodes of each model."""
    return [(f"{p}-{i:04d}", m) for m, p in enumerate(prefixes) for i in range(1, counts[m] + 1)]


class Placement(Protocol):
    """What the node and pod makers read of a layout: ``Layout`` (device plugin) and
    ``DraLayout`` (the same makers, a DRA cluster)."""

    @property
    def seed(self) -> int: ...

    @property
    def not_ready(self) -> frozenset[str]: ...

    def node_names(self) -> list[str]: ...

    def cpu_nodes(self) -> list[str]:
        """Where ordinary deployments mostly run."""
        ...


@dataclass(frozen=True)
class Layout:
    """How many of everything, and where each thing runs: the one source of placement."""

    scale: float
    seed: int
    nodes: int
    gpu_full: tuple[int, ...]  # nodes per GPU_MODELS entry
    gpu_mig: int
    vfio: tuple[int, ...]  # nodes per VFIO_MODELS entry
    cpu: int
    not_ready: frozenset[str]
    pods: int
    gpu_pods: int
    vms: int
    vmis: int

    @classmethod
    def at(cls, scale: float = 1.0, seed: int = DEFAULT_SEED) -> Layout:
        if scale <= 0:
            raise ValueError("scale must be positive")
        nodes = scaled(5000, scale, 10)
        gpu_container = scaled(1000, scale, 2)
        gpu_mig = max(1, round(gpu_container * 0.2))
        gpu_full = split_by(gpu_container - gpu_mig, [m.share for m in GPU_MODELS])
        vfio = split_by(scaled(300, scale, 2), [m.share for m in VFIO_MODELS])
        cpu = max(1, nodes - gpu_container - sum(vfio))
        layout = cls(
            scale=scale,
            seed=seed,
            nodes=gpu_container + sum(vfio) + cpu,
            gpu_full=gpu_full,
            gpu_mig=gpu_mig,
            vfio=vfio,
            cpu=cpu,
            not_ready=frozenset(),
            pods=scaled(150_000, scale),
            gpu_pods=scaled(20_000, scale),
            vms=scaled(10_000, scale, 2),
            vmis=scaled(10_000, scale, 2),
        )
        # A few dead kubelets: most on CPU nodes, about one in five on a GPU node.
        picker = random.Random(f"{seed}:not-ready")
        gpu = [n for n in layout.node_names() if not n.startswith("cpu-")]
        dead = scaled(25, scale)
        sick = picker.sample(gpu, min(len(gpu), max(1, dead // 5)))
        sick += picker.sample(layout.cpu_nodes(), min(layout.cpu, dead - len(sick)))
        return replace(layout, not_ready=frozenset(sick))

    # --- node names, by role ----------------------------------------------------------------------

    def full_gpu_nodes(self) -> list[tuple[str, int]]:
        """(name, index into GPU_MODELS) for the container-mode whole-GPU nodes."""
        return numbered([m.prefix for m in GPU_MODELS], self.gpu_full)

    def mig_nodes(self) -> list[str]:
        return [f"gpu-a100mig-{i:04d}" for i in range(1, self.gpu_mig + 1)]

    def vfio_nodes(self) -> list[tuple[str, int]]:
        """(name, index into VFIO_MODELS) for the vm-passthrough nodes."""
        return numbered([m.prefix for m in VFIO_MODELS], self.vfio)

    def cpu_nodes(self) -> list[str]:
        return [f"cpu-{i:05d}" for i in range(1, self.cpu + 1)]

    def ready_cpu_nodes(self) -> list[str]:
        """Where plain VMIs run (every CPU node, if none is Ready)."""
        return [n for n in self.cpu_nodes() if n not in self.not_ready] or self.cpu_nodes()

    def node_names(self) -> list[str]:
        return [
            *(n for n, _ in self.full_gpu_nodes()),
            *self.mig_nodes(),
            *(n for n, _ in self.vfio_nodes()),
            *self.cpu_nodes(),
        ]

    # --- derived counts ---------------------------------------------------------------------------

    @property
    def gpu_vms(self) -> int:
        return self.vms // 2

    @property
    def vfio_slots(self) -> int:
        """Passthrough devices on Ready vm-passthrough nodes: where GPU VMIs can run."""
        return sum(VFIO_MODELS[m].per_node for n, m in self.vfio_nodes() if n not in self.not_ready)

    @property
    def gpu_vms_running(self) -> int:
        return min(round(self.gpu_vms * 0.32), self.vfio_slots)

    @property
    def gpu_vms_unschedulable(self) -> int:
        return min(round(self.gpu_vms * 0.04), self.gpu_vms - self.gpu_vms_running)

    @property
    def owned_vmis(self) -> int:
        """VMIs a VirtualMachine owns: every plain VM's, and the running or scheduling GPU VMs'."""
        return (self.vms - self.gpu_vms) + self.gpu_vms_running + self.gpu_vms_unschedulable

    @property
    def standalone_vmis(self) -> int:
        return max(0, self.vmis - self.owned_vmis)

    def expected_counts(self) -> dict[str, int]:
        """``ClusterState.counts()`` of this layout: every watched kind, none of DRA's here."""
        return dict.fromkeys(map(str, WATCHED_KINDS), 0) | {
            "Node": self.nodes,
            "Pod": self.pods,
            "VirtualMachine.kubevirt.io": self.vms,
            "VirtualMachineInstance.kubevirt.io": self.owned_vmis + self.standalone_vmis,
            "KubeVirt.kubevirt.io": 1,
            "ClusterPolicy.nvidia.com": 1,
            "NodeFeature.nfd.k8s-sigs.io": sum(self.gpu_full) + self.gpu_mig + sum(self.vfio),
        }


# --- images ---------------------------------------------------------------------------------------

_SYSTEM_IMAGES = (
    ("registry.k8s.io/kube-proxy", KUBELET_VERSION),
    ("docker.io/calico/node", "v3.28.1"),
    ("docker.io/calico/cni", "v3.28.1"),
    ("quay.io/prometheus/node-exporter", "v1.8.2"),
    ("cr.fluentbit.io/fluent/fluent-bit", "3.1.7"),
    ("registry.k8s.io/pause", "3.10"),
    ("registry.k8s.io/coredns/coredns", "v1.11.3"),
    ("registry.k8s.io/sig-storage/csi-node-driver-registrar", "v2.11.1"),
    ("quay.io/kubevirt/virt-handler", "v1.4.0"),
    ("quay.io/kubevirt/virt-launcher", "v1.4.0"),
)
_NVIDIA_IMAGES = (
    ("nvcr.io/nvidia/driver", "550.90.07-ubuntu22.04"),
    ("nvcr.io/nvidia/k8s-device-plugin", "v0.17.0"),
    ("nvcr.io/nvidia/cloud-native/gpu-operator-validator", "v24.9.0"),
    ("nvcr.io/nvidia/k8s/container-toolkit", "v1.17.0-ubuntu20.04"),
    ("nvcr.io/nvidia/k8s/dcgm-exporter", "3.3.8-3.6.0-ubuntu22.04"),
    ("nvcr.io/nvidia/cloud-native/k8s-mig-manager", "v0.10.0-ubuntu20.04"),
    ("nvcr.io/nvidia/kubevirt-gpu-device-plugin", "v1.2.10"),
    ("nvcr.io/nvidia/cuda", "12.6.2-base-ubi9"),
    ("nvcr.io/nvidia/pytorch", "25.01-py3"),
    ("nvcr.io/nvidia/tritonserver", "25.01-py3"),
    ("nvcr.io/nvidia/nemo", "24.12"),
)


@dataclass(frozen=True)
class Image:
    repo: str
    tag: str
    digest: str
    size: int

    @property
    def ref(self) -> str:
        return f"{self.repo}:{self.tag}"

    @property
    def name(self) -> str:
        """The last part of the repository: ``node`` for docker.io/calico/node."""
        return self.repo.rsplit("/", 1)[-1]

    def entry(self) -> Obj:
        """As a node's status.images lists it."""
        return {"names": [f"{self.repo}@sha256:{self.digest}", self.ref], "sizeBytes": self.size}


@dataclass(frozen=True)
class Images:
    """The images a cluster runs, the same for every kind's stream."""

    system: list[Image]
    nvidia: list[Image]
    apps: list[Image]  # one per (team, service), in TEAMS x SERVICES order

    @classmethod
    def of(cls, seed: int) -> Images:
        rng = random.Random(f"{seed}:images")

        def image(repo: str, tag: str, low: int, high: int) -> Image:
            return Image(repo, tag, draw.hexdigits(rng, 64), rng.randrange(low, high))

        system = [image(r, t, 20_000_000, 400_000_000) for r, t in _SYSTEM_IMAGES]
        nvidia = [image(r, t, 300_000_000, 12_000_000_000) for r, t in _NVIDIA_IMAGES]
        apps = [
            image(
                f"registry.example.com/{team}/{service}",
                f"{rng.randrange(1, 6)}.{rng.randrange(40)}.{rng.randrange(20)}-"
                f"{draw.hexdigits(rng, 7)}",
                30_000_000,
                900_000_000,
            )
            for team in TEAMS
            for service in SERVICES
        ]
        return cls(system, nvidia, apps)

    def app(self, team: str, service: str) -> Image:
        return self.apps[TEAMS.index(team) * len(SERVICES) + SERVICES.index(service)]

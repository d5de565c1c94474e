"""The DRA cluster's layout: every node a GPU node whose GPUs NVIDIA's DRA driver publishes in a
ResourceSlice (no device plugin), which nodes are sick, and the hardware tables.

At ``scale=1.0``: 5,000 nodes with 8 GPUs each: 3,800 container-mode nodes (H100 SXM, A100,
L40S; ``type=gpu`` devices), 200 MIG nodes (A100s cut into 7 ``1g.10gb`` each: 56 ``type=mig``
devices), 1,000 vm-passthrough nodes (H100 PCIe, L40S; ``type=vfio`` devices), 5 of them the
only H200 NVL nodes. Unhealthy, so an audit has something to say: every H200 node NotReady
(the VMs that want one wait: the 112 days at scale), 10 container and 10 passthrough nodes
NotReady with claims still allocated on them, 5 nodes where the device plugin still
advertises ``nvidia.com/gpu`` beside the DRA driver, and one node in ten on an older driver
release that publishes ``pcieBusID``/``numa`` instead of the standard attribute names. Which
claim, pod and VM goes where is ``dra_plan.py``'s.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import NamedTuple

from bench.synthetic.layout import DEFAULT_SEED, GPU_MODELS, GpuModel, numbered, scaled, split_by

DRIVER = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
VFIO_CLASS = "vfio.gpu.nvidia.com"
GPUS_PER_NODE = 8
MIG_PROFILE = "1g.10gb"
MIGS_PER_GPU = 7


class DraGpuModel(NamedTuple):
    """A container-mode node flavour: the device plugin's model, as the DRA driver names it."""

    base: GpuModel
    product: str  # the driver's productName attribute
    architecture: str
    compute: str  # cudaComputeCapability, a version
    memory: str  # capacity memory


class DraVfioModel(NamedTuple):
    """A vm-passthrough node flavour: 8 GPUs bound to vfio-pci, published as ``type=vfio``."""

    prefix: str
    share: float  # of the passthrough nodes other than the H200 ones
    product: str
    device: str  # PCI device id, as the driver's deviceID attribute (0x....)
    memory: str  # capacity addressableMemory
    short: str  # the model in template names: h100-vfio
    field: str  # how VMs take it: gpus or hostDevices


DRA_GPU_MODELS = (
    DraGpuModel(GPU_MODELS[0], "NVIDIA H100 80GB HBM3", "Hopper", "9.0.0", "81559Mi"),
    DraGpuModel(GPU_MODELS[1], "NVIDIA A100-SXM4-80GB", "Ampere", "8.0.0", "81920Mi"),
    DraGpuModel(GPU_MODELS[2], "NVIDIA L40S", "Ada Lovelace", "8.9.0", "46068Mi"),
)
MIG_MODEL = DRA_GPU_MODELS[1]
DRA_VFIO_MODELS = (
    DraVfioModel("vfio-h100", 0.6, "NVIDIA H100 PCIe", "0x2331", "80Gi", "h100", "hostDevices"),
    DraVfioModel("vfio-l40s", 0.4, "NVIDIA L40S", "0x26b9", "48Gi", "l40s", "gpus"),
)
#: The passthrough model only a few nodes have, all of them NotReady.
H200 = DraVfioModel("vfio-h200", 0.0, "NVIDIA H200 NVL", "0x233b", "141Gi", "h200", "hostDevices")
#: What pending pods ask that no node has.
ABSENT_PRODUCT = "NVIDIA B200"


@dataclass(frozen=True)
class DraLayout:
    """How many of everything in the DRA cluster, and which nodes are which."""

    scale: float
    seed: int
    gpu: tuple[int, ...]  # container nodes per DRA_GPU_MODELS entry
    mig: int
    vfio: tuple[int, ...]  # passthrough nodes per DRA_VFIO_MODELS entry
    h200: int
    not_ready: frozenset[str]
    managed_twice: frozenset[str]
    """Container nodes where the device plugin still advertises nvidia.com/gpu too."""
    legacy_driver: frozenset[str]
    """Nodes on an older driver release: unqualified pcieBusID and numa attributes."""
    pods: int
    pod_claims: int
    mig_claims: int
    pending_pod_claims: int
    vms: int
    vms_running: int
    vms_unschedulable: int
    dynamic_mig: bool = False
    """Container GPU nodes under the driver's DynamicMIG gate: each GPU also published as seven
    partitions drawing on its counters (KEP-4815), the counters in a slice of their own."""

    @classmethod
    def at(cls, scale: float = 1.0, seed: int = DEFAULT_SEED) -> DraLayout:
        if scale <= 0:
            raise ValueError("scale must be positive")
        nodes = scaled(5000, scale, 10)
        h200 = scaled(5, scale)
        vfio = split_by(scaled(995, scale, 2), [m.share for m in DRA_VFIO_MODELS])
        mig = scaled(200, scale)
        gpu = split_by(
            max(3, nodes - h200 - sum(vfio) - mig), [m.base.share for m in DRA_GPU_MODELS]
        )
        vms = scaled(10_000, scale, 3)
        empty: frozenset[str] = frozenset()
        layout = cls(
            scale=scale,
            seed=seed,
            gpu=gpu,
            mig=mig,
            vfio=vfio,
            h200=h200,
            not_ready=empty,
            managed_twice=empty,
            legacy_driver=empty,
            pods=scaled(150_000, scale),
            pod_claims=scaled(11_500, scale),
            mig_claims=scaled(2_000, scale),
            pending_pod_claims=scaled(100, scale),
            vms=vms,
            vms_running=round(vms * 0.6),
            vms_unschedulable=max(1, round(vms * 0.04)),
        )
        rng = random.Random(f"{seed}:dra-nodes")
        container = [n for n, _ in layout.gpu_nodes()]
        passthrough = [n for n, _ in layout.vfio_nodes()]
        dead = {n for n, _ in layout.h200_nodes()}
        dead |= set(rng.sample(container, min(len(container) - 1, scaled(10, scale))))
        dead |= set(rng.sample(passthrough, min(len(passthrough) - 1, scaled(10, scale))))
        ready = [n for n in container if n not in dead]
        twice = rng.sample(ready, min(len(ready), scaled(5, scale)))
        everyone = layout.node_names()
        legacy = rng.sample(everyone, round(len(everyone) * 0.1))
        return cls(
            **{
                **vars(layout),
                "not_ready": frozenset(dead),
                "managed_twice": frozenset(twice),
                "legacy_driver": frozenset(legacy),
            }
        )

    # --- node names, by role ----------------------------------------------------------------------

    def gpu_nodes(self) -> list[tuple[str, int]]:
        """(name, index into DRA_GPU_MODELS) for the container-mode nodes."""
        return numbered([m.base.prefix for m in DRA_GPU_MODELS], self.gpu)

    def mig_nodes(self) -> list[str]:
        return [f"gpu-a100mig-{i:04d}" for i in range(1, self.mig + 1)]

    def vfio_nodes(self) -> list[tuple[str, int]]:
        """(name, index into DRA_VFIO_MODELS) for the passthrough nodes but the H200 ones."""
        return numbered([m.prefix for m in DRA_VFIO_MODELS], self.vfio)

    def h200_nodes(self) -> list[tuple[str, DraVfioModel]]:
        return [(f"{H200.prefix}-{i:04d}", H200) for i in range(1, self.h200 + 1)]

    def passthrough_nodes(self) -> list[tuple[str, DraVfioModel]]:
        """Every vm-passthrough node with its model, the H200 ones last."""
        return [(n, DRA_VFIO_MODELS[m]) for n, m in self.vfio_nodes()] + self.h200_nodes()

    def node_names(self) -> list[str]:
        return [
            *(n for n, _ in self.gpu_nodes()),
            *self.mig_nodes(),
            *(n for n, _ in self.passthrough_nodes()),
        ]

    def cpu_nodes(self) -> list[str]:
        """Where ordinary deployments run: there are no CPU-only nodes, so the Ready
        container-mode nodes."""
        return [n for n, _ in self.gpu_nodes() if n not in self.not_ready]

    @property
    def nodes(self) -> int:
        return sum(self.gpu) + self.mig + sum(self.vfio) + self.h200

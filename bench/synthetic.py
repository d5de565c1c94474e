"""A large, realistic, deterministic cluster for benchmarks: nodes, pods, VMs, VMIs, operator CRs.

At ``scale=1.0``: 5,000 nodes (1,000 GPU nodes in container mode with GFD labels, 200 of them MIG;
300 vm-passthrough nodes advertising sandbox resources; a few NotReady with unreachable taints;
about 18 KB each with ~30 images in status), 150,000 pods (20,000 holding ``nvidia.com/gpu`` or
MIG slices on the GPU nodes; daemonset, GPU Operator operand, virt-launcher and deployment pods of
3-5 KB), 10,000 VirtualMachines (half with gpus/hostDevices), 10,000 VMIs, one KubeVirt CR, one
ClusterPolicy and a NodeFeature per GPU node. ``scale`` multiplies every count.

The same (scale, seed) gives the same objects, byte for byte, whatever order the kinds are read in:
each kind draws from its own random stream, and every placement comes from ``Layout``.

    python -m bench.synthetic -o /tmp/big.json [--scale 1.0] [--seed 7] [--format json|yaml]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import yaml

Obj = dict[str, Any]

DEFAULT_SEED = 7
#: Everything happened before this instant; timestamps are offsets back from it.
EPOCH = datetime(2026, 7, 1, 12, 0, 0, tzinfo=UTC)
KUBELET_VERSION = "v1.33.4"

#: (name prefix, share of the full-GPU container nodes, GFD product, PCI device, class)
GPU_MODELS: tuple[tuple[str, float, str, str, str], ...] = (
    ("gpu-h100", 0.5, "NVIDIA-H100-80GB-HBM3", "2330", "0302"),
    ("gpu-a100", 0.3, "NVIDIA-A100-SXM4-80GB", "20b2", "0302"),
    ("gpu-l40s", 0.2, "NVIDIA-L40S", "26b9", "0302"),
)
MIG_RESOURCE = "nvidia.com/mig-1g.10gb"
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
H100_PCIE = "nvidia.com/GH100_H100_PCIE"
#: vm-passthrough node flavours: (name prefix, share, sandbox resource, devices per node, PCI id)
VFIO_MODELS: tuple[tuple[str, float, str, int, str], ...] = (
    ("vfio-3090", 0.6, RTX_3090, 4, "2204"),
    ("vfio-h100", 0.4, H100_PCIE, 8, "2331"),
)

DAEMONSETS = ("kube-proxy", "calico-node", "node-exporter", "fluent-bit")
FULL_OPERANDS = (
    "nvidia-driver-daemonset",
    "gpu-feature-discovery",
    "nvidia-container-toolkit-daemonset",
    "nvidia-device-plugin-daemonset",
    "nvidia-dcgm-exporter",
    "nvidia-operator-validator",
)
MIG_OPERANDS = (*FULL_OPERANDS, "nvidia-mig-manager")
VFIO_OPERANDS = (
    "nvidia-sandbox-device-plugin-daemonset",
    "nvidia-vfio-manager",
    "nvidia-sandbox-validator",
)

#: Running GPU pods per node: leave headroom below 8 GPUs / 56 MIG slices, like a busy cluster.
GPU_PODS_PER_FULL_NODE = 7
GPU_PODS_PER_MIG_NODE = 40


def _count(base: int, scale: float, minimum: int = 1) -> int:
    return max(minimum, round(base * scale))


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
        nodes = _count(5000, scale, 10)
        gpu_container = _count(1000, scale, 2)
        gpu_mig = max(1, round(gpu_container * 0.2))
        full = gpu_container - gpu_mig
        gpu_full = _split(full, [share for _, share, *_ in GPU_MODELS])
        vfio = _split(_count(300, scale, 2), [share for _, share, *_ in VFIO_MODELS])
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
            pods=_count(150_000, scale),
            gpu_pods=_count(20_000, scale),
            vms=_count(10_000, scale, 2),
            vmis=_count(10_000, scale, 2),
        )
        # A few dead kubelets: most on CPU nodes, about one in five on a GPU node.
        picker = random.Random(f"{seed}:not-ready")
        gpu = [n for n in layout.node_names() if not n.startswith("cpu-")]
        dead = _count(25, scale)
        sick = picker.sample(gpu, min(len(gpu), max(1, dead // 5)))
        sick += picker.sample(layout.cpu_nodes(), min(layout.cpu, dead - len(sick)))
        return replace(layout, not_ready=frozenset(sick))

    # --- node names, by role ----------------------------------------------------------------------

    def full_gpu_nodes(self) -> list[tuple[str, int]]:
        """(name, index into GPU_MODELS) for the container-mode whole-GPU nodes."""
        out: list[tuple[str, int]] = []
        for m, (prefix, *_rest) in enumerate(GPU_MODELS):
            out.extend((f"{prefix}-{i:04d}", m) for i in range(1, self.gpu_full[m] + 1))
        return out

    def mig_nodes(self) -> list[str]:
        return [f"gpu-a100mig-{i:04d}" for i in range(1, self.gpu_mig + 1)]

    def vfio_nodes(self) -> list[tuple[str, int]]:
        """(name, index into VFIO_MODELS) for the vm-passthrough nodes."""
        out: list[tuple[str, int]] = []
        for m, (prefix, *_rest) in enumerate(VFIO_MODELS):
            out.extend((f"{prefix}-{i:04d}", m) for i in range(1, self.vfio[m] + 1))
        return out

    def cpu_nodes(self) -> list[str]:
        return [f"cpu-{i:05d}" for i in range(1, self.cpu + 1)]

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
        return sum(VFIO_MODELS[m][3] for n, m in self.vfio_nodes() if n not in self.not_ready)

    @property
    def gpu_vms_running(self) -> int:
        return min(round(self.gpu_vms * 0.32), self.vfio_slots)

    @property
    def gpu_vms_unschedulable(self) -> int:
        return min(round(self.gpu_vms * 0.04), self.gpu_vms - self.gpu_vms_running)

    @property
    def standalone_vmis(self) -> int:
        owned = (self.vms - self.gpu_vms) + self.gpu_vms_running + self.gpu_vms_unschedulable
        return max(0, self.vmis - owned)

    def expected_counts(self) -> dict[str, int]:
        return {
            "Node": self.nodes,
            "Pod": self.pods,
            "VirtualMachine.kubevirt.io": self.vms,
            "VirtualMachineInstance.kubevirt.io": (
                (self.vms - self.gpu_vms)
                + self.gpu_vms_running
                + self.gpu_vms_unschedulable
                + self.standalone_vmis
            ),
            "KubeVirt.kubevirt.io": 1,
            "ClusterPolicy.nvidia.com": 1,
            "NodeFeature.nfd.k8s-sigs.io": sum(self.gpu_full) + self.gpu_mig + sum(self.vfio),
        }


def _split(total: int, shares: list[float]) -> tuple[int, ...]:
    """``total`` split by ``shares``, every part at least 1 when total allows, summing to total."""
    parts = [max(1 if total >= len(shares) else 0, int(total * s)) for s in shares]
    parts[0] += total - sum(parts)
    return tuple(parts)


# --- small deterministic helpers ------------------------------------------------------------------


def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _hex(rng: random.Random, digits: int) -> str:
    return f"{rng.getrandbits(digits * 4):0{digits}x}"


def _stamp(rng: random.Random, max_days: float, min_days: float = 0.0) -> str:
    back = timedelta(seconds=rng.uniform(min_days * 86400, max_days * 86400))
    return (EPOCH - back).strftime("%Y-%m-%dT%H:%M:%SZ")


_ALNUM = "bcdfghjklmnpqrstvwxz2456789"


def _suffix(rng: random.Random, n: int = 5) -> str:
    return "".join(rng.choice(_ALNUM) for _ in range(n))


def _ip(rng: random.Random, prefix: str = "10") -> str:
    return f"{prefix}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"


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
_TEAMS = (
    "payments",
    "search",
    "checkout",
    "identity",
    "ledger",
    "catalog",
    "pricing",
    "fraud",
    "notify",
    "media",
    "maps",
    "ads",
    "growth",
    "support",
    "billing",
    "infra",
    "data",
    "platform",
    "mobile-api",
    "reports",
)
_SERVICES = (
    "api",
    "worker",
    "frontend",
    "gateway",
    "indexer",
    "scheduler",
    "cache-warmer",
    "consumer",
    "exporter",
    "syncer",
    "auth",
    "webhook",
    "batch",
    "cron",
    "ingest",
    "stream",
)


@dataclass(frozen=True)
class _Image:
    repo: str
    tag: str
    digest: str
    size: int

    @property
    def ref(self) -> str:
        return f"{self.repo}:{self.tag}"

    @property
    def pinned(self) -> str:
        return f"{self.repo}@sha256:{self.digest}"

    def entry(self) -> Obj:
        return {"names": [self.pinned, self.ref], "sizeBytes": self.size}


def _image_pool(seed: int) -> tuple[list[_Image], list[_Image], list[_Image]]:
    """(system, nvidia, application) images, the same for every kind's stream."""
    rng = random.Random(f"{seed}:images")

    def image(repo: str, tag: str, low: int, high: int) -> _Image:
        return _Image(repo, tag, _hex(rng, 64), rng.randrange(low, high))

    system = [image(r, t, 20_000_000, 400_000_000) for r, t in _SYSTEM_IMAGES]
    nvidia = [image(r, t, 300_000_000, 12_000_000_000) for r, t in _NVIDIA_IMAGES]
    apps = [
        image(
            f"registry.example.com/{team}/{service}",
            f"{rng.randrange(1, 6)}.{rng.randrange(40)}.{rng.randrange(20)}-{_hex(rng, 7)}",
            30_000_000,
            900_000_000,
        )
        for team in _TEAMS
        for service in _SERVICES
    ]
    return system, nvidia, apps


# --- nodes ----------------------------------------------------------------------------------------

_NFD_CPU_FLAGS = (
    "ADX",
    "AESNI",
    "AMXBF16",
    "AMXINT8",
    "AMXTILE",
    "AVX",
    "AVX2",
    "AVX512BF16",
    "AVX512BITALG",
    "AVX512BW",
    "AVX512CD",
    "AVX512DQ",
    "AVX512F",
    "AVX512FP16",
    "AVX512IFMA",
    "AVX512VBMI",
    "AVX512VBMI2",
    "AVX512VL",
    "AVX512VNNI",
    "AVX512VPOPCNTDQ",
    "AVXVNNI",
    "CMPXCHG8",
    "FMA3",
    "FSRM",
    "FXSR",
    "FXSROPT",
    "GFNI",
    "HYPERVISOR",
    "IBPB",
    "LAHF",
    "MOVBE",
    "MOVDIR64B",
    "MOVDIRI",
    "OSXSAVE",
    "SERIALIZE",
    "SHA",
    "STIBP",
    "SYSCALL",
    "SYSEE",
    "TSXLDTRK",
    "VAES",
    "VMX",
    "VPCLMULQDQ",
    "WAITPKG",
    "X87",
    "XGETBV1",
    "XSAVE",
    "XSAVEC",
    "XSAVEOPT",
    "XSAVES",
)


def _nfd_labels(rng: random.Random, pci_present: list[str]) -> dict[str, str]:
    labels = {
        f"feature.node.kubernetes.io/cpu-cpuid.{flag}": "true"
        for flag in _NFD_CPU_FLAGS
        if rng.random() < 0.85
    }
    labels.update(
        {
            "feature.node.kubernetes.io/cpu-hardware_multithreading": "true",
            "feature.node.kubernetes.io/cpu-model.family": "6",
            "feature.node.kubernetes.io/cpu-model.id": "143",
            "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
            "feature.node.kubernetes.io/kernel-config.NO_HZ": "true",
            "feature.node.kubernetes.io/kernel-config.NO_HZ_IDLE": "true",
            "feature.node.kubernetes.io/kernel-version.full": "5.15.0-122-generic",
            "feature.node.kubernetes.io/kernel-version.major": "5",
            "feature.node.kubernetes.io/kernel-version.minor": "15",
            "feature.node.kubernetes.io/kernel-version.revision": "0",
            "feature.node.kubernetes.io/memory-numa": "true",
            "feature.node.kubernetes.io/network-sriov.capable": "true",
            "feature.node.kubernetes.io/storage-nonrotationaldisk": "true",
            "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
            "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
            "feature.node.kubernetes.io/system-os_release.VERSION_ID.major": "22",
            "feature.node.kubernetes.io/system-os_release.VERSION_ID.minor": "04",
        }
    )
    for pci in pci_present:
        labels[f"feature.node.kubernetes.io/pci-{pci}.present"] = "true"
    return labels


def _gfd_labels(
    rng: random.Random, product: str, count: int, mode: str, mig: bool
) -> dict[str, str]:
    deploy = {
        f"nvidia.com/gpu.deploy.{operand}": "true"
        for operand in (
            "container-toolkit",
            "dcgm",
            "dcgm-exporter",
            "device-plugin",
            "driver",
            "gpu-feature-discovery",
            "node-status-exporter",
            "operator-validator",
            "mig-manager",
        )
    }
    labels = {
        "nvidia.com/cuda.driver-version.full": "550.90.07",
        "nvidia.com/cuda.driver-version.major": "550",
        "nvidia.com/cuda.driver-version.minor": "90",
        "nvidia.com/cuda.driver-version.revision": "07",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "90",
        "nvidia.com/cuda.driver.rev": "07",
        "nvidia.com/cuda.runtime-version.full": "12.4",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "4",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/gfd.timestamp": str(1751000000 + rng.randrange(300000)),
        "nvidia.com/gpu-driver-upgrade-state": "upgrade-done",
        "nvidia.com/gpu.compute.major": "9" if "H100" in product else "8",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.family": "hopper" if "H100" in product else "ampere",
        "nvidia.com/gpu.machine": rng.choice(("PowerEdge-XE9680", "DGX-H100", "SYS-821GE-TNHR")),
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.workload.config": mode,
        "nvidia.com/mig.capable": "true" if mig or "00" in product else "false",
        "nvidia.com/mig.config": "all-1g.10gb" if mig else "all-disabled",
        "nvidia.com/mig.config.state": "success",
        "nvidia.com/mig.strategy": "mixed",
        **deploy,
    }
    if mig:
        labels.update(
            {
                "nvidia.com/mig-1g.10gb.count": str(7 * count),
                "nvidia.com/mig-1g.10gb.engines.copy": "1",
                "nvidia.com/mig-1g.10gb.engines.decoder": "1",
                "nvidia.com/mig-1g.10gb.memory": "9728",
                "nvidia.com/mig-1g.10gb.multiprocessors": "16",
                "nvidia.com/mig-1g.10gb.product": f"{product}-MIG-1g.10gb",
                "nvidia.com/mig-1g.10gb.replicas": "1",
                "nvidia.com/mig-1g.10gb.slices.ci": "1",
                "nvidia.com/mig-1g.10gb.slices.gi": "1",
            }
        )
    return labels


def _managed_fields(manager: str, operation: str, stamp: str, fields: Obj, sub: str = "") -> Obj:
    entry: Obj = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "time": stamp,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if sub:
        entry["subresource"] = sub
    return entry


def _fields_of(keys: list[str]) -> Obj:
    return {f"f:{k}": {} for k in keys}


class _NodeMaker:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.rng = random.Random(f"{layout.seed}:nodes")
        self.system, self.nvidia, self.apps = _image_pool(layout.seed)

    def node(
        self,
        name: str,
        *,
        labels: dict[str, str],
        extended: dict[str, str],
        gpu: bool,
        taints: list[Obj],
    ) -> Obj:
        rng = self.rng
        created = _stamp(rng, 400, 30)
        heartbeat = _stamp(rng, 0.0005)
        ready = name not in self.layout.not_ready
        ip = _ip(rng, "10")
        zone = rng.choice(("a", "b", "c"))
        all_labels = {
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/instance-type": labels.pop("_instance", "m6i.8xlarge"),
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "node-role.kubernetes.io/worker": "",
            "node.kubernetes.io/instance-type": "bare-metal" if gpu else "m6i.8xlarge",
            "topology.kubernetes.io/region": "eu-central-1",
            "topology.kubernetes.io/zone": f"eu-central-1{zone}",
            "topology.ebs.csi.aws.com/zone": f"eu-central-1{zone}",
            "kubevirt.io/schedulable": "true",
            **labels,
        }
        nfd_keys = [k for k in all_labels if k.startswith("feature.node.kubernetes.io/")]
        annotations = {
            "csi.volume.kubernetes.io/nodeid": orjson.dumps(
                {"ebs.csi.aws.com": f"i-{_hex(rng, 17)}", "rook-ceph.rbd.csi.ceph.com": name}
            ).decode(),
            "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock",
            "nfd.node.kubernetes.io/feature-labels": ",".join(
                k.removeprefix("feature.node.kubernetes.io/") for k in nfd_keys
            ),
            "nfd.node.kubernetes.io/master.version": "v0.16.4",
            "nfd.node.kubernetes.io/worker.version": "v0.16.4",
            "node.alpha.kubernetes.io/ttl": "0",
            "projectcalico.org/IPv4Address": f"{ip}/20",
            "projectcalico.org/IPv4VXLANTunnelAddr": _ip(rng, "100"),
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        }
        if gpu:
            annotations["nvidia.com/gpu-driver-upgrade-enabled"] = "true"
        pods_cap = "110"
        capacity = {
            "cpu": "128" if gpu else "32",
            "ephemeral-storage": "1843269236Ki",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "memory": "2113389240Ki" if gpu else "131497324Ki",
            "pods": pods_cap,
            **extended,
        }
        allocatable = {
            **capacity,
            "cpu": "127500m" if gpu else "31750m",
            "ephemeral-storage": "1698726102812",
            "memory": "2112237264Ki" if gpu else "130346348Ki",
        }
        images = [i.entry() for i in self.system]
        if gpu:
            images += [i.entry() for i in rng.sample(self.nvidia, 8)]
        images += [i.entry() for i in rng.sample(self.apps, 30 - len(images))]
        status_keys = ["allocatable", "capacity", "conditions", "images", "nodeInfo"]
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "uid": _uid(rng),
                "resourceVersion": str(rng.randrange(10**6, 10**8)),
                "creationTimestamp": created,
                "labels": all_labels,
                "annotations": annotations,
                "managedFields": [
                    _managed_fields(
                        "kubelet",
                        "Update",
                        created,
                        {"f:metadata": {"f:annotations": _fields_of(list(annotations)[:4])}},
                    ),
                    _managed_fields(
                        "nfd-master",
                        "Update",
                        created,
                        {"f:metadata": {"f:labels": _fields_of(nfd_keys)}},
                    ),
                    _managed_fields(
                        "kubelet",
                        "Update",
                        heartbeat,
                        {"f:status": _fields_of(status_keys)},
                        "status",
                    ),
                ],
            },
            "spec": {
                "podCIDR": f"192.168.{rng.randrange(256)}.0/24",
                "podCIDRs": [f"192.168.{rng.randrange(256)}.0/24"],
                "providerID": f"aws:///eu-central-1{zone}/i-{_hex(rng, 17)}",
                **({"taints": taints} if taints else {}),
            },
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": ip},
                    {"type": "InternalDNS", "address": f"ip-{ip.replace('.', '-')}.internal"},
                    {"type": "Hostname", "address": name},
                ],
                "allocatable": allocatable,
                "capacity": capacity,
                "conditions": self._conditions(ready, heartbeat),
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "images": images,
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": _uid(rng),
                    "containerRuntimeVersion": "containerd://1.7.22",
                    "kernelVersion": "5.15.0-122-generic",
                    "kubeProxyVersion": KUBELET_VERSION,
                    "kubeletVersion": KUBELET_VERSION,
                    "machineID": _hex(rng, 32),
                    "operatingSystem": "linux",
                    "osImage": "Ubuntu 22.04.5 LTS",
                    "systemUUID": _uid(rng).upper(),
                },
                "runtimeHandlers": [
                    {"name": "nvidia", "features": {"recursiveReadOnlyMounts": True}},
                    {"name": "runc", "features": {"recursiveReadOnlyMounts": True}},
                ]
                if gpu
                else [{"name": "runc", "features": {"recursiveReadOnlyMounts": True}}],
            },
        }

    def _conditions(self, ready: bool, heartbeat: str) -> list[Obj]:
        rng = self.rng
        since = _stamp(rng, 200, 20)
        dead_since = _stamp(rng, 3, 0.1)

        def cond(kind: str, status: str, reason: str, message: str) -> Obj:
            return {
                "type": kind,
                "status": status if ready else "Unknown",
                "lastHeartbeatTime": heartbeat if ready else dead_since,
                "lastTransitionTime": since if ready else dead_since,
                "reason": reason if ready else "NodeStatusUnknown",
                "message": message if ready else "Kubelet stopped posting node status.",
            }

        return [
            {
                "type": "NetworkUnavailable",
                "status": "False",
                "lastHeartbeatTime": since,
                "lastTransitionTime": since,
                "reason": "CalicoIsUp",
                "message": "Calico is running on this node",
            },
            cond("KernelDeadlock", "False", "KernelHasNoDeadlock", "kernel has no deadlock"),
            cond(
                "ReadonlyFilesystem",
                "False",
                "FilesystemIsNotReadOnly",
                "Filesystem is not read-only",
            ),
            cond(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            cond(
                "DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"
            ),
            cond(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ]

    def taints_for(self, name: str, extra: list[Obj]) -> list[Obj]:
        if name not in self.layout.not_ready:
            return extra
        added = _stamp(self.rng, 3, 0.1)
        return [
            *extra,
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": added},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": added},
        ]


def nodes(layout: Layout) -> Iterator[Obj]:
    maker = _NodeMaker(layout)
    gpu_taint = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    for name, m in layout.full_gpu_nodes():
        _, _, product, _device, klass = GPU_MODELS[m]
        labels = {
            **_nfd_labels(maker.rng, [f"{klass}_10de", "0200_15b3", "0108_144d"]),
            **_gfd_labels(maker.rng, product, 8, "container", mig=False),
        }
        yield maker.node(
            name,
            labels=labels,
            extended={"nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "63"},
            gpu=True,
            taints=maker.taints_for(name, gpu_taint),
        )
    for name in layout.mig_nodes():
        labels = {
            **_nfd_labels(maker.rng, ["0302_10de", "0200_15b3", "0108_144d"]),
            **_gfd_labels(maker.rng, "NVIDIA-A100-SXM4-80GB", 8, "container", mig=True),
        }
        yield maker.node(
            name,
            labels=labels,
            extended={"nvidia.com/gpu": "0", MIG_RESOURCE: "56"},
            gpu=True,
            taints=maker.taints_for(name, gpu_taint),
        )
    for name, m in layout.vfio_nodes():
        _, _, resource, count, _device = VFIO_MODELS[m]
        labels = {
            **_nfd_labels(maker.rng, ["0300_10de", "0200_8086", "0108_144d"]),
            "nvidia.com/gpu.workload.config": "vm-passthrough",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.deploy.sandbox-device-plugin": "true",
            "nvidia.com/gpu.deploy.sandbox-validator": "true",
            "nvidia.com/gpu.deploy.vfio-manager": "true",
            "nvidia.com/gpu.deploy.operands": "true",
        }
        yield maker.node(
            name,
            labels=labels,
            extended={resource: str(count), "devices.kubevirt.io/kvm": "1k"},
            gpu=True,
            taints=maker.taints_for(name, []),
        )
    for name in layout.cpu_nodes():
        labels = _nfd_labels(maker.rng, ["0200_8086", "0108_1d0f"])
        yield maker.node(
            name,
            labels=labels,
            extended={"devices.kubevirt.io/kvm": "1k", "devices.kubevirt.io/tun": "1k"},
            gpu=False,
            taints=maker.taints_for(name, []),
        )


# --- pods -----------------------------------------------------------------------------------------

_DEFAULT_TOLERATIONS = [
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
]
_DAEMON_TOLERATIONS = [
    {"operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Exists", "effect": "NoExecute"},
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
]
_GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _api_access_volume(rng: random.Random) -> Obj:
    return {
        "name": f"kube-api-access-{_suffix(rng)}",
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                            }
                        ]
                    }
                },
            ],
        },
    }


@dataclass
class _PodSpec:
    """What differs between the kinds of pod; the maker fills in the rest the way kubelet does."""

    namespace: str
    name: str
    node: str
    app: str
    image: _Image
    owner_kind: str
    owner_name: str
    phase: str = "Running"
    resources: Obj | None = None
    env: int = 8
    tolerations: list[Obj] | None = None
    problem: str = ""  # a waiting/terminated reason (CrashLoopBackOff, Error, OOMKilled)
    sidecar: _Image | None = None
    init: _Image | None = None
    extra_labels: dict[str, str] | None = None
    host_network: bool = False
    priority_class: str = ""


class _PodMaker:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.rng = random.Random(f"{layout.seed}:pods")
        self.system, self.nvidia, self.apps = _image_pool(layout.seed)
        self.rs_hash: dict[str, str] = {}
        self.used: set[tuple[str, str]] = set()

    def _env(self, n: int, app: str) -> list[Obj]:
        rng = self.rng
        fields: list[Obj] = [
            {
                "name": "POD_NAME",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
            },
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}},
            },
            {
                "name": "NODE_NAME",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}},
            },
        ]
        env = fields[:n]
        names = (
            "LOG_LEVEL",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "SERVICE_NAME",
            "GOMAXPROCS",
            "HTTP_PORT",
            "CACHE_TTL",
            "FEATURE_FLAGS",
            "REGION",
            "DB_POOL_SIZE",
            "QUEUE",
        )
        for key in names[: max(0, n - len(env))]:
            env.append({"name": key, "value": str(rng.randrange(1000))})
        return env

    def _container(self, spec: _PodSpec, image: _Image, name: str, main: bool) -> Obj:
        rng = self.rng
        resources = (
            spec.resources
            if main and spec.resources is not None
            else {
                "requests": {"cpu": f"{rng.choice((50, 100, 250, 500))}m", "memory": "256Mi"},
                "limits": {"memory": f"{rng.choice((256, 512, 1024, 2048))}Mi"},
            }
        )
        port = rng.choice((8080, 8443, 9090, 3000))
        container: Obj = {
            "name": name,
            "image": image.ref,
            "imagePullPolicy": "IfNotPresent",
            "args": [f"--port={port}"],
            "env": self._env(spec.env if main else 1, spec.app),
            "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
            "resources": resources,
            "volumeMounts": [
                {"name": "config", "mountPath": "/etc/app", "readOnly": True},
                {
                    "name": "kube-api-access",
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                    "readOnly": True,
                },
            ],
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
        }
        if main:
            probe = {
                "httpGet": {"path": "/healthz", "port": port, "scheme": "HTTP"},
                "periodSeconds": 10,
                "timeoutSeconds": 1,
                "successThreshold": 1,
                "failureThreshold": 3,
            }
            container["readinessProbe"] = probe
        if main and spec.owner_kind == "ReplicaSet":
            container["securityContext"] = {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "readOnlyRootFilesystem": True,
                "runAsNonRoot": True,
            }
        return container

    def _status_of(
        self, spec: _PodSpec, containers: list[Obj], started: str, host_ip: str, pod_ip: str
    ) -> Obj:
        rng = self.rng
        running = spec.phase == "Running"
        done = spec.phase in ("Succeeded", "Failed")
        pending = spec.phase == "Pending"
        statuses = []
        for i, c in enumerate(containers):
            image = c["image"]
            repo = image.rsplit(":", 1)[0]
            state: Obj
            restarts = 0
            if pending:
                state = {"waiting": {"reason": "ContainerCreating"}}
            elif done:
                reason = "Completed" if spec.phase == "Succeeded" else (spec.problem or "Error")
                state = {
                    "terminated": {
                        "exitCode": 0 if spec.phase == "Succeeded" else 1,
                        "reason": reason,
                        "startedAt": started,
                        "finishedAt": _stamp(rng, 0.5),
                        "containerID": f"containerd://{_hex(rng, 64)}",
                    }
                }
            elif spec.problem and i == 0:
                restarts = rng.randrange(5, 300)
                state = {
                    "waiting": {
                        "reason": spec.problem,
                        "message": f"back-off 5m0s restarting failed container={c['name']}",
                    }
                }
            else:
                state = {"running": {"startedAt": started}}
            entry: Obj = {
                "name": c["name"],
                "image": image,
                "imageID": f"{repo}@sha256:{_hex(rng, 64)}",
                "ready": running and not (spec.problem and i == 0),
                "restartCount": restarts,
                "started": running and not (spec.problem and i == 0),
                "state": state,
                "lastState": {},
            }
            if not pending:
                entry["containerID"] = f"containerd://{_hex(rng, 64)}"
            statuses.append(entry)
        ready = "True" if running and not spec.problem else "False"
        scheduled = "False" if pending and not spec.node else "True"

        def cond(kind: str, status: str) -> Obj:
            return {
                "type": kind,
                "status": status,
                "lastProbeTime": None,
                "lastTransitionTime": started,
            }

        status: Obj = {
            "phase": spec.phase,
            "conditions": [
                cond("PodReadyToStartContainers", "True" if not pending else "False"),
                cond("Initialized", "True"),
                cond("Ready", ready),
                cond("ContainersReady", ready),
                cond("PodScheduled", scheduled),
            ],
            "qosClass": "Burstable",
            "startTime": started,
            "containerStatuses": statuses,
        }
        if spec.node:
            status["hostIP"] = host_ip
            status["hostIPs"] = [{"ip": host_ip}]
        if not pending:
            status["podIP"] = pod_ip
            status["podIPs"] = [{"ip": pod_ip}]
        return status

    def pod(self, spec: _PodSpec) -> Obj:
        rng = self.rng
        started = _stamp(rng, 60)
        host_ip = _ip(rng, "10")
        pod_ip = host_ip if spec.host_network else _ip(rng, "192")
        containers = [self._container(spec, spec.image, spec.app.split("/")[-1][:40], True)]
        if spec.sidecar is not None:
            containers.append(self._container(spec, spec.sidecar, "log-shipper", False))
        labels = {
            "app": spec.app,
            "app.kubernetes.io/name": spec.app,
            **(spec.extra_labels or {}),
        }
        if spec.owner_kind == "ReplicaSet":
            labels["pod-template-hash"] = spec.owner_name.rsplit("-", 1)[-1]
        elif spec.owner_kind == "DaemonSet":
            labels["controller-revision-hash"] = _hex(rng, 9)
            labels["pod-template-generation"] = str(rng.randrange(1, 20))
        meta: Obj = {
            "name": spec.name,
            "generateName": spec.name[:-5],
            "namespace": spec.namespace,
            "uid": _uid(rng),
            "resourceVersion": str(rng.randrange(10**6, 10**8)),
            "creationTimestamp": started,
            "labels": labels,
            "annotations": {
                "cni.projectcalico.org/containerID": _hex(rng, 64),
                "cni.projectcalico.org/podIP": f"{pod_ip}/32",
                "cni.projectcalico.org/podIPs": f"{pod_ip}/32",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1" if spec.owner_kind != "Job" else "batch/v1",
                    "kind": spec.owner_kind,
                    "name": spec.owner_name,
                    "uid": _uid(rng),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                _managed_fields(
                    "kubelet",
                    "Update",
                    started,
                    {
                        "f:status": _fields_of(
                            [
                                "conditions",
                                "containerStatuses",
                                "hostIP",
                                "phase",
                                "podIP",
                                "podIPs",
                                "startTime",
                            ]
                        )
                    },
                    "status",
                )
            ],
        }
        pod_spec: Obj = {
            "containers": containers,
            "dnsPolicy": "ClusterFirstWithHostNet" if spec.host_network else "ClusterFirst",
            "enableServiceLinks": False,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 1000 if spec.priority_class else 0,
            "restartPolicy": "OnFailure" if spec.owner_kind == "Job" else "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {"fsGroup": 2000, "seccompProfile": {"type": "RuntimeDefault"}},
            "serviceAccount": spec.app.split("/")[-1][:40],
            "serviceAccountName": spec.app.split("/")[-1][:40],
            "terminationGracePeriodSeconds": 30,
            "tolerations": spec.tolerations
            if spec.tolerations is not None
            else _DEFAULT_TOLERATIONS,
            "volumes": [
                {
                    "name": "config",
                    "configMap": {"name": f"{spec.app[:40]}-config", "defaultMode": 420},
                },
                _api_access_volume(rng),
            ],
        }
        if spec.priority_class:
            pod_spec["priorityClassName"] = spec.priority_class
        if spec.host_network:
            pod_spec["hostNetwork"] = True
        if spec.node:
            pod_spec["nodeName"] = spec.node
        if spec.init is not None:
            init = self._container(spec, spec.init, "init-config", False)
            pod_spec["initContainers"] = [init]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": pod_spec,
            "status": self._status_of(spec, containers, started, host_ip, pod_ip),
        }

    def unique(self, namespace: str, prefix: str) -> str:
        """``prefix-xxxxx`` as the ReplicaSet/DaemonSet controllers name pods, never taken twice."""
        while True:
            name = f"{prefix}-{_suffix(self.rng)}"
            if (namespace, name) not in self.used:
                self.used.add((namespace, name))
                return name

    def owner(self, namespace: str, app: str) -> str:
        key = f"{namespace}/{app}"
        if key not in self.rs_hash:
            self.rs_hash[key] = _hex(self.rng, 10)
        return f"{app}-{self.rs_hash[key]}"


def pods(layout: Layout) -> Iterator[Obj]:
    """Daemonset, GPU, GPU Operator operand, virt-launcher and deployment pods, ``layout.pods``
    in all (the deployment pods fill whatever the others leave)."""
    maker = _PodMaker(layout)
    rng = maker.rng
    system = {i.repo.rsplit("/", 1)[-1]: i for i in maker.system}
    nvidia = {i.repo.rsplit("/", 1)[-1]: i for i in maker.nvidia}
    budget = layout.pods
    made = 0

    def emit(spec: _PodSpec) -> Obj | None:
        nonlocal made
        if made >= budget:
            return None
        made += 1
        return maker.pod(spec)

    names = layout.node_names()
    # 1. per-node daemonsets, every node
    ds_images = {
        "kube-proxy": system["kube-proxy"],
        "calico-node": system["node"],
        "node-exporter": system["node-exporter"],
        "fluent-bit": system["fluent-bit"],
    }
    for app in DAEMONSETS:
        namespace = "kube-system" if app in ("kube-proxy", "calico-node") else "monitoring"
        for node in names:
            obj = emit(
                _PodSpec(
                    namespace=namespace,
                    name=maker.unique(namespace, app),
                    node=node,
                    app=app,
                    image=ds_images[app],
                    owner_kind="DaemonSet",
                    owner_name=app,
                    env=5,
                    tolerations=_DAEMON_TOLERATIONS,
                    host_network=app in ("kube-proxy", "calico-node", "node-exporter"),
                    priority_class="system-node-critical",
                )
            )
            if obj is not None:
                yield obj
    # 2. GPU Operator operands
    operand_image = {
        "nvidia-driver-daemonset": nvidia["driver"],
        "gpu-feature-discovery": nvidia["k8s-device-plugin"],
        "nvidia-container-toolkit-daemonset": nvidia["container-toolkit"],
        "nvidia-device-plugin-daemonset": nvidia["k8s-device-plugin"],
        "nvidia-dcgm-exporter": nvidia["dcgm-exporter"],
        "nvidia-operator-validator": nvidia["gpu-operator-validator"],
        "nvidia-mig-manager": nvidia["k8s-mig-manager"],
        "nvidia-sandbox-device-plugin-daemonset": nvidia["kubevirt-gpu-device-plugin"],
        "nvidia-vfio-manager": nvidia["cuda"],
        "nvidia-sandbox-validator": nvidia["gpu-operator-validator"],
    }
    placements = (
        [(n, FULL_OPERANDS) for n, _ in layout.full_gpu_nodes()]
        + [(n, MIG_OPERANDS) for n in layout.mig_nodes()]
        + [(n, VFIO_OPERANDS) for n, _ in layout.vfio_nodes()]
    )
    for node, operands in placements:
        for app in operands:
            sick = node in layout.not_ready or rng.random() < 0.003
            obj = emit(
                _PodSpec(
                    namespace="gpu-operator",
                    name=maker.unique("gpu-operator", app),
                    node=node,
                    app=app,
                    image=operand_image[app],
                    owner_kind="DaemonSet",
                    owner_name=app,
                    env=6,
                    tolerations=[*_DAEMON_TOLERATIONS, _GPU_TOLERATION],
                    problem="CrashLoopBackOff" if sick else "",
                    priority_class="system-node-critical",
                )
            )
            if obj is not None:
                yield obj
    # 3. GPU pods: running within each node's capacity, the rest finished jobs
    yield from (p for p in _gpu_pods(layout, maker, nvidia, emit) if p is not None)
    # 4. virt-launcher pods, one per VMI
    for v in _vmi_plan(layout):
        resources: Obj = {
            "requests": {"cpu": "2", "memory": "8Gi", "devices.kubevirt.io/kvm": "1"},
            "limits": {"devices.kubevirt.io/kvm": "1"},
        }
        if v.device:
            resources["requests"][v.device] = "1"
            resources["limits"][v.device] = "1"
        obj = emit(
            _PodSpec(
                namespace=v.namespace,
                name=maker.unique(v.namespace, f"virt-launcher-{v.name}"),
                node=v.node,
                app="virt-launcher",
                image=system["virt-launcher"],
                owner_kind="VirtualMachineInstance",
                owner_name=v.name,
                phase="Running" if v.node else "Pending",
                resources=resources,
                env=4,
                extra_labels={"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": v.name},
            )
        )
        if obj is not None:
            yield obj
    # 5. deployments fill the rest, mostly on CPU nodes
    cpu = layout.cpu_nodes()
    anywhere = names
    namespaces = [f"{team}-{env}" for team in _TEAMS for env in ("prod", "staging", "dev")]
    while made < budget:
        namespace = rng.choice(namespaces)
        team = namespace.rsplit("-", 1)[0]
        service = rng.choice(_SERVICES)
        app = f"{team}-{service}"
        roll = rng.random()
        phase, problem, node = "Running", "", rng.choice(cpu if rng.random() < 0.95 else anywhere)
        if roll < 0.01:
            phase, node = "Pending", ""
        elif roll < 0.03:
            problem = rng.choice(
                ("CrashLoopBackOff", "ImagePullBackOff", "CreateContainerConfigError")
            )
        elif roll < 0.05:
            phase, problem = "Failed", rng.choice(("Error", "OOMKilled", "Evicted"))
        image = maker.apps[_TEAMS.index(team) * len(_SERVICES) + _SERVICES.index(service)]
        yield maker.pod(
            _PodSpec(
                namespace=namespace,
                name=maker.unique(namespace, maker.owner(namespace, app)),
                node=node,
                app=app,
                image=image,
                owner_kind="ReplicaSet",
                owner_name=maker.owner(namespace, app),
                phase=phase,
                problem=problem,
                env=rng.randrange(3, 9),
                sidecar=system["fluent-bit"] if rng.random() < 0.1 else None,
                init=image if rng.random() < 0.1 else None,
            )
        )
        made += 1


def _gpu_pods(
    layout: Layout,
    maker: _PodMaker,
    nvidia: dict[str, _Image],
    emit: Callable[[_PodSpec], Obj | None],
) -> Iterator[Obj | None]:
    rng = maker.rng
    full = [n for n, _ in layout.full_gpu_nodes() if n not in layout.not_ready]
    mig = [n for n in layout.mig_nodes() if n not in layout.not_ready]
    total = layout.gpu_pods
    run_full = min(round(total * 0.3), len(full) * GPU_PODS_PER_FULL_NODE)
    run_mig = min(round(total * 0.4), len(mig) * GPU_PODS_PER_MIG_NODE)
    finished = total - run_full - run_mig
    namespaces = [
        f"ml-{t}"
        for t in (
            "research",
            "training",
            "inference",
            "vision",
            "speech",
            "llm",
            "recsys",
            "robotics",
            "eval",
            "platform",
        )
    ]
    images = [nvidia["pytorch"], nvidia["tritonserver"], nvidia["nemo"], nvidia["cuda"]]

    def gpu_spec(node: str, resource: str, phase: str, problem: str = "") -> _PodSpec:
        namespace = rng.choice(namespaces)
        job = (
            f"{namespace.removeprefix('ml-')}-{rng.choice(('train', 'finetune', 'serve', 'eval'))}"
        )
        run = _hex(rng, 6)
        return _PodSpec(
            namespace=namespace,
            name=maker.unique(namespace, f"{job}-{run}-worker-{rng.randrange(64)}"),
            node=node,
            app=job,
            image=rng.choice(images),
            owner_kind="Job",
            owner_name=f"{job}-{run}",
            phase=phase,
            problem=problem,
            resources={
                "requests": {"cpu": "8", "memory": "64Gi", resource: "1"},
                "limits": {"memory": "64Gi", resource: "1"},
            },
            env=10,
            tolerations=[*_DEFAULT_TOLERATIONS, _GPU_TOLERATION],
            extra_labels={"batch.kubernetes.io/job-name": f"{job}-{run}", "team": namespace},
        )

    for i in range(run_full):
        yield emit(gpu_spec(full[i % len(full)], "nvidia.com/gpu", "Running"))
    for i in range(run_mig):
        yield emit(gpu_spec(mig[i % len(mig)], MIG_RESOURCE, "Running"))
    all_full = [n for n, _ in layout.full_gpu_nodes()]
    all_mig = layout.mig_nodes()
    for _ in range(finished):
        on_mig = rng.random() < 0.3
        node = rng.choice(all_mig if on_mig else all_full)
        failed = rng.random() < 0.15
        yield emit(
            gpu_spec(
                node,
                MIG_RESOURCE if on_mig else "nvidia.com/gpu",
                "Failed" if failed else "Succeeded",
                rng.choice(("Error", "OOMKilled")) if failed else "",
            )
        )


# --- KubeVirt -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PlannedVMI:
    namespace: str
    name: str
    node: str  # "" while unschedulable
    device: str  # sandbox resource, or "" for a VM without GPUs
    field: str  # "gpus" or "hostDevices"
    owner: str  # VM name, "" for a standalone VMI
    phase: str


@dataclass(frozen=True)
class _PlannedVM:
    namespace: str
    name: str
    device: str
    field: str
    run_strategy: str
    vmi: _PlannedVMI | None


def _vm_plan(layout: Layout) -> list[_PlannedVM]:
    """Every VM and the VMI it has (if any); GPU VMIs fit the passthrough nodes' capacity."""
    rng = random.Random(f"{layout.seed}:vm-plan")
    namespaces = [f"vms-{t}" for t in _TEAMS] + ["vdi", "ci-runners"]
    slots: list[tuple[str, str]] = []  # (node, resource), one per device
    for name, m in layout.vfio_nodes():
        if name not in layout.not_ready:
            _, _, resource, count, _ = VFIO_MODELS[m]
            slots.extend((name, resource) for _ in range(count))
    rng.shuffle(slots)
    cpu = [n for n in layout.cpu_nodes() if n not in layout.not_ready] or layout.cpu_nodes()
    plan: list[_PlannedVM] = []
    running, unschedulable = layout.gpu_vms_running, layout.gpu_vms_unschedulable
    for i in range(layout.gpu_vms):
        namespace = rng.choice(namespaces)
        name = f"gpu-vm-{i:05d}"
        if i < running:
            node, device = slots[i]
            strategy = "Always"
        else:
            node, device = "", rng.choice((RTX_3090, H100_PCIE))
            strategy = "Always" if i < running + unschedulable else "Halted"
        field = "gpus" if device == RTX_3090 else "hostDevices"
        vmi = None
        if strategy == "Always":
            phase = "Running" if node else "Scheduling"
            vmi = _PlannedVMI(namespace, name, node, device, field, name, phase)
        plan.append(_PlannedVM(namespace, name, device, field, strategy, vmi))
    for i in range(layout.vms - layout.gpu_vms):
        namespace = rng.choice(namespaces)
        name = f"vm-{i:05d}"
        vmi = _PlannedVMI(namespace, name, rng.choice(cpu), "", "", name, "Running")
        plan.append(_PlannedVM(namespace, name, "", "", "Always", vmi))
    return plan


def _vmi_plan(layout: Layout) -> list[_PlannedVMI]:
    owned = [vm.vmi for vm in _vm_plan(layout) if vm.vmi is not None]
    rng = random.Random(f"{layout.seed}:vmi-plan")
    cpu = [n for n in layout.cpu_nodes() if n not in layout.not_ready] or layout.cpu_nodes()
    standalone = [
        _PlannedVMI("vdi", f"vdi-pool-{_suffix(rng, 5)}{i}", rng.choice(cpu), "", "", "", "Running")
        for i in range(layout.standalone_vmis)
    ]
    return owned + standalone


def _vmi_spec(rng: random.Random, name: str, device: str, field: str) -> Obj:
    devices: Obj = {
        "disks": [
            {"name": "rootdisk", "disk": {"bus": "virtio"}},
            {"name": "cloudinitdisk", "disk": {"bus": "virtio"}},
        ],
        "interfaces": [{"name": "default", "masquerade": {}, "model": "virtio"}],
        "rng": {},
    }
    if device:
        devices[field] = [{"name": f"{field.lower()[:3]}1", "deviceName": device}]
    cores = rng.choice((2, 4, 8, 16))
    return {
        "architecture": "amd64",
        "domain": {
            "cpu": {"cores": cores, "sockets": 1, "threads": 1, "model": "host-passthrough"},
            "devices": devices,
            "features": {"acpi": {"enabled": True}, "smm": {"enabled": True}},
            "firmware": {"uuid": _uid(rng), "bootloader": {"efi": {"secureBoot": False}}},
            "machine": {"type": "q35"},
            "memory": {"guest": f"{cores * 4}Gi"},
            "resources": {"requests": {"memory": f"{cores * 4}Gi"}},
        },
        "evictionStrategy": "None" if device else "LiveMigrate",
        "networks": [{"name": "default", "pod": {}}],
        "terminationGracePeriodSeconds": 180,
        "volumes": [
            {"name": "rootdisk", "dataVolume": {"name": f"{name}-rootdisk"}},
            {
                "name": "cloudinitdisk",
                "cloudInitNoCloud": {
                    "userData": "#cloud-config\nuser: cloud-user\nchpasswd: { expire: False }\n"
                    "ssh_authorized_keys:\n  - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI"
                    f"{_hex(rng, 40)} ops@example.com\n"
                },
            },
        ],
    }


def virtual_machines(layout: Layout) -> Iterator[Obj]:
    rng = random.Random(f"{layout.seed}:vms")
    for vm in _vm_plan(layout):
        created = _stamp(rng, 300, 1)
        status: Obj = {
            "created": vm.vmi is not None,
            "ready": vm.vmi is not None and vm.vmi.phase == "Running",
            "printableStatus": "Stopped",
            "conditions": [],
            "desiredGeneration": 3,
            "observedGeneration": 3,
            "runStrategy": vm.run_strategy,
            "volumeSnapshotStatuses": [
                {"name": "rootdisk", "enabled": True},
                {
                    "name": "cloudinitdisk",
                    "enabled": False,
                    "reason": "Snapshot is not supported for this volumeSource type"
                    " [cloudinitdisk]",
                },
            ],
        }
        if vm.vmi is not None and vm.vmi.phase == "Running":
            status["printableStatus"] = "Running"
            status["conditions"] = [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": created,
                },
                {
                    "type": "LiveMigratable",
                    "status": "False" if vm.device else "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": None,
                    **(
                        {
                            "reason": "HostDeviceNotLiveMigratable",
                            "message": "VMI uses a host device that is not live migratable",
                        }
                        if vm.device
                        else {}
                    ),
                },
            ]
        elif vm.vmi is not None:
            status["printableStatus"] = "ErrorUnschedulable"
            status["conditions"] = [
                {
                    "type": "Ready",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": created,
                    "reason": "GuestNotRunning",
                    "message": "Guest VM is not reported as running",
                },
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": _stamp(rng, 5),
                    "reason": "Unschedulable",
                    "message": f"0/{layout.nodes} nodes are available: {layout.nodes} "
                    f"Insufficient {vm.device}.",
                },
            ]
        yield {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "metadata": {
                "name": vm.name,
                "namespace": vm.namespace,
                "uid": _uid(rng),
                "generation": 3,
                "resourceVersion": str(rng.randrange(10**6, 10**8)),
                "creationTimestamp": created,
                "labels": {"app": vm.name, "kubevirt.io/os": "linux", "team": vm.namespace},
                "annotations": {
                    "kubemacpool.io/transaction-timestamp": created,
                    "kubevirt.io/latest-observed-api-version": "v1",
                    "kubevirt.io/storage-observed-api-version": "v1",
                },
                "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"],
            },
            "spec": {
                "runStrategy": vm.run_strategy,
                "dataVolumeTemplates": [
                    {
                        "metadata": {"name": f"{vm.name}-rootdisk"},
                        "spec": {
                            "sourceRef": {
                                "kind": "DataSource",
                                "name": "ubuntu2404",
                                "namespace": "os-images",
                            },
                            "storage": {
                                "resources": {"requests": {"storage": "60Gi"}},
                                "storageClassName": "ceph-block",
                            },
                        },
                    }
                ],
                "template": {
                    "metadata": {"labels": {"kubevirt.io/domain": vm.name, "app": vm.name}},
                    "spec": _vmi_spec(rng, vm.name, vm.device, vm.field),
                },
            },
            "status": status,
        }


def virtual_machine_instances(layout: Layout) -> Iterator[Obj]:
    rng = random.Random(f"{layout.seed}:vmis")
    for v in _vmi_plan(layout):
        created = _stamp(rng, 60, 0.1)
        meta: Obj = {
            "name": v.name,
            "namespace": v.namespace,
            "uid": _uid(rng),
            "generation": 12,
            "resourceVersion": str(rng.randrange(10**6, 10**8)),
            "creationTimestamp": created,
            "labels": {
                "kubevirt.io/domain": v.name,
                "app": v.owner or "vdi-pool",
                **({"kubevirt.io/nodeName": v.node} if v.node else {}),
            },
            "annotations": {
                "kubevirt.io/latest-observed-api-version": "v1",
                "kubevirt.io/storage-observed-api-version": "v1",
                "kubevirt.io/vm-generation": "3",
            },
            "finalizers": [
                "kubevirt.io/virtualMachineControllerFinalize",
                "foregroundDeleteVirtualMachine",
            ],
        }
        if v.owner:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachine",
                    "name": v.owner,
                    "uid": _uid(rng),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        else:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachineInstanceReplicaSet",
                    "name": "vdi-pool",
                    "uid": _uid(rng),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        status: Obj = {"phase": v.phase, "qosClass": "Burstable", "guestOSInfo": {}}
        if v.node:
            ip = _ip(rng, "192")
            status.update(
                {
                    "nodeName": v.node,
                    "activePods": {_uid(rng): v.node},
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "lastProbeTime": None,
                            "lastTransitionTime": created,
                        },
                        {
                            "type": "LiveMigratable",
                            "status": "False" if v.device else "True",
                            "lastProbeTime": None,
                            "lastTransitionTime": None,
                        },
                    ],
                    "interfaces": [
                        {
                            "name": "default",
                            "ipAddress": ip,
                            "ipAddresses": [ip],
                            "mac": f"02:{_hex(rng, 2)}:{_hex(rng, 2)}:{_hex(rng, 2)}:"
                            f"{_hex(rng, 2)}:{_hex(rng, 2)}",
                            "infoSource": "domain, guest-agent",
                            "queueCount": 1,
                        }
                    ],
                    "launcherContainerImageVersion": "quay.io/kubevirt/virt-launcher:v1.4.0",
                    "machine": {"type": "pc-q35-rhel9.4.0"},
                    "migrationMethod": "BlockMigration",
                    "migrationTransport": "Unix",
                    "phaseTransitionTimestamps": [
                        {"phase": p, "phaseTransitionTimestamp": created}
                        for p in ("Pending", "Scheduling", "Scheduled", "Running")
                    ],
                    "volumeStatus": [
                        {"name": "cloudinitdisk", "size": 1048576, "target": "vdb"},
                        {
                            "name": "rootdisk",
                            "target": "vda",
                            "persistentVolumeClaimInfo": {
                                "accessModes": ["ReadWriteMany"],
                                "capacity": {"storage": "60Gi"},
                                "volumeMode": "Block",
                            },
                        },
                    ],
                }
            )
        else:
            status["conditions"] = [
                {
                    "type": "Ready",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": created,
                    "reason": "GuestNotRunning",
                },
            ]
        yield {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": meta,
            "spec": _vmi_spec(rng, v.owner or v.name, v.device, v.field),
            "status": status,
        }


def kubevirts(layout: Layout) -> Iterator[Obj]:
    rng = random.Random(f"{layout.seed}:kubevirt")
    yield {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {
            "name": "kubevirt",
            "namespace": "kubevirt",
            "uid": _uid(rng),
            "generation": 9,
            "resourceVersion": str(rng.randrange(10**6, 10**8)),
            "creationTimestamp": _stamp(rng, 400, 300),
            "finalizers": ["foregroundDeleteKubeVirt"],
        },
        "spec": {
            "certificateRotateStrategy": {},
            "configuration": {
                "developerConfiguration": {
                    "featureGates": [
                        "HostDevices",
                        "GPU",
                        "DataVolumes",
                        "LiveMigration",
                        "Snapshot",
                        "ExpandDisks",
                    ]
                },
                "evictionStrategy": "LiveMigrate",
                "permittedHostDevices": {
                    "pciHostDevices": [
                        {
                            "pciVendorSelector": f"10de:{dev}",
                            "resourceName": res,
                            "externalResourceProvider": True,
                        }
                        for _, _, res, _, dev in VFIO_MODELS
                    ],
                    "mediatedDevices": [],
                },
            },
            "customizeComponents": {},
            "imagePullPolicy": "IfNotPresent",
            "workloadUpdateStrategy": {"workloadUpdateMethods": ["LiveMigrate"]},
        },
        "status": {
            "phase": "Deployed",
            "observedKubeVirtVersion": "v1.4.0",
            "targetKubeVirtVersion": "v1.4.0",
            "conditions": [
                {
                    "type": "Available",
                    "status": "True",
                    "reason": "AllComponentsReady",
                    "message": "All components are ready.",
                    "lastProbeTime": _stamp(rng, 1),
                    "lastTransitionTime": _stamp(rng, 30, 1),
                },
            ],
        },
    }


def cluster_policies(layout: Layout) -> Iterator[Obj]:
    rng = random.Random(f"{layout.seed}:cluster-policy")
    enabled = {"enabled": True}
    yield {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {
            "name": "cluster-policy",
            "uid": _uid(rng),
            "generation": 4,
            "resourceVersion": str(rng.randrange(10**6, 10**8)),
            "creationTimestamp": _stamp(rng, 400, 300),
            "labels": {"app.kubernetes.io/component": "gpu-operator"},
        },
        "spec": {
            "operator": {"defaultRuntime": "containerd", "runtimeClass": "nvidia"},
            "daemonsets": {
                "priorityClassName": "system-node-critical",
                "tolerations": [_GPU_TOLERATION],
            },
            "driver": {
                **enabled,
                "version": "550.90.07",
                "repository": "nvcr.io/nvidia",
                "image": "driver",
                "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1},
            },
            "toolkit": {**enabled, "version": "v1.17.0-ubuntu20.04"},
            "devicePlugin": {**enabled, "version": "v0.17.0"},
            "dcgm": {"enabled": False},
            "dcgmExporter": {**enabled, "version": "3.3.8-3.6.0-ubuntu22.04"},
            "gfd": {**enabled, "version": "v0.17.0"},
            "migManager": {**enabled, "config": {"name": "default-mig-parted-config"}},
            "mig": {"strategy": "mixed"},
            "nodeStatusExporter": enabled,
            "validator": {"plugin": {"env": [{"name": "WITH_WORKLOAD", "value": "false"}]}},
            "sandboxWorkloads": {"enabled": True, "defaultWorkload": "container"},
            "sandboxDevicePlugin": {**enabled, "version": "v1.2.10"},
            "vfioManager": {**enabled, "version": "12.6.2-base-ubi9"},
            "vgpuManager": {"enabled": False},
            "vgpuDeviceManager": {"enabled": False},
            "kataManager": {"enabled": False},
            "ccManager": {"enabled": False},
        },
        "status": {
            "state": "ready",
            "namespace": "gpu-operator",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Reconciled",
                    "lastTransitionTime": _stamp(rng, 30, 1),
                    "message": "",
                }
            ],
        },
    }


def node_features(layout: Layout) -> Iterator[Obj]:
    rng = random.Random(f"{layout.seed}:node-features")
    gpu_nodes: list[tuple[str, str, str, int]] = [
        (n, GPU_MODELS[m][4], GPU_MODELS[m][3], 8) for n, m in layout.full_gpu_nodes()
    ]
    gpu_nodes += [(n, "0302", "20b2", 8) for n in layout.mig_nodes()]
    gpu_nodes += [(n, "0300", VFIO_MODELS[m][4], VFIO_MODELS[m][3]) for n, m in layout.vfio_nodes()]
    for node, klass, device, count in gpu_nodes:
        pci = [
            {
                "class": klass,
                "vendor": "10de",
                "device": device,
                "subsystem_vendor": "10de",
                "subsystem_device": _hex(rng, 4),
                "sriov_totalvfs": "0",
            }
            for _ in range(count)
        ]
        if device == "2330":
            pci += [{"class": "0680", "vendor": "10de", "device": "22a3"} for _ in range(4)]
        pci += [
            {"class": "0200", "vendor": "15b3", "device": "101d", "sriov_totalvfs": "16"},
            {"class": "0108", "vendor": "144d", "device": "a80a"},
            {"class": "0600", "vendor": "8086", "device": "09a2"},
            {"class": "0c03", "vendor": "8086", "device": "1bcd"},
        ]
        labels = {
            k: "true"
            for k in (
                "feature.node.kubernetes.io/cpu-cpuid.AVX512F",
                "feature.node.kubernetes.io/pci-10de.present",
                "feature.node.kubernetes.io/memory-numa",
            )
        }
        yield {
            "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
            "kind": "NodeFeature",
            "metadata": {
                "name": node,
                "namespace": "node-feature-discovery",
                "uid": _uid(rng),
                "generation": rng.randrange(1, 50),
                "resourceVersion": str(rng.randrange(10**6, 10**8)),
                "creationTimestamp": _stamp(rng, 400, 30),
                "labels": {"nfd.node.kubernetes.io/node-name": node},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": f"nfd-worker-{_suffix(rng)}",
                        "uid": _uid(rng),
                    }
                ],
            },
            "spec": {
                "features": {
                    "flags": {
                        "cpu.cpuid": {"elements": {f: {} for f in _NFD_CPU_FLAGS}},
                        "kernel.loadedmodule": {
                            "elements": {
                                m: {}
                                for m in (
                                    "nvidia",
                                    "nvidia_uvm",
                                    "nvidia_modeset",
                                    "vfio_pci",
                                    "mlx5_core",
                                    "ib_core",
                                    "overlay",
                                    "br_netfilter",
                                )
                            }
                        },
                    },
                    "attributes": {
                        "kernel.version": {
                            "elements": {
                                "full": "5.15.0-122-generic",
                                "major": "5",
                                "minor": "15",
                                "revision": "0",
                            }
                        },
                        "system.osrelease": {"elements": {"ID": "ubuntu", "VERSION_ID": "22.04"}},
                        "cpu.model": {
                            "elements": {"family": "6", "id": "143", "vendor_id": "Intel"}
                        },
                    },
                    "instances": {
                        "pci.device": {"elements": [{"attributes": a} for a in pci]},
                        "memory.nv": {"elements": []},
                    },
                },
                "labels": labels,
            },
        }


# --- everything -----------------------------------------------------------------------------------

#: (kind as the state counts it, plural, generator): the order a state file lists them in.
KINDS: tuple[tuple[str, str, Callable[[Layout], Iterator[Obj]]], ...] = (
    ("Node", "nodes", nodes),
    ("Pod", "pods", pods),
    ("VirtualMachine.kubevirt.io", "virtualmachines", virtual_machines),
    ("VirtualMachineInstance.kubevirt.io", "virtualmachineinstances", virtual_machine_instances),
    ("KubeVirt.kubevirt.io", "kubevirts", kubevirts),
    ("ClusterPolicy.nvidia.com", "clusterpolicies", cluster_policies),
    ("NodeFeature.nfd.k8s-sigs.io", "nodefeatures", node_features),
)
GENERATORS: dict[str, Callable[[Layout], Iterator[Obj]]] = {plural: g for _, plural, g in KINDS}


def cluster(layout: Layout) -> Iterator[Obj]:
    """Every object of the synthetic cluster, kind by kind."""
    for _, _, generate in KINDS:
        yield from generate(layout)


def write_list(
    path: str | Path,
    fmt: str = "json",
    *,
    scale: float = 1.0,
    seed: int = DEFAULT_SEED,
) -> dict[str, int]:
    """Writes the whole cluster as one ``kind: List`` (``fmt`` "json" or "yaml"), streaming:
    memory stays at one object. Returns objects per kind, plus "bytes" written."""
    if fmt not in ("json", "yaml"):
        raise ValueError(f"fmt must be json or yaml, not {fmt!r}")
    layout = Layout.at(scale, seed)
    counts: dict[str, int] = {}
    with open(path, "wb") as out:
        if fmt == "json":
            written = _write_json(out, layout, counts)
        else:
            written = _write_yaml(out, layout, counts)
    counts["bytes"] = written
    return counts


def _write_json(out: BinaryIO, layout: Layout, counts: dict[str, int]) -> int:
    written = out.write(b'{"apiVersion":"v1","kind":"List","metadata":{},"items":[\n')
    first = True
    for label, _, generate in KINDS:
        for obj in generate(layout):
            counts[label] = counts.get(label, 0) + 1
            written += out.write((b"" if first else b",\n") + orjson.dumps(obj))
            first = False
    written += out.write(b"\n]}\n")
    return written


def _write_yaml(out: BinaryIO, layout: Layout, counts: dict[str, int]) -> int:
    written = out.write(b"apiVersion: v1\nkind: List\nmetadata: {}\nitems:\n")
    dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    for label, _, generate in KINDS:
        for obj in generate(layout):
            counts[label] = counts.get(label, 0) + 1
            text = yaml.dump([obj], Dumper=dumper, sort_keys=False, width=120)
            written += out.write(text.encode())
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.synthetic", description=__doc__.split("\n")[0]
    )
    parser.add_argument("-o", "--output", required=True, help="file to write (a kind: List)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every count")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--format", choices=("json", "yaml"), default="json")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    counts = write_list(args.output, args.format, scale=args.scale, seed=args.seed)
    size = counts.pop("bytes")
    total = sum(counts.values())
    print(
        f"{args.output}: {total:,} objects, {size / 1e6:,.1f} MB in "
        f"{time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    for label, n in counts.items():
        print(f"  {label:<36} {n:>8,}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

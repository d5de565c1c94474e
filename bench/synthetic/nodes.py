"""Nodes (GFD and NFD labels, conditions, images, managedFields) and their NFD NodeFeatures."""

from __future__ import annotations

import random
from collections.abc import Iterator

import orjson

from bench.synthetic import draw
from bench.synthetic.draw import Obj
from bench.synthetic.layout import (
    GPU_MODELS,
    KUBELET_VERSION,
    MIG_RESOURCE,
    VFIO_MODELS,
    Images,
    Layout,
    Placement,
    labels,
    words,
)

NFD = "feature.node.kubernetes.io/"
NFD_CPU_FLAGS = words(
    """ADX AESNI AMXBF16 AMXINT8 AMXTILE AVX AVX2 AVX512BF16 AVX512BITALG AVX512BW AVX512CD
    AVX512DQ AVX512F AVX512FP16 AVX512IFMA AVX512VBMI AVX512VBMI2 AVX512VL AVX512VNNI
    AVX512VPOPCNTDQ AVXVNNI CMPXCHG8 FMA3 FSRM FXSR FXSROPT GFNI HYPERVISOR IBPB LAHF MOVBE
    MOVDIR64B MOVDIRI OSXSAVE SERIALIZE SHA STIBP SYSCALL SYSEE TSXLDTRK VAES VMX VPCLMULQDQ
    WAITPKG X87 XGETBV1 XSAVE XSAVEC XSAVEOPT XSAVES"""
)
_NFD_HOST = labels(
    NFD,
    """cpu-hardware_multithreading=true cpu-model.family=6 cpu-model.id=143
    cpu-model.vendor_id=Intel kernel-config.NO_HZ=true kernel-config.NO_HZ_IDLE=true
    kernel-version.full=5.15.0-122-generic kernel-version.major=5 kernel-version.minor=15
    kernel-version.revision=0 memory-numa=true network-sriov.capable=true
    storage-nonrotationaldisk=true system-os_release.ID=ubuntu system-os_release.VERSION_ID=22.04
    system-os_release.VERSION_ID.major=22 system-os_release.VERSION_ID.minor=04""",
)
#: What GFD labels a GPU node with; empty values are per node (filled in gfd_labels, in place).
_GFD = labels(
    "nvidia.com/",
    """cuda.driver-version.full=550.90.07 cuda.driver-version.major=550
    cuda.driver-version.minor=90 cuda.driver-version.revision=07 cuda.driver.major=550
    cuda.driver.minor=90 cuda.driver.rev=07 cuda.runtime-version.full=12.4
    cuda.runtime-version.major=12 cuda.runtime-version.minor=4 cuda.runtime.major=12
    cuda.runtime.minor=4 gfd.timestamp= gpu-driver-upgrade-state=upgrade-done gpu.compute.major=
    gpu.compute.minor=0 gpu.count= gpu.family= gpu.machine= gpu.memory=81559 gpu.mode=compute
    gpu.present=true gpu.product= gpu.replicas=1 gpu.sharing-strategy=none
    gpu.workload.config=container mig.capable= mig.config= mig.config.state=success
    mig.strategy=mixed gpu.deploy.container-toolkit=true gpu.deploy.dcgm=true
    gpu.deploy.dcgm-exporter=true gpu.deploy.device-plugin=true gpu.deploy.driver=true
    gpu.deploy.gpu-feature-discovery=true gpu.deploy.node-status-exporter=true
    gpu.deploy.operator-validator=true gpu.deploy.mig-manager=true""",
)
_GFD_MIG = labels(
    f"{MIG_RESOURCE}.",
    """count= engines.copy=1 engines.decoder=1 memory=9728 multiprocessors=16 product= replicas=1
    slices.ci=1 slices.gi=1""",
)
VM_PASSTHROUGH_LABELS = labels(
    "nvidia.com/",
    """gpu.workload.config=vm-passthrough gpu.present=true gpu.deploy.sandbox-device-plugin=true
    gpu.deploy.sandbox-validator=true gpu.deploy.vfio-manager=true gpu.deploy.operands=true""",
)
#: (type, reason, message) of the node conditions kubelet and node-problem-detector post; all
#: "False" but Ready.
_CONDITIONS = (
    ("KernelDeadlock", "KernelHasNoDeadlock", "kernel has no deadlock"),
    ("ReadonlyFilesystem", "FilesystemIsNotReadOnly", "Filesystem is not read-only"),
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "KubeletReady", "kubelet is posting ready status"),
)
_UNREACHABLE_EFFECTS = ("NoSchedule", "NoExecute")
GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def nfd_labels(rng: random.Random, pci_present: list[str]) -> dict[str, str]:
    found = {f"{NFD}cpu-cpuid.{flag}": "true" for flag in NFD_CPU_FLAGS if rng.random() < 0.85}
    return {**found, **_NFD_HOST, **{f"{NFD}pci-{pci}.present": "true" for pci in pci_present}}


def gfd_labels(rng: random.Random, product: str, count: int, mig: bool) -> dict[str, str]:
    hopper = "H100" in product
    gfd = {
        **_GFD,
        "nvidia.com/gfd.timestamp": str(1751000000 + rng.randrange(300000)),
        "nvidia.com/gpu.compute.major": "9" if hopper else "8",
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.family": "hopper" if hopper else "ampere",
        "nvidia.com/gpu.machine": rng.choice(("PowerEdge-XE9680", "DGX-H100", "SYS-821GE-TNHR")),
        "nvidia.com/gpu.product": product,
        "nvidia.com/mig.capable": "true" if mig or "00" in product else "false",
        "nvidia.com/mig.config": "all-1g.10gb" if mig else "all-disabled",
    }
    if mig:
        mig_count, mig_product = f"{MIG_RESOURCE}.count", f"{MIG_RESOURCE}.product"
        gfd |= {**_GFD_MIG, mig_count: str(7 * count), mig_product: f"{product}-MIG-1g.10gb"}
    return gfd


class NodeMaker:
    def __init__(self, layout: Placement) -> None:
        self.layout = layout
        self.rng = random.Random(f"{layout.seed}:nodes")
        self.images = Images.of(layout.seed)

    def node(
        self,
        name: str,
        node_labels: dict[str, str],
        extended: dict[str, str],
        taints: list[Obj] | None = None,
    ) -> Obj:
        """A node as kubelet, NFD and GFD leave it; ``extended``: its device resources. Every
        node but the ``cpu-*`` ones is a bare-metal GPU machine with the nvidia runtime."""
        rng = self.rng
        gpu = not name.startswith("cpu-")
        taints = self._taints(name, taints or [])
        created = draw.stamp(rng, 400, 30)
        heartbeat = draw.stamp(rng, 0.0005)
        address = draw.ip(rng, "10")
        zone = f"eu-central-1{rng.choice(('a', 'b', 'c'))}"
        instance = "bare-metal" if gpu else "m6i.8xlarge"
        all_labels = {
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/instance-type": "m6i.8xlarge",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "node-role.kubernetes.io/worker": "",
            "node.kubernetes.io/instance-type": instance,
            "topology.kubernetes.io/region": "eu-central-1",
            "topology.kubernetes.io/zone": zone,
            "topology.ebs.csi.aws.com/zone": zone,
            "kubevirt.io/schedulable": "true",
            **node_labels,
        }
        nfd_keys = [k for k in all_labels if k.startswith(NFD)]
        annotations = {
            "csi.volume.kubernetes.io/nodeid": orjson.dumps(
                {
                    "ebs.csi.aws.com": f"i-{draw.hexdigits(rng, 17)}",
                    "rook-ceph.rbd.csi.ceph.com": name,
                }
            ).decode(),
            "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock",
            "nfd.node.kubernetes.io/feature-labels": ",".join(
                k.removeprefix(NFD) for k in nfd_keys
            ),
            "nfd.node.kubernetes.io/master.version": "v0.16.4",
            "nfd.node.kubernetes.io/worker.version": "v0.16.4",
            "node.alpha.kubernetes.io/ttl": "0",
            "projectcalico.org/IPv4Address": f"{address}/20",
            "projectcalico.org/IPv4VXLANTunnelAddr": draw.ip(rng, "100"),
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        }
        if gpu:
            annotations["nvidia.com/gpu-driver-upgrade-enabled"] = "true"
        capacity = {
            "cpu": "128" if gpu else "32",
            "ephemeral-storage": "1843269236Ki",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "memory": "2113389240Ki" if gpu else "131497324Ki",
            "pods": "110",
            **extended,
        }
        allocatable = {
            **capacity,
            "cpu": "127500m" if gpu else "31750m",
            "ephemeral-storage": "1698726102812",
            "memory": "2112237264Ki" if gpu else "130346348Ki",
        }
        images = [i.entry() for i in self.images.system]
        if gpu:
            images += [i.entry() for i in rng.sample(self.images.nvidia, 8)]
        images += [i.entry() for i in rng.sample(self.images.apps, 30 - len(images))]
        status_keys = ["allocatable", "capacity", "conditions", "images", "nodeInfo"]
        node_annotations = {"f:metadata": {"f:annotations": draw.fields_of(list(annotations)[:4])}}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "uid": draw.uid(rng),
                "resourceVersion": draw.resource_version(rng),
                "creationTimestamp": created,
                "labels": all_labels,
                "annotations": annotations,
                "managedFields": [
                    draw.managed_fields("kubelet", created, node_annotations),
                    draw.managed_fields(
                        "nfd-master",
                        created,
                        {"f:metadata": {"f:labels": draw.fields_of(nfd_keys)}},
                    ),
                    draw.managed_fields(
                        "kubelet", heartbeat, {"f:status": draw.fields_of(status_keys)}, "status"
                    ),
                ],
            },
            "spec": {
                "podCIDR": f"192.168.{rng.randrange(256)}.0/24",
                "podCIDRs": [f"192.168.{rng.randrange(256)}.0/24"],
                "providerID": f"aws:///{zone}/i-{draw.hexdigits(rng, 17)}",
                **({"taints": taints} if taints else {}),
            },
            "status": {
                "addresses": [
                    {"type": "InternalIP", "address": address},
                    {"type": "InternalDNS", "address": f"ip-{address.replace('.', '-')}.internal"},
                    {"type": "Hostname", "address": name},
                ],
                "allocatable": allocatable,
                "capacity": capacity,
                "conditions": self._conditions(name not in self.layout.not_ready, heartbeat),
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "images": images,
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": draw.uid(rng),
                    "containerRuntimeVersion": "containerd://1.7.22",
                    "kernelVersion": "5.15.0-122-generic",
                    "kubeProxyVersion": KUBELET_VERSION,
                    "kubeletVersion": KUBELET_VERSION,
                    "machineID": draw.hexdigits(rng, 32),
                    "operatingSystem": "linux",
                    "osImage": "Ubuntu 22.04.5 LTS",
                    "systemUUID": draw.uid(rng).upper(),
                },
                "runtimeHandlers": [
                    {"name": runtime, "features": {"recursiveReadOnlyMounts": True}}
                    for runtime in (("nvidia", "runc") if gpu else ("runc",))
                ],
            },
        }

    def _conditions(self, ready: bool, heartbeat: str) -> list[Obj]:
        """Healthy conditions, or all Unknown since kubelet stopped posting them."""
        since = draw.stamp(self.rng, 200, 20)
        dead_since = draw.stamp(self.rng, 3, 0.1)
        network = {
            "type": "NetworkUnavailable",
            "status": "False",
            "lastHeartbeatTime": since,
            "lastTransitionTime": since,
            "reason": "CalicoIsUp",
            "message": "Calico is running on this node",
        }
        return [network] + [
            {
                "type": kind,
                "status": ("True" if kind == "Ready" else "False") if ready else "Unknown",
                "lastHeartbeatTime": heartbeat if ready else dead_since,
                "lastTransitionTime": since if ready else dead_since,
                "reason": reason if ready else "NodeStatusUnknown",
                "message": message if ready else "Kubelet stopped posting node status.",
            }
            for kind, reason, message in _CONDITIONS
        ]

    def _taints(self, name: str, taints: list[Obj]) -> list[Obj]:
        if name not in self.layout.not_ready:
            return taints
        added = draw.stamp(self.rng, 3, 0.1)
        unreachable = "node.kubernetes.io/unreachable"
        return [
            *taints,
            *({"key": unreachable, "effect": e, "timeAdded": added} for e in _UNREACHABLE_EFFECTS),
        ]


def nodes(layout: Layout) -> Iterator[Obj]:
    maker = NodeMaker(layout)
    rng = maker.rng
    rdma = {"rdma/rdma_shared_device_a": "63"}
    for name, m in layout.full_gpu_nodes():
        model = GPU_MODELS[m]
        found = nfd_labels(rng, [f"{model.pci_class}_10de", "0200_15b3", "0108_144d"])
        gfd = gfd_labels(rng, model.product, 8, mig=False)
        yield maker.node(name, {**found, **gfd}, {"nvidia.com/gpu": "8", **rdma}, GPU_TAINT)
    for name in layout.mig_nodes():
        found = nfd_labels(rng, ["0302_10de", "0200_15b3", "0108_144d"])
        gfd = gfd_labels(rng, "NVIDIA-A100-SXM4-80GB", 8, mig=True)
        extended = {"nvidia.com/gpu": "0", MIG_RESOURCE: "56"}
        yield maker.node(name, {**found, **gfd}, extended, GPU_TAINT)
    kvm = {"devices.kubevirt.io/kvm": "1k"}
    for name, m in layout.vfio_nodes():
        vfio = VFIO_MODELS[m]
        found = nfd_labels(rng, ["0300_10de", "0200_8086", "0108_144d"])
        extended = {vfio.resource: str(vfio.per_node), **kvm}
        yield maker.node(name, {**found, **VM_PASSTHROUGH_LABELS}, extended)
    for name in layout.cpu_nodes():
        found = nfd_labels(rng, ["0200_8086", "0108_1d0f"])
        yield maker.node(name, found, {**kvm, "devices.kubevirt.io/tun": "1k"})


# --- NodeFeature: what nfd-worker found on each GPU node -----------------------------------------

_KERNEL_MODULES = words(
    "nvidia nvidia_uvm nvidia_modeset vfio_pci mlx5_core ib_core overlay br_netfilter"
)
_NODE_FEATURE_LABELS = labels(NFD, "cpu-cpuid.AVX512F=true pci-10de.present=true memory-numa=true")
#: The rest of a GPU node's PCI devices: NIC, NVMe, host bridge, USB.
_OTHER_PCI = (
    {"class": "0200", "vendor": "15b3", "device": "101d", "sriov_totalvfs": "16"},
    {"class": "0108", "vendor": "144d", "device": "a80a"},
    {"class": "0600", "vendor": "8086", "device": "09a2"},
    {"class": "0c03", "vendor": "8086", "device": "1bcd"},
)
_KERNEL_VERSION = {"full": "5.15.0-122-generic", "major": "5", "minor": "15", "revision": "0"}
_NVSWITCH = {"class": "0680", "vendor": "10de", "device": "22a3"}


def node_features(layout: Layout) -> Iterator[Obj]:
    rng = random.Random(f"{layout.seed}:node-features")
    gpu_nodes = [
        (n, GPU_MODELS[m].pci_class, GPU_MODELS[m].device, 8) for n, m in layout.full_gpu_nodes()
    ]
    gpu_nodes += [(n, "0302", "20b2", 8) for n in layout.mig_nodes()]
    gpu_nodes += [
        (n, "0300", VFIO_MODELS[m].device, VFIO_MODELS[m].per_node) for n, m in layout.vfio_nodes()
    ]
    for node, pci_class, device, count in gpu_nodes:
        gpus = [
            {
                "class": pci_class,
                "vendor": "10de",
                "device": device,
                "subsystem_vendor": "10de",
                "subsystem_device": draw.hexdigits(rng, 4),
                "sriov_totalvfs": "0",
            }
            for _ in range(count)
        ]
        switches = [dict(_NVSWITCH) for _ in range(4)] if device == "2330" else []
        pci = [*gpus, *switches, *(dict(p) for p in _OTHER_PCI)]
        yield {
            "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
            "kind": "NodeFeature",
            "metadata": {
                "name": node,
                "namespace": "node-feature-discovery",
                "uid": draw.uid(rng),
                "generation": rng.randrange(1, 50),
                "resourceVersion": draw.resource_version(rng),
                "creationTimestamp": draw.stamp(rng, 400, 30),
                "labels": {"nfd.node.kubernetes.io/node-name": node},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": f"nfd-worker-{draw.suffix(rng)}",
                        "uid": draw.uid(rng),
                    }
                ],
            },
            "spec": {
                "features": {
                    "flags": {
                        "cpu.cpuid": {"elements": {f: {} for f in NFD_CPU_FLAGS}},
                        "kernel.loadedmodule": {"elements": {m: {} for m in _KERNEL_MODULES}},
                    },
                    "attributes": {
                        "kernel.version": {"elements": dict(_KERNEL_VERSION)},
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
                "labels": dict(_NODE_FEATURE_LABELS),
            },
        }

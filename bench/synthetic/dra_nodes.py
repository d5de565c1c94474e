"""The DRA cluster's nodes, the ResourceSlice NVIDIA's DRA driver publishes for each, and the
driver chart's DeviceClasses: shapes from tests/fixtures/dra/ and docs/dra.md."""

from __future__ import annotations

import random
from collections.abc import Iterator

from bench.synthetic import draw
from bench.synthetic.dra_layout import (
    DRA_GPU_MODELS,
    DRIVER,
    GPU_CLASS,
    GPUS_PER_NODE,
    MIG_CLASS,
    MIG_MODEL,
    MIG_PROFILE,
    MIGS_PER_GPU,
    VFIO_CLASS,
    DraGpuModel,
    DraLayout,
    DraVfioModel,
)
from bench.synthetic.draw import Obj
from bench.synthetic.layout import words
from bench.synthetic.nodes import (
    GPU_TAINT,
    VM_PASSTHROUGH_LABELS,
    NodeMaker,
    gfd_labels,
    nfd_labels,
)

RESOURCE_API = "resource.k8s.io/v1"
#: The chart's classes, as the fixtures recorded them: (name, type, extendedResourceName).
CLASSES = (
    (GPU_CLASS, "gpu", "nvidia.com/gpu"),
    (MIG_CLASS, "mig", ""),
    (VFIO_CLASS, "vfio", ""),
)
#: Where the 8 GPUs of a node sit: PCI bus id and root port, the first four on NUMA node 0.
_BUSES = words("1b 43 52 61 9d c3 d1 df")
_BUS_IDS = tuple(f"0000:{bus}:00.0" for bus in _BUSES)
_PCIE_ROOTS = tuple(f"pci0000:{int(bus, 16) - 6:02x}" for bus in _BUSES)
GPU_DRIVER_VERSION = "570.133.20"
CUDA_DRIVER_VERSION = "12.8.0"
_DRA_MODE = {"nvidia.com/gpu.deploy.device-plugin": "false"}
_DRA_PASSTHROUGH = {**VM_PASSTHROUGH_LABELS, "nvidia.com/gpu.deploy.sandbox-device-plugin": "false"}


#: Partitions per GPU under DynamicMIG (1g.10gb of an 80 GB GPU: seven).
_DYNAMIC_PARTITIONS = 7


def dra_nodes(layout: DraLayout) -> Iterator[Obj]:
    """Every node: GFD and NFD labels, no device-plugin resources (the devices are in the
    slices) except on the nodes where the device plugin runs beside the DRA driver."""
    maker = NodeMaker(layout)
    rng = maker.rng
    rdma = {"rdma/rdma_shared_device_a": "63"}
    for name, m in layout.gpu_nodes():
        model = DRA_GPU_MODELS[m].base
        found = nfd_labels(rng, [f"{model.pci_class}_10de", "0200_15b3", "0108_144d"])
        gfd = gfd_labels(rng, model.product, GPUS_PER_NODE, mig=False)
        if name in layout.managed_twice:
            yield maker.node(name, {**found, **gfd}, {"nvidia.com/gpu": "8", **rdma}, GPU_TAINT)
        else:
            yield maker.node(name, {**found, **gfd, **_DRA_MODE}, rdma, GPU_TAINT)
    for name in layout.mig_nodes():
        found = nfd_labels(rng, ["0302_10de", "0200_15b3", "0108_144d"])
        gfd = gfd_labels(rng, MIG_MODEL.base.product, GPUS_PER_NODE, mig=True)
        yield maker.node(name, {**found, **gfd, **_DRA_MODE}, rdma, GPU_TAINT)
    kvm = {"devices.kubevirt.io/kvm": "1k"}
    for name, _ in layout.passthrough_nodes():
        found = nfd_labels(rng, ["0302_10de", "0200_8086", "0108_144d"])
        yield maker.node(name, {**found, **_DRA_PASSTHROUGH}, kvm)


def device_classes(layout: DraLayout) -> Iterator[Obj]:
    rng = random.Random(f"{layout.seed}:dra-classes")
    for name, kind, extended in CLASSES:
        expression = (
            f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{kind}'"
        )
        spec: Obj = {"selectors": [{"cel": {"expression": expression}}]}
        if extended:
            spec = {"extendedResourceName": extended, **spec}
        yield {
            "apiVersion": RESOURCE_API,
            "kind": "DeviceClass",
            "metadata": {
                "name": name,
                "uid": draw.uid(rng),
                "generation": 1,
                "resourceVersion": draw.resource_version(rng),
                "creationTimestamp": draw.stamp(rng, 400, 300),
            },
            "spec": spec,
        }


def _typed(value: str | int | bool, kind: str = "") -> Obj:
    """An attribute value as the API spells it: {"string": ...}, {"int": ...}, {"version": ...}."""
    if not kind:
        kind = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "string"
    return {kind: value}


class _SliceMaker:
    def __init__(self, layout: DraLayout) -> None:
        self.layout = layout
        self.rng = random.Random(f"{layout.seed}:dra-slices")

    def pci(self, node: str, index: int) -> Obj:
        """Where GPU ``index`` sits, in the names this node's driver release publishes."""
        bus, numa = _BUS_IDS[index], index * 2 // GPUS_PER_NODE
        if node in self.layout.legacy_driver:
            return {"pcieBusID": _typed(bus), "numa": _typed(numa)}
        return {
            "resource.kubernetes.io/pciBusID": _typed(bus),
            "resource.kubernetes.io/pcieRoot": _typed(_PCIE_ROOTS[index]),
            "resource.kubernetes.io/numaNode": _typed(numa),
        }

    def common(self, node: str, model: DraGpuModel, index: int) -> Obj:
        """What a full GPU and its MIG devices share."""
        return {
            "productName": _typed(model.product),
            "brand": _typed("Nvidia"),
            "architecture": _typed(model.architecture),
            "cudaComputeCapability": _typed(model.compute, "version"),
            "driverVersion": _typed(GPU_DRIVER_VERSION, "version"),
            "cudaDriverVersion": _typed(CUDA_DRIVER_VERSION, "version"),
            **self.pci(node, index),
        }

    def device(
        self, name: str, kind: str, attributes: Obj, capacity: Obj, uuid: str = "GPU"
    ) -> Obj:
        """One device: its ``type``, a fresh uuid (``GPU-...``, ``MIG-...``), the rest."""
        head = {"type": _typed(kind), "uuid": _typed(f"{uuid}-{draw.uid(self.rng)}")}
        return {"name": name, "attributes": head | attributes, "capacity": capacity}

    def gpus(self, node: str, model: DraGpuModel) -> list[Obj]:
        memory = {"memory": {"value": model.memory}}
        return [
            self.device(f"gpu-{i}", "gpu", self.common(node, model, i), memory)
            for i in range(GPUS_PER_NODE)
        ]

    def migs(self, node: str) -> list[Obj]:
        profile = MIG_PROFILE.replace(".", "")
        engines = {
            "multiprocessors": {"value": "14"},
            "copyEngines": {"value": "1"},
            "decoders": {"value": "0"},
            "encoders": {"value": "0"},
            "jpegEngines": {"value": "0"},
            "ofaEngines": {"value": "0"},
            "memory": {"value": "9856Mi"},
        }
        return [
            self.device(
                f"gpu-{g}-mig-{profile}-{m}",
                "mig",
                {"profile": _typed(MIG_PROFILE), **self.common(node, MIG_MODEL, g)},
                {**engines, f"memorySlice{m}": {"value": "1"}},
                uuid="MIG",
            )
            for g in range(GPUS_PER_NODE)
            for m in range(MIGS_PER_GPU)
        ]

    def vfio(self, node: str, model: DraVfioModel) -> list[Obj]:
        identity = {
            "vendorID": _typed("0x10de"),
            "deviceID": _typed(model.device),
            "productName": _typed(model.product),
            "iommuFDEnabled": _typed(False),
        }
        memory = {"addressableMemory": {"value": model.memory}}
        return [
            self.device(f"gpu-vfio-{i}", "vfio", {**identity, **self.pci(node, i)}, memory)
            for i in range(GPUS_PER_NODE)
        ]

    def dynamic(self, node: str, model: DraGpuModel) -> tuple[list[Obj], list[Obj]]:
        """Under DynamicMIG: one counter set per GPU, and each GPU whole and as seven
        partitions drawing on it (names as the driver's partitions.go gives them)."""
        slots = {f"memory-slice-{s}": {"value": "1"} for s in range(_DYNAMIC_PARTITIONS + 1)}
        whole = {"memory": {"value": model.memory}, "multiprocessors": {"value": "132"}, **slots}
        sets, devices = [], []
        for gpu in self.gpus(node, model):
            name = f"{gpu['name']}-counter-set"
            sets.append({"name": name, "counters": whole})
            devices.append({**gpu, "consumesCounters": [{"counterSet": name, "counters": whole}]})
            for m in range(_DYNAMIC_PARTITIONS):
                use = {"memory": {"value": "1Gi"}, "multiprocessors": {"value": "16"}}
                use[f"memory-slice-{m}"] = {"value": "1"}
                part = self.device(
                    f"{gpu['name']}-mig-1g10gb-{m}",
                    "mig",
                    {"profile": _typed(MIG_PROFILE), **gpu["attributes"]},
                    {"memory": {"value": "10Gi"}},
                    uuid="MIG",
                )
                devices.append(
                    {**part, "consumesCounters": [{"counterSet": name, "counters": use}]}
                )
        return sets, devices

    def slice(self, node: str, devices: list[Obj], counters: list[Obj] | None = None) -> Obj:
        """The one slice of the node's pool, as the kubelet plugin writes it; with
        ``counters``, one of the pool's two (the counters alone, or the devices)."""
        rng = self.rng
        prefix = f"{node}-{DRIVER}-"
        return {
            "apiVersion": RESOURCE_API,
            "kind": "ResourceSlice",
            "metadata": {
                "name": prefix + draw.suffix(rng),
                "generateName": prefix,
                "uid": draw.uid(rng),
                "generation": 1,
                "resourceVersion": draw.resource_version(rng),
                "creationTimestamp": draw.stamp(rng, 30, 1),
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": node,
                        "uid": draw.uid(rng),
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                **({"sharedCounters": counters} if counters else {"devices": devices}),
            },
        }


def resource_slices(layout: DraLayout) -> Iterator[Obj]:
    """One slice per node: 8 full GPUs, 56 MIG devices or 8 passthrough devices. A NotReady
    node's slice stays: nothing removes it while its kubelet is down."""
    maker = _SliceMaker(layout)
    for name, m in layout.gpu_nodes():
        if layout.dynamic_mig:
            sets, devices = maker.dynamic(name, DRA_GPU_MODELS[m])
            for part in (maker.slice(name, [], sets), maker.slice(name, devices)):
                part["spec"]["pool"]["resourceSliceCount"] = 2
                yield part
            continue
        yield maker.slice(name, maker.gpus(name, DRA_GPU_MODELS[m]))
    for name in layout.mig_nodes():
        yield maker.slice(name, maker.migs(name))
    for name, model in layout.passthrough_nodes():
        yield maker.slice(name, maker.vfio(name, model))

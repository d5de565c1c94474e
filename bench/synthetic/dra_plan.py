"""Which claim holds which devices and who uses it, in the DRA cluster: the one source of
placement the claims, pods, VMs and VMIs generators share (each draws its objects from its own
random stream; the plan is drawn once, from its own).

At ``scale=1.0``, 20,000 ResourceClaims: 11,500 for job pods on the container-mode nodes (1, 2,
4 or 8 GPUs; half made from a template for the pod, half named outright, some with a selector on
the product or the memory), 2,000 for pods on MIG slices, 100 for Pending pods asking a product no
node has, 6,000 for the running VMs' virt-launcher pods on passthrough devices and 400 for VMs
that want an H200 (only NotReady nodes have one: ErrorUnschedulable, their claims unallocated).
10,000 VMs, all taking their GPU from a claim: 6,000 running, 400 scheduling, 3,600 halted.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import NamedTuple

from bench.synthetic import draw
from bench.synthetic.dra_layout import (
    ABSENT_PRODUCT,
    DRA_GPU_MODELS,
    DRA_VFIO_MODELS,
    GPU_CLASS,
    GPUS_PER_NODE,
    H200,
    MIG_CLASS,
    MIG_PROFILE,
    MIGS_PER_GPU,
    VFIO_CLASS,
    DraLayout,
    DraVfioModel,
)
from bench.synthetic.draw import ClaimEntry
from bench.synthetic.layout import TEAMS, words
from bench.synthetic.vms import PlannedVM, PlannedVMI

ML_NAMESPACES = tuple(f"ml-{team}" for team in words("research training inference vision llm"))
VM_NAMESPACES = (*(f"vms-{team}" for team in TEAMS), "vdi", "ci-runners")
#: GPUs per claim of a job pod, and how often each is asked.
GPU_COUNTS = (1, 2, 4, 8)
GPU_COUNT_WEIGHTS = (80, 10, 7, 3)


def attribute(name: str) -> str:
    """A CEL reference to one of the NVIDIA driver's attributes."""
    return f"device.attributes['gpu.nvidia.com'].{name}"


def product_is(product: str) -> str:
    return f"{attribute('productName')} == '{product}'"


def product_matches(short: str) -> str:
    """The selector style of the driver's own demo: lowerAscii().matches(...)."""
    return f"{attribute('productName')}.lowerAscii().matches('^.*{short}.*$')"


MEMORY_OVER_40GI = "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40Gi'))"
MIG_SELECTOR = f"{attribute('profile')} == '{MIG_PROFILE}'"


@dataclass(frozen=True)
class Request:
    """What a claim (or a template's claims) asks: ``count`` devices of a class."""

    device_class: str
    selectors: tuple[str, ...]
    count: int


class PlannedTemplate(NamedTuple):
    namespace: str
    name: str
    request: Request


class PlannedClaim(NamedTuple):
    namespace: str
    name: str
    request: Request
    node: str  # '' while unallocated
    devices: tuple[str, ...]  # its devices in the node's pool
    consumer: str  # the pod using it (in reservedFor once allocated)
    template: str  # '' for a claim made outright, else the template it was made from for the pod


class PlannedPod(NamedTuple):
    """A job's pod using one claim, or a VMI's virt-launcher pod using the VMI's claims."""

    namespace: str
    name: str
    node: str  # '' while pending
    phase: str
    app: str
    claim: ClaimEntry
    vmi: PlannedVMI | None = None


@dataclass(frozen=True)
class DraPlan:
    templates: tuple[PlannedTemplate, ...]
    claims: tuple[PlannedClaim, ...]
    pods: tuple[PlannedPod, ...]
    """Job pods with claims, then the virt-launcher pods."""
    vms: tuple[PlannedVM, ...]

    @property
    def vmis(self) -> tuple[PlannedVMI, ...]:
        return tuple(vm.vmi for vm in self.vms if vm.vmi is not None)


def _templates() -> list[PlannedTemplate]:
    out = [
        PlannedTemplate(namespace, f"gpu-{count}", Request(GPU_CLASS, (), count))
        for namespace in ML_NAMESPACES
        for count in GPU_COUNTS
    ]
    out += [
        PlannedTemplate(namespace, "mig-1g", Request(MIG_CLASS, (MIG_SELECTOR,), 1))
        for namespace in ML_NAMESPACES
    ]
    out += [
        PlannedTemplate(namespace, _vfio_template(model), _vfio_request(model))
        for namespace in VM_NAMESPACES
        for model in (*DRA_VFIO_MODELS, H200)
    ]
    return out


def _vfio_template(model: DraVfioModel) -> str:
    return f"{model.short}-vfio"


def _vfio_request(model: DraVfioModel) -> Request:
    return Request(VFIO_CLASS, (product_matches(model.short),), 1)


class _Planner:
    def __init__(self, layout: DraLayout) -> None:
        self.layout = layout
        self.rng = random.Random(f"{layout.seed}:dra-plan")
        self.names: set[tuple[str, str]] = set()
        self.claims: list[PlannedClaim] = []
        self.pods: list[PlannedPod] = []

    def unique(self, namespace: str, prefix: str) -> str:
        return draw.unique_name(self.rng, self.names, namespace, prefix)

    def job_pod(
        self, namespace: str, node: str, request: Request, devices: tuple[str, ...]
    ) -> None:
        """A job's pod and its claim: named outright (with the request's selectors) or made from
        the namespace's template for that many GPUs (or MIG slices)."""
        rng = self.rng
        job = f"{namespace.removeprefix('ml-')}-{rng.choice(('train', 'finetune', 'serve'))}"
        pod = self.unique(namespace, f"{job}-{draw.hexdigits(rng, 6)}")
        phase = "Running" if node else "Pending"
        templated = not request.selectors or request.device_class == MIG_CLASS
        if templated and rng.random() < 0.5:
            template = "mig-1g" if request.device_class == MIG_CLASS else f"gpu-{request.count}"
            claim = self.unique(namespace, f"{pod}-gpu")
            entry = ClaimEntry("gpu", template=template, made=claim)
        else:
            template, claim = "", f"{pod}-gpu"
            entry = ClaimEntry("gpu", claim=claim)
        self.claims.append(PlannedClaim(namespace, claim, request, node, devices, pod, template))
        self.pods.append(PlannedPod(namespace, pod, node, phase, job, entry))

    def first_fit(self, order: list[str], free: dict[str, list[str]], count: int) -> str:
        """The first node from a random place in ``order`` with ``count`` devices free."""
        start = self.rng.randrange(len(order))
        for k in range(len(order)):
            node = order[(start + k) % len(order)]
            if len(free[node]) >= count:
                return node
        return ""

    def container_claims(self) -> None:
        rng, layout = self.rng, self.layout
        models = dict(layout.gpu_nodes())
        order = list(models)
        rng.shuffle(order)
        free = {node: [f"gpu-{i}" for i in range(GPUS_PER_NODE)] for node in order}
        for _ in range(layout.pod_claims):
            count = rng.choices(GPU_COUNTS, GPU_COUNT_WEIGHTS)[0]
            node = self.first_fit(order, free, count)
            if not node:
                continue  # the cluster is full at this scale
            devices = tuple(free[node][:count])
            del free[node][:count]
            roll = rng.random()
            product = DRA_GPU_MODELS[models[node]].product
            selectors = (
                (product_is(product),) if roll < 0.35 else (MEMORY_OVER_40GI,) if roll < 0.6 else ()
            )
            self.job_pod(
                rng.choice(ML_NAMESPACES), node, Request(GPU_CLASS, selectors, count), devices
            )

    def mig_claims(self) -> None:
        rng, nodes = self.rng, self.layout.mig_nodes()
        slices = [
            (node, f"gpu-{g}-mig-{MIG_PROFILE.replace('.', '')}-{m}")
            for node in nodes
            for g in range(GPUS_PER_NODE)
            for m in range(MIGS_PER_GPU)
        ]
        rng.shuffle(slices)
        request = Request(MIG_CLASS, (MIG_SELECTOR,), 1)
        for node, device in slices[: self.layout.mig_claims]:
            self.job_pod(rng.choice(ML_NAMESPACES), node, request, (device,))

    def pending_claims(self) -> None:
        request = Request(GPU_CLASS, (product_is(ABSENT_PRODUCT),), 1)
        for _ in range(self.layout.pending_pod_claims):
            self.job_pod(self.rng.choice(ML_NAMESPACES), "", request, ())

    def virtual_machines(self) -> list[PlannedVM]:
        """Running VMs on the passthrough devices of the nodes but the H200 ones (NotReady ones
        too: they went down with their VMs), VMs that want an H200, and halted ones."""
        rng, layout = self.rng, self.layout
        slots = [
            (node, model, f"gpu-vfio-{i}")
            for node, model in layout.passthrough_nodes()
            if model is not H200
            for i in range(GPUS_PER_NODE)
        ]
        rng.shuffle(slots)
        running = min(layout.vms_running, len(slots))
        waiting = min(layout.vms_unschedulable, layout.vms - running)
        plan = []
        for i in range(layout.vms):
            namespace, name = rng.choice(VM_NAMESPACES), f"gpu-vm-{i:05d}"
            alive = i < running + waiting
            if i < running:
                node, model, device = slots[i]
            else:
                node, device = "", ""
                model = H200 if alive else rng.choice(DRA_VFIO_MODELS)
            if alive and rng.random() < 0.2:
                entry = ClaimEntry("gpu", claim=f"{name}-gpu")
            else:
                entry = ClaimEntry("gpu", template=_vfio_template(model))
            if not alive:
                plan.append(PlannedVM(namespace, name, "", model.field, "Halted", None, (entry,)))
                continue
            phase = "Running" if node else "Scheduling"
            vmi = PlannedVMI(namespace, name, node, "", model.field, name, phase, (entry,))
            plan.append(PlannedVM(namespace, name, "", model.field, "Always", vmi, (entry,)))
            self.launcher(vmi, entry, _vfio_request(model), device)
        return plan

    def launcher(self, vmi: PlannedVMI, entry: ClaimEntry, request: Request, device: str) -> None:
        """The VMI's virt-launcher pod, and the claim it uses: the VM's own, or one made for
        the pod from the VM's template."""
        pod = self.unique(vmi.namespace, f"virt-launcher-{vmi.name}")
        claim = entry.claim or self.unique(vmi.namespace, f"{pod}-gpu")
        made = entry._replace(made=claim) if entry.template else entry
        devices = (device,) if device else ()
        self.claims.append(
            PlannedClaim(vmi.namespace, claim, request, vmi.node, devices, pod, entry.template)
        )
        phase = "Running" if vmi.node else "Pending"
        self.pods.append(
            PlannedPod(vmi.namespace, pod, vmi.node, phase, "virt-launcher", made, vmi)
        )


@functools.cache
def dra_plan(layout: DraLayout) -> DraPlan:
    """The plan of ``layout``, drawn once per layout (the generators of every kind ask it)."""
    planner = _Planner(layout)
    planner.container_claims()
    planner.mig_claims()
    planner.pending_claims()
    vms = planner.virtual_machines()
    return DraPlan(tuple(_templates()), tuple(planner.claims), tuple(planner.pods), tuple(vms))

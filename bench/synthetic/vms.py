"""KubeVirt's VirtualMachines and VirtualMachineInstances: which exist, where each runs (the plan,
shared with the virt-launcher pods), and the objects (``vm_object``, ``vmi_object``: also the DRA
cluster's, whose devices come from claims)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from bench.synthetic import draw
from bench.synthetic.draw import ClaimEntry, Obj
from bench.synthetic.layout import H100_PCIE, RTX_3090, TEAMS, VFIO_MODELS, Layout

KUBEVIRT_API = "kubevirt.io/v1"
_OBSERVED_API = {
    "kubevirt.io/latest-observed-api-version": "v1",
    "kubevirt.io/storage-observed-api-version": "v1",
}


@dataclass(frozen=True)
class PlannedVMI:
    namespace: str
    name: str
    node: str  # "" while unschedulable
    device: str  # sandbox resource, or "" for a VM without GPUs
    field: str  # "gpus" or "hostDevices"
    owner: str  # VM name, "" for a standalone VMI
    phase: str
    claims: tuple[ClaimEntry, ...] = ()  # with KubeVirt's DRA gates: the device is a claim's

    @property
    def has_device(self) -> bool:
        return bool(self.device or self.claims)


@dataclass(frozen=True)
class PlannedVM:
    namespace: str
    name: str
    device: str
    field: str
    run_strategy: str
    vmi: PlannedVMI | None
    claims: tuple[ClaimEntry, ...] = ()

    @property
    def has_device(self) -> bool:
        return bool(self.device or self.claims)


def _vm_plan(layout: Layout) -> list[PlannedVM]:
    """Every VM and the VMI it has (if any); GPU VMIs fit the passthrough nodes' capacity."""
    rng = random.Random(f"{layout.seed}:vm-plan")
    namespaces = [f"vms-{t}" for t in TEAMS] + ["vdi", "ci-runners"]
    slots: list[tuple[str, str]] = []  # (node, resource), one per device
    for name, m in layout.vfio_nodes():
        if name not in layout.not_ready:
            slots.extend((name, VFIO_MODELS[m].resource) for _ in range(VFIO_MODELS[m].per_node))
    rng.shuffle(slots)
    cpu = layout.ready_cpu_nodes()
    plan: list[PlannedVM] = []
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
            vmi = PlannedVMI(namespace, name, node, device, field, name, phase)
        plan.append(PlannedVM(namespace, name, device, field, strategy, vmi))
    for i in range(layout.vms - layout.gpu_vms):
        namespace = rng.choice(namespaces)
        name = f"vm-{i:05d}"
        vmi = PlannedVMI(namespace, name, rng.choice(cpu), "", "", name, "Running")
        plan.append(PlannedVM(namespace, name, "", "", "Always", vmi))
    return plan


def vmi_plan(layout: Layout) -> list[PlannedVMI]:
    """Every VMI: the VMs' and a VDI pool's standalone ones (a VMI replica set)."""
    owned = [vm.vmi for vm in _vm_plan(layout) if vm.vmi is not None]
    rng = random.Random(f"{layout.seed}:vmi-plan")
    cpu = layout.ready_cpu_nodes()
    standalone = [
        PlannedVMI(
            "vdi", f"vdi-pool-{draw.suffix(rng, 5)}{i}", rng.choice(cpu), "", "", "", "Running"
        )
        for i in range(layout.standalone_vmis)
    ]
    return owned + standalone


def _vmi_spec(
    rng: random.Random, name: str, device: str, field: str, claims: tuple[ClaimEntry, ...] = ()
) -> Obj:
    """A VMI's spec; its one GPU or host device named by resource (``device``) or, with
    ``claims``, taken from the first claim's ``gpu`` request (KubeVirt's DRA shape)."""
    devices: Obj = {
        "disks": [
            {"name": "rootdisk", "disk": {"bus": "virtio"}},
            {"name": "cloudinitdisk", "disk": {"bus": "virtio"}},
        ],
        "interfaces": [{"name": "default", "masquerade": {}, "model": "virtio"}],
        "rng": {},
    }
    if claims:
        entry = {"name": f"{field.lower()[:3]}1", "claimName": claims[0].name, "requestName": "gpu"}
        devices[field] = [entry]
    elif device:
        devices[field] = [{"name": f"{field.lower()[:3]}1", "deviceName": device}]
    cores = rng.choice((2, 4, 8, 16))
    spec: Obj = {
        "architecture": "amd64",
        "domain": {
            "cpu": {"cores": cores, "sockets": 1, "threads": 1, "model": "host-passthrough"},
            "devices": devices,
            "features": {"acpi": {"enabled": True}, "smm": {"enabled": True}},
            "firmware": {"uuid": draw.uid(rng), "bootloader": {"efi": {"secureBoot": False}}},
            "machine": {"type": "q35"},
            "memory": {"guest": f"{cores * 4}Gi"},
            "resources": {"requests": {"memory": f"{cores * 4}Gi"}},
        },
        "evictionStrategy": "None" if device or claims else "LiveMigrate",
        "networks": [{"name": "default", "pod": {}}],
        "terminationGracePeriodSeconds": 180,
        "volumes": [
            {"name": "rootdisk", "dataVolume": {"name": f"{name}-rootdisk"}},
            {
                "name": "cloudinitdisk",
                "cloudInitNoCloud": {
                    "userData": "#cloud-config\nuser: cloud-user\nchpasswd: { expire: False }\n"
                    "ssh_authorized_keys:\n  - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI"
                    f"{draw.hexdigits(rng, 40)} ops@example.com\n"
                },
            },
        ],
    }
    if claims:
        spec["resourceClaims"] = [claim.entry() for claim in claims]
    return spec


def _condition(kind: str, status: str, since: str | None, **why: str) -> Obj:
    """A KubeVirt condition; ``why``: its reason and message, when it has them."""
    return {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": since,
        **why,
    }


def _vm_status(rng: random.Random, vm: PlannedVM, created: str, unschedulable: str) -> Obj:
    """Running, scheduling (the scheduler found no free device: ``unschedulable`` says so) or
    stopped."""
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
                "reason": "Snapshot is not supported for this volumeSource type [cloudinitdisk]",
            },
        ],
    }
    if vm.vmi is not None and vm.vmi.phase == "Running":
        pinned = {
            "reason": "HostDeviceNotLiveMigratable",
            "message": "VMI uses a host device that is not live migratable",
        }
        status["printableStatus"] = "Running"
        status["conditions"] = [
            _condition("Ready", "True", created),
            _condition(
                "LiveMigratable",
                "False" if vm.has_device else "True",
                None,
                **(pinned if vm.has_device else {}),
            ),
        ]
    elif vm.vmi is not None:
        status["printableStatus"] = "ErrorUnschedulable"
        status["conditions"] = [
            _condition(
                "Ready",
                "False",
                created,
                reason="GuestNotRunning",
                message="Guest VM is not reported as running",
            ),
            _condition(
                "PodScheduled",
                "False",
                draw.stamp(rng, 5),
                reason="Unschedulable",
                message=unschedulable,
            ),
        ]
    return status


def virtual_machines(layout: Layout) -> Iterator[Obj]:
    rng = random.Random(f"{layout.seed}:vms")
    for vm in _vm_plan(layout):
        insufficient = (
            f"0/{layout.nodes} nodes are available: {layout.nodes} Insufficient {vm.device}."
        )
        yield vm_object(rng, vm, insufficient)


def vm_object(rng: random.Random, vm: PlannedVM, unschedulable: str) -> Obj:
    """The VirtualMachine of ``vm``; ``unschedulable``: the scheduler's message when its VMI
    cannot be placed."""
    created = draw.stamp(rng, 300, 1)
    status = _vm_status(rng, vm, created, unschedulable)
    root_disk = {
        "sourceRef": {"kind": "DataSource", "name": "ubuntu2404", "namespace": "os-images"},
        "storage": {
            "resources": {"requests": {"storage": "60Gi"}},
            "storageClassName": "ceph-block",
        },
    }
    return {
        "apiVersion": KUBEVIRT_API,
        "kind": "VirtualMachine",
        "metadata": {
            "name": vm.name,
            "namespace": vm.namespace,
            "uid": draw.uid(rng),
            "generation": 3,
            "resourceVersion": draw.resource_version(rng),
            "creationTimestamp": created,
            "labels": {"app": vm.name, "kubevirt.io/os": "linux", "team": vm.namespace},
            "annotations": {"kubemacpool.io/transaction-timestamp": created, **_OBSERVED_API},
            "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"],
        },
        "spec": {
            "runStrategy": vm.run_strategy,
            "dataVolumeTemplates": [
                {"metadata": {"name": f"{vm.name}-rootdisk"}, "spec": root_disk}
            ],
            "template": {
                "metadata": {"labels": {"kubevirt.io/domain": vm.name, "app": vm.name}},
                "spec": _vmi_spec(rng, vm.name, vm.device, vm.field, vm.claims),
            },
        },
        "status": status,
    }


def _running_vmi_status(rng: random.Random, v: PlannedVMI, created: str) -> Obj:
    address = draw.ip(rng, "192")
    return {
        "nodeName": v.node,
        "activePods": {draw.uid(rng): v.node},
        "conditions": [
            _condition("Ready", "True", created),
            _condition("LiveMigratable", "False" if v.has_device else "True", None),
        ],
        "interfaces": [
            {
                "name": "default",
                "ipAddress": address,
                "ipAddresses": [address],
                "mac": "02:" + ":".join(draw.hexdigits(rng, 2) for _ in range(5)),
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


def virtual_machine_instances(layout: Layout) -> Iterator[Obj]:
    rng = random.Random(f"{layout.seed}:vmis")
    for v in vmi_plan(layout):
        yield vmi_object(rng, v)


def vmi_object(rng: random.Random, v: PlannedVMI) -> Obj:
    """The VirtualMachineInstance of ``v``: running on its node, or still scheduling."""
    created = draw.stamp(rng, 60, 0.1)
    owner_kind, owner = (
        ("VirtualMachine", v.owner) if v.owner else ("VirtualMachineInstanceReplicaSet", "vdi-pool")
    )
    meta: Obj = {
        "name": v.name,
        "namespace": v.namespace,
        "uid": draw.uid(rng),
        "generation": 12,
        "resourceVersion": draw.resource_version(rng),
        "creationTimestamp": created,
        "labels": {
            "kubevirt.io/domain": v.name,
            "app": v.owner or "vdi-pool",
            **({"kubevirt.io/nodeName": v.node} if v.node else {}),
        },
        "annotations": {**_OBSERVED_API, "kubevirt.io/vm-generation": "3"},
        "finalizers": [
            "kubevirt.io/virtualMachineControllerFinalize",
            "foregroundDeleteVirtualMachine",
        ],
        "ownerReferences": [draw.controller_ref(rng, KUBEVIRT_API, owner_kind, owner)],
    }
    status: Obj = {"phase": v.phase, "qosClass": "Burstable", "guestOSInfo": {}}
    if v.node:
        status |= _running_vmi_status(rng, v, created)
    else:
        status["conditions"] = [
            _condition("Ready", "False", created, reason="GuestNotRunning"),
        ]
    return {
        "apiVersion": KUBEVIRT_API,
        "kind": "VirtualMachineInstance",
        "metadata": meta,
        "spec": _vmi_spec(rng, v.owner or v.name, v.device, v.field, v.claims),
        "status": status,
    }

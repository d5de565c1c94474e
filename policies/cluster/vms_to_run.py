"""The VMs KubeVirt will try to start: a VirtualMachine that should run (its run strategy),
one that was started or is trying to (a live VMI, ErrorUnschedulable), a live
VirtualMachineInstance. What such a VM asks for (devices, providers, permissions) is what the VM
policies judge, at admission for the one in a request and in the audit, with the diagnoses, for
all of them.

A VM's devices include those of the instancetype it names (``resolved``), and at admission the
templates VMs are made from ask too (``asked_to_run``): a VirtualMachineInstanceReplicaSet or a
VirtualMachinePool with replicas, and an instancetype, whose devices every VM naming it gets.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from policies.cluster.conditions import Condition
from policies.cluster.kinds import (
    VIRTUAL_MACHINE,
    VIRTUAL_MACHINE_INSTANCE,
    VM_CLUSTER_INSTANCETYPE,
    VM_INSTANCETYPE,
    VM_POOL,
    VM_REPLICA_SET,
    object_ref,
    scaled_kind,
)
from policies.cluster.kubevirt import (
    VM_STARTING_REQUESTS,
    DeviceRequest,
    InstancetypeRef,
    VMIInfo,
    VMInfo,
)
from policies.cluster.projections import request_projection
from policies.cluster.view import ClusterView
from policies.cluster.vm_templates import InstancetypeInfo, PoolInfo, ReplicaSetInfo
from policies.vocabulary.fields import get_int, get_map
from policies.vocabulary.requests import (
    CREATE,
    UPDATE,
    AdmissionRequest,
    GroupKind,
    JSONObject,
    ObjectRef,
)

#: A VM's printableStatus while its VMI waits for a node: it is trying to run.
UNSCHEDULABLE_STATUS = "ErrorUnschedulable"


def vm_to_run(request: AdmissionRequest) -> VMInfo | VMIInfo | None:
    """The request's VM if it should run, or its VMI if live; None otherwise (or on DELETE)."""
    if request.obj is None:
        return None
    if request.group_kind == VIRTUAL_MACHINE:
        vm: VMInfo = request_projection(request)
        return vm if vm.should_run else None
    vmi: VMIInfo = request_projection(request)
    return vmi if vmi.live else None


#: The requests whose object asks for the devices VMs will run with: those that start a VM, and
#: the templates VMs are made from (a replica set of VMIs, a pool of VMs, an instancetype).
VM_DEVICE_REQUESTS: Mapping[GroupKind, frozenset[str]] = MappingProxyType(
    {
        **VM_STARTING_REQUESTS,
        VM_REPLICA_SET: frozenset({CREATE, UPDATE}),
        VM_POOL: frozenset({CREATE, UPDATE}),
        VM_INSTANCETYPE: frozenset({CREATE, UPDATE}),
        VM_CLUSTER_INSTANCETYPE: frozenset({CREATE, UPDATE}),
    }
)
#: What ``VM_DEVICE_REQUESTS`` judges, as a policy's summary names it before what it asks for.
VM_DEVICE_SUBJECTS = (
    "A VirtualMachine that should run (with its instancetype's devices), a new "
    "VirtualMachineInstance, a VirtualMachineInstanceReplicaSet or VirtualMachinePool with "
    "replicas, or an instancetype"
)


@dataclass(frozen=True, slots=True)
class Resolved:
    """A VM's devices with its instancetype's; ``unknown`` names an instancetype whose devices
    cannot be told (never read as none): the view does not hold it, or the VM runs with a copy
    KubeVirt made of it before it changed (``outdated``)."""

    devices: tuple[DeviceRequest, ...]
    unknown: InstancetypeRef | None = None
    outdated: bool = False


def _instancetype(vm: VMInfo, view: ClusterView) -> InstancetypeInfo | None:
    ref = vm.instancetype
    if ref is None or not ref.name:
        return None
    if ref.kind == VM_INSTANCETYPE:
        return view.instancetype(vm.namespace, ref.name)
    if ref.kind == VM_CLUSTER_INSTANCETYPE:
        return view.cluster_instancetype(ref.name)
    return None


def resolved(vm: VMInfo, view: ClusterView) -> Resolved:
    """The devices KubeVirt gives the VM: its instancetype's gpus[] (hostDevices[]) fill its own
    when it has none (kubevirt/kubevirt pkg/instancetype/apply/gpu.go, hostdevices.go; both set
    is a conflict KubeVirt's VM webhook refuses). A VM runs with the copy KubeVirt made of the
    instancetype when it first synced the VM (docs/field-guide.md): read from the view when that
    copy is of the instancetype as it is now, or when none was made yet."""
    ref = vm.instancetype
    if ref is None:
        return Resolved(vm.devices)
    found = _instancetype(vm, view)
    if found is None:
        return Resolved(vm.devices, ref)
    if ref.revision and not found.copied_as(ref.revision):
        return Resolved(vm.devices, ref, outdated=True)
    own = {d.field for d in vm.devices}
    return Resolved(vm.devices + tuple(d for d in found.devices if d.field not in own))


@dataclass(frozen=True, slots=True)
class Asked:
    """What a request asks to run with: its devices (an instancetype's resolved), and the
    conditions of what it names (none for a template)."""

    devices: tuple[DeviceRequest, ...]
    conditions: tuple[Condition, ...] = ()
    resolved: Resolved | None = None
    """How a VM's instancetype was resolved (None: it names none, or a template's own)."""
    unseen: ObjectRef | None = None
    """A scaled pool or replica set the view does not hold: what it runs cannot be told."""


@dataclass(frozen=True, slots=True)
class Scaled:
    """A ``scale`` write that raises a pool's or replica set's replicas: the parent as the view
    holds it, with the new count (``parent`` None: not in the view, cannot tell)."""

    ref: ObjectRef
    parent: ReplicaSetInfo | PoolInfo | None


def _scale_replicas(scale: JSONObject | None) -> int:
    """An autoscaling/v1 Scale's spec.replicas (the API server fills it from the parent's
    specReplicasPath); absent is read as 0, the side that judges more."""
    spec = get_map(scale, "spec", "") if scale is not None else {}
    return get_int(spec, "replicas", "spec", 0)


def scaled(request: AdmissionRequest, view: ClusterView) -> Scaled | None:
    """The pool or VMIRS a Scale review raises the replicas of; None for any other request and
    for a count that does not grow (fewer VMs ask for nothing new). Every increase is judged,
    not only one from 0: the view may have changed since the parent was last judged (a
    provider gone, a permission removed), and the new VMs ask for their devices now."""
    kind = scaled_kind(request)
    if kind not in (VM_POOL, VM_REPLICA_SET):
        return None
    replicas = _scale_replicas(request.obj)
    if replicas <= _scale_replicas(request.old):
        return None
    ref = object_ref(kind, request.namespace, request.name)
    parent: ReplicaSetInfo | PoolInfo | None = (
        view.vm_pool(request.namespace, request.name)
        if kind == VM_POOL
        else view.vm_replica_set(request.namespace, request.name)
    )
    return Scaled(ref, None if parent is None else replace(parent, replicas=replicas))


def _template_asks(made: ReplicaSetInfo | PoolInfo, view: ClusterView) -> Asked | None:
    """What a replica set's or pool's VMs run with; None when it makes none that run."""
    if made.replicas <= 0:
        return None
    if isinstance(made, ReplicaSetInfo):
        return Asked(made.devices)
    if not made.vm.should_run:
        return None
    found = resolved(made.vm, view)
    return Asked(found.devices, (), found)


def asked_to_run(request: AdmissionRequest, view: ClusterView) -> Asked | None:
    """What the request's object will run with, or None when it runs nothing: a VM that should
    not run, a finished VMI, a replica set or pool of 0 replicas (or a pool whose VMs are made
    stopped). A paused one is judged: it runs when resumed. An instancetype asks for what it
    gives every VM created from now on that names it. A scale that raises a pool's or replica
    set's replicas asks for what the parent's template runs with (``scaled``)."""
    kind = request.group_kind
    if request.obj is None:
        return None
    if kind in VM_STARTING_REQUESTS:
        asks = vm_to_run(request)
        if isinstance(asks, VMInfo):
            found = resolved(asks, view)
            return Asked(found.devices, asks.conditions, found)
        return Asked(asks.devices, asks.conditions) if asks is not None else None
    if kind in (VM_REPLICA_SET, VM_POOL):
        made: ReplicaSetInfo | PoolInfo = request_projection(request)
        return _template_asks(made, view)
    if kind in (VM_INSTANCETYPE, VM_CLUSTER_INSTANCETYPE):
        instancetype: InstancetypeInfo = request_projection(request)
        return Asked(instancetype.devices)
    scale = scaled(request, view)
    if scale is None:
        return None
    if scale.parent is None:
        return Asked((), unseen=scale.ref)
    return _template_asks(scale.parent, view)


@dataclass(frozen=True, slots=True)
class VmToRun:
    """One VM that wants to run, named by ``ref``: a VirtualMachine, or a VMI no VM owns."""

    ref: ObjectRef
    asks: VMInfo | VMIInfo
    """What asks for the devices: the VM (its template), or the ownerless VMI."""
    instance: VMIInfo | None
    """The VM's VMI (any phase), or the ownerless VMI itself; None before KubeVirt made one."""
    devices: tuple[DeviceRequest, ...]
    """What it asks for: its own entries, and a VM's instancetype's (``resolved``)."""
    resolved: Resolved | None = None

    @property
    def conditions(self) -> tuple[Condition, ...]:
        """The conditions of what is named (the VM's own, or the VMI's)."""
        return self.asks.conditions


def wants_to_run(vm: VMInfo, instance: VMIInfo | None) -> bool:
    """Its run strategy starts it, or it was started (Manual) and its VMI lives, or its status
    says it is trying (a snapshot without VMIs still shows ErrorUnschedulable)."""
    return (
        vm.should_run
        or vm.printable_status == UNSCHEDULABLE_STATUS
        or (instance is not None and instance.live)
    )


def vms_to_run(view: ClusterView) -> Iterator[VmToRun]:
    """Every VM that wants to run, then every live VMI no VM owns (a VM speaks for its own VMI),
    in the view's order."""
    owned: dict[tuple[str, str], VMIInfo] = {}
    ownerless: list[VMIInfo] = []
    for vmi in view.vmis():
        if vmi.owner_vm:
            owned[(vmi.namespace, vmi.owner_vm)] = vmi
        elif vmi.live:
            ownerless.append(vmi)
    for vm in view.vms():
        instance = owned.get((vm.namespace, vm.name))
        if wants_to_run(vm, instance):
            found = resolved(vm, view)
            if found.unknown is not None and instance is not None and instance.live:
                found = Resolved(instance.devices)  # its VMI lists what it runs with
            ref = object_ref(VIRTUAL_MACHINE, vm.namespace, vm.name)
            yield VmToRun(ref, vm, instance, found.devices, found)
    for vmi in ownerless:
        ref = object_ref(VIRTUAL_MACHINE_INSTANCE, vmi.namespace, vmi.name)
        yield VmToRun(ref, vmi, vmi, vmi.devices)

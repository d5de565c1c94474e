"""The VMs KubeVirt will try to start: a VirtualMachine that should run (its run strategy),
one that was started or is trying to (a live VMI, ErrorUnschedulable), a live
VirtualMachineInstance. What such a VM asks for (devices, providers, permissions) is what the VM
policies judge, at admission for the one in a request and in the audit, with the diagnoses, for
all of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from policies.cluster.conditions import Condition
from policies.cluster.kinds import VIRTUAL_MACHINE, VIRTUAL_MACHINE_INSTANCE, object_ref
from policies.cluster.kubevirt import DeviceRequest, VMIInfo, VMInfo
from policies.cluster.projections import request_projection
from policies.cluster.view import ClusterView
from policies.vocabulary.requests import AdmissionRequest, ObjectRef

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


@dataclass(frozen=True, slots=True)
class VmToRun:
    """One VM that wants to run, named by ``ref``: a VirtualMachine, or a VMI no VM owns."""

    ref: ObjectRef
    asks: VMInfo | VMIInfo
    """What asks for the devices: the VM (its template), or the ownerless VMI."""
    instance: VMIInfo | None
    """The VM's VMI (any phase), or the ownerless VMI itself; None before KubeVirt made one."""

    @property
    def devices(self) -> tuple[DeviceRequest, ...]:
        return self.asks.devices

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
            yield VmToRun(object_ref(VIRTUAL_MACHINE, vm.namespace, vm.name), vm, instance)
    for vmi in ownerless:
        yield VmToRun(object_ref(VIRTUAL_MACHINE_INSTANCE, vmi.namespace, vmi.name), vmi, vmi)

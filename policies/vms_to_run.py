"""The VMs KubeVirt will try to start: a VirtualMachine that should run (its run strategy),
a live VirtualMachineInstance. What such a VM asks for (devices, providers, permissions) is what
the VM policies judge, at admission for the one in a request and in the audit for all of them.
"""

from __future__ import annotations

from collections.abc import Iterator

from policies.kinds import VIRTUAL_MACHINE, VIRTUAL_MACHINE_INSTANCE, object_ref
from policies.model import AdmissionRequest, ObjectRef
from policies.objects import VMIInfo, VMInfo
from policies.projections import request_projection
from policies.view import ClusterView


def vm_to_run(request: AdmissionRequest) -> VMInfo | VMIInfo | None:
    """The request's VM if it should run, or its VMI if live; None otherwise (or on DELETE)."""
    if request.obj is None:
        return None
    if request.group_kind == VIRTUAL_MACHINE:
        vm: VMInfo = request_projection(request)
        return vm if vm.should_run else None
    vmi: VMIInfo = request_projection(request)
    return vmi if vmi.live else None


def vms_to_run(view: ClusterView) -> Iterator[tuple[ObjectRef, VMInfo | VMIInfo]]:
    """Every VM that should run and every live VMI no VM owns (its VM speaks for it), that asks
    for devices, with a reference to name it by."""
    for vm in view.vms():
        if vm.should_run and vm.devices:
            yield object_ref(VIRTUAL_MACHINE, vm.namespace, vm.name), vm
    for vmi in view.vmis():
        if vmi.live and vmi.devices and not vmi.owner_vm:
            yield object_ref(VIRTUAL_MACHINE_INSTANCE, vmi.namespace, vmi.name), vmi

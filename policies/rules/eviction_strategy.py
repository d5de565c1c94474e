"""evictionstrategy-not-migratable: a GPU VM that promises a live migration it cannot do.

A VMI with gpus or hostDevices gets LiveMigratable=False (HostDeviceNotLiveMigratable), whether
they name a deviceName or a DRA claim (VMIs with DRA devices do not live-migrate). With an
effective evictionStrategy of LiveMigrate (its own, else the KubeVirt CR's cluster-wide default)
the eviction of its launcher pod is refused until a migration that never comes: every drain of
its node hangs, a permanent drain blocker. (The opt-in mutation set-eviction-none-on-gpu-vms
fixes it on the way in; this policy says so when that mutation is off.)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from policies.cluster.coverage import ASKED_TO_RUN_READS
from policies.cluster.kinds import (
    KUBEVIRT,
    SCALE,
    VIRTUAL_MACHINE,
    VIRTUAL_MACHINE_INSTANCE,
    VM_POOL,
    VM_REPLICA_SET,
    object_ref,
)
from policies.cluster.kubevirt import (
    LIVE_MIGRATE,
    VM_STARTING_REQUESTS,
    DeviceRequest,
    KubeVirtInfo,
    VMIInfo,
    VMInfo,
    effective_eviction_strategy,
)
from policies.cluster.projections import request_projection
from policies.cluster.view import ClusterView
from policies.cluster.vm_templates import PoolInfo, ReplicaSetInfo
from policies.cluster.vms_to_run import resolved, scaled
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest, ObjectRef
from policies.vocabulary.text import few
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "evictionstrategy-not-migratable"
VM_FIELD = "spec.template.spec.evictionStrategy"
VMI_FIELD = "spec.evictionStrategy"
#: Where the templates of a replica set of VMIs and of a pool of VMs say it.
TEMPLATE_FIELDS = {
    VM_REPLICA_SET: VM_FIELD,
    VM_POOL: "spec.virtualMachineTemplate.spec.template.spec.evictionStrategy",
}


def judge(
    devices: Sequence[DeviceRequest], own: str, kubevirt: KubeVirtInfo | None, field: str
) -> Finding | None:
    if not devices or effective_eviction_strategy(own, kubevirt) != LIVE_MIGRATE:
        return None
    if own:
        source = "its own"
    else:
        assert kubevirt is not None
        source = f"the cluster default of KubeVirt {kubevirt.namespace}/{kubevirt.name}"
    names = sorted({d.label for d in devices})
    message = (
        f"evictionStrategy LiveMigrate ({source}) but {few(names)} cannot live-migrate "
        f"(HostDeviceNotLiveMigratable): a drain of its node hangs forever. Set {field}: None."
    )
    return Finding(
        message,
        chain=(
            f"evictionStrategy LiveMigrate ({source})",
            "host devices: LiveMigratable=False (HostDeviceNotLiveMigratable)",
            "eviction refused until a migration that never comes: the drain hangs",
        ),
        remediation=(
            f"set {field}: None (the drain stops the VM) or LiveMigrateIfPossible",
            "stop the VM yourself before draining its node",
        ),
    )


def _template(made: ReplicaSetInfo | PoolInfo, view: ClusterView) -> Sequence[Finding]:
    """A replica set or pool with replicas: each VMI or VM it makes would block drains."""
    if made.replicas <= 0:
        return ()
    if isinstance(made, PoolInfo):
        devices, own = resolved(made.vm, view).devices, made.vm.eviction_strategy
        field = TEMPLATE_FIELDS[VM_POOL]
    else:
        devices, own, field = made.devices, made.eviction_strategy, TEMPLATE_FIELDS[VM_REPLICA_SET]
    finding = judge(devices, own, view.kubevirt(), field)
    return () if finding is None else (finding,)


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    obj = request.obj
    if obj is None:
        return ()
    if request.group_kind in TEMPLATE_FIELDS:
        return _template(request_projection(request), view)
    if request.group_kind == SCALE:  # a pool's or VMIRS's replicas raised: its template's VMs
        scale = scaled(request, view)
        parent = scale.parent if scale is not None else None
        return () if parent is None else _template(parent, view)
    info: VMInfo | VMIInfo = request_projection(request)
    field = VM_FIELD if request.group_kind == VIRTUAL_MACHINE else VMI_FIELD
    devices = resolved(info, view).devices if isinstance(info, VMInfo) else info.devices
    finding = judge(devices, info.eviction_strategy, view.kubevirt(), field)
    return () if finding is None else (finding,)


def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
    """VMs whose template says LiveMigrate, and live VMIs that say it when their VM does not
    (a running VMI keeps the strategy it started with)."""
    kubevirt = view.kubevirt()
    flagged: set[str] = set()
    for vm in view.vms():
        devices = resolved(vm, view).devices  # its instancetype's too
        finding = judge(devices, vm.eviction_strategy, kubevirt, VM_FIELD)
        if finding is not None:
            flagged.add(vm.key)
            yield object_ref(VIRTUAL_MACHINE, vm.namespace, vm.name), finding
    for vmi in view.vmis():
        if not vmi.live:
            continue
        owner = f"{vmi.namespace}/{vmi.owner_vm}" if vmi.owner_vm else ""
        if owner in flagged:
            continue
        finding = judge(vmi.devices, vmi.eviction_strategy, kubevirt, VMI_FIELD)
        if finding is not None:
            yield object_ref(VIRTUAL_MACHINE_INSTANCE, vmi.namespace, vmi.name), finding


POLICY = Policy(
    id=ID,
    summary=(
        "A VirtualMachine or VirtualMachineInstance (or a VirtualMachineInstanceReplicaSet or "
        "VirtualMachinePool with replicas) with gpus or hostDevices whose effective "
        "evictionStrategy (its own, else the KubeVirt CR's spec.configuration.evictionStrategy) "
        "is LiveMigrate: it can't migrate, so it blocks every drain of its node."
    ),
    scope={
        **VM_STARTING_REQUESTS,
        **{kind: frozenset({CREATE, UPDATE}) for kind in TEMPLATE_FIELDS},
    },
    default_action=Action.WARN,
    default_reason=(
        "The VM runs fine until someone drains its node, and whether to stop it on a drain is "
        "the owner's choice: say it at apply time, do not block."
    ),
    failure_action=Action.WARN,
    check=check,
    audit=audit,
    reads=ASKED_TO_RUN_READS | {KUBEVIRT},
)

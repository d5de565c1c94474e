"""The VMs that want to run and what stops them, once per audit: the vm-unschedulable diagnosis
reports them, the node diagnoses and the overview count the ones that wait for a node."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from policies.cluster.conditions import Condition, find_condition
from policies.cluster.coverage import PROVIDER_READS, VMS_TO_RUN_READS
from policies.cluster.device_providers import DeviceProblem, device_problem
from policies.cluster.kinds import KUBEVIRT
from policies.cluster.kubevirt import DeviceRequest, KubeVirtInfo, VMIInfo
from policies.cluster.view import AuditView, ClusterView
from policies.cluster.vms_to_run import VmToRun, vms_to_run
from policies.vocabulary.requests import ObjectRef


def stuck_condition(*condition_sets: tuple[Condition, ...]) -> Condition | None:
    """The earliest PodScheduled=False among the VM's and its VMI's conditions."""
    found: Condition | None = None
    for conditions in condition_sets:
        scheduled = find_condition(conditions, "PodScheduled")
        if scheduled is None or scheduled.status != "False":
            continue
        if found is None or (
            scheduled.last_transition is not None
            and (found.last_transition is None or scheduled.last_transition < found.last_transition)
        ):
            found = scheduled
    return found


@dataclass(frozen=True, slots=True)
class Workload:
    """A VM (or an ownerless VMI) that wants to run, with what the audit needs of it."""

    ref: ObjectRef
    status: str
    """What the user sees ("ErrorUnschedulable", "Pending", "not running")."""
    stuck: Condition | None
    """PodScheduled=False: the scheduler refuses it (the earliest, VM's or VMI's)."""
    problems: tuple[DeviceProblem, ...]
    """Per distinct deviceName that no healthy node provides, why."""
    provided: tuple[DeviceRequest, ...]
    """The distinct deviceNames healthy nodes do provide."""

    @property
    def since(self) -> datetime | None:
        return self.stuck.last_transition if self.stuck is not None else None


def _workload(vm: VmToRun, view: ClusterView, kubevirt: KubeVirtInfo | None) -> Workload:
    asks, instance = vm.asks, vm.instance
    if isinstance(asks, VMIInfo):
        status = asks.phase or "Pending"
        stuck = stuck_condition(asks.conditions)
    else:
        phase = instance.phase if instance is not None else ""
        status = asks.printable_status or phase or "not running"
        stuck = stuck_condition(asks.conditions, instance.conditions if instance else ())
    problems: list[DeviceProblem] = []
    provided: list[DeviceRequest] = []
    seen: set[str] = set()
    for device in vm.devices:
        if not device.device_name or device.device_name in seen:
            continue
        seen.add(device.device_name)
        problem = device_problem(device, view, kubevirt)
        if problem is not None:
            problems.append(problem)
        else:
            provided.append(device)
    return Workload(vm.ref, status, stuck, tuple(problems), tuple(provided))


#: What ``workloads_of`` and ``waiting_vms`` read: the VMs to run, the KubeVirt CR and who
#: provides the devices they ask for.
WORKLOADS_READS = VMS_TO_RUN_READS | PROVIDER_READS | {KUBEVIRT}


def workloads_of(view: AuditView) -> tuple[Workload, ...]:
    """Every VM that wants to run (``vms_to_run``), by namespace, name and kind."""

    def scan() -> tuple[Workload, ...]:
        wanting = sorted(
            vms_to_run(view.cluster), key=lambda w: (w.ref.namespace, w.ref.name, w.ref.kind)
        )
        kubevirt = view.cluster.kubevirt()
        return tuple(_workload(vm, view.cluster, kubevirt) for vm in view.track(wanting, "VMs"))

    return view.once(workloads_of, scan)


def waiting_vms(view: AuditView) -> Mapping[str, tuple[str, ...]]:
    """Node -> the VMs that wait for it: it advertises a device they need that no healthy node
    provides, so they run again only when it does."""

    def scan() -> dict[str, tuple[str, ...]]:
        waiting: dict[str, set[str]] = {}
        for w in workloads_of(view):
            for problem in w.problems:
                for provider in problem.providers:
                    waiting.setdefault(provider, set()).add(str(w.ref))
        return {node: tuple(sorted(vms)) for node, vms in waiting.items()}

    return view.once(waiting_vms, scan)

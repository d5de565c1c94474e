"""passthrough-without-ready-provider: a VM that asks for a device no healthy node provides.

A passthrough VM is nailed to the nodes that hold its physical device: virt-controller asks the
scheduler for one unit of the deviceName, and with no Ready, schedulable, untainted provider the
VM sits in ErrorUnschedulable indefinitely (the 112 days of docs/field-guide.md section 1). Stale
allocatable on a dead node looks like a provider; only node health tells the difference.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import datetime

from policies.cluster.conditions import Condition, find_condition
from policies.cluster.coverage import ASKED_TO_RUN_READS, PROVIDER_READS
from policies.cluster.device_providers import DeviceProblem, device_problem
from policies.cluster.kinds import (
    CLUSTER_POLICY,
    KUBEVIRT,
    RESOURCE_OF,
)
from policies.cluster.kubevirt import DeviceRequest, InstancetypeRef
from policies.cluster.view import ClusterView
from policies.cluster.vms_to_run import (
    VM_DEVICE_REQUESTS,
    VM_DEVICE_SUBJECTS,
    Resolved,
    asked_to_run,
    vms_to_run,
)
from policies.vocabulary.requests import AdmissionRequest, ObjectRef
from policies.vocabulary.text import few, plural
from policies.vocabulary.verdicts import Action, Finding, Policy, Severity

ID = "passthrough-without-ready-provider"


def unschedulable_since(conditions: tuple[Condition, ...]) -> datetime | None:
    """When the scheduler last started refusing the VM's pod, from its own conditions."""
    scheduled = find_condition(conditions, "PodScheduled")
    if scheduled is not None and scheduled.status == "False":
        return scheduled.last_transition
    return None


def problem_finding(problem: DeviceProblem) -> Finding:
    """The policy's finding: the message admission and the audit show for the device."""
    name, device = problem.name, problem.device
    reasons: list[str] = []
    chain: list[str] = [f"needs {name}"]
    remediation: list[str] = []
    since: datetime | None = None
    for provider, health in problem.shown:
        reasons.append(f"{provider} advertises it but is {health.describe()}")
        chain.append(f"{provider}: {health.describe()}")
        remediation.append(
            f"find why {provider} is not Ready (journalctl -u kubelet there), fix it"
        )
        if health.since is not None and (since is None or health.since < since):
            since = health.since
    if problem.more:
        verb = "is" if problem.more == 1 else "are"
        reasons.append(f"{plural(problem.more, 'more provider')} {verb} unhealthy too")
    if not problem.providers:
        reasons.append("no node advertises it")
        chain.append("no node advertises it")
        if problem.suggestions:
            why = "names are case-sensitive"
            if problem.profiles is not None and problem.profiles.meant:
                why = problem.profiles.why(name)
            reasons[-1] += f"; did you mean {few(problem.suggestions)}? ({why})"
            remediation.append(f"set deviceName to {problem.suggestions[0]}")
        elif problem.profiles is not None:
            remediation.append(problem.profiles.remedy(name))
        else:
            remediation.append(
                f"check the deviceName, or add a node whose hardware provides {name}"
            )
        if problem.profiles is not None:
            reasons.append(problem.profiles.offered())
            chain.append(problem.profiles.offered())
    reasons.extend(problem.permission)
    message = f"{name} ({device.field}[{device.name}]): {'; '.join(reasons)}"
    if problem.providers:
        message += "; the VM stays unschedulable until a provider is Ready"
    return Finding(
        message, since=since, chain=tuple(chain), remediation=tuple(remediation), device=name
    )


def judge(
    devices: Sequence[DeviceRequest], conditions: tuple[Condition, ...], view: ClusterView
) -> list[Finding]:
    """One finding per distinct deviceName that no healthy node provides."""
    kubevirt = view.kubevirt()
    stuck_since = unschedulable_since(conditions)
    findings = []
    seen: set[str] = set()
    for device in devices:
        if not device.device_name or device.device_name in seen:
            continue
        seen.add(device.device_name)
        problem = device_problem(device, view, kubevirt)
        if problem is not None:
            finding = problem_finding(problem)
            if stuck_since is not None:
                finding = replace(finding, since=stuck_since)
            findings.append(finding)
    return findings


def unknown_instancetype(found: Resolved | None) -> list[Finding]:
    """A VM names an instancetype whose devices gpu-guard cannot tell: not in its view, or
    changed since KubeVirt copied it for the VM. Said, rather than nothing (a GPU may hide
    there)."""
    ref = found.unknown if found is not None else None
    if found is None or ref is None:
        return []
    if found.outdated:
        return [
            Finding(
                f"{ref.label} changed after KubeVirt copied it for this VM (ControllerRevision "
                f"{ref.revision}): the gpus and hostDevices the VM runs with go unjudged. Check "
                "them in that revision.",
                remediation=(f"kubectl get controllerrevision {ref.revision} -o yaml",),
            )
        ]
    return [
        Finding(
            f"{ref.label} (spec.instancetype) is not in gpu-guard's view: the gpus and "
            "hostDevices it gives go unjudged. Check that it exists and that gpu-guard can read "
            "it.",
            remediation=(f"kubectl get {_plural(ref)} {ref.name}",),
        )
    ]


def unseen_parent(ref: ObjectRef | None) -> list[Finding]:
    """A scale raises the replicas of a pool or replica set gpu-guard does not hold: the
    devices its new VMs ask for cannot be told (never all clear)."""
    if ref is None:
        return []
    return [
        Finding(
            f"{ref.kind} {ref} is not in gpu-guard's view: the gpus and hostDevices of the "
            "replicas this scale adds go unjudged. Check that gpu-guard can read it.",
            remediation=(f"kubectl get {ref.kind.lower()} -n {ref.namespace} {ref.name}",),
        )
    ]


def _plural(ref: InstancetypeRef) -> str:
    """Its kind as kubectl names it: the REST plural (the written kind when KubeVirt knows none)."""
    if ref.kind is None:
        return ref.written_kind.lower()
    return f"{RESOURCE_OF[ref.kind].plural}.{ref.kind.group}"


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    vm = asked_to_run(request, view)
    if vm is None:
        return ()
    return [
        *unknown_instancetype(vm.resolved),
        *unseen_parent(vm.unseen),
        *judge(vm.devices, vm.conditions, view),
    ]


def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
    """VMs that want to run, and VMIs no VM owns, whose devices have no healthy provider (or
    whose instancetype's devices cannot be told)."""
    for vm in vms_to_run(view):
        for finding in unknown_instancetype(vm.resolved):
            yield vm.ref, finding
        for finding in judge(vm.devices, vm.conditions, view):
            yield vm.ref, finding


POLICY = Policy(
    id=ID,
    summary=(
        f"{VM_DEVICE_SUBJECTS} asks in gpus[] or hostDevices[] for a deviceName that no "
        "Ready, schedulable, untainted node advertises."
    ),
    scope=VM_DEVICE_REQUESTS,
    default_action=Action.WARN,
    default_reason=(
        "The object is valid and may become schedulable when the provider returns; the user "
        "needs to know now, not be blocked."
    ),
    failure_action=Action.WARN,
    check=check,
    audit=audit,
    reads=ASKED_TO_RUN_READS | PROVIDER_READS | {CLUSTER_POLICY, KUBEVIRT},
    audit_severity=Severity.HIGH,
)

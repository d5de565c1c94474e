"""passthrough-without-ready-provider: a VM that asks for a device no healthy node provides.

A passthrough VM is nailed to the nodes that hold its physical device: virt-controller asks the
scheduler for one unit of the deviceName, and with no Ready, schedulable, untainted provider the
VM sits in ErrorUnschedulable indefinitely (the 112 days of docs/field-guide.md section 1). Stale
allocatable on a dead node looks like a provider; only node health tells the difference.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from policies.feature_gates import gate_off, turn_on_steps
from policies.health import NodeHealth, node_health
from policies.kinds import KUBEVIRT, NODE
from policies.model import Action, AdmissionRequest, Finding, ObjectRef, Policy, Severity
from policies.objects import (
    VM_STARTING_REQUESTS,
    Condition,
    DeviceRequest,
    KubeVirtInfo,
    find_condition,
)
from policies.text import few
from policies.view import ClusterView
from policies.vms_to_run import vm_to_run, vms_to_run

ID = "passthrough-without-ready-provider"
SHOWN_PROVIDERS = 3


def unschedulable_since(conditions: tuple[Condition, ...]) -> datetime | None:
    """When the scheduler last started refusing the VM's pod, from its own conditions."""
    scheduled = find_condition(conditions, "PodScheduled")
    if scheduled is not None and scheduled.status == "False":
        return scheduled.last_transition
    return None


def did_you_mean(name: str, view: ClusterView, kubevirt: KubeVirtInfo | None) -> list[str]:
    """Names that differ only in case, or that pci.ids maps to the same device (raw id vs name)."""
    candidates = set(view.advertised_like(name))
    if kubevirt is not None:
        folded = name.casefold()
        candidates.update(r for r in kubevirt.permitted_resource_names if r.casefold() == folded)
    for pci in view.pci_database.ids_for_resource_name(name):
        candidates.update(view.advertised_for_pci(pci))
    candidates.discard(name)
    return sorted(candidates)


def permission_problems(device: DeviceRequest, kubevirt: KubeVirtInfo | None) -> list[str]:
    if kubevirt is None:
        return []
    problems = []
    if not kubevirt.permits(device):
        problems.append("not in permittedHostDevices, so KubeVirt will refuse to start it")
    gate = kubevirt.lacks_gate_for(device)
    if gate is not None:
        problems.append(
            f"hostDevices need the {gate.gate} feature gate, which KubeVirt {gate_off(gate)}"
        )
    return problems


def permission_steps(device: DeviceRequest, kubevirt: KubeVirtInfo | None) -> list[str]:
    """The remediation of ``permission_problems``: permit the device, turn its gate on."""
    if kubevirt is None:
        return []
    steps = []
    if not kubevirt.permits(device):
        steps.append(f"permit {device.device_name} in the KubeVirt CR's permittedHostDevices")
    gate = kubevirt.lacks_gate_for(device)
    if gate is not None:
        steps.extend(turn_on_steps([gate], f"KubeVirt {kubevirt.namespace}/{kubevirt.name}"))
    return steps


@dataclass(frozen=True, slots=True)
class DeviceProblem:
    """Why no healthy node provides a device: what the policy's message and the audit's
    vm-unschedulable diagnosis both tell, computed once by ``device_problem``."""

    device: DeviceRequest
    providers: tuple[str, ...]
    """Every node that advertises it (none is a healthy provider)."""
    shown: tuple[tuple[str, NodeHealth], ...]
    """The first ``SHOWN_PROVIDERS`` of them, with their health."""
    suggestions: tuple[str, ...]
    """When none advertises it: names it may have meant (case, or pci.ids)."""
    permission: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.device.device_name

    @property
    def more(self) -> int:
        """Providers beyond the shown ones."""
        return max(0, len(self.providers) - SHOWN_PROVIDERS)


def device_problem(
    device: DeviceRequest, view: ClusterView, kubevirt: KubeVirtInfo | None
) -> DeviceProblem | None:
    """None when a healthy node provides ``device``; else who advertises it and in what health."""
    name = device.device_name
    if view.healthy_provider_count(name) > 0:
        return None
    providers = tuple(view.providers_of(name))
    shown = []
    for provider in providers[:SHOWN_PROVIDERS]:
        node = view.node(provider)
        if node is not None:
            shown.append((provider, node_health(node)))
    suggestions = () if providers else tuple(did_you_mean(name, view, kubevirt))
    permission = tuple(permission_problems(device, kubevirt))
    return DeviceProblem(device, providers, tuple(shown), suggestions, permission)


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
        reasons.append(f"{problem.more} more providers are unhealthy too")
    if not problem.providers:
        reasons.append("no node advertises it")
        chain.append("no node advertises it")
        if problem.suggestions:
            reasons[-1] += f"; did you mean {few(problem.suggestions)}? (names are case-sensitive)"
            remediation.append(f"set deviceName to {problem.suggestions[0]}")
        else:
            remediation.append(
                f"check the deviceName, or add a node whose hardware provides {name}"
            )
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


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    vm = vm_to_run(request)
    return judge(vm.devices, vm.conditions, view) if vm is not None else ()


def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
    """VMs that want to run, and VMIs no VM owns, whose devices have no healthy provider."""
    for vm in vms_to_run(view):
        for finding in judge(vm.devices, vm.conditions, view):
            yield vm.ref, finding


POLICY = Policy(
    id=ID,
    summary=(
        "A VirtualMachine that should run, or a new VirtualMachineInstance, asks in gpus[] or "
        "hostDevices[] for a deviceName that no Ready, schedulable, untainted node advertises."
    ),
    scope=VM_STARTING_REQUESTS,
    default_action=Action.WARN,
    default_reason=(
        "The object is valid and may become schedulable when the provider returns; the user "
        "needs to know now, not be blocked."
    ),
    failure_action=Action.WARN,
    check=check,
    audit=audit,
    reads=frozenset({NODE, KUBEVIRT}),
    audit_severity=Severity.HIGH,
)

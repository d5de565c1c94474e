"""vm-unschedulable: a VM that wants to run and cannot; the chain names the resource, the
providers and their health, and the repair starts on the provider easiest to revive.

Why a device has no healthy provider is ``passthrough_provider.device_problem``'s answer (the
policy's own): a VM finding about such a device explains that policy's verdict on the same VM
and device, so the audit reports it once, under the policy's id, with this chain.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from policies.cluster.device_class import device_class, unadvertised_fix
from policies.cluster.device_providers import DeviceProblem, permission_problems, permission_steps
from policies.cluster.kubevirt import DeviceRequest
from policies.cluster.view import AuditView, ClusterView
from policies.diagnoses.chains import age, for_how_long, node_links, scheduler_link
from policies.diagnoses.facts import NODE_FACTS_READS, NodeFacts, node_facts_of
from policies.diagnoses.repair import repair_steps
from policies.diagnoses.workloads import WORKLOADS_READS, Workload, workloads_of
from policies.vocabulary.audit import Diagnosis, DiagnosisFinding, Link
from policies.vocabulary.text import few, plural
from policies.vocabulary.verdicts import Action, Severity

VM_UNSCHEDULABLE = "vm-unschedulable"
#: The policy whose verdict these findings explain (policies/rules/passthrough_provider.py).
PASSTHROUGH_WITHOUT_READY_PROVIDER = "passthrough-without-ready-provider"


@dataclass
class _Capacity:
    total: int = 0
    used: int = 0
    holders: list[str] = field(default_factory=list)


class _VmDiagnoser:
    """The per-audit state one run of the diagnosis shares across VMs: facts, capacities."""

    def __init__(self, view: AuditView, now: datetime) -> None:
        self.cluster: ClusterView = view.cluster
        self.now = now
        self.facts: Mapping[str, NodeFacts] = node_facts_of(view)
        self.kubevirt = self.cluster.kubevirt()
        self.capacity: dict[str, _Capacity] = {}

    def diagnose(self, w: Workload) -> list[DiagnosisFinding]:
        """Per device without a healthy provider one finding; else one if the VM is stuck."""
        out = [self._no_healthy_provider(w, problem) for problem in w.problems]
        if not out and w.stuck is not None:
            out.append(self._stuck_anyway(w, w.provided))
        return out

    def _root(self, w: Workload, children: Sequence[Link]) -> Link:
        text = f"{w.ref.kind} {w.ref}: {w.status}{for_how_long(w.since, self.now)}"
        return Link(text, tuple(children) + tuple(scheduler_link(w.stuck)))

    def _status_for(self, w: Workload, since: datetime | None) -> str:
        """ "ErrorUnschedulable for 112 days 8 hours" """
        return w.status + (f" for {age(self.now - since)}" if since is not None else "")

    def _no_healthy_provider(self, w: Workload, problem: DeviceProblem) -> DiagnosisFinding:
        name, device = problem.name, problem.device
        providers = problem.providers
        where = f"{device.field}[{device.name}]"
        since = w.since
        if providers:
            if len(providers) == 1:
                who = f"only {providers[0]} advertises it, and it is not a healthy provider"
            else:
                who = f"{few(providers)} advertise it, and none is a healthy provider"
            head = f"needs {name} ({where}): {who}; a passthrough VM cannot run anywhere else"
            provider_links: list[Link] = []
            for provider, _health in problem.shown:
                f = self.facts.get(provider)
                if f is None:
                    continue
                provider_links.append(node_links(f, self.now, prefix=f"{provider}: "))
                if since is None:
                    since = f.not_ready_since
            if problem.more:
                provider_links.append(Link(plural(problem.more, "more unhealthy provider")))
            links = [Link(head, tuple(provider_links))]
            if len(providers) == 1 and problem.shown:
                (only, health), *_ = problem.shown
                reason = f"only {only} advertises it, and {only} is {health.describe()}"
            else:
                reason = who
            remediation = self._provider_repair(w, name, providers)
        else:
            head = f"needs {name} ({where}): no node advertises it"
            suggestions = problem.suggestions
            children: list[Link] = []
            if suggestions:
                children.append(
                    Link(f"did you mean {few(suggestions)}? resource names are case-sensitive")
                )
                remediation = [f"set deviceName to {suggestions[0]} in {w.ref.kind} {w.ref}"]
            else:
                kind = device_class(name, self.kubevirt, self.cluster.pci_database)
                remediation = [unadvertised_fix(name, kind)]
            children.extend(Link(f"{name}: {p}") for p in problem.permission)
            if problem.profiles is not None:
                children.append(Link(problem.profiles.offered()))
            links = [Link(head, tuple(children))]
            reason = "no node advertises it" + (
                f"; did you mean {few(suggestions)}?" if suggestions else ""
            )
            if problem.profiles is not None:
                reason += f"; {problem.profiles.offered()}"
        return DiagnosisFinding(
            resource=w.ref,
            message=f"{self._status_for(w, since)}: needs {name}; {reason}",
            chain=self._root(w, links),
            since=since,
            remediation=tuple(remediation),
            device=name,
            explains=PASSTHROUGH_WITHOUT_READY_PROVIDER,
        )

    def _provider_repair(self, w: Workload, name: str, providers: Sequence[str]) -> list[str]:
        known = [self.facts[p] for p in providers if p in self.facts]
        if not known:
            return [f"bring back a provider of {name}: {few(list(providers))}"]
        # The easiest provider to revive first: no trap to defuse, then by name.
        first = min(known, key=lambda f: (f.trapped, f.name))
        steps: list[str] = []
        if len(known) > 1:
            steps.append(f"any one of {few([f.name for f in known])} would do; {first.name}:")
        steps.extend(repair_steps(first, [str(w.ref)]))
        steps.append(
            f"{w.ref} then schedules by itself once {first.name} advertises {name} again; "
            f"watch: kubectl get vmi -n {w.ref.namespace} {w.ref.name} -w"
        )
        return steps

    def _capacity_of(self, name: str) -> _Capacity:
        """Units of ``name`` on healthy providers, and who holds them (unfinished pods)."""
        cached = self.capacity.get(name)
        if cached is not None:
            return cached
        cap = _Capacity()
        for provider in self.cluster.providers_of(name):
            f = self.facts.get(provider)
            if f is None or not f.health.healthy:
                continue
            cap.total += self.cluster.resources_provided_on(provider).get(name, 0)
            for pod in self.cluster.pods_on(provider):
                held = pod.extended.get(name, 0)
                if held and not pod.finished:
                    cap.used += held
                    cap.holders.append(pod.key)
        self.capacity[name] = cap
        return cap

    def _stuck_anyway(self, w: Workload, devices: Sequence[DeviceRequest]) -> DiagnosisFinding:
        """Stuck although every device has a healthy provider: capacity, or something else."""
        links: list[Link] = []
        remediation: list[str] = []
        reasons: list[str] = []
        free: list[str] = []
        for device in devices:
            name = device.device_name
            cap = self._capacity_of(name)
            healthy = plural(self.cluster.healthy_provider_count(name), "healthy provider")
            if cap.total and cap.used >= cap.total:
                text = (
                    f"needs {name}: all {cap.total} units on {healthy} are in use "
                    f"({few(cap.holders)})"
                )
                reasons.append(f"every {name} is in use")
                remediation.append(
                    f"free a unit of {name} (stop a VM that holds one) or add a node with one"
                )
            else:
                left = max(0, cap.total - cap.used)
                text = f"needs {name}: {healthy}, {left} of {cap.total} units free"
                free.append(f"{name} has {left} free on {healthy}")
            permission = permission_problems(device, self.kubevirt)
            if permission:
                reasons.append(f"{name}: {'; '.join(permission)}")
                remediation.extend(permission_steps(device, self.kubevirt))
            links.append(Link(text, tuple(Link(f"{name}: {p}") for p in permission)))
        if not reasons:
            said = scheduler_link(w.stuck)
            refusal = "the scheduler refuses it" + (
                f" ({said[0].text.removeprefix('scheduler: ')})" if said else ""
            )
            reasons.append("; ".join([*free, refusal]) if free else refusal)
            remediation.append(
                f"kubectl describe vmi -n {w.ref.namespace} {w.ref.name}: the scheduler's "
                "events say which constraint no node meets (node selectors, affinity, taints, "
                "CPU or memory)"
            )
        return DiagnosisFinding(
            resource=w.ref,
            message=f"{self._status_for(w, w.since)}: {'; '.join(reasons)}",
            chain=self._root(w, links),
            since=w.since,
            remediation=tuple(remediation),
        )


def _diagnose(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    diagnoser = _VmDiagnoser(view, now)
    for workload in workloads_of(view):
        yield from diagnoser.diagnose(workload)


VM_UNSCHEDULABLE_DIAGNOSIS = Diagnosis(
    id=VM_UNSCHEDULABLE,
    summary=(
        "A VM that should run cannot be scheduled; the chain names the resource, the providers "
        "and their health. Reported under passthrough-without-ready-provider when that policy "
        "already flags the VM and device."
    ),
    default_action=Action.WARN,
    default_severity=Severity.HIGH,
    reason="The VM is down; the cause is usually elsewhere (a node, a name), so say where.",
    diagnose=_diagnose,
    reads=NODE_FACTS_READS | WORKLOADS_READS,
)

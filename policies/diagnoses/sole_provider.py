"""sole-provider: a node whose failure would strand workloads, said while everything is green.

The 112-day incident was predictable on day zero: two VMs needed a GPU that exactly one node
had. A VM that should run, a running VMI, or a pod holding a GPU, whose device exactly one
healthy node (``policies.cluster.health``) can provide, has nowhere else to go when that node fails
or is drained. What counts as providing is what the other checks use: for a deviceName or a pod's
resource limit, ``ClusterView.healthy_provider_count``/``providers_of`` (device plugins and DRA
classes with that extendedResourceName alike); for a DRA claim, the Ready nodes where all its
requests fit together (``policies.cluster.claim_fit.fitting_nodes``, devices others hold not
subtracted: the question is where it could run, not where it could run this minute).

One finding per sole-provider node, naming every workload that depends on it. Nothing where a
second healthy provider exists, and nothing where no healthy one does: that is already broken,
and the node and VM diagnoses say so.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from policies.cluster.claim_fit import fitting_nodes
from policies.cluster.coverage import (
    CLAIM_FIT_READS,
    GPU_USERS_READS,
    PROVIDER_READS,
    VMS_TO_RUN_READS,
)
from policies.cluster.dra_claims import ClaimRef, ClaimRequest
from policies.cluster.gpu_users import GpuUser, gpu_users_on
from policies.cluster.health import node_health, sole_healthy_provider
from policies.cluster.kinds import (
    NODE,
    POD,
    RESOURCE_CLAIM_TEMPLATE,
    object_ref,
)
from policies.cluster.pods import launched_vmi
from policies.cluster.view import AuditView, ClusterView
from policies.cluster.vms_to_run import VmToRun, vms_to_run
from policies.vocabulary.audit import Diagnosis, DiagnosisFinding, Link
from policies.vocabulary.requests import ObjectRef
from policies.vocabulary.text import few
from policies.vocabulary.verdicts import Action, Severity

SOLE_PROVIDER = "sole-provider"


@dataclass(frozen=True, slots=True)
class _Dependant:
    """A workload that has one place to run."""

    ref: ObjectRef
    running: bool
    """A running VMI or a pod holding GPUs now: the node failing stops it."""
    status: str
    """ "Running on tower1", "should run, not running"."""

    @property
    def label(self) -> str:
        return f"{self.ref.kind} {self.ref}: {self.status}"


@dataclass(frozen=True, slots=True, order=True)
class _Need:
    """What a workload needs that only one healthy node provides."""

    label: str
    """How a message names it: "nvidia.com/X", "what claim ml/c asks for"."""
    resource: str = ""
    """The device-plugin (or extended) resource it is; '' for a claim."""


@dataclass(slots=True)
class _OnlyHere:
    """Everything that exists only on one healthy node, and who needs it."""

    node: str
    needs: dict[_Need, set[ObjectRef]] = field(default_factory=dict)
    """What only this node provides -> who needs it."""
    dependants: dict[ObjectRef, _Dependant] = field(default_factory=dict)

    def add(self, need: _Need, who: _Dependant) -> None:
        self.needs.setdefault(need, set()).add(who.ref)
        self.dependants.setdefault(who.ref, who)


def _ordered(refs: Sequence[ObjectRef] | set[ObjectRef]) -> list[ObjectRef]:
    return sorted(refs, key=lambda r: (r.namespace, r.name, r.kind))


class _SoleProviders:
    """The one healthy node that provides a resource or fits a claim ('' when none or several),
    each resource and each distinct set of requests asked once per audit."""

    def __init__(self, cluster: ClusterView) -> None:
        self.cluster = cluster
        self._resources: dict[str, str] = {}
        self._claims: dict[tuple[ClaimRequest, ...], str] = {}

    def of_resource(self, resource: str) -> str:
        if resource not in self._resources:
            self._resources[resource] = sole_healthy_provider(self.cluster, resource)
        return self._resources[resource]

    def of_requests(self, requests: tuple[ClaimRequest, ...]) -> str:
        if requests not in self._claims:
            nodes = fitting_nodes(requests, self.cluster, most=2)
            self._claims[requests] = nodes[0] if len(nodes) == 1 else ""
        return self._claims[requests]

    def of_claim(self, namespace: str, ref: ClaimRef) -> tuple[str, _Need]:
        """(the sole node, how a message names what it asks for) for a spec.resourceClaims[]
        entry: the claim it names, else the template it is made from."""
        if ref.claim:
            claim = self.cluster.claim(namespace, ref.claim)
            if claim is not None:
                return self.of_requests(claim.requests), _Need(f"what claim {claim.key} asks for")
        if ref.template:
            template = self.cluster.claim_template(namespace, ref.template)
            if template is not None:
                return (
                    self.of_requests(template.requests),
                    _Need(f"what claim template {template.key} asks for"),
                )
        return "", _Need("")

    def others(self, resource: str, sole: str) -> list[str]:
        """The resource's other providers, each with why it does not count."""
        out = []
        for name in self.cluster.providers_of(resource):
            info = self.cluster.node(name)
            if name != sole and info is not None:
                out.append(f"{name} ({node_health(info).describe()})")
        return out


def _resource(name: str) -> _Need:
    return _Need(name, name)


def _vm_dependant(vm: VmToRun) -> _Dependant:
    instance = vm.instance
    if instance is not None and instance.live and instance.phase == "Running":
        where = f" on {instance.node}" if instance.node else ""
        return _Dependant(vm.ref, True, f"Running{where}")
    return _Dependant(vm.ref, False, "should run, not running")


def _vm_needs(vm: VmToRun, sole: _SoleProviders) -> Iterator[tuple[str, _Need]]:
    """(sole node, what) for each device of the VM that one healthy node alone provides."""
    claims = {ref.name: ref for ref in vm.asks.claims}
    names: set[str] = set()
    entries: set[str] = set()
    for device in vm.devices:
        if device.device_name and device.device_name not in names:
            names.add(device.device_name)
            yield sole.of_resource(device.device_name), _resource(device.device_name)
        elif device.uses_claim and device.claim_name in claims and device.claim_name not in entries:
            entries.add(device.claim_name)
            yield sole.of_claim(vm.ref.namespace, claims[device.claim_name])


def _pod_needs(user: GpuUser, sole: _SoleProviders) -> Iterator[tuple[str, _Need]]:
    for resource, count in sorted(user.pod.gpu.items()):
        if count > 0:
            yield sole.of_resource(resource), _resource(resource)
    for held in user.claims:
        namespace, _, name = held.claim.partition("/")
        claim = sole.cluster.claim(namespace, name)
        if claim is not None:
            yield sole.of_requests(claim.requests), _Need(f"what claim {claim.key} asks for")


def _only_here(cluster: ClusterView, sole: _SoleProviders) -> dict[str, _OnlyHere]:
    """Sole node -> what only it provides and who needs it."""
    found: dict[str, _OnlyHere] = {}

    def add(node: str, need: _Need, who: _Dependant) -> None:
        if node:
            found.setdefault(node, _OnlyHere(node)).add(need, who)

    for vm in vms_to_run(cluster):
        who = _vm_dependant(vm)
        for node, need in _vm_needs(vm, sole):
            add(node, need, who)
    for info in cluster.nodes():
        for user in gpu_users_on(info.name, cluster):
            if launched_vmi(user.pod.name):  # a virt-launcher: its VM speaks for it
                continue
            ref = object_ref(POD, user.pod.namespace, user.pod.name)
            who = _Dependant(ref, True, f"{user.pod.phase or 'Pending'} on {info.name}")
            for node, need in _pod_needs(user, sole):
                add(node, need, who)
    return found


def _message(here: _OnlyHere) -> str:
    n = here.node
    ordered = [here.dependants[r] for r in _ordered(list(here.dependants))]
    running = [str(d.ref) for d in ordered if d.running]
    waiting = [str(d.ref) for d in ordered if not d.running]
    parts = []
    if running:
        verb = "stops" if len(running) == 1 else "stop"
        parts.append(f"{few(running)} {verb} and cannot start anywhere else")
    if waiting:
        either = ", not running now, cannot start anywhere else either" if running else ""
        parts.append(f"{few(waiting)}{either or ' cannot start anywhere else'}")
    needs = [need.label for need in sorted(here.needs)]
    exist = "exists" if len(needs) == 1 else "exist"
    return f"if {n} fails, {', and '.join(parts)} ({few(needs)} {exist} only on {n})"


def _finding(here: _OnlyHere, sole: _SoleProviders) -> DiagnosisFinding:
    n = here.node
    links = []
    for need in sorted(here.needs):
        others = sole.others(need.resource, n) if need.resource else []
        also = f"; its other providers are not healthy: {few(others)}" if others else ""
        who = [Link(here.dependants[r].label) for r in _ordered(here.needs[need])]
        links.append(
            Link(f"{need.label}: only {n} provides it among healthy nodes{also}", tuple(who))
        )
    count = len(here.dependants)
    root = Link(
        f"Node {n}: the only healthy node that provides what "
        f"{'1 workload needs' if count == 1 else f'{count} workloads need'}",
        tuple(links),
    )
    any_running = any(d.running for d in here.dependants.values())
    needs = [need.label for need in sorted(here.needs)]
    return DiagnosisFinding(
        resource=object_ref(NODE, "", n),
        message=_message(here),
        chain=root,
        remediation=(
            f"add a second healthy node that provides {few(needs)}, so that {n} "
            "failing or being drained leaves them a place to run",
            f"or accept the risk: configure policies: {{{SOLE_PROVIDER}: {{action: off}}}}, and "
            f"plan maintenance of {n} as downtime for them",
        ),
        severity=Severity.HIGH if any_running else None,
        workloads=tuple(_ordered(list(here.dependants))),
    )


def _diagnose(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    sole = _SoleProviders(view.cluster)
    found = _only_here(view.cluster, sole)
    for node in sorted(found):
        yield _finding(found[node], sole)


SOLE_PROVIDER_DIAGNOSIS = Diagnosis(
    id=SOLE_PROVIDER,
    summary=(
        "A node that is the only healthy provider of a device (a deviceName, a pod's GPU "
        "resource, or what a DRA claim asks for) that VMs that should run, running VMIs or GPU "
        "pods need: one finding per node, naming what would stop and could not start anywhere "
        "else if it failed. High when something running would strand, medium when only VMs "
        "that should run but do not yet."
    ),
    default_action=Action.AUDIT,
    default_severity=Severity.MEDIUM,
    reason=(
        "A prediction, not a fault: everything may be green today. Nothing is wrong with any "
        "object a guard could refuse; the risk is accepted or removed by adding a provider."
    ),
    diagnose=_diagnose,
    reads=CLAIM_FIT_READS
    | GPU_USERS_READS
    | PROVIDER_READS
    | VMS_TO_RUN_READS
    | {RESOURCE_CLAIM_TEMPLATE},
)

"""claim-on-not-ready-node: a pod or a VM that should run whose ResourceClaim is allocated on a
node that is not Ready: the 112-day incident in DRA form.

An allocated claim's ``status.allocation.nodeSelector`` pins every pod using it to the node of
its devices (docs/dra.md); the node's slices stay while kubelet is down, so nothing says the
devices are gone. The workload waits for that one node until it returns or the claim is released.
The chain runs to the node and its condition (``chains.node_links``: kubelet's cause, swap,
taints, how long), the repair is the node's (``repair.repair_steps``), as for device-plugin VMs.

Only allocated claims are looked at here: whether a claim can be satisfied at all is
``policies.cluster.claim_fit``'s question, and its policy ``claim-without-ready-device``'s verdict
on the same workload and claim request is reported once, with this chain (``explains``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from policies.cluster.conditions import Condition
from policies.cluster.dra_claims import ClaimRef, ResourceClaimInfo
from policies.cluster.kinds import (
    POD,
    VIRTUAL_MACHINE,
    VIRTUAL_MACHINE_INSTANCE,
    object_ref,
)
from policies.cluster.kubevirt import DeviceRequest, VMIInfo, VMInfo
from policies.cluster.pods import PodInfo, launched_vmi
from policies.cluster.view import AuditView, ClusterView, NodeClaim
from policies.diagnoses.chains import condition_text, for_how_long, node_links, scheduler_link
from policies.diagnoses.facts import NODE_FACTS_READS, NodeFacts, describe_device, node_facts_of
from policies.diagnoses.repair import repair_steps
from policies.diagnoses.workloads import WORKLOADS_READS, Workload, workloads_of
from policies.vocabulary.audit import Diagnosis, DiagnosisFinding, Link
from policies.vocabulary.requests import ObjectRef
from policies.vocabulary.text import few
from policies.vocabulary.verdicts import Action, Severity

CLAIM_ON_NOT_READY_NODE = "claim-on-not-ready-node"
#: The policy whose verdict these findings explain (policies/rules/claim_without_ready_device.py).
CLAIM_WITHOUT_READY_DEVICE = "claim-without-ready-device"


def claim_device(namespace: str, claim: ResourceClaimInfo) -> str:
    """The finding's subject within the workload, as dra-wave's contract spells it:
    ``<ns>/<claim>:<request>``, the request '' when the claim has several (the whole claim)."""
    request = claim.requests[0].name if len(claim.requests) == 1 else ""
    return f"{namespace}/{claim.name}:{request}"


def launcher_vmi(pod_name: str, vmis: Mapping[str, VMIInfo]) -> VMIInfo | None:
    """The VMI whose virt-launcher ``pod_name`` is, among ``vmis`` (by name)."""
    name = launched_vmi(pod_name)
    return vmis.get(name) if name else None


@dataclass(frozen=True, slots=True)
class _Holder:
    """A workload that uses the claim: what the finding is about."""

    ref: ObjectRef
    status: str
    entry: str
    """The spec.resourceClaims[] entry through which it uses the claim ('' if unknown)."""
    devices: tuple[DeviceRequest, ...]
    """A VM's gpus[]/hostDevices[] entries that take their device from that entry."""
    pod: str
    """The pod that holds the claim (a VM's virt-launcher), '' when not known."""
    workload: Workload | None


def _entry(claims: Sequence[ClaimRef], claim: str) -> str:
    return next((ref.name for ref in claims if ref.claim == claim), "")


def _using(devices: Sequence[DeviceRequest], entry: str) -> tuple[DeviceRequest, ...]:
    return tuple(d for d in devices if entry and d.claim_name == entry)


def _vm_ref(namespace: str, vmi: VMIInfo) -> ObjectRef:
    if vmi.owner_vm:
        return object_ref(VIRTUAL_MACHINE, namespace, vmi.owner_vm)
    return object_ref(VIRTUAL_MACHINE_INSTANCE, namespace, vmi.name)


class _ClaimDiagnoser:
    def __init__(self, view: AuditView, now: datetime) -> None:
        self.cluster: ClusterView = view.cluster
        self.now = now
        self.wanting = {w.ref: w for w in workloads_of(view)}

    def holders(self, f: NodeFacts, nc: NodeClaim) -> list[_Holder]:
        """Who waits for this claim: VMs that should run and live VMIs naming it (directly, or
        through their virt-launcher pod for a claim made from a template), and unfinished pods
        that name it or hold it (reservedFor)."""
        claim = nc.claim
        ns = claim.namespace
        found: dict[ObjectRef, _Holder] = {}

        def add_vm(ref: ObjectRef, asks: VMInfo | VMIInfo, entry: str, pod: str) -> None:
            workload = self.wanting.get(ref)
            known = found.get(ref)
            if known is not None and pod and not known.pod:  # its launcher pod, found later
                found[ref] = replace(known, pod=pod)
            elif workload is not None and known is None:
                devices = _using(asks.devices, entry)
                found[ref] = _Holder(ref, workload.status, entry, devices, pod, workload)

        referrers = self.cluster.claim_referrers(ns, claim.name)
        for vm in referrers.vms:
            add_vm(object_ref(VIRTUAL_MACHINE, ns, vm.name), vm, _entry(vm.claims, claim.name), "")
        for vmi in referrers.vmis:
            add_vm(_vm_ref(ns, vmi), vmi, _entry(vmi.claims, claim.name), "")
        launchers = {v.name: v for v in self.cluster.vmis_on(f.name) if v.namespace == ns}
        pods: dict[str, PodInfo] = {p.name: p for p in (*nc.pods, *referrers.pods)}
        for name in sorted(pods):
            pod = pods[name]
            if pod.finished:
                continue
            entry = _entry(pod.claims, claim.name)
            launched = launcher_vmi(name, launchers)
            if launched is not None:
                add_vm(_vm_ref(ns, launched), launched, entry, name)
                continue
            status = "Terminating" if pod.terminating else (pod.phase or "Pending")
            ref = object_ref(POD, ns, name)
            found.setdefault(ref, _Holder(ref, status, entry, (), name, None))
        return [found[ref] for ref in sorted(found, key=lambda r: (r.namespace, r.name, r.kind))]

    def finding(self, f: NodeFacts, nc: NodeClaim, holder: _Holder) -> DiagnosisFinding:
        claim, ref, n = nc.claim, holder.ref, f.name
        devices = [
            describe_device(published)
            if published is not None
            else f"{allocated.device} (pool {allocated.pool}: no longer published)"
            for allocated, published in nc.devices
        ]
        via = [f"{d.field}[{d.name}]" for d in holder.devices]
        if holder.entry:
            via.append(f"resourceClaims[{holder.entry}]")
        through = f" ({', '.join(via)})" if via else ""
        workload = holder.workload
        stuck_since = workload.since if workload is not None else None
        since = stuck_since if stuck_since is not None else f.not_ready_since
        stuck: Condition | None = workload.stuck if workload is not None else None
        ready = condition_text(f.ready_condition)
        message = (
            f"{ref.kind} {ref} is {holder.status}: its claim {claim.key}{through} is allocated "
            f"on {n} ({few(devices, 2)}), NotReady{for_how_long(f.not_ready_since, self.now)}: "
            f"{ready}; the allocation pins it to {n} until {n} returns or the claim is released"
        )
        uses = Link(
            f"uses claim {claim.key}{through}, allocated on {n}: {few(devices, 2)}",
            (node_links(f, self.now, prefix=f"{n}: "),),
        )
        root = Link(
            f"{ref.kind} {ref}: {holder.status}{for_how_long(stuck_since, self.now)}",
            (uses, *scheduler_link(stuck)),
        )
        return DiagnosisFinding(
            resource=ref,
            message=message,
            chain=root,
            since=since,
            remediation=self._repair(f, claim, holder),
            device=claim_device(claim.namespace, claim),
            explains=CLAIM_WITHOUT_READY_DEVICE,
        )

    def _repair(self, f: NodeFacts, claim: ResourceClaimInfo, holder: _Holder) -> tuple[str, ...]:
        ref, n, ns = holder.ref, f.name, holder.ref.namespace
        watch = "pod" if ref.kind == POD.kind else "vmi"
        pod = (
            f"kubectl delete pod -n {ns} {holder.pod} --grace-period=0 --force"
            if holder.pod
            else f"force-delete the virt-launcher pod of {ref} (kubectl get pods -n {ns})"
        )
        return (
            *repair_steps(f, [str(ref)]),
            f"{ref} runs again by itself once {n} is Ready: its claim {claim.key} stays "
            f"allocated there; watch: kubectl get {watch} -n {ns} {ref.name} -w",
            f"only if {n} cannot come back, and is powered off (else its GPU may still be in "
            f"use): {pod} releases the claim, which can then be allocated on another node with "
            "a matching device",
        )


def _diagnose(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    facts = node_facts_of(view)
    diagnoser: _ClaimDiagnoser | None = None
    for name in sorted(facts):
        f = facts[name]
        if not f.not_ready:
            continue
        for nc in view.cluster.claims_allocated_on(name):
            if diagnoser is None:  # the VMs' scan only when some claim is on a dead node
                diagnoser = _ClaimDiagnoser(view, now)
            for holder in diagnoser.holders(f, nc):
                yield diagnoser.finding(f, nc, holder)


CLAIM_ON_NOT_READY_NODE_DIAGNOSIS = Diagnosis(
    id=CLAIM_ON_NOT_READY_NODE,
    summary=(
        "A pod, or a VM that should run, whose ResourceClaim is allocated on a NotReady node: "
        "the chain runs to the node and its condition, with the repair order. Reported under "
        "claim-without-ready-device when that policy already flags the workload and claim."
    ),
    default_action=Action.WARN,
    default_severity=Severity.HIGH,
    reason=(
        "The workload is down or about to be, pinned to a dead node by its allocation; the fix "
        "is on the node, not in any object a guard could refuse."
    ),
    diagnose=_diagnose,
    reads=NODE_FACTS_READS | WORKLOADS_READS,
)

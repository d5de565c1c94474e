"""claim-without-ready-device: a DRA claim that no Ready node can satisfy.

The scheduler allocates a claim's devices when it places the first pod that uses it: all of the
claim's requests on the one node the pod goes to, from what the DRA drivers publish there
(docs/dra.md). When no Ready, schedulable, untainted node (or node-independent pool) publishes
enough devices that pass the class's and the request's selectors, the pod stays Pending and a
KubeVirt VM in ErrorUnschedulable, indefinitely: the 112 days of docs/field-guide.md section 1, with
DRA. A NotReady node's ResourceSlices stay behind, so the devices look published; only node
health tells the difference, as for device-plugin allocatable. The judgement and its wording are
``policies.cluster.claim_fit``'s; this policy says it where a claim is made or used: a ResourceClaim
or ResourceClaimTemplate created or updated, a Pod created with claims, a VM that should run or a
new VMI (the scope of passthrough-without-ready-provider), and a workload controller whose pod
template uses one (policies.cluster.pod_templates). An allocated claim already has its devices and
is not judged.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from policies.cel.hints import COMPARE_WITH_DEVICES
from policies.cluster.claim_fit import claim_fit
from policies.cluster.claim_shortfall import UnmetRequest, Why
from policies.cluster.coverage import CLAIM_FIT_READS, VMS_TO_RUN_READS
from policies.cluster.device_taints import TAINT_REPAIR
from policies.cluster.dra_claims import (
    ClaimRef,
    ClaimRequest,
    ResourceClaimInfo,
    ResourceClaimTemplateInfo,
)
from policies.cluster.kinds import (
    CLUSTER_POLICY,
    POD,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    object_ref,
)
from policies.cluster.kubevirt import VM_STARTING_REQUESTS
from policies.cluster.pod_templates import POD_TEMPLATE_REQUESTS, judge_template
from policies.cluster.pods import PodInfo, launched_vmi
from policies.cluster.projections import request_projection
from policies.cluster.view import ClusterView
from policies.cluster.vms_to_run import vm_to_run, vms_to_run
from policies.cluster.workload import CONTAINER, VM_MODES, effective_mode, relabel_before_return
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest, ObjectRef
from policies.vocabulary.verdicts import Action, Finding, Policy, Severity

ID = "claim-without-ready-device"
FOR_CLAIM = "pods using it stay Pending"
FOR_TEMPLATE = "pods and VMs using it stay Pending"
FOR_POD = "the pod stays Pending"
FOR_TEMPLATE_PODS = "its pods stay Pending"
FOR_VM = "the VM stays unschedulable"
COUNTER_STEPS = {
    Why.COUNTERS_SHORT: (
        "ask for fewer or smaller devices of one GPU (a whole GPU and its MIG partitions share "
        "its counters; kubectl get resourceslices -o yaml shows sharedCounters)"
    ),
    Why.COUNTERS_HELD: (
        "wait until the claims named release their devices, or ask for a MIG partition "
        "instead of the whole GPU"
    ),
}


@dataclass(frozen=True, slots=True)
class Claimed:
    """A claim or template a workload uses, as found in the state."""

    label: str
    """How messages name it: "claim ml/train-gpu", "template vms/rtx5090-vfio"."""
    key: str
    """<namespace>/<name>: the prefix of the findings' device field."""
    requests: tuple[ClaimRequest, ...]

    @staticmethod
    def claim(info: ResourceClaimInfo) -> Claimed:
        return Claimed(f"claim {info.key}", info.key, info.requests)

    @staticmethod
    def template(info: ResourceClaimTemplateInfo) -> Claimed:
        return Claimed(f"template {info.key}", info.key, info.requests)


def resolve(namespace: str, ref: ClaimRef, view: ClusterView) -> Claimed | None:
    """The unallocated claim ``ref`` names, else the template it is made from; None when neither
    is in the state (it may come next: apply order is no hazard) or the claim is allocated."""
    claim = view.claim(namespace, ref.claim) if ref.claim else None
    if claim is not None:
        return None if claim.allocated else Claimed.claim(claim)
    template = view.claim_template(namespace, ref.template) if ref.template else None
    return None if template is None else Claimed.template(template)


def remediation(unmet: UnmetRequest, view: ClusterView) -> tuple[str, ...]:
    """The steps for what falls short, in the order of the alternatives, each said once. A dead
    node in a VM mode is relabelled before its kubelet returns, as the recovery trap's repair
    says: reviving it as it is rebinds its GPUs under whatever uses them."""
    steps: list[str] = []
    for shortfall in unmet.shortfalls:
        meant, name = shortfall.suggestions, shortfall.device_class
        if shortfall.why is Why.NO_CLASS:
            steps.append(
                f"set deviceClassName to {meant[0]}"
                if meant
                else f"create DeviceClass {name} or use one that exists (kubectl get deviceclasses)"
            )
        elif shortfall.why is Why.CLASS_MATCHES_NOTHING:
            steps.append(f"check that a DRA driver publishes devices of class {name}")
        elif shortfall.why is Why.SELECTORS_MATCH_NOTHING and meant:
            steps.append(f"change the selector to {meant[0]}")
        elif shortfall.why in (Why.SELECTORS_MATCH_NOTHING, Why.CANNOT_BE_JUDGED):
            steps.append(COMPARE_WITH_DEVICES)
        elif shortfall.why is Why.TOO_FEW_ON_ONE_NODE:
            steps.append(
                f"ask for at most {shortfall.most}, or add a node with {shortfall.asks} "
                "(a claim's devices come from one node)"
            )
        elif shortfall.why is Why.NOT_ON_ONE_NODE:
            steps.append("split the requests into claims of separate pods, or add a node with all")
        elif shortfall.why in (Why.COUNTERS_SHORT, Why.COUNTERS_HELD):
            steps.append(COUNTER_STEPS[shortfall.why])
        elif shortfall.why is Why.TAINTED:
            steps.extend(TAINT_REPAIR)
        for node, health in shortfall.nodes:
            if health.problems == ("cordoned",):
                steps.append(f"kubectl uncordon {node}, if it is fit to run work again")
            else:
                info = view.node(node)
                mode = effective_mode(info.labels, view.cluster_policy()) if info else CONTAINER
                if mode in VM_MODES and not health.healthy:
                    steps.append(relabel_before_return(node, mode))
                steps.append(f"find why {node} is not Ready (journalctl -u kubelet there), fix it")
    return tuple(dict.fromkeys(steps))


def findings(claimed: Claimed, view: ClusterView, subject: str, consequence: str) -> list[Finding]:
    """One finding per request no Ready node can satisfy (or one for the claim as a whole);
    ``subject`` leads the message ('' when the claim itself is under review)."""
    out = []
    for unmet in claim_fit(claimed.requests, view).unmet:
        request = f"request {unmet.request}" if unmet.request else ""
        where = " ".join(part for part in (subject, request) if part)
        links = [link for s in unmet.shortfalls for link in s.chain] or [unmet.describe()]
        out.append(
            Finding(
                f"{where}: {unmet.describe()}; {consequence}"
                if where
                else f"{unmet.describe()}; {consequence}",
                since=unmet.since,
                chain=(f"needs {claimed.label} {request}".rstrip(), *links),
                remediation=remediation(unmet, view),
                device=f"{claimed.key}:{unmet.request}",
            )
        )
    return out


def judge_uses(
    namespace: str, refs: Sequence[ClaimRef], view: ClusterView, consequence: str
) -> list[Finding]:
    """What a pod or VM is told about the claims and templates it uses, each judged once."""
    out: list[Finding] = []
    seen: set[str] = set()
    for ref in refs:
        claimed = resolve(namespace, ref, view)
        if claimed is None or claimed.label in seen:
            continue
        seen.add(claimed.label)
        out.extend(findings(claimed, view, claimed.label, consequence))
    return out


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    if request.obj is None:
        return ()
    if request.group_kind == RESOURCE_CLAIM:
        claim: ResourceClaimInfo = request_projection(request)
        if claim.allocated:
            return ()
        return findings(Claimed.claim(claim), view, "", FOR_CLAIM)
    if request.group_kind == RESOURCE_CLAIM_TEMPLATE:
        template: ResourceClaimTemplateInfo = request_projection(request)
        return findings(Claimed.template(template), view, "", FOR_TEMPLATE)
    if request.group_kind == POD:
        pod: PodInfo = request_projection(request)
        return judge_uses(pod.namespace, pod.claims, view, FOR_POD)
    if request.group_kind in POD_TEMPLATE_REQUESTS:
        return judge_template(
            request, lambda _, pod: judge_uses(pod.namespace, pod.claims, view, FOR_TEMPLATE_PODS)
        )
    vm = vm_to_run(request)
    return judge_uses(vm.namespace, vm.claims, view, FOR_VM) if vm is not None else ()


def waiting(pod: PodInfo) -> bool:
    """Wants to run and is not placed yet: a bound pod's claims were allocated before binding."""
    return not pod.finished and not pod.terminating and not pod.node


def made_for(pod: PodInfo, template: ResourceClaimTemplateInfo, view: ClusterView) -> bool:
    """Whether the claim made for the pod from ``template`` is in the state (judged as a claim)."""
    return any(
        ref.template == template.name and ref.claim and view.claim(pod.namespace, ref.claim)
        for ref in pod.claims
    )


def pods_waiting_on(
    claimed: Claimed, pods: Sequence[PodInfo], view: ClusterView
) -> Iterator[tuple[ObjectRef, Finding]]:
    if pods:
        said = findings(claimed, view, claimed.label, FOR_POD)
        for pod in pods:
            for finding in said:
                yield object_ref(POD, pod.namespace, pod.name), finding


def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
    """Pods waiting on an unallocated claim (or on a template no claim was made from yet) that no
    Ready node can satisfy, and VMs that should run and are not placed yet, whose claims cannot
    be; the finding is about the workload. A VMI's virt-launcher pod is not reported apart: its
    VM or VMI is, with the claim it asked for."""
    vmis = {(vmi.namespace, vmi.name) for vmi in view.vmis()}

    def waiting_alone(pod: PodInfo) -> bool:
        return waiting(pod) and (pod.namespace, launched_vmi(pod.name)) not in vmis

    for claim in view.claims():
        if not claim.allocated:
            referrers = view.claim_referrers(claim.namespace, claim.name)
            pods = [p for p in referrers.pods if waiting_alone(p)]
            yield from pods_waiting_on(Claimed.claim(claim), pods, view)
    for template in view.claim_templates():
        referrers = view.claim_referrers(template.namespace, template.name, template=True)
        pods = [p for p in referrers.pods if waiting_alone(p) and not made_for(p, template, view)]
        yield from pods_waiting_on(Claimed.template(template), pods, view)
    for vm in vms_to_run(view):
        if vm.instance is not None and vm.instance.node:
            continue  # placed: the scheduler allocated its claims first
        for finding in judge_uses(vm.asks.namespace, vm.asks.claims, view, FOR_VM):
            yield vm.ref, finding


POLICY = Policy(
    id=ID,
    summary=(
        "A ResourceClaim or ResourceClaimTemplate, or a new Pod, VM or VMI (or a workload "
        "controller's pod template) that uses one, asks for devices that no Ready, schedulable, "
        "untainted node (or node-independent pool) publishes: no such DeviceClass, no device its "
        "selectors accept, too few on one node, or only on nodes that are not Ready."
    ),
    scope={
        RESOURCE_CLAIM: frozenset({CREATE, UPDATE}),
        RESOURCE_CLAIM_TEMPLATE: frozenset({CREATE, UPDATE}),
        POD: frozenset({CREATE}),
        **VM_STARTING_REQUESTS,
        **POD_TEMPLATE_REQUESTS,
    },
    default_action=Action.WARN,
    default_reason=(
        "The claim is valid and may become satisfiable when a node returns or a driver publishes "
        "more devices; the owner needs to know now, and controllers creating pods must not be "
        "blocked."
    ),
    failure_action=Action.WARN,
    check=check,
    audit=audit,
    audit_severity=Severity.HIGH,
    reads=CLAIM_FIT_READS | VMS_TO_RUN_READS | {CLUSTER_POLICY, RESOURCE_CLAIM_TEMPLATE},
)

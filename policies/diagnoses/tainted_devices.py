"""workload-on-tainted-device: a pod or VM whose allocated DRA device is tainted NoExecute (it is
evicted, or about to be) or carries the NVIDIA DRA driver's health taint (its GPU failed).

KEP-5055 (docs/dra.md, [taints]): the device-taint eviction controller deletes the pods using a
device with a NoExecute taint their claim's request does not tolerate, across namespaces and
priorities, once the rule or the slice says so; a DeviceTaintRule matching every device did
exactly that to every DRA pod of a cluster (kubernetes/kubernetes#141422). NoSchedule leaves
running pods alone, but NVIDIA's driver sets ``gpu.nvidia.com/gpu-lost`` and a fatal
``gpu.nvidia.com/xid`` with effect NoSchedule: its verdict that the GPU under the workload has
failed (policies.cluster.device_taints). The chain names the workload, its claim, the device,
its node, the taint and since when; the repair is the taint's.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from policies.cluster.coverage import DEVICE_HOLDERS_READS
from policies.cluster.device_taints import (
    NO_EXECUTE,
    NOT_EVICTED,
    DeviceTaint,
    Toleration,
    describe_taint,
    evicting,
)
from policies.cluster.dra import PublishedDevice
from policies.cluster.dra_claims import ResourceClaimInfo, through_extended_resource_only
from policies.cluster.gpu_users import pod_workload
from policies.cluster.kinds import DEVICE_TAINT_RULE
from policies.cluster.pods import PodInfo
from policies.cluster.view import AuditView, ClusterView
from policies.diagnoses.chains import for_how_long
from policies.vocabulary.audit import Diagnosis, DiagnosisFinding, Link
from policies.vocabulary.requests import ObjectRef
from policies.vocabulary.verdicts import Action, Severity

WORKLOAD_ON_TAINTED_DEVICE = "workload-on-tainted-device"


def _tolerations(claim: ResourceClaimInfo, request: str) -> tuple[Toleration, ...]:
    """The tolerations of the request (``req`` or a firstAvailable ``req/sub``) a device was
    allocated for."""
    name, _, sub = request.partition("/")
    for asked in claim.requests:
        if asked.name == name:
            for choice in asked.choices:
                if not sub or choice.name == sub:
                    return choice.tolerations
    return ()


def _harm(taints: tuple[DeviceTaint, ...], tolerated: tuple[Toleration, ...]) -> DeviceTaint | None:
    """The taint that matters: an untolerated NoExecute first (eviction), else a health taint."""
    evicts = evicting(taints, tolerated)
    if evicts:
        return evicts[0]
    return next((t for t in taints if t.health), None)


def _repair(
    taint: DeviceTaint, device: PublishedDevice, ref: ObjectRef, kept: bool
) -> tuple[str, ...]:
    where = f"{device.device.name} on {device.node}" if device.node else device.device.name
    if kept and taint.effect == NO_EXECUTE:
        return (
            f"move {ref} off {where} yourself (delete its pod): nothing evicts it "
            "(kubernetes/kubernetes#141290)",
        )
    if taint.rule:
        return (
            f"if the rule was not meant for {ref}: kubectl delete devicetaintrule {taint.rule} "
            "(eviction stops; evicted pods are recreated by their controllers)",
            f"else move {ref} off {where} first, then let the rule act",
        )
    if taint.health:
        return (
            f"stop {ref} or move it off {where}: the DRA driver reports its GPU failed",
            f"drain {device.node or 'the nodes using it'}, reset or replace the GPU; the driver "
            "removes the taint when the GPU is healthy again",
        )
    return (
        f"find who tainted {where} (kubectl get resourceslices -o yaml) and why; move {ref} off "
        "it, or add a toleration of the taint to its claim's request if it may stay",
    )


def _diagnose(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    cluster = view.cluster
    nodes = sorted({d.node for d in cluster.published_devices()})  # '': node-independent
    for name in nodes:
        if not cluster.may_keep_off(name):
            continue
        for held in cluster.claims_allocated_on(name):
            claim = held.claim
            for result, device in held.devices:
                if device is None:
                    continue
                taint = _harm(cluster.device_taints(device), _tolerations(claim, result.request))
                if taint is None:
                    continue
                for pod in held.pods:
                    if pod.finished:
                        continue
                    yield _finding(cluster, now, claim, device, taint, pod)


def _finding(
    cluster: ClusterView,
    now: datetime,
    claim: ResourceClaimInfo,
    device: PublishedDevice,
    taint: DeviceTaint,
    pod: PodInfo,
) -> DiagnosisFinding:
    ref = pod_workload(cluster, claim.namespace, pod.name, pod.node)
    tainted = describe_taint(device.device.name, device.node, taint)
    kept = through_extended_resource_only(pod.claims, claim.name)
    if taint.effect == NO_EXECUTE and kept:
        fate = (
            f"is not evicted from a device tainted NoExecute: it got its GPU through {NOT_EVICTED}"
        )
    elif taint.effect == NO_EXECUTE:
        fate = "is evicted (NoExecute, not tolerated by its claim's request)"
    else:
        fate = "runs on a GPU the NVIDIA DRA driver reports failed"
    message = f"{ref.kind} {ref} {fate}: its claim {claim.key} holds {tainted}"
    uses = Link(f"uses claim {claim.key}: {tainted}", ())
    root = Link(f"{ref.kind} {ref}: {fate}{for_how_long(taint.time_added, now)}", (uses,))
    return DiagnosisFinding(
        resource=ref,
        message=message,
        chain=root,
        since=taint.time_added,
        remediation=_repair(taint, device, ref, kept),
        device=f"{claim.key}:{device.id}",
    )


WORKLOAD_ON_TAINTED_DEVICE_DIAGNOSIS = Diagnosis(
    id=WORKLOAD_ON_TAINTED_DEVICE,
    summary=(
        "A pod or VM whose allocated DRA device is tainted NoExecute (evicted, not tolerated) "
        "or carries the NVIDIA DRA driver's health taint (gpu-lost, a fatal xid): the chain "
        "names the claim, device, node, taint and since when."
    ),
    default_action=Action.WARN,
    default_severity=Severity.HIGH,
    reason=(
        "The workload is being evicted or runs on a failed GPU; the cause is a taint (the "
        "driver's or an operator's rule), so the repair is reported, not refused."
    ),
    diagnose=_diagnose,
    reads=DEVICE_HOLDERS_READS | {DEVICE_TAINT_RULE},
)

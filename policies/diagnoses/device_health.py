"""workload-on-unhealthy-device: a running pod, or the VM whose virt-launcher it is, whose
kubelet reports an allocated device Unhealthy or Unknown (KEP-4680, beta in 1.36:
``status.containerStatuses[].allocatedResourcesStatus``; ``policies.cluster.device_health``).

The kubelet asks the DRA driver (or device plugin) for its devices' health and writes it into
the pod's status; nothing moves the workload: it keeps a GPU that failed, or one nobody can vouch
for, until someone acts. The finding names the workload, the device as the kubelet names it,
its claim and node; the repair is to move the workload and have the device checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from policies.cluster.device_health import DeviceHealth
from policies.cluster.kinds import NODE, POD, VIRTUAL_MACHINE, VIRTUAL_MACHINE_INSTANCE, object_ref
from policies.cluster.pods import PodInfo, launched_vmi
from policies.cluster.view import AuditView, ClusterView
from policies.vocabulary.audit import Diagnosis, DiagnosisFinding, Link
from policies.vocabulary.requests import ObjectRef
from policies.vocabulary.verdicts import Action, Severity

WORKLOAD_ON_UNHEALTHY_DEVICE = "workload-on-unhealthy-device"


def _workload(cluster: ClusterView, pod: PodInfo) -> ObjectRef:
    """The pod, or the VM (else VMI) whose virt-launcher it is."""
    vmi_name = launched_vmi(pod.name)
    for vmi in cluster.vmis_on(pod.node) if vmi_name else ():
        if vmi.namespace == pod.namespace and vmi.name == vmi_name:
            if vmi.owner_vm:
                return object_ref(VIRTUAL_MACHINE, pod.namespace, vmi.owner_vm)
            return object_ref(VIRTUAL_MACHINE_INSTANCE, pod.namespace, vmi.name)
    return object_ref(POD, pod.namespace, pod.name)


def _finding(cluster: ClusterView, pod: PodInfo, bad: DeviceHealth) -> DiagnosisFinding:
    ref = _workload(cluster, pod)
    via = f"claim entry {bad.claim_entry}" if bad.claim_entry else bad.source
    device = bad.device or "(no resourceID)"
    what = "failed" if bad.health == "Unhealthy" else "cannot be vouched for"
    message = (
        f"{ref.kind} {ref} runs on device {device} on {pod.node}, which its kubelet reports "
        f"{bad.health} ({via}, container {bad.container}): the device {what}"
    )
    pod_link = Link(f"pod {pod.key} on {pod.node}, container {bad.container}", ())
    chain = Link(f"{ref.kind} {ref}: device {device} {bad.health}", (pod_link,))
    return DiagnosisFinding(
        resource=ref,
        message=message,
        chain=chain,
        remediation=(
            f"move {ref} off {pod.node} (delete the pod, or migrate or restart the VM), so it "
            "gets a healthy device",
            f"have {device} on {pod.node} checked (nvidia-smi -q there; the DRA driver's "
            "health taints on its ResourceSlice say more)",
        ),
        device=device,
    )


def _diagnose(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    cluster = view.cluster
    for info in cluster.nodes():
        for pod in cluster.pods_on(info.name):
            if pod.finished or pod.terminating:
                continue
            for bad in pod.unhealthy_devices:
                yield _finding(cluster, pod, bad)


WORKLOAD_ON_UNHEALTHY_DEVICE_DIAGNOSIS = Diagnosis(
    id=WORKLOAD_ON_UNHEALTHY_DEVICE,
    summary=(
        "A running pod or VM whose kubelet reports an allocated device Unhealthy or Unknown "
        "(status.containerStatuses[].allocatedResourcesStatus): the device, node and workload."
    ),
    default_action=Action.WARN,
    default_severity=Severity.HIGH,
    reason=(
        "The workload holds a failed or unvouched device and nothing moves it; the cause is the "
        "hardware, so the repair is reported, not refused."
    ),
    diagnose=_diagnose,
    reads=frozenset({NODE, POD, VIRTUAL_MACHINE_INSTANCE}),
)

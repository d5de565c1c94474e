"""iommufd-missing: with KubeVirt's IOMMUFD gate on, the nodes where no VM can run.

KubeVirt v1.9.0's IOMMUFD gate (alpha) makes virt-controller request
``devices.kubevirt.io/iommufd`` for every virt-launcher pod; a node whose kernel lacks
``/dev/iommu`` (older than 6.2) reports the device unhealthy, so the scheduler places no VM
there (pkg/virt-config/featuregate/active.go; docs/dra.md [kv-1.9]). gpu-guard otherwise sets
KubeVirt's own devices aside (``is_device_resource``); here their absence is the finding. One
finding per Ready node KubeVirt may schedule on (``kubevirt.io/schedulable=true``) that does not
advertise it; ``vm-claim-preflight`` warns the VMs when no Ready node does.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from policies.cluster.health import healthy_node
from policies.cluster.kinds import KUBEVIRT, NODE, object_ref
from policies.cluster.view import AuditView
from policies.vocabulary.audit import Diagnosis, DiagnosisFinding, Link
from policies.vocabulary.verdicts import Action, Severity

IOMMUFD_MISSING = "iommufd-missing"
IOMMUFD_GATE = "IOMMUFD"
IOMMUFD_DEVICE = "devices.kubevirt.io/iommufd"
SCHEDULABLE_LABEL = "kubevirt.io/schedulable"


def _diagnose(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    del now
    cluster = view.cluster
    kubevirt = cluster.kubevirt()
    if kubevirt is None or not kubevirt.gates.read(IOMMUFD_GATE).on:
        return
    for info in cluster.nodes():
        if info.labels.get(SCHEDULABLE_LABEL) != "true" or not healthy_node(cluster, info.name):
            continue
        if info.allocatable.get(IOMMUFD_DEVICE, 0) > 0:
            continue
        yield DiagnosisFinding(
            resource=object_ref(NODE, "", info.name),
            message=(
                f"{info.name} does not advertise {IOMMUFD_DEVICE} while {kubevirt.label} turns on "
                f"the {IOMMUFD_GATE} gate: every virt-launcher asks for it, so no VM can run on "
                f"{info.name}"
            ),
            chain=Link(
                f"Node {info.name}: no {IOMMUFD_DEVICE} in allocatable",
                (
                    Link(f"{kubevirt.label}: feature gate {IOMMUFD_GATE}"),
                    Link(f"virt-controller: every launcher pod requests {IOMMUFD_DEVICE}"),
                ),
            ),
            remediation=(
                f"give {info.name} a kernel with /dev/iommu (6.2+), or remove {IOMMUFD_GATE} "
                "from the KubeVirt CR's featureGates",
            ),
            device=IOMMUFD_DEVICE,
        )


IOMMUFD_MISSING_DIAGNOSIS = Diagnosis(
    id=IOMMUFD_MISSING,
    summary=(
        "KubeVirt's IOMMUFD gate is on and a Ready node KubeVirt schedules on does not advertise "
        "devices.kubevirt.io/iommufd: no VM can run there."
    ),
    default_action=Action.WARN,
    default_severity=Severity.MEDIUM,
    reason=(
        "Every launcher pod asks for the device once the gate is on; a node without it keeps its "
        "kvm device and looks fit for VMs, while the scheduler passes it over."
    ),
    diagnose=_diagnose,
    reads=frozenset({KUBEVIRT, NODE}),
)

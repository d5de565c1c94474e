"""resource-name-case-mismatch: one resource name spelled differently (case only) by VMs, the
KubeVirt CR and node allocatable. Kubelet resource names are case-sensitive: only the spelling
the device plugin advertises schedules."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime

from policies.cluster.coverage import VMS_TO_RUN_READS
from policies.cluster.kinds import (
    KUBEVIRT,
    object_ref,
)
from policies.cluster.resources import is_container_gpu_resource
from policies.cluster.view import AuditView, ClusterView
from policies.diagnoses.facts import NODE_FACTS_READS, node_facts_of
from policies.vocabulary.audit import Diagnosis, DiagnosisFinding, Link
from policies.vocabulary.requests import CLUSTER
from policies.vocabulary.text import few
from policies.vocabulary.verdicts import Action, Severity

RESOURCE_NAME_CASE_MISMATCH = "resource-name-case-mismatch"


def _finding(
    spellings: Mapping[str, set[str]],
    permitted: set[str],
    advertised: set[str],
    view: ClusterView,
) -> DiagnosisFinding:
    right = sorted(s for s in spellings if s in advertised)
    parts = []
    children = []
    for spelling in sorted(spellings):
        sources = sorted(spellings[spelling])
        parts.append(f"{spelling} ({few(sources, 2)})")
        children.append(Link(f"{spelling}: {few(sources, 4)}"))
    message = (
        "resource names differ only in case: "
        + "; ".join(parts)
        + ". Kubelet resource names are case-sensitive: only the advertised spelling "
        "schedules"
    )
    odd_permitted = any(s in permitted and s not in advertised for s in spellings)
    kubevirt = view.kubevirt()
    if kubevirt is not None and (odd_permitted or not right):
        resource = object_ref(KUBEVIRT, kubevirt.namespace, kubevirt.name)
    else:
        resource = CLUSTER
    if right:
        remediation = (
            f"spell it {right[0]} everywhere (the device plugin's spelling): in VM "
            "deviceNames and in the KubeVirt CR's permittedHostDevices resourceName",
        )
    else:
        remediation = (
            "pick the spelling the device plugin will register (the sandbox plugin "
            "upper-cases pci.ids names) and use it in VMs and the KubeVirt CR",
        )
    return DiagnosisFinding(
        resource=resource,
        message=message,
        chain=Link(
            f"{resource.kind} {resource}",
            (Link(f"{len(spellings)} spellings of one resource name", tuple(children)),),
        ),
        remediation=remediation,
    )


def _diagnose(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    """Resource names equal but for case, across VMs/VMIs, the KubeVirt CR and allocatable."""
    cluster = view.cluster
    where: dict[str, dict[str, set[str]]] = {}

    def note(name: str, source: str) -> None:
        if name:
            where.setdefault(name.casefold(), {}).setdefault(name, set()).add(source)

    for vm in cluster.vms():
        for device in vm.devices:
            note(device.device_name, f"VM {vm.key}")
    for vmi in cluster.vmis():
        if not vmi.owner_vm:
            for device in vmi.devices:
                note(device.device_name, f"VMI {vmi.key}")
    permitted: set[str] = set()
    for kubevirt in cluster.kubevirts():
        for resource in kubevirt.permitted_resource_names:
            permitted.add(resource)
            note(resource, f"permitted by KubeVirt {kubevirt.namespace}/{kubevirt.name}")
    advertised: set[str] = set()
    for f in node_facts_of(view).values():
        for resource, count in f.node.allocatable.items():
            if count > 0 and not is_container_gpu_resource(resource):
                advertised.add(resource)
                note(resource, f"advertised by {f.name}")
    for folded in sorted(where):
        spellings = where[folded]
        if len(spellings) >= 2:
            yield _finding(spellings, permitted, advertised, cluster)


RESOURCE_NAME_CASE_MISMATCH_DIAGNOSIS = Diagnosis(
    id=RESOURCE_NAME_CASE_MISMATCH,
    summary=(
        "Resource names that differ only in case between VMs, the KubeVirt CR and node "
        "allocatable (kubelet resource names are case-sensitive)."
    ),
    default_action=Action.WARN,
    default_severity=Severity.MEDIUM,
    reason="Dead configuration until a VM uses it, then a VM unschedulable forever.",
    diagnose=_diagnose,
    reads=NODE_FACTS_READS | VMS_TO_RUN_READS | {KUBEVIRT},
)

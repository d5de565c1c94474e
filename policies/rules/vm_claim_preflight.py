"""vm-claim-preflight: a VM that KubeVirt 1.9 will not start from its DRA claims as written.

Two things KubeVirt v1.9.0 checks only when the VM's launcher runs (docs/dra.md, [kv-1.9]):

- one device per claim request: virt-launcher reads each ``gpus[]``/``hostDevices[]`` entry's
  device from the request it names and refuses a request with more than one ("KubeVirt only
  supports exactly one device per request (count > 1 is not supported)", pkg/dra/utils.go). A
  request with ``count`` > 1 or ``allocationMode: All`` is allocated, the pod scheduled, and the
  VM fails to start;
- the IOMMUFD gate (alpha in 1.9): virt-controller asks ``devices.kubevirt.io/iommufd`` for every
  launcher pod, so a VM runs only on a node whose KubeVirt device plugin advertises it (kernel
  6.2+, ``/dev/iommu``). When no Ready node does, every VM stays Pending.

Both are warnings: the VM object itself is valid, and the fix is elsewhere (the claim, the gate).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from policies.cluster.coverage import PROVIDER_READS, VMS_TO_RUN_READS
from policies.cluster.dra_claims import ALL_DEVICES, ClaimRequest
from policies.cluster.kinds import (
    KUBEVIRT,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
)
from policies.cluster.kubevirt import VM_STARTING_REQUESTS, KubeVirtInfo, VMIInfo, VMInfo
from policies.cluster.view import ClusterView
from policies.cluster.vms_to_run import vm_to_run, vms_to_run
from policies.vocabulary.requests import AdmissionRequest, ObjectRef
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "vm-claim-preflight"
#: From this KubeVirt minor on, virt-launcher reads devices from the driver's metadata, one per
#: request (v1.9.0 pkg/dra/utils.go resolveDevice).
ONE_DEVICE_FROM = (1, 9)
IOMMUFD_GATE = "IOMMUFD"
IOMMUFD_DEVICE = "devices.kubevirt.io/iommufd"


def _requests(vm: VMInfo | VMIInfo, view: ClusterView) -> dict[str, tuple[str, ClaimRequest]]:
    """spec.resourceClaims[] entry name -> (what it names, its requests by name)."""
    out: dict[str, tuple[str, ClaimRequest]] = {}
    for ref in vm.claims:
        if ref.claim and (claim := view.claim(vm.namespace, ref.claim)) is not None:
            source, requests = f"claim {claim.key}", claim.requests
        elif ref.template and (tpl := view.claim_template(vm.namespace, ref.template)):
            source, requests = f"claim template {tpl.key}", tpl.requests
        else:
            continue
        for request in requests:
            out[f"{ref.name}/{request.name}"] = (source, request)
    return out


def _several(request: ClaimRequest) -> str:
    """How the request asks more than one device ('' when it asks one)."""
    for choice in request.choices:
        if choice.allocation_mode == ALL_DEVICES:
            return "allocationMode All"
        if choice.count > 1:
            return f"count {choice.count}"
    return ""


def _one_device(vm: VMInfo | VMIInfo, kubevirt: KubeVirtInfo, view: ClusterView) -> list[Finding]:
    release = kubevirt.gates.release
    if release is None or release < ONE_DEVICE_FROM:
        return []
    requests = _requests(vm, view)
    out = []
    for device in vm.devices:
        if not device.uses_claim:
            continue
        found = requests.get(f"{device.claim_name}/{device.request_name}")
        if found is None or not (how := _several(found[1])):
            continue
        source, request = found
        out.append(
            Finding(
                f"{device.field}[] entry {device.name} takes its device from request "
                f"{request.name} of {source}, which asks {how}: KubeVirt "
                f"{kubevirt.gates.version} starts a VM with exactly one device per request, "
                "so the VM fails to start after the claim is allocated",
                chain=(
                    f"{kubevirt.label}: KubeVirt {kubevirt.gates.version}",
                    "virt-launcher: KubeVirt only supports exactly one device per request "
                    "(count > 1 is not supported)",
                ),
                remediation=(
                    f"give request {request.name} count 1 (allocationMode ExactCount) and add a "
                    f"request, and a {device.field}[] entry, for each further device",
                ),
                device=f"{device.claim_name}/{device.request_name}",
            )
        )
    return out


def _iommufd(vm: VMInfo | VMIInfo, kubevirt: KubeVirtInfo, view: ClusterView) -> list[Finding]:
    if not kubevirt.gates.read(IOMMUFD_GATE).on or view.healthy_provider_count(IOMMUFD_DEVICE):
        return []
    advertising = view.providers_of(IOMMUFD_DEVICE)
    where = f" (only {', '.join(advertising)}, not Ready)" if advertising else ""
    return [
        Finding(
            f"{kubevirt.label} turns on the {IOMMUFD_GATE} gate, so every virt-launcher asks "
            f"{IOMMUFD_DEVICE}, and no Ready node advertises it{where}: the VM can run nowhere",
            chain=(
                f"{kubevirt.label}: feature gate {IOMMUFD_GATE}",
                f"virt-controller: every launcher pod requests {IOMMUFD_DEVICE}",
                "nodes without /dev/iommu (kernel older than 6.2) report no healthy device",
            ),
            remediation=(
                f"remove {IOMMUFD_GATE} from the KubeVirt CR's featureGates, or run the VMs on "
                f"nodes that advertise {IOMMUFD_DEVICE} (kernel 6.2+, libvirt 12.2+)",
            ),
            device=IOMMUFD_DEVICE,
        )
    ]


def judge(vm: VMInfo | VMIInfo, view: ClusterView) -> list[Finding]:
    kubevirt = view.kubevirt()
    if kubevirt is None:
        return []
    return _one_device(vm, kubevirt, view) + _iommufd(vm, kubevirt, view)


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    vm = vm_to_run(request)
    return judge(vm, view) if vm is not None else ()


def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
    """Every VM that should run (or ownerless VMI), judged as at admission."""
    for entry in vms_to_run(view):
        for finding in judge(entry.asks, view):
            yield entry.ref, finding


POLICY = Policy(
    id=ID,
    summary=(
        "A VM that KubeVirt 1.9 will not start as its DRA claims and gates stand: a claim "
        "request it takes a device from asks more than one, or the IOMMUFD gate is on and no "
        "Ready node advertises devices.kubevirt.io/iommufd."
    ),
    scope=dict(VM_STARTING_REQUESTS),
    default_action=Action.WARN,
    default_reason=(
        "The VM object is valid and the fix is in the claim or the KubeVirt CR; the warning "
        "comes before the claim is allocated and the launcher fails."
    ),
    failure_action=Action.WARN,
    check=check,
    audit=audit,
    reads=VMS_TO_RUN_READS | PROVIDER_READS | {KUBEVIRT, RESOURCE_CLAIM, RESOURCE_CLAIM_TEMPLATE},
)

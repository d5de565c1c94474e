"""permitted-device-without-hardware: KubeVirt permits a device that no node has or advertises.

A permittedHostDevices entry whose PCI id matches no hardware, or whose resourceName no node
advertises, is silent dead configuration: KubeVirt accepts it and every VM that uses it stays
unschedulable. On UPDATE only added or changed entries get the policy's action; dead entries
that were already there are mentioned, never blocked, so an unrelated edit still goes through.
A HyperConverged (OpenShift Virtualization) is judged by what HCO will write from it
(policies/cluster/hco_translation.py), each entry named by the field the user wrote.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from policies.cluster.hardware import SOURCE_DRA, is_gpu_function
from policies.cluster.kinds import (
    DEVICE_CLASS,
    HYPERCONVERGED,
    KUBEVIRT,
    NODE,
    NODE_FEATURE,
    RESOURCE_SLICE,
    object_ref,
)
from policies.cluster.kubevirt import (
    KubeVirtInfo,
    PermittedMdev,
    PermittedPciDevice,
    PermittedUsb,
    entry_field,
)
from policies.cluster.kubevirt_config import HCO, requested_kubevirt
from policies.cluster.pciids import NVIDIA_VENDOR, PciId
from policies.cluster.vgpu import permitted_mdevs, profile_hint
from policies.cluster.view import ClusterView
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest, ObjectRef
from policies.vocabulary.text import few
from policies.vocabulary.verdicts import Action, Finding, Policy, Severity

ID = "permitted-device-without-hardware"


def _pci_key(entry: PermittedPciDevice) -> tuple[str, str, bool]:
    return (entry.selector.strip().lower(), entry.resource_name, entry.external)


def _mdev_key(entry: PermittedMdev) -> tuple[str, str, bool]:
    return (entry.selector, entry.resource_name, entry.external)


def _usb_key(entry: PermittedUsb) -> tuple[tuple[str, ...], str, bool]:
    return (entry.selectors, entry.resource_name, entry.external)


def _advertising_problem(
    resource: str, view: ClusterView, expected: str | None, vgpu: bool = False
) -> str | None:
    """``vgpu``: a mediated device's resourceName, whose answer names the profiles on offer."""
    if not resource or view.has_provider(resource):
        return None
    problem = f"no node advertises {resource}"
    if expected is not None:
        problem += f" (the sandbox device plugin would call it {expected})"
    else:
        similar = [name for name in view.advertised_like(resource) if name != resource]
        hint = profile_hint(resource, view, vgpu) if vgpu else None
        if hint is not None and hint.meant:
            problem += f" (did you mean {few(hint.meant)}? {hint.why(resource)})"
        elif similar:
            problem += f" (did you mean {few(similar)}? resource names are case-sensitive)"
        if hint is not None:
            problem += f"; {hint.offered()}"
    return problem


def pci_entry_problems(entry: PermittedPciDevice, view: ClusterView) -> tuple[str, list[str]]:
    """The entry's label ("10de:2b85 GB202 [GeForce RTX 5090]") and what is wrong with it."""
    db = view.pci_database
    problems: list[str] = []
    expected: str | None = None
    if entry.pci is None:
        label = repr(entry.selector)
        problems.append("pciVendorSelector is not a vendor:device id in hex")
    else:
        label = db.describe(entry.pci)
        if (
            entry.external
            and entry.pci.vendor == NVIDIA_VENDOR  # the only vendor the sandbox plugin serves
            and entry.pci not in db.ids_for_resource_name(entry.resource_name)
        ):
            # The plugin's own pci.ids decides the name; any spelling of any version counts.
            expected = db.sandbox_resource_name(entry.pci)
        if not view.nodes_with_hardware(entry.pci):
            known = [
                str(pci)
                for pci in view.known_hardware(entry.pci.vendor)
                if is_gpu_function(pci, db)
            ]
            seen = f" (seen: {few(known, 4)})" if known else ""
            problems.append(f"no node has this device{seen}")
    advertising = _advertising_problem(entry.resource_name, view, expected)
    if advertising is not None:
        if entry.pci is not None and _only_in_dra_slices(entry.pci, view):
            advertising += " (only the DRA driver publishes it: VMs take it from a claim)"
        problems.append(advertising)
    return label, problems


def _only_in_dra_slices(pci: PciId, view: ClusterView) -> bool:
    """The hardware is there, but only ResourceSlices show it: a VM reaches it through a
    claim, not through a deviceName that no device plugin advertises."""
    holders = view.nodes_with_hardware(pci)
    return bool(holders) and all(sources == {SOURCE_DRA} for sources in holders.values())


def judge(kubevirt: KubeVirtInfo, before: KubeVirtInfo | None, view: ClusterView) -> list[Finding]:
    """Dead entries of ``kubevirt``; those already in ``before`` are only mentioned."""
    old_pci = {_pci_key(e) for e in before.pci_devices} if before else set()
    old_mdev = {_mdev_key(e) for e in before.mediated_devices} if before else set()
    old_usb = {_usb_key(e) for e in before.usb_devices} if before else set()
    findings: list[Finding] = []
    mdevs = permitted_mdevs(kubevirt)

    def report(field: str, where: str, problems: list[str], existed: bool) -> None:
        message = f"{where}: {'; '.join(problems)}; VMs using it never schedule"
        if existed:
            findings.append(Finding(f"{message} (already there before this change)", Action.WARN))
        else:
            findings.append(Finding(message, remediation=(f"remove or correct {field}",)))

    for entry in kubevirt.pci_devices:
        label, problems = pci_entry_problems(entry, view)
        if problems:
            field = entry_field(entry)
            where = f"{field} {label}"
            report(field, where, problems, _pci_key(entry) in old_pci)
    # mdev and USB entries: only their resourceName can be checked (field, label, name, existed).
    by_name_only = [
        (entry_field(m), repr(m.selector), m.resource_name, _mdev_key(m) in old_mdev)
        for m in kubevirt.mediated_devices
    ] + [
        (
            entry_field(u),
            f"({', '.join(u.selectors) or 'no selectors'})",
            u.resource_name,
            _usb_key(u) in old_usb,
        )
        for u in kubevirt.usb_devices
    ]
    for field, label, resource, existed in by_name_only:
        advertising = _advertising_problem(resource, view, None, resource in mdevs)
        if advertising is not None:
            report(field, f"{field} {label}", [advertising], existed)
    return findings


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    if request.obj is None:
        return ()
    before = None
    if request.operation == UPDATE and request.old is not None:
        before = requested_kubevirt(request, view, old=True)
    after = requested_kubevirt(request, view)
    return judge(after, before, view) if after is not None else ()


def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
    for kubevirt in view.kubevirts():
        ref = object_ref(KUBEVIRT, kubevirt.namespace, kubevirt.name)
        for finding in judge(kubevirt, None, view):
            yield ref, finding


POLICY = Policy(
    id=ID,
    summary=(
        "The KubeVirt CR permits a PCI id, mdev name, USB device or resourceName that no node's "
        "hardware matches or no node advertises; on OpenShift Virtualization, the HyperConverged "
        "CR that HCO translates onto it does."
    ),
    scope={KUBEVIRT: frozenset({CREATE, UPDATE}), HYPERCONVERGED: frozenset({CREATE, UPDATE})},
    owners=(HCO,),
    default_action=Action.WARN,
    default_reason=(
        "Dead configuration harms nothing running; hardware may be on its way. Say it loudly, "
        "do not block the KubeVirt CR, which carries unrelated settings too."
    ),
    failure_action=Action.WARN,
    check=check,
    audit=audit,
    reads=frozenset({DEVICE_CLASS, KUBEVIRT, NODE, NODE_FEATURE, RESOURCE_SLICE}),
    audit_severity=Severity.MEDIUM,
)

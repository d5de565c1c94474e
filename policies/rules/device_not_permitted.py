"""device-not-permitted: a VM asks for a device healthy nodes have but KubeVirt does not permit.

The device is there (a Ready, schedulable, untainted node advertises the deviceName), yet
virt-controller refuses the VMI: "GPU X is not permitted in permittedHostDevices configuration",
or hostDevices[] without the HostDevices feature gate (Alpha in every KubeVirt release: on only
when featureGates lists it; policies/cluster/feature_gates.py). When no healthy node advertises the
device, passthrough-without-ready-provider reports it, permission remarks included; this policy
covers the case where permission is the only thing missing. On OpenShift Virtualization (a
KubeVirt CR HCO writes from a HyperConverged) the finding names the HyperConverged's entry, or
its absence, and the field to edit there (docs/openshift.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from policies.cluster.coverage import ASKED_TO_RUN_READS, PROVIDER_READS
from policies.cluster.feature_gates import HOST_DEVICES_GATE, gate_off, turn_on_steps
from policies.cluster.hyperconverged import HyperConvergedInfo
from policies.cluster.kinds import (
    KUBEVIRT,
)
from policies.cluster.kubevirt import DeviceRequest, KubeVirtInfo
from policies.cluster.kubevirt_config import hco_owner
from policies.cluster.view import ClusterView
from policies.cluster.vms_to_run import (
    VM_DEVICE_REQUESTS,
    VM_DEVICE_SUBJECTS,
    asked_to_run,
    vms_to_run,
)
from policies.vocabulary.requests import AdmissionRequest, ObjectRef
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "device-not-permitted"


def _hco_entry(device: DeviceRequest, hc: HyperConvergedInfo) -> str:
    """The chain's link: the HyperConverged's entry for the device, kept disabled, or none."""
    disabled = [d.field for d in hc.disabled if d.resource_name == device.device_name]
    if disabled:
        return f"HyperConverged {hc.key}: {disabled[0]} has disabled: true (HCO leaves it out)"
    return f"HyperConverged {hc.key}: no entry for {device.device_name} in {hc.permitted_field}"


def _hco_step(device: DeviceRequest, hc: HyperConvergedInfo, selector: str) -> str:
    disabled = [d.field for d in hc.disabled if d.resource_name == device.device_name]
    if disabled:
        return f"remove disabled: true from {disabled[0]} of HyperConverged {hc.key}"
    return (
        f"add {{pciDeviceSelector: {selector}, resourceName: {device.device_name}, "
        f"externalResourceProvider: true}} to {hc.permitted_field}.pciHostDevices of "
        f"HyperConverged {hc.key} (HCO writes it onto the KubeVirt CR)"
    )


def _remediation(device: DeviceRequest, kubevirt: KubeVirtInfo, view: ClusterView) -> list[str]:
    where = f"KubeVirt {kubevirt.namespace}/{kubevirt.name}"
    steps = []
    name = device.device_name
    hc = hco_owner(kubevirt, view)
    if not kubevirt.permits(device):
        ids = view.pci_database.ids_for_resource_name(name)
        selector = str(sorted(ids)[0]) if ids else "<vendor:device>"
        if hc is not None:
            steps.append(_hco_step(device, hc, selector))
        else:
            steps.append(
                f"add {{pciVendorSelector: {selector}, resourceName: {name}, "
                f"externalResourceProvider: true}} to spec.configuration.permittedHostDevices."
                f"pciHostDevices of {where}"
            )
    gate = kubevirt.lacks_gate_for(device)
    if gate is not None:
        *first, last = turn_on_steps([gate], where)
        steps.extend([*first, f"{last}, or move the device to gpus[]"])
    return steps


def judge(devices: Sequence[DeviceRequest], view: ClusterView) -> list[Finding]:
    kubevirt = view.kubevirt()
    if kubevirt is None:
        return []
    findings = []
    seen: set[tuple[str, str]] = set()
    for device in devices:
        key = (device.field, device.device_name)
        if not device.device_name or key in seen:
            continue
        seen.add(key)
        if view.healthy_provider_count(device.device_name) == 0:
            continue  # passthrough-without-ready-provider's case
        reasons = []
        if not kubevirt.permits(device):
            reasons.append("does not permit it (permittedHostDevices)")
        gate = kubevirt.lacks_gate_for(device)
        if gate is not None:
            reasons.append(
                f"{gate_off(gate)} the {HOST_DEVICES_GATE} feature gate hostDevices[] need"
            )
        if not reasons:
            continue
        hc = hco_owner(kubevirt, view)
        fix = (
            "the KubeVirt CR first"
            if hc is None
            else f"HyperConverged {hc.key} first: HCO writes the KubeVirt CR from it"
        )
        message = (
            f"{device.device_name} ({device.field}[{device.name}]): healthy nodes advertise it, "
            f"but KubeVirt {kubevirt.namespace}/{kubevirt.name} {' and '.join(reasons)}, so it "
            f"will refuse to start the VM. Fix {fix}."
        )
        chain: tuple[str, ...] = ()
        if hc is not None and not kubevirt.permits(device):
            chain = (
                f"{device.field}[{device.name}]: {device.device_name}",
                _hco_entry(device, hc),
                f"KubeVirt {kubevirt.namespace}/{kubevirt.name}: does not permit it",
            )
        remediation = tuple(_remediation(device, kubevirt, view))
        findings.append(Finding(message, chain=chain, remediation=remediation))
    return findings


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    vm = asked_to_run(request, view)
    return judge(vm.devices, view) if vm is not None else ()


def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
    """VMs that want to run, and live VMIs no VM owns, that KubeVirt would refuse."""
    for vm in vms_to_run(view):
        for finding in judge(vm.devices, view):
            yield vm.ref, finding


POLICY = Policy(
    id=ID,
    summary=(
        f"{VM_DEVICE_SUBJECTS} asks for a deviceName that healthy nodes advertise but "
        "the KubeVirt CR does not permit (permittedHostDevices, "
        "or the HostDevices feature gate for hostDevices[])."
    ),
    scope=VM_DEVICE_REQUESTS,
    default_action=Action.WARN,
    default_reason=(
        'KubeVirt refuses to start the VM ("GPU X is not permitted in permittedHostDevices '
        'configuration"), but the VM object is valid and the fix belongs in the KubeVirt CR.'
    ),
    failure_action=Action.WARN,
    check=check,
    audit=audit,
    reads=ASKED_TO_RUN_READS | PROVIDER_READS | {KUBEVIRT},
)

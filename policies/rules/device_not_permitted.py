"""device-not-permitted: a VM asks for a device healthy nodes have but KubeVirt does not permit.

The device is there (a Ready, schedulable, untainted node advertises the deviceName), yet
virt-controller refuses the VMI: "GPU X is not permitted in permittedHostDevices configuration",
or hostDevices[] without the HostDevices feature gate (Alpha in every KubeVirt release: on only
when featureGates lists it; policies/cluster/feature_gates.py). When no healthy node advertises the
device, passthrough-without-ready-provider reports it, permission remarks included; this policy
covers the case where permission is the only thing missing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from policies.cluster.feature_gates import HOST_DEVICES_GATE, gate_off, turn_on_steps
from policies.cluster.kinds import KUBEVIRT, NODE
from policies.cluster.kubevirt import VM_STARTING_REQUESTS, DeviceRequest, KubeVirtInfo
from policies.cluster.view import ClusterView
from policies.cluster.vms_to_run import vm_to_run, vms_to_run
from policies.vocabulary.requests import AdmissionRequest, ObjectRef
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "device-not-permitted"


def _remediation(device: DeviceRequest, kubevirt: KubeVirtInfo, view: ClusterView) -> list[str]:
    where = f"KubeVirt {kubevirt.namespace}/{kubevirt.name}"
    steps = []
    name = device.device_name
    if not kubevirt.permits(device):
        ids = view.pci_database.ids_for_resource_name(name)
        selector = str(sorted(ids)[0]) if ids else "<vendor:device>"
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
        message = (
            f"{device.device_name} ({device.field}[{device.name}]): healthy nodes advertise it, "
            f"but KubeVirt {kubevirt.namespace}/{kubevirt.name} {' and '.join(reasons)}, so it "
            "will refuse to start the VM. Fix the KubeVirt CR first."
        )
        findings.append(Finding(message, remediation=tuple(_remediation(device, kubevirt, view))))
    return findings


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    vm = vm_to_run(request)
    return judge(vm.devices, view) if vm is not None else ()


def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
    """VMs that want to run, and live VMIs no VM owns, that KubeVirt would refuse."""
    for vm in vms_to_run(view):
        for finding in judge(vm.devices, view):
            yield vm.ref, finding


POLICY = Policy(
    id=ID,
    summary=(
        "A VirtualMachine that should run, or a new VirtualMachineInstance, asks for a deviceName "
        "that healthy nodes advertise but the KubeVirt CR does not permit (permittedHostDevices, "
        "or the HostDevices feature gate for hostDevices[])."
    ),
    scope=VM_STARTING_REQUESTS,
    default_action=Action.WARN,
    default_reason=(
        'KubeVirt refuses to start the VM ("GPU X is not permitted in permittedHostDevices '
        'configuration"), but the VM object is valid and the fix belongs in the KubeVirt CR.'
    ),
    failure_action=Action.WARN,
    check=check,
    audit=audit,
    reads=frozenset({NODE, KUBEVIRT}),
)

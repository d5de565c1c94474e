"""claim-without-dra-feature-gate: a VM takes a device from a claim the KubeVirt CR does not allow.

With KubeVirt's DRA support a gpus[] or hostDevices[] entry names a claim (``claimName``,
``requestName``) instead of a deviceName. KubeVirt admits such a VMI only with the feature gate
of its field on: ``GPUsWithDRA`` for gpus[], ``HostDevicesWithDRA`` for hostDevices[] (which, like
every hostDevices[] entry, need ``HostDevices`` too); without it the VMI is rejected ("contains
DRA enabled GPUs but feature gate is not enabled", kubevirt/kubevirt pkg/dra/admitter;
``validateHostDevicesWithPassthroughEnabled`` in the VMI admitter). The DRA gates are Alpha
before KubeVirt 1.9 (on only when listed in developerConfiguration.featureGates) and Beta from
1.9 (on unless disabledFeatureGates lists them); HostDevices stays Alpha (policies/
feature_gates.py reads them by the CR's version). So a VM that should run never starts, and the
device-plugin policies say nothing of such entries (no deviceName; with the gate on, KubeVirt
checks no permittedHostDevices for them). Removing a gate that VMs need is
permitted-device-in-use-removed's case.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from policies.cluster.coverage import ASKED_TO_RUN_READS
from policies.cluster.feature_gates import (
    GateReading,
    gate_state,
    turn_on_instruction,
    turn_on_steps,
    why_off,
)
from policies.cluster.kinds import (
    KUBEVIRT,
)
from policies.cluster.kubevirt import DeviceRequest, KubeVirtInfo
from policies.cluster.view import ClusterView
from policies.cluster.vms_to_run import (
    VM_DEVICE_REQUESTS,
    VM_DEVICE_SUBJECTS,
    asked_to_run,
    vms_to_run,
)
from policies.vocabulary.requests import AdmissionRequest, ObjectRef
from policies.vocabulary.text import few
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "claim-without-dra-feature-gate"


def judge(devices: Sequence[DeviceRequest], kubevirt: KubeVirtInfo | None) -> list[Finding]:
    """One finding for the VM when entries that use a claim lack gates they need."""
    if kubevirt is None:
        return []  # no KubeVirt CR to judge by
    fields: list[str] = []
    claims: list[str] = []
    off: dict[str, GateReading] = {}
    for device in devices:
        missing = kubevirt.missing_gates(device) if device.uses_claim else ()
        if missing:
            if f"{device.field}[]" not in fields:
                fields.append(f"{device.field}[]")
            claims.append(f"{device.field}[{device.name}] takes a device from {device.label}")
            off.update((r.gate, r) for r in missing if r.gate not in off)
    if not off:
        return []
    readings = list(off.values())
    where = f"KubeVirt {kubevirt.namespace}/{kubevirt.name}"
    if any(r.disabled for r in readings):
        step = turn_on_instruction(readings)
    else:
        step = f"add {'it' if len(readings) == 1 else 'them'} there"
    message = (
        f"{few(fields)} use DRA claims but {where} {why_off(readings)}, so KubeVirt rejects "
        f"the VMI: {step} first."
    )
    return [
        Finding(
            message,
            chain=(
                *claims,
                f"{where}: {gate_state(readings)}",
                "KubeVirt rejects the VMI: the VM never starts",
            ),
            remediation=turn_on_steps(readings, where),
        )
    ]


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    vm = asked_to_run(request, view)
    return judge(vm.devices, view.kubevirt()) if vm is not None else ()


def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
    """VMs that want to run, and live VMIs no VM owns, that KubeVirt would reject."""
    kubevirt = view.kubevirt()
    for vm in vms_to_run(view):
        for finding in judge(vm.devices, kubevirt):
            yield vm.ref, finding


POLICY = Policy(
    id=ID,
    summary=(
        f"{VM_DEVICE_SUBJECTS} takes a device in "
        "gpus[] or hostDevices[] from a DRA claim while the KubeVirt CR lacks the feature gates "
        "for it (GPUsWithDRA for gpus[]; HostDevicesWithDRA and HostDevices for hostDevices[])."
    ),
    scope=VM_DEVICE_REQUESTS,
    default_action=Action.WARN,
    default_reason=(
        "KubeVirt rejects the VMI itself, and the fix belongs in the KubeVirt CR, not in the VM, "
        "which is valid once the gate is on: say why the VM will not start, do not block it."
    ),
    failure_action=Action.WARN,
    check=check,
    audit=audit,
    reads=ASKED_TO_RUN_READS | {KUBEVIRT},
)

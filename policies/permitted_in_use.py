"""permitted-device-in-use-removed: a KubeVirt CR update takes away what VMs already use.

KubeVirt refuses to start a VMI whose deviceName is not in permittedHostDevices ("GPU X is not
permitted in permittedHostDevices configuration"), hostDevices[] without the HostDevices
feature gate, and gpus[]/hostDevices[] that take their device from a DRA claim without the
GPUsWithDRA/HostDevicesWithDRA gate (kubevirt/kubevirt pkg/dra/admitter). An update that
removes a resourceName, renames it or changes its case (names are case-sensitive), or removes a
gate, leaves running VMs alone but refuses their next start; VMs that are stopped fail when
someone starts them, so they only get a warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from policies.kinds import KUBEVIRT, VIRTUAL_MACHINE, VIRTUAL_MACHINE_INSTANCE
from policies.model import UPDATE, Action, AdmissionRequest, Finding, Policy
from policies.objects import (
    GPUS_WITH_DRA_GATE,
    HOST_DEVICES_GATE,
    HOST_DEVICES_WITH_DRA_GATE,
    KubeVirtInfo,
    VMIInfo,
    VMInfo,
)
from policies.projections import request_projection
from policies.text import few
from policies.view import ClusterView

ID = "permitted-device-in-use-removed"
#: Each feature gate VMs' devices need (``DeviceRequest.gates_needed``): what needs it, the step.
GATE_USES = {
    HOST_DEVICES_GATE: ("hostDevices[]", "Keep the gate, or move the devices to gpus[] first."),
    GPUS_WITH_DRA_GATE: ("gpus[] from claims", "Keep the gate while they use claims."),
    HOST_DEVICES_WITH_DRA_GATE: (
        "hostDevices[] from claims",
        "Keep the gate while they use claims.",
    ),
}


@dataclass(frozen=True, slots=True)
class Users:
    """The VMs and live VMIs that use something, named once each (a VM and its VMI share a key)."""

    keys: tuple[str, ...]
    running: bool
    """Some user runs or should run: its next (re)start is what breaks."""

    @classmethod
    def of(cls, vms: Sequence[VMInfo], vmis: Sequence[VMIInfo]) -> Users:
        live = [v for v in vmis if v.live]
        keys = sorted({v.key for v in vms} | {v.key for v in live})
        return cls(tuple(keys), bool(live) or any(v.should_run for v in vms))


def _selectors(kubevirt: KubeVirtInfo) -> dict[str, str]:
    """resourceName -> the selector that permits it (PCI ids lower-cased: they are hex)."""
    out = {d.resource_name: d.selector.strip().lower() for d in kubevirt.pci_devices}
    out.update({d.resource_name: d.selector for d in kubevirt.mediated_devices})
    return out


def _how(name: str, before: KubeVirtInfo, after: KubeVirtInfo) -> tuple[str, str, str]:
    """What the update does to a resourceName that is gone: (what, next step, remediation)."""
    selector = _selectors(before).get(name, "")
    successors = sorted(r for r, s in _selectors(after).items() if s == selector)
    recased = [r for r in successors if r.casefold() == name.casefold()]
    if recased:
        what = f"re-cases {name} to {recased[0]}"
    elif successors:
        what = f"renames {name} to {few(successors)}"
    else:
        return (
            f"removes {name}",
            "Keep it until no VM uses it.",
            f"keep {selector} permitted as {name} until no VM or VMI uses it",
        )
    return (
        what,
        "Keep the old name too, or move the VMs first.",
        f"permit {selector} under both names, set deviceName: {successors[0]} in the VMs, "
        f"then drop {name}",
    )


def _finding(what: str, users: Users, refusal: str, step: str, remediation: str) -> Finding:
    verb = "uses" if len(users.keys) == 1 else "use"
    message = f"this update {what} while {few(list(users.keys))} {verb} it: {refusal}. {step}"
    if not users.running:
        message += " (only stopped VMs use it)"
    return Finding(
        message,
        max_action=None if users.running else Action.WARN,
        remediation=(remediation,),
    )


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    if request.obj is None or request.old is None:
        return ()
    before: KubeVirtInfo = request_projection(request, old=True)
    after: KubeVirtInfo = request_projection(request)
    findings: list[Finding] = []
    gone = before.permitted_resource_names - after.permitted_resource_names
    for name in sorted(gone):
        users = Users.of(view.vms_using(name), view.vmis_using(name))
        if users.keys:
            what, step, remediation = _how(name, before, after)
            refusal = "KubeVirt refuses their next start"
            findings.append(_finding(what, users, refusal, step, remediation))
    for gate, (needs, step) in GATE_USES.items():
        if gate not in before.feature_gates or gate in after.feature_gates:
            continue
        users = Users.of(view.vms_needing_gate(gate), view.vmis_needing_gate(gate))
        if users.keys:
            findings.append(
                _finding(
                    f"removes the {gate} feature gate",
                    users,
                    f"KubeVirt refuses to start VMs with {needs}",
                    step,
                    f"keep {gate} in spec.configuration.developerConfiguration."
                    f"featureGates until no VM uses {needs} ({', '.join(users.keys)})",
                )
            )
    return findings


POLICY = Policy(
    id=ID,
    summary=(
        "A KubeVirt CR update removes, renames or re-cases a permittedHostDevices resourceName "
        "(pci or mdev) that VMs or live VMIs use, or removes a feature gate their devices need "
        "(HostDevices for hostDevices, GPUsWithDRA or HostDevicesWithDRA for devices from "
        "claims)."
    ),
    scope={KUBEVIRT: frozenset({UPDATE})},
    default_action=Action.DENY,
    default_reason=(
        'KubeVirt refuses the next start of every VM that uses it ("GPU X is not permitted in '
        'permittedHostDevices configuration"): each restart becomes an outage. Only stopped VMs '
        "get a warning. A policy error only warns: the CR carries unrelated settings too."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=frozenset({VIRTUAL_MACHINE, VIRTUAL_MACHINE_INSTANCE}),
)

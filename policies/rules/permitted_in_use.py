"""permitted-device-in-use-removed: a KubeVirt CR update takes away what VMs already use.

KubeVirt refuses to start a VMI whose deviceName is not in permittedHostDevices ("GPU X is not
permitted in permittedHostDevices configuration"), hostDevices[] without the HostDevices
feature gate, and gpus[]/hostDevices[] that take their device from a DRA claim without the
GPUsWithDRA/HostDevicesWithDRA gate (kubevirt/kubevirt pkg/dra/admitter). An update that
removes a resourceName, renames it or changes its case (names are case-sensitive), or removes a
gate, leaves running VMs alone but refuses their next start; VMs that are stopped fail when
someone starts them, so they only get a warning. A gate is read as KubeVirt reads it for the CR's
version (policies/cluster/feature_gates.py): on 1.9 removing the Beta GPUsWithDRA from featureGates
changes nothing, while adding it to disabledFeatureGates turns it off. When the CR reports no
version, a change that turns a gate off on only one side of 1.9 is a warning that says so.
A HyperConverged update is judged by what HCO will write from it (an entry set to
``disabled: true`` is dropped, so it counts as removed: policies/cluster/hyperconverged.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from policies.cluster.feature_gates import (
    BETA_NOTE,
    BETA_ON_FROM,
    DISABLED_GATES_FIELD,
    FEATURE_GATES_FIELD,
    GPUS_WITH_DRA_GATE,
    HOST_DEVICES_GATE,
    HOST_DEVICES_WITH_DRA_GATE,
    UNKNOWN_NOTE,
    UNKNOWN_READ_AS,
    FeatureGates,
    Release,
    read_gate,
)
from policies.cluster.hyperconverged import HyperConvergedInfo
from policies.cluster.kinds import (
    HYPERCONVERGED,
    KUBEVIRT,
    VIRTUAL_MACHINE,
    VIRTUAL_MACHINE_INSTANCE,
    VM_CLUSTER_INSTANCETYPE,
    VM_INSTANCETYPE,
)
from policies.cluster.kubevirt import KubeVirtInfo, VMIInfo, VMInfo
from policies.cluster.kubevirt_config import HCO, requested_kubevirt
from policies.cluster.projections import request_projection
from policies.cluster.view import ClusterView
from policies.vocabulary.requests import UPDATE, AdmissionRequest
from policies.vocabulary.text import few
from policies.vocabulary.verdicts import Action, Finding, Policy

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
    """resourceName -> the selector that permits it (PCI ids lower-cased: they are hex; a USB
    entry's vendor:product pairs, joined)."""
    out = {d.resource_name: d.selector.strip().lower() for d in kubevirt.pci_devices}
    out.update({d.resource_name: d.selector for d in kubevirt.mediated_devices})
    usb = kubevirt.usb_devices
    out.update({u.resource_name: ", ".join(u.selectors) for u in usb if u.selectors})
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


def _finding(
    what: str, users: Users, refusal: str, step: str, remediation: tuple[str, ...], sure: bool
) -> Finding:
    """``sure``: the harm does not hang on a version the CR does not report."""
    verb = "uses" if len(users.keys) == 1 else "use"
    message = f"this update {what} while {few(list(users.keys))} {verb} it: {refusal}. {step}"
    if not users.running:
        message += " (only stopped VMs use it)"
    return Finding(
        message,
        max_action=None if users.running and sure else Action.WARN,
        remediation=remediation,
    )


@dataclass(frozen=True, slots=True)
class GateChange:
    """How an update turns a gate off, for the CR's version."""

    removed: bool
    """It leaves featureGates."""
    disabled: bool
    """It enters disabledFeatureGates."""
    sure: bool
    """Off whatever the version: False when the CR reports none and only one side of 1.9
    reads it off."""
    note: str = ""

    @property
    def verb(self) -> str:
        if self.removed and self.disabled:
            return "removes and disables"
        return "disables" if self.disabled else "removes"


def _turned_off(gate: str, before: FeatureGates, after: FeatureGates, release: Release) -> bool:
    was = read_gate(gate, before.enabled, before.disabled, release)
    return was.on and not read_gate(gate, after.enabled, after.disabled, release).on


def gate_change(gate: str, before: FeatureGates, after: FeatureGates) -> GateChange | None:
    """None when the update leaves ``gate`` as it was. Read for the CR's version (the update's
    status, else the stored one's); when neither reports one, for before 1.9 and for 1.9."""
    release = after.release or before.release
    note = ""
    if release is not None:
        if not _turned_off(gate, before, after, release):
            return None
        sure = True
    else:
        early = _turned_off(gate, before, after, UNKNOWN_READ_AS)
        late = _turned_off(gate, before, after, BETA_ON_FROM)
        if not (early or late):
            return None
        sure = early and late
        beta = BETA_NOTE.format(which="this gate is")
        if not late:
            note = f" ({UNKNOWN_NOTE}; {beta})"
        elif not early:
            note = f" (its version is unknown; {beta}, and this turns it off)"
    return GateChange(
        removed=gate in before.enabled and gate not in after.enabled,
        disabled=gate in after.disabled and gate not in before.disabled,
        sure=sure,
        note=note,
    )


def _disabled_in(request: AdmissionRequest) -> dict[str, str]:
    """A HyperConverged's entries kept with ``disabled: true``: resourceName -> field."""
    if request.group_kind != HYPERCONVERGED:
        return {}
    hc: HyperConvergedInfo = request_projection(request)
    return {d.resource_name: d.field for d in hc.disabled}


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    if request.obj is None or request.old is None:
        return ()
    before = requested_kubevirt(request, view, old=True)
    after = requested_kubevirt(request, view)
    if before is None or after is None:
        return ()
    findings: list[Finding] = []
    gone = before.permitted_resource_names - after.permitted_resource_names
    disabled = _disabled_in(request)
    for name in sorted(gone):
        users = Users.of(view.vms_using(name), view.vmis_using(name))
        if users.keys:
            what, step, remediation = _how(name, before, after)
            if name in disabled:
                what = f"disables {name} ({disabled[name]} disabled: true: HCO drops it)"
            refusal = "KubeVirt refuses their next start"
            findings.append(_finding(what, users, refusal, step, (remediation,), sure=True))
    for gate, (needs, step) in GATE_USES.items():
        change = gate_change(gate, before.gates, after.gates)
        if change is None:
            continue
        users = Users.of(view.vms_needing_gate(gate), view.vmis_needing_gate(gate))
        if users.keys:
            until = f"until no VM uses {needs} ({', '.join(users.keys)})"
            keep = []
            if change.removed:
                keep.append(f"keep {gate} in {FEATURE_GATES_FIELD} {until}")
            if change.disabled:
                keep.append(f"keep {gate} out of {DISABLED_GATES_FIELD} {until}")
            what = f"{change.verb} the {gate} feature gate{change.note}"
            refusal = f"KubeVirt refuses to start VMs with {needs}"
            findings.append(_finding(what, users, refusal, step, tuple(keep), change.sure))
    return findings


POLICY = Policy(
    id=ID,
    summary=(
        "A KubeVirt CR update removes, renames or re-cases a permittedHostDevices resourceName "
        "(pci or mdev) that VMs or live VMIs use, or removes a feature gate their devices need "
        "(HostDevices for hostDevices, GPUsWithDRA or HostDevicesWithDRA for devices from "
        "claims); on OpenShift Virtualization, a HyperConverged update whose translation does "
        "(a disabled entry counts as removed)."
    ),
    scope={KUBEVIRT: frozenset({UPDATE}), HYPERCONVERGED: frozenset({UPDATE})},
    owners=(HCO,),
    default_action=Action.DENY,
    default_reason=(
        'KubeVirt refuses the next start of every VM that uses it ("GPU X is not permitted in '
        'permittedHostDevices configuration"): each restart becomes an outage. Only stopped VMs '
        "get a warning. A policy error only warns: the CR carries unrelated settings too."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=frozenset(
        {VIRTUAL_MACHINE, VIRTUAL_MACHINE_INSTANCE, VM_INSTANCETYPE, VM_CLUSTER_INSTANCETYPE}
    ),
    # A VM takes devices from its instancetype too (vms_using); none means no VM does.
)

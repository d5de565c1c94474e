"""kubevirt-config-reverted-by-hco: configuration that HCO will not carry to the KubeVirt CR.

On OpenShift Virtualization the HyperConverged Cluster Operator (HCO) owns the KubeVirt CR: it
writes it from the HyperConverged CR (``NewKubeVirt``, controllers/handlers/kubevirt.go of
kubevirt/hyperconverged-cluster-operator) and, on its next reconcile, overwrites any spec that
differs. A direct edit of that CR by anyone but HCO is therefore undone within seconds: a permitted
device added there disappears, one removed comes back. The supported ways are the HyperConverged's
own fields, or its ``kubevirt.kubevirt.io/jsonpatch`` annotation, which HCO applies to the CR it
writes and reports with the HyperConverged's ``TaintedConfiguration`` condition (docs/openshift.md).

The second case is that annotation when it does not apply: HCO's ``ApplyPatchToSpec`` then fails,
HCO writes no KubeVirt CR at all ("invalid jsonPatch in the kubevirt.kubevirt.io/jsonpatch
annotation"), and on an update HCO's own webhook refuses the HyperConverged (``checkOperands``).
The third is an annotation gpu-guard cannot apply in full because an operation needs a field of
the KubeVirt CR it does not model, and that operation writes permitted devices or feature gates:
what HCO writes there is unknown, no policy judges it, and the warning says so with the
operation's index. One that needs such a field but writes elsewhere is left to HCO's webhook
(the other operations are still applied and judged).

Both warn: the edit harms nothing by itself (HCO undoes it, or refuses the patch), and a deny
on the KubeVirt CR would get in the way of whoever is recovering a cluster by hand.
HCO's own writes and dry runs never reach the policy (``kubevirt_config.is_hco_operator_request``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from policies.cluster.hco_translation import Translation
from policies.cluster.hyperconverged import (
    JSONPATCH_ANNOTATION,
    HyperConvergedInfo,
    written_by_hco,
)
from policies.cluster.kinds import HYPERCONVERGED, KUBEVIRT, object_ref
from policies.cluster.kubevirt import KubeVirtInfo
from policies.cluster.kubevirt_config import (
    HCO,
    hco_owned_edit,
    request_translation,
    translation_of,
)
from policies.cluster.projections import request_projection
from policies.cluster.view import ClusterView
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest, ObjectRef
from policies.vocabulary.text import few
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "kubevirt-config-reverted-by-hco"


def _changed(
    before: KubeVirtInfo | None, after: KubeVirtInfo, hc: HyperConvergedInfo
) -> list[tuple[str, str]]:
    """What the edit changes that the policies read, each with the HyperConverged field for it."""
    if before is None:
        return [("the KubeVirt CR", "the HyperConverged's spec")]
    out = []
    devices = ("pci_devices", "mediated_devices", "usb_devices")
    if any(getattr(before, d) != getattr(after, d) for d in devices):
        out.append(("permittedHostDevices", hc.permitted_field))
    if (before.gates.enabled, before.gates.disabled) != (after.gates.enabled, after.gates.disabled):
        out.append(("the feature gates", hc.gates_field))
    if before.eviction_strategy != after.eviction_strategy:
        out.append(("evictionStrategy", "spec.evictionStrategy"))
    return out


def _direct_edit(request: AdmissionRequest, view: ClusterView) -> list[Finding]:
    hc = hco_owned_edit(request, view)
    if hc is None or request.obj is None:
        return []
    after: KubeVirtInfo = request_projection(request)
    before: KubeVirtInfo | None = request_projection(request, old=True)
    changed = _changed(before, after, hc)
    if not changed:
        return []
    what = few([w for w, _ in changed])
    fields = ", ".join(f for _, f in changed)
    message = (
        f"HCO reverts this edit of {what}: it writes this KubeVirt CR from HyperConverged "
        f"{hc.key}. Set {fields} there instead, or its jsonpatch annotation."
    )
    return [
        Finding(
            message,
            chain=(
                f"KubeVirt {after.namespace}/{after.name}: labelled as HCO's",
                f"HyperConverged {hc.key}: what HCO writes onto it",
            ),
            remediation=(
                f"edit HyperConverged {hc.key}: {fields}",
                f"or set the {JSONPATCH_ANNOTATION} annotation of HyperConverged {hc.key} to a "
                "JSON Patch of the KubeVirt CR",
            ),
        )
    ]


def _annotation(translation: Translation, whose: str) -> Finding | None:
    """What the jsonpatch annotation does to the translation: a patch HCO refuses, or one whose
    effect on what the policies read gpu-guard cannot tell (it is then judged by no policy)."""
    if translation.patch_problem:
        return Finding(
            f"{translation.patch_problem}, so HCO writes no KubeVirt CR from {whose}. "
            "Correct or remove the annotation.",
            remediation=(f"correct the {JSONPATCH_ANNOTATION} annotation",),
        )
    if not translation.known:
        return Finding(
            f"{translation.cannot_tell} and it writes permitted devices or feature gates, so no "
            f"policy judges what HCO writes from {whose}. Check the annotation by hand "
            "against the KubeVirt CR HCO wrote.",
            remediation=(f"kubectl get kubevirt -n {translation.kubevirt.namespace} -o yaml",),
        )
    return None


def _patch_problem(request: AdmissionRequest, view: ClusterView) -> list[Finding]:
    translation = request_translation(request, view)
    found = None if translation is None else _annotation(translation, "this HyperConverged")
    return [] if found is None else [found]


def _differences(translated: KubeVirtInfo, in_force: KubeVirtInfo) -> list[str]:
    """Where the CR in force differs from the translation, in what the policies read."""
    out = []
    if translated.permitted_resource_names != in_force.permitted_resource_names:
        extra = sorted(in_force.permitted_resource_names - translated.permitted_resource_names)
        missing = sorted(translated.permitted_resource_names - in_force.permitted_resource_names)
        said = [f"permits {few(extra)} that HCO would not"] if extra else []
        said += [f"lacks {few(missing)} that HCO would permit"] if missing else []
        out.append("; ".join(said))
    gates = ("GPUsWithDRA", "HostDevicesWithDRA", "HostDevices")
    for gate in gates:
        now, would = in_force.gates.read(gate).on, translated.gates.read(gate).on
        if now != would:
            state = {True: "on", False: "off"}
            out.append(f"has {gate} {state[now]} where HCO would write it {state[would]}")
    return out


def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
    """Each HyperConverged whose KubeVirt CR in force is not what HCO would write from it: HCO
    could not apply it (virt-operator refused a gate in both lists, the patch fails) or has not
    yet. The CR in force is what KubeVirt does; the message says what the HyperConverged asks."""
    for hc in view.hyperconvergeds():
        ref = object_ref(HYPERCONVERGED, hc.namespace, hc.name)
        translation = translation_of(hc, view)
        found = _annotation(translation, "it")
        if found is not None:
            yield ref, found
            continue
        in_force = written_by_hco(hc, view.kubevirts_in(hc.namespace))
        if in_force is None:
            continue
        differences = _differences(translation.kubevirt, in_force)
        if not differences:
            continue
        both = translation.kubevirt.gates.in_both
        why = (
            f"virt-operator refuses {few(both)} in both gate lists"
            if both
            else "HCO has not reconciled it yet, or could not"
        )
        yield (
            ref,
            Finding(
                f"KubeVirt {in_force.namespace}/{in_force.name} in force "
                f"{'; '.join(differences)} ({why}): KubeVirt does what the CR says. Make the "
                "HyperConverged what you want HCO to write, then check its conditions.",
                chain=(
                    f"HyperConverged {hc.key}: what HCO would write",
                    f"KubeVirt {in_force.namespace}/{in_force.name}: what KubeVirt does now",
                ),
                remediation=(f"kubectl get hyperconverged -n {hc.namespace} {hc.name} -o yaml",),
            ),
        )


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    if request.group_kind == HYPERCONVERGED:
        return _patch_problem(request, view)
    return _direct_edit(request, view)


POLICY = Policy(
    id=ID,
    summary=(
        "Someone other than HCO edits the KubeVirt CR that HCO owns (HCO reverts it), or a "
        "HyperConverged's kubevirt.kubevirt.io/jsonpatch annotation does not apply (HCO cannot "
        "write the KubeVirt CR) or writes permitted devices or gates gpu-guard cannot tell; in "
        "the audit, a KubeVirt CR in force that is not what HCO would write."
    ),
    scope={KUBEVIRT: frozenset({UPDATE}), HYPERCONVERGED: frozenset({CREATE, UPDATE})},
    owners=(HCO,),
    default_action=Action.WARN,
    default_reason=(
        "Nothing breaks by itself: HCO undoes the edit, or refuses the patch. Say where the "
        "setting belongs; never block the KubeVirt CR, which someone may be repairing by hand."
    ),
    failure_action=Action.WARN,
    check=check,
    audit=audit,
    reads=frozenset({HYPERCONVERGED, KUBEVIRT}),
)

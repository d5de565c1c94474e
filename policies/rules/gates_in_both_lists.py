"""feature-gate-in-both-lists: the KubeVirt CR lists a feature gate as on and as off.

Since KubeVirt 1.8 developerConfiguration has ``disabledFeatureGates`` beside ``featureGates``,
and "a feature gate must not appear in both" (kubevirt/kubevirt staging/src/kubevirt.io/api/
core/v1/types.go). virt-operator's update admitter enforces it: when an update changes either
list (``featureGatesChanged``, an ordered comparison), ``validateFeatureGates`` refuses it for
every gate in both (pkg/virt-operator/webhooks/kubevirt-update-admitter.go), so the stored CR,
and the configuration in force, stay the previous ones. Its create admitter checks no such thing
(kubevirt-create-admitter.go; the first CR exists before virt-operator's webhooks do), so a CR
can be created, or stored where the webhook did not run, with a gate in both. KubeVirt then
reads the gate as on (``IsEnabled`` checks featureGates first), and virt-operator refuses every
later change of the gates that keeps it in both. The usual way in: HCO 1.19+ writes the Beta
gates it does not enable into disabledFeatureGates, and a ``kubevirt.kubevirt.io/jsonpatch``
annotation that only adds one to featureGates puts it in both (docs/field-guide.md section 6).
A HyperConverged is judged by what HCO will write from it (policies/cluster/hco_translation.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from policies.cluster.feature_gates import DISABLED_GATES_FIELD, FEATURE_GATES_FIELD
from policies.cluster.hyperconverged import JSONPATCH_ANNOTATION
from policies.cluster.kinds import HYPERCONVERGED, KUBEVIRT, object_ref
from policies.cluster.kubevirt import KubeVirtInfo
from policies.cluster.kubevirt_config import HCO, requested_kubevirt
from policies.cluster.view import ClusterView
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest, ObjectRef
from policies.vocabulary.text import few
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "feature-gate-in-both-lists"
#: How a change to a CR in that state fares, by what the change is: the message's middle.
REFUSED = "virt-operator will refuse it; the configuration in force stays the previous one"
NEW = (
    "virt-operator does not check a new CR, so KubeVirt reads {it} as on (featureGates wins) "
    "and virt-operator will refuse every later change of the gates that keeps {it} in both"
)
#: A HyperConverged whose translation has them in both: HCO's update of the KubeVirt CR is what
#: virt-operator refuses (HCO's webhook dry-runs it first), usually through the jsonpatch
#: annotation adding a gate HCO disables.
HCO_WRITES = "HCO would write {it} so, and virt-operator refuses that update of the KubeVirt CR"
#: The last sentence: which list to fix.
KEEP = "Keep {it} in featureGates to turn {it} on, or in disabledFeatureGates to turn {it} off."
HCO_ADVICE = (
    f"In the {JSONPATCH_ANNOTATION} annotation, also remove {{it}} from disabledFeatureGates."
)
STORED = (
    "KubeVirt reads {it} as on (featureGates wins), and virt-operator refuses every change of "
    "the gates that keeps {it} in both"
)


def judge(
    kubevirt: KubeVirtInfo, fate: str, already: bool = False, advice: str = KEEP
) -> list[Finding]:
    """One finding when ``kubevirt`` lists gates in both lists; ``fate`` says what follows;
    ``already``: an update found them so and left them (mentioned, never blocked); ``advice``
    is the last sentence."""
    both = kubevirt.gates.in_both
    if not both:
        return []
    one = len(both) == 1
    it = "it" if one else "them"
    where = kubevirt.label
    message = (
        f"{few(both)} {'is' if one else 'are'} in both featureGates and disabledFeatureGates "
        f"of {where}: {fate.format(it=it)}. {advice.format(it=it)}"
    )
    gates = ", ".join(both)
    return [
        Finding(
            message,
            max_action=Action.WARN if already else None,
            chain=(
                f"{where}: {gates} in {FEATURE_GATES_FIELD} and in {DISABLED_GATES_FIELD}",
                f"virt-operator (validateFeatureGates): feature gate {gates} exists on both "
                '"FeatureGates" and "DisabledFeatureGates"',
            ),
            remediation=(
                f"to keep {gates} on: remove {it} from {DISABLED_GATES_FIELD} of {where}",
                f"to turn {gates} off: remove {it} from {FEATURE_GATES_FIELD} of {where} instead",
            ),
        )
    ]


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    if request.obj is None:
        return ()
    after = requested_kubevirt(request, view)
    if after is None or not after.gates.in_both:
        return ()
    if request.group_kind == HYPERCONVERGED:
        return judge(after, HCO_WRITES, advice=HCO_ADVICE)
    before = requested_kubevirt(request, view, old=True) if request.operation == UPDATE else None
    if before is None:  # a new CR, or an update without its old object: nothing to compare
        return judge(after, NEW)
    lists = (before.gates.enabled, before.gates.disabled)
    if lists != (after.gates.enabled, after.gates.disabled):
        return judge(after, REFUSED)
    return judge(after, STORED, already=True)  # lists untouched: virt-operator lets it by


def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
    """A stored CR with a gate in both lists: its webhook never judged it."""
    for kubevirt in view.kubevirts():
        ref = object_ref(KUBEVIRT, kubevirt.namespace, kubevirt.name)
        for finding in judge(kubevirt, STORED):
            yield ref, finding


POLICY = Policy(
    id=ID,
    summary=(
        "A KubeVirt CR lists a feature gate in both developerConfiguration.featureGates and "
        "disabledFeatureGates, which virt-operator refuses in an update that changes the gates."
    ),
    scope={KUBEVIRT: frozenset({CREATE, UPDATE}), HYPERCONVERGED: frozenset({CREATE, UPDATE})},
    owners=(HCO,),
    default_action=Action.WARN,
    default_reason=(
        "virt-operator refuses such an update itself (validateFeatureGates), and a CR stored "
        "so still works (the gate reads as on): say which list to fix, do not block a CR that "
        "carries every KubeVirt setting."
    ),
    failure_action=Action.WARN,
    check=check,
    audit=audit,
    reads=frozenset({KUBEVIRT}),
)

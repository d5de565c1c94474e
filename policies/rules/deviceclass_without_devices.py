"""deviceclass-without-devices: a DeviceClass whose selectors accept no published device.

A claim names a DeviceClass, and the scheduler considers only the devices every selector of the
class accepts (docs/dra.md). A class that accepts none, through a typo in the driver name or an
attribute value, or a device type the driver does not publish (``vfio`` without the driver's
passthrough support), makes every claim of that class unsatisfiable, and nothing says so: the
claims just stay unallocated (inferred from the allocator: no error names the class). A selector
this evaluator cannot decide is reported as that, never as "no device". Before any DRA driver
publishes, every class matches nothing, and the message says that instead (a fresh install
creates the classes before the kubelet plugins start).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from policies.cel.hints import COMPARE_WITH_DEVICES, near_misses
from policies.cel.selectors import select
from policies.cel.values import Outcome
from policies.cluster.claim_fit import selector_problem
from policies.cluster.claim_shortfall import Shortfall, Why
from policies.cluster.dra import DeviceClassInfo, PublishedDevice
from policies.cluster.kinds import DEVICE_CLASS, RESOURCE_SLICE, object_ref
from policies.cluster.projections import request_projection
from policies.cluster.view import ClusterView
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest, ObjectRef
from policies.vocabulary.text import few, plural
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "deviceclass-without-devices"
CONSEQUENCE = "claims for it cannot be allocated"


def finding(
    info: DeviceClassInfo,
    undecided: Sequence[tuple[PublishedDevice, str]],
    view: ClusterView,
) -> Finding:
    """What is said of a class that accepts no published device: why it cannot be judged (the
    first undecided device), or how many devices there are and which value it nearly names."""
    if undecided:
        device, why = min(undecided, key=lambda pair: pair[0].id)
        judged = Shortfall(Why.CANNOT_BE_JUDGED, info.name, reason=f"{why} ({device.id})")
        return Finding(
            f"class {info.name} {judged.describe()}",
            remediation=(COMPARE_WITH_DEVICES,),
        )
    published = [d.device for d in view.published_devices()]
    nothing = Shortfall(Why.CLASS_MATCHES_NOTHING, info.name).describe()
    if not published:
        return Finding(
            f"{nothing}: no DRA driver publishes any device yet; {CONSEQUENCE} until one does",
            remediation=(
                "check that the DRA driver's kubelet plugins run (kubectl get resourceslices)",
            ),
        )
    drivers = sorted({d.driver for d in published})
    meant = near_misses(info.selectors, published)
    hint = f" (did you mean {few(meant)}?)" if meant else ""
    message = (
        f"{nothing} (none of {plural(len(published), 'device')} of {few(drivers, 2)}){hint}; "
        f"{CONSEQUENCE}"
    )
    steps = [f"change the selector to {meant[0]}"] if meant else []
    steps.append(COMPARE_WITH_DEVICES)
    return Finding(message, remediation=tuple(steps))


def judge(info: DeviceClassInfo, view: ClusterView) -> Finding | None:
    """A class the state has not indexed: its selectors tried on the published devices until one
    accepts (the first usually does)."""
    problem = selector_problem(info.selectors)
    if problem:
        judged = Shortfall(Why.CANNOT_BE_JUDGED, info.name, reason=problem)
        return Finding(
            f"class {info.name} {judged.describe()}", remediation=(COMPARE_WITH_DEVICES,)
        )
    undecided: list[tuple[PublishedDevice, str]] = []
    for device in view.published_devices():
        result = select(info.selectors, device.device)
        if result.matches:
            return None
        if result.outcome is Outcome.UNKNOWN:
            undecided.append((device, result.reason))
    return finding(info, undecided, view)


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    """On UPDATE only when the selectors change: the rest of a class does not choose devices."""
    if request.obj is None:
        return ()
    info: DeviceClassInfo = request_projection(request)
    if request.old is not None:
        before: DeviceClassInfo = request_projection(request, old=True)
        if before.selectors == info.selectors:
            return ()
    found = judge(info, view)
    return () if found is None else (found,)


def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
    """Existing classes whose selectors the index found to accept no device."""
    for info in view.device_classes():
        if not view.class_device_counts(info.name):
            yield (
                object_ref(DEVICE_CLASS, "", info.name),
                finding(info, view.class_undecided(info.name), view),
            )


POLICY = Policy(
    id=ID,
    summary=(
        "A DeviceClass is created, or its selectors changed, so that they accept no device any "
        "ResourceSlice publishes: every claim of that class stays unallocated."
    ),
    scope={DEVICE_CLASS: frozenset({CREATE, UPDATE})},
    default_action=Action.WARN,
    default_reason=(
        "A class may be created before its driver publishes devices, and blocking it would get "
        "in the way of installing the driver; the administrator needs to know, not be stopped."
    ),
    failure_action=Action.WARN,
    check=check,
    audit=audit,
    reads=frozenset({DEVICE_CLASS, RESOURCE_SLICE}),
)

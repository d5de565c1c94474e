"""cordon-sole-provider: cordoning, tainting or deleting the only healthy provider of a device.

A VMI with gpus/hostDevices cannot live-migrate: when the only Ready, schedulable, untainted
node providing its device (a device plugin's allocatable, or DRA devices of a class with that
extendedResourceName) is cordoned and drained, the drain either hangs on it (evictionStrategy
LiveMigrate) or stops it, and it has nowhere to start again: the ErrorUnschedulable of
docs/field-guide.md section 1, caused on purpose. VMIs still waiting for the device lose their only
place too. Only a warning: blocking cordons would hamper incident response.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.cluster.health import node_health
from policies.cluster.identities import KUBELET
from policies.cluster.kinds import DEVICE_CLASS, NODE, RESOURCE_SLICE, VIRTUAL_MACHINE_INSTANCE
from policies.cluster.nodes import project_node, project_scheduling
from policies.cluster.view import ClusterView
from policies.vocabulary.requests import DELETE, UPDATE, AdmissionRequest
from policies.vocabulary.text import few
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "cordon-sole-provider"
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def what_it_does(request: AdmissionRequest) -> str | None:
    """ "cordoning omen2", "tainting omen2 NoExecute (maint)", "deleting omen2", or None.

    Reads only spec.unschedulable and spec.taints: most node updates change neither and
    leave here at the cost of two small lookups.
    """
    name = request.name
    if request.operation == DELETE:
        return f"deleting {name}"
    if request.obj is None or request.old is None:
        return None
    was_cordoned, old_taints = project_scheduling(request.old)
    cordoned, taints = project_scheduling(request.obj)
    if cordoned and not was_cordoned:
        return f"cordoning {name}"
    before = {(t.key, t.effect) for t in old_taints}
    added = [t for t in taints if t.effect in BLOCKING_EFFECTS and (t.key, t.effect) not in before]
    if added:
        effects = sorted({t.effect for t in added})
        return f"tainting {name} {' and '.join(effects)} ({few([t.key for t in added])})"
    return None


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    if request.old is None:
        return ()
    action = what_it_does(request)
    if action is None:
        return ()
    # The node as it is now: the state's projection, else read from the request's oldObject.
    old = view.node(request.name) or project_node(request.old)
    if not node_health(old).healthy:
        return ()
    findings = []
    # What the state counts it as providing (device plugins and DRA), and what it advertises.
    provided = view.resources_provided_on(old.name)
    state_node = view.node(old.name)
    counted = state_node is not None and node_health(state_node).healthy
    resources = {r for r, count in old.allocatable.items() if count > 0} | set(provided)
    for resource in sorted(resources):
        itself = 1 if counted and resource in provided else 0
        others = view.healthy_provider_count(resource) - itself
        if others > 0:
            continue
        vmis = [v for v in view.vmis_using(resource) if v.live]
        if not vmis:
            continue
        users = [f"{v.key} (here)" if v.node == old.name else v.key for v in vmis]
        verb = "uses" if len(users) == 1 else "use"
        message = (
            f"{action}, the only healthy provider of {resource}, while {few(users)} {verb} it: a "
            "drain hangs or stops them for good. Add a provider or stop them first."
        )
        findings.append(
            Finding(
                message,
                chain=(
                    f"{old.name} is the only healthy provider of {resource}",
                    f"{few([v.key for v in vmis])} cannot live-migrate (host devices)",
                    "a drain hangs (evictionStrategy LiveMigrate) or stops them (None)",
                ),
                remediation=(
                    f"bring up another node that advertises {resource}, or",
                    *(f"virtctl stop {v.owner_vm or v.name} -n {v.namespace}" for v in vmis),
                ),
            )
        )
    return findings


POLICY = Policy(
    id=ID,
    summary=(
        "A node update cordons the node (spec.unschedulable false -> true) or adds a NoSchedule/"
        "NoExecute taint, or the node is deleted, while it is the only healthy provider of a "
        "device resource that live VMIs use."
    ),
    scope={NODE: frozenset({UPDATE, DELETE})},
    owners=(KUBELET,),
    default_action=Action.WARN,
    default_reason=(
        "A drain of a single provider hangs on or stops VMs that can't migrate, and they cannot "
        "start elsewhere; but blocking cordons would hamper incident response."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=frozenset({DEVICE_CLASS, NODE, RESOURCE_SLICE, VIRTUAL_MACHINE_INSTANCE}),
)

"""device-taint-rule-blast-radius: a DeviceTaintRule with effect NoExecute, and what it evicts.

KEP-5055 (docs/dra.md, [taints]): once a DeviceTaintRule taints a device NoExecute, the
device-taint eviction controller deletes every pod using it whose claim's request does not
tolerate the taint, across namespaces and priorities. kube-apiserver v1.36.2 accepts a rule with
``deviceSelector: {}``, which selects every device: such a rule evicted every DRA pod of a
cluster (kubernetes/kubernetes#141422). Since 1.35 effect None taints without consequence, so a
rule can be previewed first. A NoExecute rule is warned with its blast radius (the workloads
whose allocated devices it selects, by namespace, with their claims); one that selects every
device, or devices on more than ``MAX_NODES`` nodes, is denied with the advice to preview with
effect None first; one that selects only devices nothing uses now (the safe order: drain, then
taint) is let through. Only spec changes are judged: an update that leaves ``spec`` as it was (a
label, a finalizer) is let through, so an existing rule can always be cleaned up. ResourceSlices
are never sent: the DRA driver's own health taints (its slice writes) are never judged.

Node-independent devices (allNodes pools, node selectors) count too: their users are found
through the claims pinned to no node, and the nodes those users run on count against the bound.
A pod that got its GPU for an extended resource (``status.extendedResourceClaimStatus``) is
named apart, matched but not evicted (kubernetes/kubernetes#141290). The bound is checked on the
indexes first (``nodes_selected`` stops past it), so admission costs the same at any size.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from policies.cluster.coverage import DEVICE_HOLDERS_READS
from policies.cluster.device_taints import NO_EXECUTE, NOT_EVICTED, DeviceTaintRuleInfo
from policies.cluster.dra import PublishedDevice
from policies.cluster.dra_claims import through_extended_resource_only
from policies.cluster.gpu_users import pod_workload
from policies.cluster.kinds import (
    DEVICE_TAINT_RULE,
    POD,
    object_ref,
)
from policies.cluster.projections import request_projection
from policies.cluster.view import ClusterView
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest, ObjectRef
from policies.vocabulary.text import few, plural
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "device-taint-rule-blast-radius"
MAX_NODES = 16
"""The most nodes whose devices one NoExecute rule may taint: a rack. Beyond it, or for a rule
that selects every device, the rule is denied: taint a rack at a time, after a preview."""
PREVIEW = "Preview with effect None first, then narrow the deviceSelector."
SHOWN = 3


def _spec_changed(request: AdmissionRequest) -> bool:
    if request.old is None or request.obj is None:
        return True
    return request.old.get("spec") != request.obj.get("spec")


@dataclass(frozen=True)
class _User:
    """A running pod or VM on a selected device: where it runs, whether the taint evicts it."""

    namespace: str
    text: str
    node: str
    evicted: bool


def _users(view: ClusterView, selected: Sequence[PublishedDevice]) -> list[_User]:
    """Each pod or VM using a selected device, through the claims allocated on the devices'
    nodes ('' for node-independent devices: the claims pinned to no node)."""
    ids = {d.id for d in selected}
    out = []
    for node in sorted({d.node for d in selected}):
        for held in view.claims_allocated_on(node):
            claim = held.claim
            if not any(d is not None and d.id in ids for _, d in held.devices):
                continue
            for pod in held.pods:
                if pod.finished:
                    continue
                ref = pod_workload(view, claim.namespace, pod.name, pod.node)
                who = f"pod {pod.name}" if ref.kind == POD.kind else f"{ref.kind} {ref.name}"
                evicted = not through_extended_resource_only(pod.claims, claim.name)
                out.append(_User(claim.namespace, f"{who} (claim {claim.key})", pod.node, evicted))
    return out


def _by_namespace(users: Iterable[_User]) -> str:
    grouped: dict[str, list[str]] = {}
    for user in users:
        grouped.setdefault(user.namespace, []).append(user.text)
    return "; ".join(f"{ns}: {few(sorted(found), SHOWN)}" for ns, found in sorted(grouped.items()))


def _deny(rule: DeviceTaintRuleInfo, what: str) -> Finding:
    return Finding(
        message=(
            f"DeviceTaintRule {rule.name} taints {what} NoExecute: every pod using them is "
            f"evicted, in every namespace and at every priority. {PREVIEW}"
        ),
        remediation=(
            f"create {rule.name} with spec.taint.effect None and see which devices and claims it "
            "selects (kubectl get resourceclaims -A -o wide)",
            f"narrow spec.deviceSelector (driver, pool, device) to at most {MAX_NODES} nodes' "
            "devices, then set NoExecute",
        ),
    )


def judge(rule: DeviceTaintRuleInfo, view: ClusterView) -> Finding | None:
    if rule.taint.effect != NO_EXECUTE:
        return None
    if rule.selects_everything:
        return _deny(rule, "every device in the cluster (its deviceSelector is empty)")
    bound = view.nodes_selected(rule, MAX_NODES + 1)  # index hits, stopped past the bound
    if len(bound) > MAX_NODES:
        shown = ", ".join(bound[:SHOWN])
        return _deny(rule, f"devices on more than {MAX_NODES} nodes ({shown}, ...)")
    selected = view.devices_selected(rule)
    users = _users(view, selected)
    nodes = sorted({*bound, *(u.node for u in users if u.node)})
    if len(nodes) > MAX_NODES:  # node-independent devices, used from many nodes
        return _deny(rule, f"devices used on {len(nodes)} nodes (more than {MAX_NODES})")
    if not users:
        return None  # nothing uses those devices now: the safe order (drain, then taint)
    free = sum(1 for d in selected if not d.node)
    what = plural(len(selected), "device") + (f" on {few(bound, SHOWN)}" if bound else "")
    if free:  # allNodes pools, or a node selector: their users are named, wherever they run
        what += f" ({free} of them node-independent)"
    fates = []
    if evicted := [u for u in users if u.evicted]:
        fates.append(f"it evicts {_by_namespace(evicted)}")
    if kept := [u for u in users if not u.evicted]:
        fates.append(
            f"it matches but does not evict {_by_namespace(kept)}: they got their GPUs through "
            f"{NOT_EVICTED}, and keep running on the tainted devices"
        )
    return Finding(
        message=(
            f"DeviceTaintRule {rule.name} taints {what} NoExecute ({rule.describe_selector()}): "
            f"{'; '.join(fates)}. Move them off those devices first, or create it with effect "
            "None to preview what it selects."
        ),
        max_action=Action.WARN,
        remediation=(
            f"move the workloads named off {few(nodes, SHOWN) or 'those devices'} first, or add a "
            f"toleration of {rule.taint.key} to the claims that may stay",
        ),
    )


def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
    """Existing NoExecute rules, judged as if created now: what they evict (or would, once the
    gate is on), and those admission would have denied."""
    for rule in view.device_taint_rules():
        found = judge(rule, view)
        if found is not None:
            yield object_ref(DEVICE_TAINT_RULE, "", rule.name), found


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    if request.obj is None or not _spec_changed(request):
        return ()
    found = judge(request_projection(request), view)
    return () if found is None else (found,)


POLICY = Policy(
    id=ID,
    summary=(
        "A DeviceTaintRule with effect NoExecute: warned with the workloads it evicts; denied "
        f"when it selects every device or devices on more than {MAX_NODES} nodes."
    ),
    scope={DEVICE_TAINT_RULE: frozenset({CREATE, UPDATE})},
    default_action=Action.DENY,
    default_reason=(
        "A NoExecute rule over every device evicts every DRA workload at once, irreversibly for "
        "running work, while the safe path is cheap (preview with effect None, taint a rack at "
        "a time); a narrower rule is a recovery tool, only warned. The webhook fails open: taint "
        "rules must stay usable when the guard is down."
    ),
    failure_action=Action.WARN,
    check=check,
    audit=audit,
    reads=DEVICE_HOLDERS_READS | {DEVICE_TAINT_RULE},
)

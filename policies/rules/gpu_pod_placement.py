"""gpu-pod-on-passthrough-node: a CUDA pod pinned where no container device plugin runs.

On a node whose GPU Operator mode is vm-passthrough or vm-vgpu, the GPUs belong to vfio-pci or the
vGPU manager and only the sandbox device plugin runs: nobody advertises ``nvidia.com/gpu`` there.
A pod that asks for a container GPU resource and can only go to such nodes stays Pending forever
(Insufficient nvidia.com/gpu), or, bound with spec.nodeName, is rejected by kubelet.

A pod is pinned by spec.nodeName, by spec.nodeSelector on ``kubernetes.io/hostname`` or
``nvidia.com/gpu.workload.config``, or by required node affinity whose every term names nodes
(hostname or metadata.name In [...]) or workload modes. Every lookup is an index hit: nodes by
name, by hostname label, and by workload label value (whose mode the ClusterPolicy decides once
for all of them). A workload controller's pod template is judged the same way when the
controller is applied (policies.cluster.pod_templates).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from policies.cluster.gpu_operator import ClusterPolicyInfo
from policies.cluster.kinds import CLUSTER_POLICY, NODE, POD, object_ref
from policies.cluster.pod_templates import POD_TEMPLATE_REQUESTS, judge_template
from policies.cluster.pods import PodInfo, project_pod
from policies.cluster.view import HOSTNAME_LABEL, ClusterView
from policies.cluster.workload import VM_MODES, WORKLOAD_LABEL, describe_mode, effective_mode
from policies.vocabulary.fields import get_map, get_maps, get_str, get_string_map, get_strings
from policies.vocabulary.requests import CREATE, AdmissionRequest, JSONObject, ObjectRef
from policies.vocabulary.text import few
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "gpu-pod-on-passthrough-node"
NODE_NAME_FIELD = "metadata.name"


class Placement:
    """Answers "does this requirement alone confine the pod to VM-mode nodes, and which?"."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self.policy: ClusterPolicyInfo | None = view.cluster_policy()

    def nodes(self, names: Sequence[str]) -> list[str] | None:
        """Where the pod may go when it may only go to ``names``, if all are in a VM mode."""
        known = [node for node in map(self.view.node, names) if node is not None]
        if not known or any(effective_mode(n.labels, self.policy) not in VM_MODES for n in known):
            return None
        return [f"{n.name} ({describe_mode(n.labels, self.policy)})" for n in known]

    def requirement(
        self, key: str, operator: str, values: Sequence[str], field: bool
    ) -> list[str] | None:
        if operator != "In" or not values:
            return None
        if field:
            return self.nodes(values) if key == NODE_NAME_FIELD else None
        if key == HOSTNAME_LABEL:
            names = {n for v in values for n in self.view.nodes_labelled(HOSTNAME_LABEL, v)}
            return self.nodes(sorted(names))
        if key != WORKLOAD_LABEL:
            return None
        if any(effective_mode({WORKLOAD_LABEL: v}, self.policy) not in VM_MODES for v in values):
            return None
        where = []
        for value in values:
            labelled = self.view.nodes_labelled(WORKLOAD_LABEL, value)
            if labelled:
                where.append(f"nodes labelled {value} ({few(labelled, 2)})")
        return where or None

    def node_selector(self, selector: Mapping[str, str]) -> list[str] | None:
        for key, value in sorted(selector.items()):
            where = self.requirement(key, "In", [value], field=False)
            if where is not None:
                return where
        return None

    def affinity(self, spec: JSONObject) -> list[str] | None:
        """Required node affinity: the terms are ORed, so every term must confine."""
        affinity = get_map(get_map(spec, "affinity", "spec"), "nodeAffinity", "spec.affinity")
        base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        required = get_map(
            affinity, "requiredDuringSchedulingIgnoredDuringExecution", "spec.affinity.nodeAffinity"
        )
        terms = get_maps(required, "nodeSelectorTerms", base)
        where: list[str] = []
        for term_path, term in terms:
            found = self.term(term, term_path)
            if found is None:
                return None
            where.extend(w for w in found if w not in where)
        return where or None

    def term(self, term: JSONObject, path: str) -> list[str] | None:
        """One nodeSelectorTerm: its requirements are ANDed, so one that confines is enough."""
        for field, key in ((False, "matchExpressions"), (True, "matchFields")):
            for where, req in get_maps(term, key, path):
                found = self.requirement(
                    get_str(req, "key", where),
                    get_str(req, "operator", where),
                    get_strings(req, "values", where),
                    field,
                )
                if found is not None:
                    return found
        return None


def confined_to(spec: JSONObject, view: ClusterView) -> list[str] | None:
    """The VM-mode nodes a pod with this spec is confined to, described; None if not confined."""
    placement = Placement(view)
    node_name = get_str(spec, "nodeName", "spec")
    if node_name:
        where = placement.nodes([node_name])
        if where is not None:
            return where
    where = placement.node_selector(get_string_map(spec, "nodeSelector", "spec"))
    if where is not None:
        return where
    return placement.affinity(spec)


def _asks(gpus: Mapping[str, int]) -> str:
    return ", ".join(f"{name}: {count}" for name, count in sorted(gpus.items()))


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    if request.obj is None:
        return ()
    if request.group_kind == POD:
        return judge_pod(request.obj, project_pod(request.obj), view)
    return judge_template(request, lambda obj, pod: judge_pod(obj, pod, view))


def judge_pod(obj: JSONObject, pod: PodInfo, view: ClusterView) -> Sequence[Finding]:
    """A new pod (or a controller's template as one) pinned where no container plugin runs."""
    if not pod.gpu:
        return ()
    where = confined_to(get_map(obj, "spec", ""), view)
    if where is None:
        return ()
    return (
        Finding(
            f"pod asks for {_asks(pod.gpu)} but can only run on {few(where, 2)}, where no "
            "container GPU device plugin runs: it will never start. Target a container-mode node.",
            remediation=(
                f"select nodes with {WORKLOAD_LABEL}=container (or without VM modes) for the pod",
                "or, if no VM needs them, relabel the nodes container (kubectl label node ...)",
            ),
        ),
    )


def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
    """Unfinished pods bound to a VM-mode node that hold container GPU resources."""
    policy = view.cluster_policy()
    for node in view.nodes():
        if effective_mode(node.labels, policy) not in VM_MODES:
            continue
        for pod in view.gpu_pods_on(node.name):
            mode = describe_mode(node.labels, policy)
            ref = object_ref(POD, pod.namespace, pod.name)
            yield (
                ref,
                Finding(
                    f"pod holds {_asks(pod.gpu)} but is bound to {node.name} ({mode}), where no "
                    "container GPU device plugin runs: it cannot use its GPUs. Recreate it "
                    "for a container-mode node.",
                    chain=(
                        f"{node.name} is in {mode} mode",
                        "no container device plugin there: its GPUs are not for pods",
                    ),
                    remediation=(f"delete {pod.key} and recreate it for a container-mode node",),
                ),
            )


POLICY = Policy(
    id=ID,
    summary=(
        "A new Pod asks for NVIDIA container GPU resources (nvidia.com/gpu, gpu.shared, mig-*) but "
        "is pinned to vm-passthrough/vm-vgpu nodes: spec.nodeName, a hostname or workload-label "
        "nodeSelector, or required node affinity that names only such nodes; likewise a workload "
        "controller's pod template when the controller is created or its template changes."
    ),
    scope={POD: frozenset({CREATE}), **POD_TEMPLATE_REQUESTS},
    default_action=Action.WARN,
    default_reason=(
        "The pod harms nothing, it just never starts (no device plugin advertises nvidia.com/gpu "
        "there); the owner needs to know now, and controllers creating pods must not be blocked."
    ),
    failure_action=Action.WARN,
    check=check,
    audit=audit,
    reads=frozenset({CLUSTER_POLICY, NODE, POD}),
)

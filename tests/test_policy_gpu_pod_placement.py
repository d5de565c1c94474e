"""gpu-pod-on-passthrough-node: CUDA pods pinned where no container device plugin runs."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from policies.cluster.workload import WORKLOAD_LABEL
from policies.rules.gpu_pod_placement import POLICY, audit, check
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import (
    Obj,
    affinity_term,
    cluster_policy,
    gpu_pod,
    judged_by,
    new_pod,
    node,
    node_affinity,
    pod,
    request,
    state_of,
    with_labels,
    with_spec,
)
from webhook.engine import Engine

HOSTNAME = "kubernetes.io/hostname"
GPU = {"nvidia.com/gpu": "1"}
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
SANDBOX = cluster_policy(True, "container")
SANDBOX_PASSTHROUGH = cluster_policy(True, "vm-passthrough")
SANDBOX_OFF = cluster_policy(False, "vm-passthrough")
TOWER1 = node("tower1", labels={WORKLOAD_LABEL: "vm-passthrough"}, allocatable={RTX_3090: "1"})
TOWER2 = node("tower2", labels={WORKLOAD_LABEL: "vm-vgpu"})
OMEN1 = node("omen1", labels={WORKLOAD_LABEL: "container"}, allocatable={"nvidia.com/gpu": "4"})
NUC1 = node("nuc1")
LAB = node("n-17", labels={HOSTNAME: "tower9.lab", WORKLOAD_LABEL: "vm-passthrough"})
CLUSTER = [SANDBOX, TOWER1, TOWER2, OMEN1, NUC1, LAB]


def hostname_in(*names: str) -> Obj:
    return affinity_term([(HOSTNAME, "In", names)])


def findings(obj: Obj, objects: Sequence[Obj] = CLUSTER) -> list[Finding]:
    review = request("CREATE", obj)
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


@pytest.mark.parametrize(
    ("obj", "objects", "where"),
    [
        pytest.param(
            new_pod("p", limits=GPU, node_name="tower1"),
            CLUSTER,
            "tower1 (vm-passthrough)",
            id="spec.nodeName names a vm-passthrough node",
        ),
        pytest.param(
            new_pod("p", limits=GPU, node_name="tower2"),
            CLUSTER,
            "tower2 (vm-vgpu)",
            id="spec.nodeName names a vm-vgpu node",
        ),
        pytest.param(
            new_pod("p", limits=GPU, node_selector={HOSTNAME: "tower1"}),
            CLUSTER,
            "tower1 (vm-passthrough)",
            id="a hostname nodeSelector",
        ),
        pytest.param(
            new_pod("p", limits=GPU, node_selector={HOSTNAME: "tower9.lab"}),
            CLUSTER,
            "n-17 (vm-passthrough)",
            id="a hostname label that is not the node's name",
        ),
        pytest.param(
            new_pod("p", limits=GPU, node_selector={WORKLOAD_LABEL: "vm-passthrough"}),
            CLUSTER,
            "nodes labelled vm-passthrough (n-17 and tower1)",
            id="a workload-label nodeSelector",
        ),
        pytest.param(
            new_pod("p", limits=GPU, node_selector={WORKLOAD_LABEL: "vm-vgpu", "zone": "a"}),
            CLUSTER,
            "nodes labelled vm-vgpu (tower2)",
            id="a workload-label nodeSelector among others",
        ),
        pytest.param(
            new_pod("p", limits=GPU, affinity=node_affinity(hostname_in("tower1"))),
            CLUSTER,
            "tower1 (vm-passthrough)",
            id="required affinity on one hostname",
        ),
        pytest.param(
            new_pod("p", limits=GPU, affinity=node_affinity(hostname_in("tower1", "tower2"))),
            CLUSTER,
            "tower1 (vm-passthrough) and tower2 (vm-vgpu)",
            id="required affinity on several hostnames all in VM modes",
        ),
        pytest.param(
            new_pod(
                "p",
                limits=GPU,
                affinity=node_affinity(affinity_term(fields=[("metadata.name", "In", ["tower1"])])),
            ),
            CLUSTER,
            "tower1 (vm-passthrough)",
            id="matchFields on metadata.name as DaemonSet pods carry it",
        ),
        pytest.param(
            new_pod(
                "p",
                limits=GPU,
                affinity=node_affinity(
                    affinity_term([(WORKLOAD_LABEL, "In", ["vm-passthrough", "vm-vgpu"])])
                ),
            ),
            CLUSTER,
            "nodes labelled vm-passthrough (n-17 and tower1) and nodes labelled vm-vgpu (tower2)",
            id="required affinity on the workload label",
        ),
        pytest.param(
            new_pod(
                "p",
                limits=GPU,
                affinity=node_affinity(
                    affinity_term([("zone", "In", ["a"]), (HOSTNAME, "In", ["tower1"])]),
                    hostname_in("tower2"),
                ),
            ),
            CLUSTER,
            "tower1 (vm-passthrough) and tower2 (vm-vgpu)",
            id="every term confines, each by one of its requirements",
        ),
        pytest.param(
            new_pod("p", limits=GPU, node_name="nuc1"),
            [SANDBOX_PASSTHROUGH, NUC1],
            "nuc1 (vm-passthrough (ClusterPolicy default))",
            id="an unlabelled node in a vm-passthrough default",
        ),
        pytest.param(
            new_pod("p", limits=GPU, node_name="tower1"),
            [TOWER1],
            "tower1 (vm-passthrough)",
            id="without a ClusterPolicy the label is taken as it is",
        ),
        pytest.param(
            new_pod("p", limits={"nvidia.com/mig-1g.10gb": "1"}, node_name="tower1"),
            CLUSTER,
            "tower1 (vm-passthrough)",
            id="a MIG resource is a container GPU too",
        ),
        pytest.param(
            with_spec(
                new_pod("p", node_name="tower1"),
                {"initContainers": [{"name": "warm", "image": "x", "resources": {"limits": GPU}}]},
            ),
            CLUSTER,
            "tower1 (vm-passthrough)",
            id="an init container's GPU counts for a new pod",
        ),
    ],
)
def test_a_gpu_pod_pinned_to_vm_mode_nodes_is_warned(
    obj: Obj, objects: list[Obj], where: str
) -> None:
    (finding,) = findings(obj, objects)
    assert f"but can only run on {where}, where no container GPU device plugin" in finding.message
    assert POLICY.default_action == Action.WARN


@pytest.mark.parametrize(
    ("obj", "objects"),
    [
        pytest.param(new_pod("p", limits=GPU, node_name="omen1"), CLUSTER, id="a container node"),
        pytest.param(new_pod("p", limits=GPU, node_name="ghost"), CLUSTER, id="an unknown node"),
        pytest.param(new_pod("p", limits=GPU), CLUSTER, id="a pod the scheduler places freely"),
        pytest.param(
            new_pod("p", limits=GPU, node_selector={HOSTNAME: "omen1"}),
            CLUSTER,
            id="a hostname selector on a container node",
        ),
        pytest.param(
            new_pod("p", limits=GPU, node_selector={WORKLOAD_LABEL: "container"}),
            CLUSTER,
            id="a container workload selector",
        ),
        pytest.param(
            new_pod("p", limits=GPU, node_selector={WORKLOAD_LABEL: "vm-passthrough"}),
            [SANDBOX_OFF, TOWER1],
            id="a vm-passthrough selector while sandbox workloads are off",
        ),
        pytest.param(
            new_pod("p", limits=GPU, node_selector={WORKLOAD_LABEL: "vm-passthrough"}),
            [SANDBOX, OMEN1],
            id="a vm-passthrough selector no node carries",
        ),
        pytest.param(
            new_pod("p", limits=GPU, affinity=node_affinity(hostname_in("tower1", "omen1"))),
            CLUSTER,
            id="hostnames that include a container node",
        ),
        pytest.param(
            new_pod(
                "p", limits=GPU, affinity=node_affinity(hostname_in("tower1"), hostname_in("omen1"))
            ),
            CLUSTER,
            id="a second term that allows a container node",
        ),
        pytest.param(
            new_pod(
                "p",
                limits=GPU,
                affinity=node_affinity(affinity_term([(HOSTNAME, "NotIn", ["omen1"])])),
            ),
            CLUSTER,
            id="NotIn names where the pod may not go",
        ),
        pytest.param(
            new_pod(
                "p",
                limits=GPU,
                affinity={
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 1, "preference": hostname_in("tower1")}
                        ]
                    }
                },
            ),
            CLUSTER,
            id="a preference is not a pin",
        ),
        pytest.param(new_pod("p", node_name="tower1"), CLUSTER, id="a pod without GPUs"),
        pytest.param(
            new_pod("virt-launcher-x", limits={RTX_3090: "1"}, node_name="tower1"),
            CLUSTER,
            id="a virt-launcher holding a passthrough device",
        ),
        pytest.param(
            new_pod("p", limits=GPU, node_name="tower1"),
            [SANDBOX_OFF, TOWER1],
            id="sandbox workloads off: every node is container",
        ),
    ],
)
def test_everything_else_is_allowed(obj: Obj, objects: list[Obj]) -> None:
    assert findings(obj, objects) == []


def test_the_message_names_the_resources_the_nodes_and_the_safe_step() -> None:
    (finding,) = findings(
        new_pod("p", limits={"nvidia.com/gpu": "2"}, node_selector={HOSTNAME: "tower1"})
    )
    assert finding.message == (
        "pod asks for nvidia.com/gpu: 2 but can only run on tower1 (vm-passthrough), where no "
        "container GPU device plugin runs: it will never start. Target a container-mode node."
    )
    assert len(f"[{POLICY.id}] {finding.message}") <= 256
    assert finding.remediation[0] == (
        f"select nodes with {WORKLOAD_LABEL}=container (or without VM modes) for the pod"
    )


def test_a_malformed_affinity_is_named_by_its_path() -> None:
    bad = new_pod("p", limits=GPU, affinity=node_affinity(hostname_in("tower1")))
    bad["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"][0]["values"] = [1]
    with pytest.raises(ObjectError) as caught:
        findings(bad)
    assert caught.value.path == (
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].values[0]"
    )


def test_audit_lists_gpu_pods_bound_to_vm_mode_nodes() -> None:
    state = state_of(
        *CLUSTER,
        gpu_pod("stuck", "tower1", phase="Pending"),
        gpu_pod("done", "tower1", phase="Succeeded"),
        gpu_pod("fine", "omen1"),
        pod("launcher", "tower1", limits={RTX_3090: "1"}),
    )
    listed = [(ref.kind, str(ref), f.message) for ref, f in audit(state)]
    assert listed == [
        (
            "Pod",
            "ml/stuck",
            "pod holds nvidia.com/gpu: 1 but is bound to tower1 (vm-passthrough), where no "
            "container GPU device plugin runs: it cannot use its GPUs. Recreate it for a "
            "container-mode node.",
        )
    ]


@pytest.mark.parametrize(
    ("review", "applies"),
    [
        pytest.param(request("CREATE", new_pod("p")), True, id="a pod create is judged"),
        pytest.param(request("UPDATE", new_pod("p"), new_pod("p")), False, id="an update is not"),
        pytest.param(request("DELETE", None, new_pod("p")), False, id="a delete is not"),
        pytest.param(
            request("CREATE", new_pod("p"), sub_resource="binding"),
            False,
            id="a pods/binding create is not",
        ),
    ],
)
def test_scope(review: AdmissionRequest, applies: bool) -> None:
    assert judged_by(POLICY, review) is applies


def test_the_engine_warns_by_default() -> None:
    decision = Engine().evaluate(
        request("CREATE", new_pod("p", limits=GPU, node_name="tower1")), state_of(*CLUSTER)
    )
    assert decision.allowed
    assert [(v.policy, v.action) for v in decision.verdicts] == [(POLICY.id, Action.WARN)]


def test_the_steps_say_where_to_target_the_pod_then_how_to_free_the_nodes() -> None:
    (finding,) = findings(new_pod("p", limits=GPU, node_name="tower1"))
    assert finding.remediation == (
        f"select nodes with {WORKLOAD_LABEL}=container (or without VM modes) for the pod",
        "or, if no VM needs them, relabel the nodes container (kubectl label node ...)",
    )


def test_the_audit_chain_runs_from_the_nodes_mode_to_the_missing_plugin_and_says_recreate() -> None:
    state = state_of(*CLUSTER, gpu_pod("stuck", "tower1", phase="Pending"))
    ((_, finding),) = list(audit(state))
    assert finding.chain == (
        "tower1 is in vm-passthrough mode",
        "no container device plugin there: its GPUs are not for pods",
    )
    assert finding.remediation == ("delete ml/stuck and recreate it for a container-mode node",)


def test_a_pod_asking_for_several_gpu_resources_names_each_in_name_order() -> None:
    asks = {"nvidia.com/mig-1g.10gb": "1", "nvidia.com/gpu": "2"}
    (finding,) = findings(new_pod("p", limits=asks, node_name="tower1"))
    assert finding.message.startswith(
        "pod asks for nvidia.com/gpu: 2, nvidia.com/mig-1g.10gb: 1 but can only run on tower1"
    )


@pytest.mark.parametrize(
    "affinity",
    [
        pytest.param(node_affinity(affinity_term([(HOSTNAME, "NotIn", ["tower1"])])), id="NotIn"),
        pytest.param(node_affinity(affinity_term([(HOSTNAME, "In", [])])), id="In nothing"),
        pytest.param(
            node_affinity(affinity_term(fields=[("metadata.namespace", "In", ["tower1"])])),
            id="matchFields on a field other than metadata.name",
        ),
    ],
)
def test_a_requirement_that_does_not_name_vm_mode_nodes_to_go_to_confines_nothing(
    affinity: Obj,
) -> None:
    assert findings(new_pod("p", limits=GPU, affinity=affinity)) == []


def test_many_nodes_with_the_workload_label_are_named_two_then_counted() -> None:
    many = [node(f"vm-{i}", labels={WORKLOAD_LABEL: "vm-passthrough"}) for i in range(1, 4)]
    pinned = new_pod("p", limits=GPU, node_selector={WORKLOAD_LABEL: "vm-passthrough"})
    (finding,) = findings(pinned, [SANDBOX, *many])
    assert "can only run on nodes labelled vm-passthrough (vm-1, vm-2 and 1 more), where" in (
        finding.message
    )


def bad(at: str, value: object) -> Obj:
    """A pod whose affinity carries ``value`` at ``at`` (a dotted path under spec.affinity)."""
    obj = new_pod("p", limits=GPU, affinity=node_affinity(hostname_in("tower1")))
    *keys, last = at.split(".")
    here = obj["spec"]["affinity"]
    for key in keys:
        here = here[key][0] if isinstance(here[key], list) else here[key]
    here[last] = value
    return obj


REQUIRED = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        pytest.param(with_spec(new_pod("p", limits=GPU), {"nodeName": 1}), "spec.nodeName"),
        pytest.param(with_spec(new_pod("p", limits=GPU), {"nodeSelector": 1}), "spec.nodeSelector"),
        pytest.param(with_spec(new_pod("p", limits=GPU), {"affinity": 1}), "spec.affinity"),
        pytest.param(bad("nodeAffinity", 1), "spec.affinity.nodeAffinity"),
        pytest.param(
            bad("nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution", 1), REQUIRED
        ),
        pytest.param(
            bad(
                "nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
                ".matchExpressions.key",
                1,
            ),
            f"{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].key",
        ),
        pytest.param(
            bad(
                "nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
                ".matchExpressions.operator",
                1,
            ),
            f"{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].operator",
        ),
    ],
)
def test_each_malformed_level_of_the_affinity_is_named_by_its_path(obj: Obj, path: str) -> None:
    with pytest.raises(ObjectError) as caught:
        findings(obj)
    assert caught.value.path == path


def test_the_audit_reads_the_nodes_mode_through_the_cluster_policy() -> None:
    unlabelled = node("tower5", allocatable={RTX_3090: "1"})
    stuck = gpu_pod("stuck", "tower5", phase="Pending")
    assert list(audit(state_of(SANDBOX, unlabelled, stuck))) == []
    ((_, finding),) = list(audit(state_of(SANDBOX_PASSTHROUGH, unlabelled, stuck)))
    assert finding.chain[0] == "tower5 is in vm-passthrough (ClusterPolicy default) mode"


def test_more_than_two_vm_mode_nodes_are_named_two_then_counted() -> None:
    three = [node(f"vm-{i}", labels={WORKLOAD_LABEL: "vm-passthrough"}) for i in range(1, 4)]
    pinned = new_pod("p", limits=GPU, affinity=node_affinity(hostname_in("vm-1", "vm-2", "vm-3")))
    hostnames = [with_labels(n, {HOSTNAME: n["metadata"]["name"]}) for n in three]
    (finding,) = findings(pinned, [SANDBOX, *hostnames])
    assert "can only run on vm-1 (vm-passthrough), vm-2 (vm-passthrough) and 1 more, where" in (
        finding.message
    )

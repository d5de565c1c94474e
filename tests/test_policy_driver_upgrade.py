"""driver-upgrade-waves: a new driver version foreseen node by node, warned and never blocked;
on NVIDIADriver CRs, which nodes each drives, a new image's waves over them, nodes changing
NVIDIADriver, and the ClusterPolicy's version made moot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from policies.cluster.driver_upgrade import max_unavailable, plan_upgrade
from policies.cluster.gpu_operator import DriverUpgradePolicy, project_cluster_policy
from policies.cluster.nvidia_driver import OWNER_LABEL, owners, project_nvidia_driver
from policies.rules.driver_upgrade import POLICY, check
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import (
    Obj,
    cluster_policy,
    cordoned,
    dev_mount_pod,
    env_pod,
    gpu_pod,
    judged_by,
    node,
    nvidia_driver,
    owned_by_daemonset,
    request,
    state_of,
    with_spec,
)
from webhook.engine import Engine

SKIP = "nvidia.com/gpu-driver-upgrade.skip"


def policy(version: str = "570.172.08", **upgrade: Any) -> Obj:
    driver: dict[str, Any] = {"enabled": True, "version": version}
    if upgrade:
        driver["upgradePolicy"] = upgrade
    return with_spec(cluster_policy(False, "container"), {"driver": driver})


def gpu_node(name: str, **labels: str) -> Obj:
    return node(
        name,
        labels={"nvidia.com/gpu.present": "true", **labels},
        allocatable={"nvidia.com/gpu": "1"},
    )


OLD, NEW = policy(), policy("580.95.05")
NODES = [gpu_node(f"gpu-{i}") for i in range(1, 5)]


def findings(old: Obj, new: Obj, objects: Sequence[Obj]) -> list[Finding]:
    review: AdmissionRequest = request("UPDATE", new, old)
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


def test_the_waves_the_users_it_deletes_those_it_cannot_free_and_the_skipped_nodes() -> None:
    agent = owned_by_daemonset(env_pod("agent", "gpu-1", namespace="mon"))
    objects = [
        *NODES[:3],
        gpu_node("gpu-9", **{SKIP: "true"}),
        gpu_pod("train", "gpu-1"),
        agent,
        dev_mount_pod("probe", "gpu-2", namespace="lab"),
    ]
    (finding,) = findings(OLD, NEW, objects)
    assert finding.message == (
        "driver.version 570.172.08 -> 580.95.05 upgrades 3 nodes, up to 1 at a time in no "
        "order: gpu-1 (deletes ml/train; cannot free mon/agent (DaemonSet)) and gpu-2 (cannot "
        "free lab/probe (no GPU request)); 1 idle; skipped: gpu-9"
    )
    assert finding.remediation == (
        "free gpu-1 first: stop mon/agent (the upgrade controller cannot, and the driver cannot "
        "unload under them)",
        "free gpu-2 first: stop lab/probe (the upgrade controller cannot, and the driver cannot "
        "unload under them)",
        f"to hold a node back: kubectl label node NODE {SKIP}=true; watch "
        "nvidia.com/gpu-driver-upgrade-state on each node",
    )


def test_with_drain_the_pods_without_a_request_are_evicted_but_not_a_daemonsets() -> None:
    agent = owned_by_daemonset(env_pod("agent", "gpu-1", namespace="mon"))
    objects = [NODES[0], agent, env_pod("nb", "gpu-1")]
    (finding,) = findings(OLD, policy("580.95.05", drain={"enable": True}), objects)
    assert "gpu-1 (deletes ml/nb; cannot free mon/agent (DaemonSet))" in finding.message


@pytest.mark.parametrize(
    ("upgrade", "nodes", "at_once"),
    [
        pytest.param({}, NODES, 1, id="the defaults: one at a time"),
        pytest.param({"maxParallelUpgrades": 3}, NODES, 1, id="25 % of 4 nodes caps 3 at 1"),
        pytest.param({"maxParallelUpgrades": 3, "maxUnavailable": "50%"}, NODES, 2, id="50 % of 4"),
        pytest.param(
            {"maxParallelUpgrades": 0, "maxUnavailable": "100%"}, NODES, 4, id="0 is no limit"
        ),
        pytest.param({"maxParallelUpgrades": 2, "maxUnavailable": 3}, NODES, 2, id="a count"),
        pytest.param(
            {"maxParallelUpgrades": 2, "maxUnavailable": 2},
            [cordoned(NODES[0]), *NODES[1:]],
            1,
            id="a cordoned node counts against maxUnavailable",
        ),
        pytest.param({"maxUnavailable": "10%"}, NODES[:3], 1, id="a percentage rounds up"),
    ],
)
def test_how_many_go_together(upgrade: dict[str, Any], nodes: list[Obj], at_once: int) -> None:
    new = policy("580.95.05", **upgrade)
    assert plan_upgrade(state_of(*nodes), project_cluster_policy(new)).at_once == at_once


def test_no_slot_left_says_so() -> None:
    nodes = [cordoned(NODES[0]), *NODES[1:]]
    (finding,) = findings(OLD, policy("580.95.05", maxUnavailable=1), nodes)
    assert (
        "upgrades 4 nodes, for now only those already cordoned (maxUnavailable is used up); 4 idle"
        in finding.message
    )


@pytest.mark.parametrize(
    ("old", "new", "objects"),
    [
        pytest.param(OLD, OLD, NODES, id="the same version"),
        pytest.param(
            OLD, policy("570.172.08", maxParallelUpgrades=2), NODES, id="the policy alone"
        ),
        pytest.param(OLD, policy("580.95.05", autoUpgrade=False), NODES, id="the controller off"),
        pytest.param(
            OLD,
            with_spec(NEW, {"driver": {"enabled": False, "version": "580.95.05"}}),
            NODES,
            id="the host's driver",
        ),
        pytest.param(OLD, NEW, [node("cpu-1")], id="no GPU node"),
        pytest.param(
            OLD,
            NEW,
            [gpu_node("gpu-1", **{"nvidia.com/gpu.workload.config": "vm-passthrough"})],
            id="a passthrough node runs no driver of the operator's",
        ),
        pytest.param(
            OLD,
            NEW,
            [gpu_node("gpu-1", **{"nvidia.com/gpu.deploy.driver": "false"})],
            id="the driver pinned off",
        ),
    ],
)
def test_nothing_to_foresee(old: Obj, new: Obj, objects: list[Obj]) -> None:
    assert findings(old, new, objects) == []


def test_a_sandbox_cluster_upgrades_nothing_even_on_its_container_nodes() -> None:
    """upgrade_controller.go's Reconcile skips and clears the states when sandbox workloads are
    on; the driver DaemonSet is OnDelete, so no node moves until someone deletes its pod."""
    objects = [
        gpu_node("gpu-1", **{"nvidia.com/gpu.workload.config": "container"}),
        gpu_node("gpu-2"),
    ]
    sandbox = {"sandboxWorkloads": {"enabled": True, "defaultWorkload": "vm-passthrough"}}
    assert findings(OLD, with_spec(NEW, sandbox), objects) == []
    assert findings(OLD, NEW, objects) != []


@pytest.mark.parametrize(
    ("value", "total", "count"), [("25%", 4, 1), ("25%", 5, 2), ("3", 9, 3), ("0%", 4, 0)]
)
def test_max_unavailable_scales_a_percentage_up(value: str, total: int, count: int) -> None:
    assert max_unavailable(DriverUpgradePolicy(max_unavailable=value), total) == count


@pytest.mark.parametrize("value", ["many", "25 percent", True, "-1"])
def test_a_malformed_max_unavailable_names_its_field(value: object) -> None:
    with pytest.raises(ObjectError, match=r"spec\.driver\.upgradePolicy\.maxUnavailable"):
        project_cluster_policy(policy(maxUnavailable=value))


def test_the_engine_only_warns() -> None:
    decision = Engine().evaluate(
        request("UPDATE", NEW, OLD), state_of(NODES[0], gpu_pod("t", "gpu-1"))
    )
    assert [(v.policy, v.action) for v in decision.verdicts] == [(POLICY.id, Action.WARN)]
    assert decision.allowed


def test_a_first_version_and_two_users_it_cannot_free_are_said_plainly() -> None:
    first = with_spec(cluster_policy(False, "container"), {"driver": {"enabled": True}})
    objects = [NODES[0], env_pod("a", "gpu-1"), env_pod("b", "gpu-1")]
    (finding,) = findings(first, NEW, objects)
    assert finding.message.startswith("driver.version unset -> 580.95.05 upgrades 1 node")
    assert finding.remediation[0].startswith("free gpu-1 first: stop ml/a, ml/b (the upgrade")


def test_a_version_on_a_clusterpolicy_the_operator_does_not_act_on_moves_nothing() -> None:
    def named(obj: Obj, name: str, created: str) -> Obj:
        return {**obj, "metadata": {"name": name, "creationTimestamp": created}}

    oldest = named(OLD, "cluster-policy", "2025-01-01T00:00:00Z")
    younger = named(OLD, "bootstrap-policy", "2026-01-01T00:00:00Z")
    state = state_of(oldest, younger, *NODES)
    state.follow_gpu_operator_version(lambda: "v26.7.0")
    review = request("UPDATE", named(NEW, "bootstrap-policy", "2026-01-01T00:00:00Z"), younger)
    assert check(review, state) == ()
    review = request("UPDATE", named(NEW, "cluster-policy", "2025-01-01T00:00:00Z"), oldest)
    assert len(check(review, state)) == 1


# --- NVIDIADriver CRs (docs/driver-upgrades.md section 3) --------------------------------------
H100 = {"nvidia.com/gpu.product": "H100"}


def delegating_policy(delegated: bool = True, **driver: Any) -> Obj:
    spec = {"enabled": True, "version": "570.172.08", "useNvidiaDriverCRD": delegated, **driver}
    return with_spec(cluster_policy(False, "container"), {"driver": spec})


def owned_node(name: str, owner: str = "default", **labels: str) -> Obj:
    owned = {OWNER_LABEL: owner} if owner else {}
    return node(
        name,
        labels={"nvidia.com/gpu.present": "true", **owned, **labels},
        allocatable={"nvidia.com/gpu": "1"},
    )


DEFAULT = nvidia_driver("default", default=True)
H100_DRIVER = nvidia_driver("h100", node_selector=H100)
#: gpu-1 and gpu-2 driven by the default NVIDIADriver (gpu-1 busy), gpu-3 an H100 driven by h100.
CLUSTER = [
    delegating_policy(),
    DEFAULT,
    H100_DRIVER,
    owned_node("gpu-1", pool="training"),
    owned_node("gpu-2"),
    owned_node("gpu-3", "h100", **H100),
    gpu_pod("train", "gpu-1"),
    owned_by_daemonset(env_pod("agent", "gpu-1", namespace="mon")),
    gpu_pod("llm", "gpu-3"),
]


def nvd_findings(
    new: Obj, old: Obj | None = None, objects: Sequence[Obj] = CLUSTER
) -> list[Finding]:
    review: AdmissionRequest = request("CREATE" if old is None else "UPDATE", new, old)
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


def nvd_message(new: Obj, old: Obj | None = None, objects: Sequence[Obj] = CLUSTER) -> str:
    (finding,) = nvd_findings(new, old, objects)
    return finding.message


def test_a_new_version_walks_only_the_nodes_its_nvidiadriver_drives() -> None:
    (finding,) = nvd_findings(nvidia_driver("default", "580.95.05", default=True), DEFAULT)
    assert finding.message == (
        "NVIDIADriver default version 570.172.08 -> 580.95.05 upgrades 2 nodes, up to 1 at a "
        "time in no order: gpu-1 (deletes ml/train; cannot free mon/agent (DaemonSet)); 1 idle"
    )
    assert finding.remediation[0].startswith("free gpu-1 first: stop mon/agent")
    assert nvd_message(nvidia_driver("h100", "580.95.05", node_selector=H100), H100_DRIVER) == (
        "NVIDIADriver h100 version 570.172.08 -> 580.95.05 upgrades 1 node, up to 1 at a time "
        "in no order: gpu-3 (deletes ml/llm)"
    )


def test_another_repository_names_both_images() -> None:
    new = with_spec(DEFAULT, {"repository": "registry.example/nvidia", "version": "580.95.05"})
    assert nvd_message(new, DEFAULT).startswith(
        "NVIDIADriver default nvcr.io/nvidia/driver:570.172.08 -> "
        "registry.example/nvidia/driver:580.95.05 upgrades 2 nodes"
    )


@pytest.mark.parametrize(
    ("upgrade", "nodes", "pace"),
    [
        pytest.param({}, 3, "up to 1 at a time", id="none given: one at a time"),
        pytest.param({"maxParallelUpgrades": 0}, 4, "up to 1 at a time", id="25 % of 4 caps"),
        pytest.param(
            {"maxParallelUpgrades": 0, "maxUnavailable": "100%"},
            4,
            "up to 4 at a time",
            id="its own upgradePolicy, not the ClusterPolicy's",
        ),
        pytest.param(
            {"maxUnavailable": 1, "maxParallelUpgrades": 2},
            0,
            "for now only those already cordoned",
            id="a cordoned node of its own uses the slot up",
        ),
    ],
)
def test_how_many_go_together_is_its_own_upgrade_policy(
    upgrade: dict[str, Any], nodes: int, pace: str
) -> None:
    objects = [delegating_policy(), *(owned_node(f"gpu-{i}") for i in range(1, 5))]
    if not nodes:
        objects[1] = cordoned(objects[1])
    old = nvidia_driver("default", default=True, **upgrade)
    new = nvidia_driver("default", "580.95.05", default=True, **upgrade)
    assert pace in nvd_message(new, old, objects)


def test_skipped_and_non_container_nodes_are_named_or_left_out() -> None:
    sandbox = with_spec(delegating_policy(), {"sandboxWorkloads": {"enabled": True}})
    objects = [
        sandbox,
        *CLUSTER[1:],
        owned_node("gpu-4", **{SKIP: "true"}),
        owned_node("gpu-5", **{"nvidia.com/gpu.workload.config": "vm-passthrough"}),
        owned_node("gpu-6", **{"nvidia.com/gpu.deploy.driver": "false"}),
    ]
    text = nvd_message(nvidia_driver("default", "580.95.05", default=True), DEFAULT, objects)
    assert text.endswith("; 1 idle; skipped: gpu-4")
    assert "gpu-5" not in text and "gpu-6" not in text


def test_a_new_nvidiadriver_taking_nodes_replaces_their_driver_at_once() -> None:
    training = nvidia_driver("training", "580.95.05", node_selector={"pool": "training"})
    (finding,) = nvd_findings(training)
    assert finding.message == (
        "new NVIDIADriver training (nvcr.io/nvidia/driver:580.95.05) takes from NVIDIADriver "
        "default gpu-1 (deletes ml/train; cannot free mon/agent (DaemonSet)). A node changing "
        "NVIDIADriver has its driver replaced at once, outside the upgrade waves: free it first"
    )
    assert finding.remediation[0].startswith("free gpu-1 first: stop mon/agent")


def test_a_narrower_selector_hands_nodes_back_or_leaves_them_without_a_driver() -> None:
    everything = nvidia_driver("all")
    objects = [
        delegating_policy(),
        everything,
        owned_node("gpu-1", "all"),
        owned_node("gpu-2", "all", **H100),
    ]
    narrowed = nvidia_driver("all", node_selector=H100)
    assert nvd_message(narrowed, everything, objects) == (
        "NVIDIADriver all's new nodeSelector or default hands to no NVIDIADriver (their driver "
        "is removed) gpu-1. "
        "A node changing NVIDIADriver has its driver replaced at once, outside the upgrade "
        "waves: free it first"
    )
    with_default = [*objects, DEFAULT]
    assert "hands to NVIDIADriver default gpu-1" in nvd_message(narrowed, everything, with_default)


def test_each_former_nvidiadriver_gets_its_clause() -> None:
    stale = owned_node("gpu-2", "legacy", pool="training")  # an owner deleted since
    objects = [*(o for o in CLUSTER if o.get("metadata", {}).get("name") != "gpu-2"), stale]
    training = nvidia_driver("training", "580.95.05", node_selector={"pool": "training"})
    assert (
        "takes from NVIDIADriver default gpu-1 (deletes ml/train; cannot free mon/agent "
        "(DaemonSet)); takes from NVIDIADriver legacy gpu-2. A node"
        in nvd_message(training, None, objects)
    )


def test_a_new_version_and_new_nodes_at_once_say_both() -> None:
    widened = nvidia_driver("h100", "580.95.05")  # no nodeSelector: every GPU node
    assert nvd_message(widened, H100_DRIVER) == (
        "NVIDIADriver h100 version 570.172.08 -> 580.95.05 upgrades 1 node, up to 1 at a time in "
        "no order: gpu-3 (deletes ml/llm); takes from NVIDIADriver default gpu-1 (deletes "
        "ml/train; cannot free mon/agent (DaemonSet)) and gpu-2. A node changing NVIDIADriver has "
        "its driver replaced at once, outside the upgrade waves: free it first"
    )


def test_a_version_given_for_the_first_time_is_from_unset() -> None:
    unversioned = with_spec(DEFAULT, {"version": None})
    new = nvidia_driver("default", "580.95.05", default=True)
    assert nvd_message(new, unversioned).startswith(
        "NVIDIADriver default version unset -> 580.95.05 upgrades 2 nodes"
    )


def test_a_node_with_no_owner_yet_is_walked_in_the_waves() -> None:
    objects = [delegating_policy(), owned_node("gpu-1", ""), owned_node("gpu-2", "")]
    assert nvd_message(DEFAULT, None, objects).startswith(
        "new NVIDIADriver default (nvcr.io/nvidia/driver:570.172.08) upgrades 2 nodes"
    )
    no_auto = nvidia_driver("default", default=True, autoUpgrade=False)
    assert nvd_findings(no_auto, None, objects) == []


def test_with_auto_upgrade_off_only_the_handovers_are_said() -> None:
    old = nvidia_driver("default", default=True, autoUpgrade=False)
    new = nvidia_driver("default", "580.95.05", default=True, autoUpgrade=False)
    assert nvd_findings(new, old) == []
    pool = {"pool": "training"}
    taking = nvidia_driver("training", "580.95.05", node_selector=pool, autoUpgrade=False)
    assert nvd_message(taking).startswith(
        "new NVIDIADriver training (nvcr.io/nvidia/driver:580.95.05) takes"
    )


@pytest.mark.parametrize(
    ("new", "extra"),
    [
        pytest.param(
            nvidia_driver("other", node_selector={"pool": "training"}),
            [nvidia_driver("pool", node_selector={"pool": "training"})],
            id="two non-default ones select the same node",
        ),
        pytest.param(nvidia_driver("second", default=True), [], id="a second default NVIDIADriver"),
        pytest.param(
            nvidia_driver("other", default=True, node_selector={"pool": "training"}),
            [],
            id="a default with a nodeSelector",
        ),
        pytest.param(
            nvidia_driver("other", node_selector={OWNER_LABEL: "default"}),
            [],
            id="the owner label in a selector",
        ),
    ],
)
def test_where_the_operator_refuses_to_route_no_node_changes_nvidiadriver(
    new: Obj, extra: list[Obj]
) -> None:
    assert nvd_findings(new, None, [*CLUSTER, *extra]) == []


def test_the_stored_nvidiadriver_of_the_same_name_is_replaced_not_doubled() -> None:
    # Updating the default NVIDIADriver's version is not "a second default".
    assert nvd_findings(nvidia_driver("default", "580.95.05", default=True), DEFAULT)


@pytest.mark.parametrize(
    ("objects", "moved"),
    [
        pytest.param(CLUSTER, True, id="useNvidiaDriverCRD"),
        pytest.param([o for o in CLUSTER if o is not CLUSTER[0]], True, id="no ClusterPolicy"),
        pytest.param(
            [delegating_policy(False), *CLUSTER[1:]], False, id="a ClusterPolicy runs the driver"
        ),
        pytest.param(
            [
                delegating_policy(False),
                with_spec(delegating_policy(), {}) | {"metadata": {"name": "b"}},
                *CLUSTER[1:],
            ],
            True,
            id="one of two ClusterPolicies that may be in force delegates",
        ),
    ],
)
def test_nvidiadrivers_move_nodes_only_when_they_run_the_driver(
    objects: list[Obj], moved: bool
) -> None:
    new = nvidia_driver("default", "580.95.05", default=True)
    assert bool(nvd_findings(new, DEFAULT, objects)) == moved


def test_a_deleting_nvidiadriver_is_not_foreseen_nor_routed_to() -> None:
    deleting = nvidia_driver("default", "580.95.05", default=True)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    assert nvd_findings(deleting, DEFAULT) == []
    gone = project_nvidia_driver(deleting)
    assert owners([gone], [state_of(owned_node("gpu-1")).nodes()[0]]) == {"gpu-1": ""}


def test_with_a_gpucluster_and_no_clusterpolicy_the_mode_label_does_not_keep_a_node_out() -> None:
    gpu_cluster = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "GPUCluster",
        "metadata": {"name": "gpu-cluster"},
    }
    vm_node = owned_node("gpu-1", **{"nvidia.com/gpu.workload.config": "vm-passthrough"})
    new = nvidia_driver("default", "580.95.05", default=True)
    assert "upgrades 1 node" in nvd_message(new, DEFAULT, [DEFAULT, vm_node, gpu_cluster])
    assert nvd_findings(new, DEFAULT, [DEFAULT, vm_node]) == []


def test_a_clusterpolicy_version_under_nvidiadrivers_says_it_upgrades_nothing() -> None:
    (finding,) = list(
        check(
            request("UPDATE", delegating_policy(version="580.95.05"), delegating_policy()),
            state_of(*CLUSTER),
        )
    )
    assert finding.message == (
        "driver.version 570.172.08 -> 580.95.05 upgrades nothing: NVIDIADriver CRs (default and "
        "h100) run the driver (driver.useNvidiaDriverCRD). Change an NVIDIADriver's spec.version "
        "to upgrade."
    )
    assert finding.remediation == ("kubectl edit nvidiadriver NAME: set spec.version",)
    (alone,) = list(
        check(
            request("UPDATE", delegating_policy(version="580.95.05"), delegating_policy()),
            state_of(),
        )
    )
    assert "NVIDIADriver CRs (none yet)" in alone.message


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        pytest.param({"nodeSelector": {"pool": 1}}, "spec.nodeSelector.pool", id="selector"),
        pytest.param({"default": "yes"}, "spec.default", id="default"),
        pytest.param({"version": 570}, "spec.version", id="version"),
        pytest.param(
            {"upgradePolicy": {"maxUnavailable": "a few"}},
            "spec.upgradePolicy.maxUnavailable",
            id="maxUnavailable",
        ),
        pytest.param(
            {"upgradePolicy": {"maxParallelUpgrades": "2"}},
            "spec.upgradePolicy.maxParallelUpgrades",
            id="maxParallelUpgrades",
        ),
    ],
)
def test_a_malformed_nvidiadriver_names_the_field(spec: dict[str, Any], path: str) -> None:
    with pytest.raises(ObjectError) as caught:
        project_nvidia_driver(with_spec(DEFAULT, spec))
    assert caught.value.path == path


def test_the_projection_reads_the_operator_defaults() -> None:
    bare = project_nvidia_driver({"metadata": {"name": "d"}, "spec": {"image": "driver"}})
    assert (bare.default, bare.node_selector, bare.image) == (False, None, "driver:")
    assert (bare.upgrade.auto, bare.upgrade.max_parallel, bare.upgrade.max_unavailable) == (
        True,
        1,
        "25%",
    )
    assert bare.selects({"nvidia.com/gpu.present": "true"})
    assert not bare.selects({})


def test_scope_default_action_and_what_a_delete_gets() -> None:
    assert not judged_by(POLICY, request("DELETE", None, DEFAULT))
    new = nvidia_driver("default", "580.95.05", default=True)
    decision = Engine().evaluate(request("UPDATE", new, DEFAULT), state_of(*CLUSTER))
    assert decision.allowed
    assert [(v.policy, v.action) for v in decision.verdicts] == [(POLICY.id, Action.WARN)]

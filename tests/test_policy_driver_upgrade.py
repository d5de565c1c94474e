"""driver-upgrade-waves: a new driver version foreseen node by node, warned and never blocked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from policies.cluster.driver_upgrade import max_unavailable, plan_upgrade
from policies.cluster.gpu_operator import DriverUpgradePolicy, project_cluster_policy
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


def test_a_sandbox_cluster_upgrades_only_its_container_nodes() -> None:
    new = with_spec(
        NEW, {"sandboxWorkloads": {"enabled": True, "defaultWorkload": "vm-passthrough"}}
    )
    objects = [
        gpu_node("gpu-1", **{"nvidia.com/gpu.workload.config": "container"}),
        gpu_node("gpu-2"),
    ]
    (finding,) = findings(OLD, new, objects)
    assert "upgrades 1 node, up to 1 at a time in no order; 1 idle" in finding.message


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

"""Live state: list then watch through the real kubernetes-asyncio client against the API double.

Each test ends by checking that the cache mirrors the server exactly: nothing lost, nothing
duplicated, every projection equal to what a fresh read of the server's objects gives.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio.client import ApiClient

from policies.cluster.kinds import POD, VIRTUAL_MACHINE, WATCHED_KINDS
from policies.cluster.projections import PROJECTIONS
from policies.vocabulary.verdicts import Action
from tests.builders import cluster_policy, gpu_pod, kubevirt, node, pod, request, vm, with_labels
from tests.conftest import LiveFactory, quick_backoff
from tests.kubeapi import KubeApiDouble
from tests.waits import until
from webhook.admission.pipeline import Admission
from webhook.admission.warnings import split_warning
from webhook.config import GuardConfig
from webhook.engine import Engine
from webhook.state.live import RESOURCES, LiveState

OMEN1 = node(
    "omen1",
    labels={"nvidia.com/gpu.workload.config": "container"},
    allocatable={"nvidia.com/gpu": "1"},
)
SWITCHED = with_labels(OMEN1, {"nvidia.com/gpu.workload.config": "vm-passthrough"})
SWITCH = request("UPDATE", SWITCHED, OMEN1)


class Clock:
    """monotonic time that a test can move forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


@pytest.fixture
async def api() -> AsyncIterator[KubeApiDouble]:
    async with KubeApiDouble(bookmark_interval=0.1) as double:
        for obj in (
            OMEN1,
            node("nuc1"),
            gpu_pod("train", "omen1"),
            pod("web", "nuc1"),
            cluster_policy(),
            kubevirt([("10de:2204", "nvidia.com/GA102_GEFORCE_RTX_3090")]),
        ):
            double.create(obj)
        yield double


def mirrors(live: LiveState, api: KubeApiDouble) -> bool:
    """True when the cache holds exactly the server's objects, each projected the same way."""
    state = live.state
    for kind in WATCHED_KINDS:
        plural = next(r.plural for r in RESOURCES if r.kind == kind)
        objects = (
            api.objects(plural) if api.installed(kind.group or "core") or not kind.group else []
        )
        keys = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objects}
        if state.keys(kind) != keys:
            return False
        for obj in objects:
            expected = PROJECTIONS[kind](obj)
            name = obj["metadata"]["name"]
            if kind.kind == "Node" and state.node(name) != expected:
                return False
            if kind == VIRTUAL_MACHINE and expected not in state.vms():
                return False
    return True


async def test_readiness_waits_for_every_kind_then_the_cache_mirrors_the_server(
    kube: ApiClient, api: KubeApiDouble
) -> None:
    live = LiveState(kube, backoff=quick_backoff)
    reason = live.not_ready_reason()
    assert reason is not None and reason.startswith("waiting for the first sync of Node, Pod")
    await live.start()
    try:
        await live.wait_synced(5)
        assert live.not_ready_reason() is None
        assert mirrors(live, api)
        assert [p.key for p in live.state.gpu_pods_on("omen1")] == ["ml/train"]
        assert live.state.counts()["Pod"] == 2  # the web pod is counted, not kept
    finally:
        await live.stop()


async def test_adds_modifies_and_deletes_reach_the_indexes(
    make_live: LiveFactory, api: KubeApiDouble
) -> None:
    live = await make_live()
    api.create(gpu_pod("infer", "omen1"))
    await until(lambda: len(live.state.gpu_pods_on("omen1")) == 2)
    api.patch("Node", None, "omen1", {"status": {"allocatable": {"nvidia.com/gpu": "0"}}})
    await until(lambda: live.state.providers_of("nvidia.com/gpu") == [])
    api.delete("Pod", "ml", "infer")
    await until(lambda: [p.key for p in live.state.gpu_pods_on("omen1")] == ["ml/train"])
    await until(lambda: mirrors(live, api))


async def test_a_pod_deleted_on_the_server_stops_blocking_the_node_switch(
    make_live: LiveFactory, api: KubeApiDouble
) -> None:
    live = await make_live()
    engine = Engine()
    assert not engine.evaluate(SWITCH, live.state, live).allowed
    api.delete("Pod", "ml", "train")
    await until(lambda: engine.evaluate(SWITCH, live.state, live).allowed)


async def test_a_dropped_stream_resumes_from_the_last_version_and_loses_nothing(
    make_live: LiveFactory, api: KubeApiDouble
) -> None:
    live = await make_live()
    await until(lambda: api.open_watches == len(RESOURCES))
    seen = live.statuses[POD].resource_version
    assert api.drop_watches() == len(RESOURCES)
    api.create(gpu_pod("during-the-gap", "omen1"))
    await until(lambda: len(live.state.gpu_pods_on("omen1")) == 2)
    resumed = [w.resource_version for w in api.watch_requests if w.path == "/api/v1/pods"]
    assert resumed[-1] is not None and int(resumed[-1]) >= int(seen)
    await until(lambda: mirrors(live, api))


async def test_410_gone_relists_and_the_cache_equals_the_server(
    make_live: LiveFactory, api: KubeApiDouble
) -> None:
    live = await make_live()
    await until(lambda: api.open_watches == len(RESOURCES))
    lists_before = api.requests["/api/v1/pods"] - api.watches["/api/v1/pods"]
    api.delete("Pod", "ml", "train")
    api.create(gpu_pod("train-2", "omen1"))
    # What makes a resumed watch 410 on a real API server: its watch cache no longer reaching
    # back to the version (after a restart; etcd compaction alone does not do it).
    api.expire_watch_cache()
    api.drop_watches()
    await until(lambda: [p.key for p in live.state.gpu_pods_on("omen1")] == ["ml/train-2"])
    await until(lambda: mirrors(live, api))
    lists_after = api.requests["/api/v1/pods"] - api.watches["/api/v1/pods"]
    assert lists_after > lists_before  # it relisted rather than trusting a stale history


async def test_a_broken_watch_past_the_bound_downgrades_a_deny_and_says_how_stale(
    make_live: LiveFactory, api: KubeApiDouble
) -> None:
    clock = Clock()
    live = await make_live(clock=clock, stale_after=30)
    api.set_down(True, "503")
    await until(lambda: live.statuses[POD].broken_since is not None)
    assert not Engine().evaluate(SWITCH, live.state, live).allowed  # broken, but not for long
    clock.offset = 42
    decision = Engine().evaluate(SWITCH, live.state, live)
    assert decision.allowed
    (verdict,) = decision.verdicts
    assert verdict.action == Action.WARN
    assert "not denied: gpu-guard's view is stale" in verdict.message
    assert "not denied: gpu-guard's view is stale" in split_warning(verdict.text)[0]  # first
    assert "the Pod watch has been broken for 4" in verdict.message
    assert re.search(r"broken for 4\d s, since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", verdict.message)
    api.set_down(False)
    await until(lambda: all(s.broken_since is None for s in live.statuses.values()))
    assert not Engine().evaluate(SWITCH, live.state, live).allowed


async def test_before_the_first_sync_a_switch_the_pods_decide_is_denied_until_they_synced(
    kube: ApiClient, api: KubeApiDouble
) -> None:
    # Issue 32: a relabel sent within moments of "serving on" was allowed on an empty view.
    api.set_down(True, "503")
    live = LiveState(kube, backoff=quick_backoff)
    live.state.upsert(OMEN1)  # what a half-done first list may hold: no pod on it yet
    decision = Engine().evaluate(SWITCH, live.state, live)
    assert not decision.allowed
    verdict = next(v for v in decision.denials if v.policy == "workload-switch-with-gpu-pods")
    assert not verdict.evaluated and verdict.message.endswith(" yet; retry in a moment")
    assert verdict.message.startswith("gpu-guard has not synced Pods, ")
    await live.start()
    try:
        api.set_down(False)
        await live.wait_synced(10)
        synced = Engine().evaluate(SWITCH, live.state, live)
        assert [v.evaluated for v in synced.denials] == [True]  # judged now, on the pods
        assert "ml/train" in synced.deny_message
    finally:
        await live.stop()


async def test_before_the_first_sync_a_warn_policy_warns_that_it_did_not_evaluate(
    kube: ApiClient, api: KubeApiDouble
) -> None:
    api.set_down(True, "503")
    live = LiveState(kube, backoff=quick_backoff)
    config = GuardConfig(actions={"workload-switch-with-gpu-pods": Action.WARN})
    decision = Engine(config).evaluate(SWITCH, live.state, live)
    (verdict,) = (v for v in decision.verdicts if v.policy == "workload-switch-with-gpu-pods")
    assert verdict.action == Action.WARN and not verdict.evaluated
    assert verdict.message.startswith("gpu-guard could not evaluate this policy: gpu-guard has")
    assert "not synced Pods, " in verdict.message and verdict.message.endswith("; not checked")


async def test_a_crd_installed_later_is_found_without_a_restart(
    kube: ApiClient, api: KubeApiDouble
) -> None:
    api.uninstall("kubevirt.io")
    live = LiveState(kube, backoff=quick_backoff, absent_recheck=0.05, watch_timeout=5)
    await live.start()
    try:
        await live.wait_synced(5)  # an absent CRD counts as synced and empty
        assert not live.statuses[VIRTUAL_MACHINE].installed
        assert live.state.vms() == []
        api.install("kubevirt.io")
        api.create(vm("gpu-fedora", gpus=["nvidia.com/GB202_GEFORCE_RTX_5090"]))
        await until(lambda: [v.name for v in live.state.vms()] == ["gpu-fedora"])
        assert live.statuses[VIRTUAL_MACHINE].installed
        await until(lambda: mirrors(live, api))
    finally:
        await live.stop()


async def test_a_deny_naming_pods_is_confirmed_with_the_api_server_first(
    make_live: LiveFactory, api: KubeApiDouble
) -> None:
    live = await make_live()
    # A pod the cache still believes in, gone from the server (a missed delete):
    live.state.upsert(gpu_pod("ghost", "omen1", namespace="old"))
    api.delete("Pod", "ml", "train")
    await until(lambda: [p.key for p in live.state.gpu_pods_on("omen1")] == ["old/ghost"])
    shared = Admission(Engine(), live.state, freshness=live, confirm=live.refresh_pods_on)
    decision = await shared.decide(SWITCH)
    assert decision.allowed, decision.deny_message
    assert live.state.gpu_pods_on("omen1") == []


async def test_when_the_api_server_is_too_slow_to_confirm_the_cache_decides_and_says_so(
    make_live: LiveFactory, api: KubeApiDouble
) -> None:
    live = await make_live()
    api.set_latency(1.0)
    shared = Admission(
        Engine(), live.state, freshness=live, confirm=live.refresh_pods_on, confirm_budget=0.1
    )
    started = time.monotonic()
    decision = await shared.decide(SWITCH)
    assert time.monotonic() - started < 0.9
    assert not decision.allowed
    assert "did not confirm the pods within 0.1 s; decided on the cached state" in (
        decision.deny_message
    )


# --- Dynamic Resource Allocation ------------------------------------------------------------------


async def test_dra_objects_on_the_server_reach_the_dra_indexes(
    make_live: LiveFactory, api: KubeApiDouble
) -> None:
    from tests.dra_builders import (
        GPU_CLASS,
        claim_pod,
        device_class,
        gpu,
        resource_claim,
        resource_slice,
    )

    live = await make_live()
    api.create(device_class("gpu.nvidia.com", GPU_CLASS, extended="nvidia.com/gpu"))
    api.create(resource_slice("omen1-gpu", "omen1", [gpu("gpu-0")]))
    api.create(resource_claim("train-gpu"))
    api.create(claim_pod("train-dra", "omen1", claim="train-gpu"))
    await until(lambda: live.state.class_device_counts("gpu.nvidia.com") == {"omen1": 1})
    assert live.state.healthy_extended_resource_provider_count("nvidia.com/gpu") == 1
    api.update(resource_claim("train-gpu", allocated=("omen1", "omen1", "gpu-0"),
                              reserved_for=["train-dra"]))  # fmt: skip
    await until(lambda: len(live.state.claims_allocated_on("omen1")) == 1)
    (held,) = live.state.claims_allocated_on("omen1")
    assert [p.key for p in held.pods] == ["ml/train-dra"]
    api.update(
        resource_slice("omen1-gpu", "omen1", [gpu("gpu-vfio-0", type_="vfio")], generation=2)
    )
    await until(lambda: live.state.class_device_counts("gpu.nvidia.com") == {})
    api.delete("ResourceSlice", None, "omen1-gpu")
    await until(lambda: live.state.devices_on("omen1") == [])
    await until(lambda: mirrors(live, api))


async def test_a_cluster_without_the_dra_api_is_ready_and_finds_it_once_served(
    kube: ApiClient, api: KubeApiDouble
) -> None:
    from policies.cluster.kinds import DEVICE_CLASS, RESOURCE_SLICE
    from tests.dra_builders import GPU_CLASS, device_class

    api.uninstall("resource.k8s.io")
    live = LiveState(kube, backoff=quick_backoff, absent_recheck=0.05, watch_timeout=5)
    await live.start()
    try:
        await live.wait_synced(5)  # resource.k8s.io 404s: counted as synced and empty
        assert live.not_ready_reason() is None
        assert not live.statuses[DEVICE_CLASS].installed
        assert not live.statuses[RESOURCE_SLICE].installed
        api.install("resource.k8s.io")
        api.create(device_class("gpu.nvidia.com", GPU_CLASS))
        await until(lambda: live.state.device_class("gpu.nvidia.com") is not None)
        assert live.statuses[DEVICE_CLASS].installed
    finally:
        await live.stop()


# --- GPU Operator 26.7's GPUCluster -------------------------------------------------------------

GPU_CLUSTER_OBJ = {
    "apiVersion": "nvidia.com/v1alpha1",
    "kind": "GPUCluster",
    "metadata": {"name": "gpu-cluster"},
    "spec": {"draDriver": {"featureGates": {"PassthroughSupport": True}}},
    "status": {"state": "notReady"},
}


async def test_a_gpucluster_on_the_server_reaches_the_state_and_leaves_it(
    make_live: LiveFactory, api: KubeApiDouble
) -> None:
    live = await make_live()
    api.create(GPU_CLUSTER_OBJ)
    await until(lambda: [c.state for c in live.state.gpu_clusters()] == ["notReady"])
    assert live.state.gpu_clusters()[0].dra_feature_gates == ("PassthroughSupport",)
    api.delete("GPUCluster", None, "gpu-cluster")
    await until(lambda: live.state.gpu_clusters() == [])
    await until(lambda: mirrors(live, api))


async def test_an_nvidiadriver_on_the_server_reaches_the_state_and_a_new_version_follows(
    make_live: LiveFactory, api: KubeApiDouble
) -> None:
    from tests.builders import nvidia_driver

    live = await make_live()
    api.create(nvidia_driver("default", default=True))
    await until(
        lambda: (
            [(d.name, d.version) for d in live.state.nvidia_drivers()]
            == [("default", "570.172.08")]
        )
    )
    api.update(nvidia_driver("default", "580.95.05", default=True))
    await until(lambda: [d.version for d in live.state.nvidia_drivers()] == ["580.95.05"])
    api.delete("NVIDIADriver", None, "default")
    await until(lambda: live.state.nvidia_drivers() == [])
    await until(lambda: mirrors(live, api))


@pytest.mark.parametrize(
    ("absent", "listed"), [("GPUCluster", "gpu_clusters"), ("NVIDIADriver", "nvidia_drivers")]
)
async def test_a_cluster_without_an_operator_crd_is_ready_and_reads_its_clusterpolicy(
    tmp_path: Path, absent: str, listed: str
) -> None:
    from policies.cluster.kinds import CLUSTER_POLICY, GPU_CLUSTER, NVIDIA_DRIVER
    from tests.kubeapi import SERVED
    from webhook.state.client import connect

    kind = {"GPUCluster": GPU_CLUSTER, "NVIDIADriver": NVIDIA_DRIVER}[absent]
    without = tuple(r for r in SERVED if r.kind != absent)
    async with KubeApiDouble(resources=without, bookmark_interval=0.1) as double:
        for obj in (cluster_policy(), OMEN1, gpu_pod("train", "omen1")):
            double.create(obj)
        client = await connect(str(double.kubeconfig(tmp_path / "kubeconfig")))
        live = LiveState(client, backoff=quick_backoff, absent_recheck=0.05, watch_timeout=5)
        await live.start()
        try:
            await live.wait_synced(5)  # its collection 404s: counted as synced and empty
            assert live.not_ready_reason() is None
            assert not live.statuses[kind].installed
            assert live.statuses[CLUSTER_POLICY].installed
            assert getattr(live.state, listed)() == []
            assert [p.name for p in live.state.cluster_policies()] == ["cluster-policy"]
            # A deny that reads the kind is no less a deny where the CRD is not installed.
            decision = Engine().evaluate(SWITCH, live.state, live)
            assert [(v.policy, v.action) for v in decision.verdicts] == [
                ("workload-switch-with-gpu-pods", Action.DENY)
            ]
        finally:
            await live.stop()
            await client.close()

"""The Kubernetes API double, proven with the real kubernetes-asyncio client.

Why: tests of gpu-guard's informers are only worth something if the double behaves
like kube-apiserver *as kubernetes-asyncio sees it*; these tests pin that down, and
they document how the client surfaces each failure (the consumer must handle them).
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.kubeapi import KubeApiDouble
from tests.waits import until

KV = ("kubevirt.io", "v1")


def node(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(name: str, node_name: str | None, namespace: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if node_name is not None:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def vm(name: str, namespace: str = "vms") -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"running": True},
    }


@pytest.fixture
async def api() -> AsyncIterator[KubeApiDouble]:
    async with KubeApiDouble(bookmark_interval=0.1) as double:
        yield double


@pytest.fixture
async def kube(api: KubeApiDouble, tmp_path: Path) -> AsyncIterator[Any]:
    """A real ApiClient configured the way production code does it: from a kubeconfig."""
    path = api.kubeconfig(tmp_path / "kubeconfig")
    api_client = await config.new_client_from_config(config_file=str(path))
    yield api_client
    await api_client.close()


wait_until = functools.partial(until, timeout=2.0, every=0.005)


async def take(stream: Any, count: int, *, skip_bookmarks: bool = True) -> list[Any]:
    """The next `count` events (bounded in time, so a broken double fails, not hangs)."""
    events: list[Any] = []
    async with asyncio.timeout(5):
        async for event in stream:
            if skip_bookmarks and event["type"] == "BOOKMARK":
                continue
            events.append(event)
            if len(events) == count:
                break
    return events


def status_of(error: ApiException) -> Any:
    """The Status an HTTP error carried; ApiClient has already decoded .body to str."""
    assert error.body is not None
    return json.loads(error.body)


def summary(events: list[Any]) -> list[tuple[str, str]]:
    return [(e["type"], e["raw_object"]["metadata"]["name"]) for e in events]


async def test_list_then_watch_from_the_list_rv_sees_added_modified_deleted_in_order(
    api: KubeApiDouble, kube: Any
) -> None:
    api.create(node("n1"))
    v1 = client.CoreV1Api(kube)
    listed = await v1.list_node()
    assert [n.metadata.name for n in listed.items] == ["n1"]
    assert listed.metadata.resource_version == str(api.resource_version)

    api.create(node("n2"))  # before the watch: must be replayed from history
    async with watch.Watch() as w:
        stream = w.stream(v1.list_node, resource_version=listed.metadata.resource_version)
        first = await take(stream, 1)
        api.patch_labels("Node", None, "n2", {"nvidia.com/gpu.workload.config": "vm-passthrough"})
        api.delete("Node", None, "n1")
        rest = await take(stream, 2)

    events = first + rest
    assert summary(events) == [("ADDED", "n2"), ("MODIFIED", "n2"), ("DELETED", "n1")]
    rvs = [int(e["object"].metadata.resource_version) for e in events]
    assert rvs == sorted(rvs) and rvs[-1] == api.resource_version
    assert events[1]["object"].metadata.labels["nvidia.com/gpu.workload.config"] == "vm-passthrough"
    assert w.resource_version == str(api.resource_version)  # the client tracks RVs itself


async def test_watch_without_resource_version_starts_with_added_for_everything_current(
    api: KubeApiDouble, kube: Any
) -> None:
    api.create(node("a"))
    api.create(node("b"))
    async with watch.Watch() as w:
        events = await take(w.stream(client.CoreV1Api(kube).list_node, resource_version="0"), 2)
    assert summary(events) == [("ADDED", "a"), ("ADDED", "b")]


async def test_bookmarks_arrive_once_the_kind_moved_past_the_watch_and_carry_its_version(
    api: KubeApiDouble, kube: Any
) -> None:
    api.create(pod("here", "n1", namespace="gpu"))
    v1 = client.CoreV1Api(kube)
    async with watch.Watch() as w:
        stream = w.stream(
            v1.list_namespaced_pod,
            "gpu",
            resource_version=str(api.resource_version),
            allow_watch_bookmarks=True,
        )
        consumer = asyncio.create_task(take(stream, 2, skip_bookmarks=False))
        await wait_until(lambda: api.open_watches == 1)
        api.create(pod("elsewhere", "n1"))  # pods moved on; this watch is not sent the pod
        events = await consumer
    assert [e["type"] for e in events] == ["BOOKMARK", "BOOKMARK"]
    # Bookmark objects stay raw dicts: kubernetes-asyncio does not deserialize them.
    assert events[0]["object"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"resourceVersion": str(api.resource_version)},
    }


async def test_no_bookmark_while_the_kind_is_where_the_watch_started(
    api: KubeApiDouble, kube: Any
) -> None:
    api.create(node("n1"))
    api.create(pod("p", "n1"))  # another kind moving on is nothing to a node watch
    async with watch.Watch() as w:
        stream = w.stream(
            client.CoreV1Api(kube).list_node,
            resource_version="0",
            allow_watch_bookmarks=True,
            timeout_seconds=1,
        )
        events = await take(stream, 9, skip_bookmarks=False)
    assert summary(events) == [("ADDED", "n1")]  # the current nodes, then nothing


async def test_no_bookmarks_unless_asked(api: KubeApiDouble, kube: Any) -> None:
    v1 = client.CoreV1Api(kube)
    async with watch.Watch() as w:
        events = await take(w.stream(v1.list_node, resource_version="1", timeout_seconds=1), 99)
    assert events == []  # the stream just ran out at timeoutSeconds: clean StopAsyncIteration


async def test_a_watch_from_a_version_the_watch_cache_no_longer_holds_gets_the_410_error_event(
    api: KubeApiDouble,
) -> None:
    api.create(node("n1"))
    api.create(node("n2"))
    api.expire_watch_cache()
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{api.url}/api/v1/nodes?watch=true&resourceVersion=1") as resp,
    ):
        assert resp.status == 200
        lines = (await resp.read()).decode().splitlines()
    assert [json.loads(line) for line in lines] == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "too old resource version: 1 (2)",
                "reason": "Expired",
                "code": 410,
            },
        }
    ]


async def test_kubernetes_asyncio_raises_api_exception_410_for_a_version_the_cache_forgot(
    api: KubeApiDouble, kube: Any
) -> None:
    # How the consumer sees it: NOT an event dict with type ERROR. Watch.unmarshal_event
    # turns the ERROR event into ApiException(status=410, reason="Expired: too old
    # resource version: 1 (2)") with body=None and headers=None, raised out of the
    # `async for`. The consumer must catch it, re-list, and watch from the new RV.
    api.create(node("n1"))
    api.create(node("n2"))
    api.expire_watch_cache()
    v1 = client.CoreV1Api(kube)
    with pytest.raises(ApiException) as raised:
        async with watch.Watch() as w:
            await take(w.stream(v1.list_node, resource_version="1", timeout_seconds=5), 1)
    assert raised.value.status == 410
    assert raised.value.reason == "Expired: too old resource version: 1 (2)"
    assert raised.value.body is None
    assert api.watches["/api/v1/nodes"] == 1


async def test_without_timeout_seconds_the_client_retries_410_once_with_the_same_rv(
    api: KubeApiDouble, kube: Any
) -> None:
    # Surprise worth knowing: with no timeout_seconds, Watch retries a 410 once, but
    # from the *same* stale RV, so it costs a second request and then raises anyway.
    api.create(node("n1"))
    api.create(node("n2"))
    api.expire_watch_cache()
    v1 = client.CoreV1Api(kube)
    with pytest.raises(ApiException) as raised:
        async with watch.Watch() as w:
            await take(w.stream(v1.list_node, resource_version="1"), 1)
    assert raised.value.status == 410
    assert [r.resource_version for r in api.watch_requests] == ["1", "1"]


async def test_a_bounded_history_expires_rvs_that_fell_out_of_it() -> None:
    async def first_event_from_rv_1(double: KubeApiDouble) -> Any:
        url = f"{double.url}/api/v1/nodes?watch=1&resourceVersion=1&timeoutSeconds=1"
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            return json.loads(await resp.content.readline())

    async with KubeApiDouble(history_limit=2) as small:
        for name in ("a", "b", "c"):
            small.create(node(name))
        assert (await first_event_from_rv_1(small))["type"] == "ADDED"  # b, c still held
        small.create(node("d"))  # pushes b out: RV 1 can no longer be served
        expired = await first_event_from_rv_1(small)
    assert expired["type"] == "ERROR"
    assert expired["object"]["message"] == "too old resource version: 1 (2)"


async def test_compaction_leaves_watches_and_continue_tokens_served_until_a_restart(
    api: KubeApiDouble,
) -> None:
    for name in ("a", "b", "c"):
        api.create(node(name))
    async with aiohttp.ClientSession() as http:

        async def answer(query: str) -> tuple[int, Any]:
            async with http.get(f"{api.url}/api/v1/nodes?{query}") as resp:
                return resp.status, json.loads(await resp.content.readline())

        _, first = await answer("limit=1")
        token = first["metadata"]["continue"]
        api.create(node("d"))
        api.compact()
        assert (await answer(f"limit=1&continue={token}"))[1]["items"][0]["metadata"]["name"] == "b"
        assert (await answer("watch=1&resourceVersion=1"))[1]["type"] == "ADDED"
        await api.stop()
        await api.start_restarted(throttled=0)
        status, expired = await answer(f"limit=1&continue={token}")
        _, watched = await answer("watch=1&resourceVersion=4")  # the last version handed out
    assert (status, expired["reason"], bool(expired["metadata"]["continue"])) == (
        410,
        "Expired",
        True,
    )
    # The restarted API server wrote at start-up: its watch cache begins after version 4.
    assert watched["object"]["message"] == "too old resource version: 4 (5)"


async def test_an_uninstalled_group_answers_404_and_listing_works_after_install(
    api: KubeApiDouble, kube: Any
) -> None:
    api.create(vm("gpu-vm"))
    api.uninstall("kubevirt.io")
    custom = client.CustomObjectsApi(kube)
    # A list surfaces as ApiException(status=404, reason="Not Found") whose .body is what
    # kube-apiserver answers for a path it serves nothing at: plain text, not a Status.
    with pytest.raises(ApiException) as raised:
        await custom.list_cluster_custom_object(*KV, "virtualmachines")
    assert raised.value.status == 404
    assert raised.value.reason == "Not Found"
    assert str(raised.value.body) == "404 page not found\n"  # ApiClient decoded it

    # A watch does not raise at the request (the client skips the status check when it
    # streams), and Watch cannot decode the text: it hands the line over as the event, a str.
    async with watch.Watch() as w:
        stream = w.stream(
            custom.list_cluster_custom_object, *KV, "virtualmachines", timeout_seconds=1
        )
        async with asyncio.timeout(5):
            events = [event async for event in stream]
    assert events == ["404 page not found\n"]

    api.install("kubevirt.io")
    listed = await custom.list_cluster_custom_object(*KV, "virtualmachines")
    assert listed["kind"] == "VirtualMachineList"  # custom objects come back as plain dicts
    assert listed["items"] == []  # the objects went with their CRDs


async def test_drop_watches_ends_the_clients_stream_with_client_payload_error(
    api: KubeApiDouble, kube: Any
) -> None:
    # A cut mid-stream surfaces as aiohttp.ClientPayloadError ("Response payload is not
    # completed"), not as ApiException, and Watch does not reconnect on it even without
    # timeout_seconds (it only reconnects on a clean EOF or asyncio.TimeoutError).
    v1 = client.CoreV1Api(kube)
    async with watch.Watch() as w:
        stream = w.stream(v1.list_node, resource_version=str(api.resource_version))
        consumer = asyncio.create_task(take(stream, 1))
        await wait_until(lambda: api.open_watches == 1)
        assert api.drop_watches() == 1
        with pytest.raises(aiohttp.ClientPayloadError):
            await consumer
    await wait_until(lambda: api.open_watches == 0)


async def test_uninstall_deletes_the_groups_objects_then_ends_open_watches_cleanly(
    api: KubeApiDouble, kube: Any
) -> None:
    api.create(vm("gpu-vm"))
    custom = client.CustomObjectsApi(kube)
    async with watch.Watch() as w:
        stream = w.stream(
            custom.list_cluster_custom_object,
            *KV,
            "virtualmachines",
            resource_version=str(api.resource_version),
            timeout_seconds=5,
        )
        consumer = asyncio.create_task(take(stream, 2))
        await wait_until(lambda: api.open_watches == 1)
        api.uninstall("kubevirt.io")
        assert summary(await consumer) == [("DELETED", "gpu-vm")]


async def test_field_selector_on_pods_filters_lists_and_watches(
    api: KubeApiDouble, kube: Any
) -> None:
    api.create(pod("on-n1", "n1"))
    api.create(pod("on-n2", "n2", namespace="gpu"))
    api.create(pod("pending", None, namespace="gpu"))
    v1 = client.CoreV1Api(kube)

    everywhere = await v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=n2")
    assert [p.metadata.name for p in everywhere.items] == ["on-n2"]
    in_gpu = await v1.list_namespaced_pod("gpu", field_selector="spec.nodeName=n2")
    assert [p.metadata.name for p in in_gpu.items] == ["on-n2"]
    assert (await v1.list_namespaced_pod("default", field_selector="spec.nodeName=n2")).items == []

    async with watch.Watch() as w:
        stream = w.stream(
            v1.list_pod_for_all_namespaces,
            field_selector="spec.nodeName=n2",
            resource_version=str(api.resource_version),
        )
        consumer = asyncio.create_task(take(stream, 2))
        await wait_until(lambda: api.open_watches == 1)
        api.patch("Pod", "default", "on-n1", {"metadata": {"labels": {"x": "y"}}})  # not n2
        api.patch("Pod", "gpu", "pending", {"spec": {"nodeName": "n2"}})  # binding: enters
        api.delete("Pod", "gpu", "on-n2")
        events = await consumer
    # A pod that starts matching the selector arrives as ADDED, like the watch cache does.
    assert summary(events) == [("ADDED", "pending"), ("DELETED", "on-n2")]

    with pytest.raises(ApiException) as raised:
        await v1.list_pod_for_all_namespaces(field_selector="spec.bogus=1")
    assert raised.value.status == 400


async def test_a_namespaced_pod_watch_sees_only_its_namespace(
    api: KubeApiDouble, kube: Any
) -> None:
    api.create(pod("here", "n1", namespace="gpu"))
    api.create(pod("elsewhere", "n1"))
    v1 = client.CoreV1Api(kube)
    async with watch.Watch() as w:
        events = await take(w.stream(v1.list_namespaced_pod, "gpu", timeout_seconds=1), 9)
    assert summary(events) == [("ADDED", "here")]


async def test_spec_unschedulable_false_matches_nodes_without_the_field(
    api: KubeApiDouble, kube: Any
) -> None:
    api.create(node("plain"))
    api.create(node("cordoned") | {"spec": {"unschedulable": True}})
    v1 = client.CoreV1Api(kube)
    schedulable = await v1.list_node(field_selector="spec.unschedulable=false")
    assert [n.metadata.name for n in schedulable.items] == ["plain"]


async def test_label_selector_filters_lists(api: KubeApiDouble, kube: Any) -> None:
    api.create(node("gpu", **{"nvidia.com/gpu.present": "true"}))
    api.create(node("cpu"))
    v1 = client.CoreV1Api(kube)
    present = await v1.list_node(label_selector="nvidia.com/gpu.present=true")
    absent = await v1.list_node(label_selector="!nvidia.com/gpu.present")
    assert [n.metadata.name for n in present.items] == ["gpu"]
    assert [n.metadata.name for n in absent.items] == ["cpu"]


async def test_single_objects_are_served_and_404_when_absent(api: KubeApiDouble, kube: Any) -> None:
    api.create(node("n1"))
    api.create(pod("p", "n1", namespace="gpu"))
    api.create(vm("gpu-vm"))
    api.create({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                "metadata": {"name": "cluster-policy"}, "spec": {}})  # fmt: skip
    v1 = client.CoreV1Api(kube)
    custom = client.CustomObjectsApi(kube)

    assert (await v1.read_node("n1")).metadata.uid
    assert (await v1.read_namespaced_pod("p", "gpu")).spec.node_name == "n1"
    got = await custom.get_namespaced_custom_object(*KV, "vms", "virtualmachines", "gpu-vm")
    assert got["spec"] == {"running": True}
    policy = await custom.get_cluster_custom_object(
        "nvidia.com", "v1", "clusterpolicies", "cluster-policy"
    )
    assert policy["metadata"]["resourceVersion"] == "4"

    with pytest.raises(ApiException) as raised:
        await v1.read_namespaced_pod("p", "default")
    assert raised.value.status == 404
    assert status_of(raised.value)["message"] == 'pods "p" not found'


async def test_objects_equal_what_the_client_lists(api: KubeApiDouble, kube: Any) -> None:
    api.create(node("n1"))
    api.create(vm("a"))
    api.create(vm("b", namespace="other"))
    listed = await client.CustomObjectsApi(kube).list_cluster_custom_object(*KV, "virtualmachines")
    assert listed["items"] == api.objects("VirtualMachine")
    assert int(listed["metadata"]["resourceVersion"]) == api.resource_version == 3


async def test_set_down_503_fails_with_api_exception_and_recovers(
    api: KubeApiDouble, kube: Any
) -> None:
    v1 = client.CoreV1Api(kube)
    api.set_down(True, "503")
    with pytest.raises(ApiException) as raised:
        await v1.list_node()
    assert raised.value.status == 503
    api.set_down(False)
    assert (await v1.list_node()).items == []


async def test_set_down_close_drops_the_connection_and_recovers(
    api: KubeApiDouble, kube: Any
) -> None:
    v1 = client.CoreV1Api(kube)
    await v1.list_node()  # leaves a pooled keep-alive connection behind
    api.set_down(True, "close")
    # A closed connection is aiohttp.ServerDisconnectedError (a ClientConnectionError),
    # not ApiException. aiohttp retries an idempotent request once when the pooled
    # connection it reused dies, so the server sees two attempts.
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await v1.list_node()
    assert api.requests["/api/v1/nodes"] == 3
    api.set_down(False)
    assert (await v1.list_node()).items == []


async def test_set_down_cuts_open_watches(api: KubeApiDouble, kube: Any) -> None:
    v1 = client.CoreV1Api(kube)
    async with watch.Watch() as w:
        consumer = asyncio.create_task(take(w.stream(v1.list_node, resource_version="0"), 1))
        await wait_until(lambda: api.open_watches == 1)
        api.set_down(True)
        with pytest.raises(aiohttp.ClientPayloadError):
            await consumer


async def test_set_latency_delays_every_response(api: KubeApiDouble, kube: Any) -> None:
    v1 = client.CoreV1Api(kube)
    await v1.list_node()
    api.set_latency(0.3)
    started = time.monotonic()
    await v1.list_node()
    assert time.monotonic() - started >= 0.3
    api.set_latency(0)
    started = time.monotonic()
    await v1.list_node()
    assert time.monotonic() - started < 0.3


async def test_timeout_seconds_ends_the_stream_cleanly_on_time(
    api: KubeApiDouble, kube: Any
) -> None:
    v1 = client.CoreV1Api(kube)
    started = time.monotonic()
    async with watch.Watch() as w:
        events = await take(w.stream(v1.list_node, resource_version="0", timeout_seconds=1), 9)
    assert events == []
    assert 0.9 <= time.monotonic() - started < 2.5


async def test_counters_record_requests_and_watches_per_path(api: KubeApiDouble, kube: Any) -> None:
    v1 = client.CoreV1Api(kube)
    await v1.list_node()
    await v1.list_namespaced_pod("gpu")
    async with watch.Watch() as w:
        await take(w.stream(v1.list_node, resource_version="7", timeout_seconds=1), 1)
    assert api.requests == {"/api/v1/nodes": 2, "/api/v1/namespaces/gpu/pods": 1}
    assert api.watches == {"/api/v1/nodes": 1}
    assert api.watch_requests[0].params["timeoutSeconds"] == "1"
    assert api.watch_requests[0].resource_version == "7"
    api.reset_counters()
    assert not api.requests and not api.watches and not api.watch_requests


async def test_discovery_lists_only_installed_groups(api: KubeApiDouble) -> None:
    api.uninstall("nvidia.com")
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{api.url}/apis") as resp:
            groups = [g["name"] for g in (await resp.json())["groups"]]
        async with http.get(f"{api.url}/apis/nvidia.com/v1") as resp:
            status = resp.status
    assert groups == [
        "hco.kubevirt.io",
        "instancetype.kubevirt.io",
        "kubevirt.io",
        "nfd.k8s-sigs.io",
        "pool.kubevirt.io",
        "resource.k8s.io",
    ]
    assert status == 404


async def test_a_restart_keeps_the_url_and_the_objects(api: KubeApiDouble, kube: Any) -> None:
    api.create(node("n1"))
    url = api.url
    await api.stop()
    with pytest.raises(aiohttp.ClientConnectionError):
        await client.CoreV1Api(kube).list_node()
    await api.start()
    assert api.url == url
    assert [n.metadata.name for n in (await client.CoreV1Api(kube).list_node()).items] == ["n1"]


# --- a restarting apiserver (tests/fixtures/apiserver-restart) -------------------------------


async def test_a_stopped_double_refuses_connections_on_its_port_until_started_again(
    api: KubeApiDouble,
) -> None:
    await api.stop()
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", api.port)
    await api.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", api.port)
    writer.close()
    await writer.wait_closed()
    del reader


@pytest.mark.parametrize(
    ("path", "throttled"),
    [
        ("/apis/kubevirt.io/v1/virtualmachines", True),
        ("/apis/kubevirt.io/v1/virtualmachines?watch=true&resourceVersion=1", True),
        ("/apis/nvidia.com/v1/clusterpolicies?limit=500", True),
        ("/api/v1/pods", False),
        ("/apis/resource.k8s.io/v1/resourceslices", False),
        ("/apis/kubevirt.io/v1", False),  # discovery answers
    ],
)
async def test_throttled_custom_resources_answer_429_with_retry_after_and_the_status(
    api: KubeApiDouble, path: str, throttled: bool
) -> None:
    api.throttle_custom_resources(60, retry_after=1)
    async with aiohttp.ClientSession() as http, http.get(f"{api.url}{path}") as resp:
        status, retry, body = resp.status, resp.headers.get("Retry-After"), await resp.json()
    if not throttled:
        assert status == 200
        return
    assert (status, retry) == (429, "1")
    assert body["reason"] == "TooManyRequests"
    assert body["message"] == "storage is (re)initializing"
    assert body["details"] == {"retryAfterSeconds": 1}
    assert api.throttled[path.split("?")[0]] == 1


async def test_throttling_ends_when_its_time_is_up(api: KubeApiDouble) -> None:
    api.throttle_custom_resources(60)
    api.throttle_custom_resources(0)
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{api.url}/apis/kubevirt.io/v1/virtualmachines") as resp,
    ):
        assert resp.status == 200


async def test_readyz_fails_with_500_while_told_to_then_answers_ok(api: KubeApiDouble) -> None:
    async with aiohttp.ClientSession() as http:
        api.fail_readyz(60)
        async with http.get(f"{api.url}/readyz") as resp:
            failing = resp.status, await resp.text()
        api.fail_readyz(0)
        async with http.get(f"{api.url}/readyz") as resp:
            ready = resp.status, await resp.text()
    assert failing[0] == 500 and "[-]informer-sync failed" in failing[1]
    assert ready == (200, "ok")


@pytest.mark.parametrize("version", ["", None])
async def test_a_watch_without_a_resource_version_gets_one_error_event_in_a_200(
    api: KubeApiDouble, version: str | None
) -> None:
    api.create(node("n1"))
    api.fail_unversioned_watches()
    query = "watch=true" + ("" if version is None else f"&resourceVersion={version}")
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{api.url}/api/v1/nodes?{query}") as resp:
            status, lines = resp.status, (await resp.read()).decode().splitlines()
        async with http.get(f"{api.url}/api/v1/nodes?watch=true&resourceVersion=0") as resp:
            versioned = (await resp.content.readline()).decode()
    assert status == 200
    (event,) = [json.loads(line) for line in lines]
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (500, "InternalError")
    assert "RequestWatchProgress is disabled" in event["object"]["message"]
    assert json.loads(versioned)["type"] == "ADDED"  # with a version the watch works


async def test_a_bookmark_comes_two_seconds_before_the_deadline_as_from_the_watch_cache() -> None:
    async with KubeApiDouble(bookmark_interval=3600) as api:
        api.create(node("n1", gpu="yes"))
        url = f"{api.url}/api/v1/nodes?watch=true&labelSelector=gpu%3Dyes&allowWatchBookmarks=true"

        async def watched(seconds: int, unseen: str) -> list[Any]:
            since = api.resource_version
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"{url}&resourceVersion={since}&timeoutSeconds={seconds}") as resp,
            ):
                api.create(node(unseen))  # moves nodes on, unseen by this selector
                return [json.loads(line) for line in (await resp.read()).splitlines()]

        events = await watched(3, "n2")
        too_short = await watched(2, "n3")
    assert [e["type"] for e in events] == ["BOOKMARK"]
    assert events[0]["object"]["metadata"]["resourceVersion"] == "2"
    assert too_short == []  # 2 s before a 2 s deadline is now: the cache sends none either


async def test_held_watches_answer_200_and_send_nothing_until_released(
    api: KubeApiDouble,
) -> None:
    api.create(node("n1"))
    api.hold_watch_events()
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{api.url}/api/v1/nodes?watch=true&resourceVersion=0") as resp,
    ):
        assert resp.status == 200
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await resp.content.readline()
        api.hold_watch_events(False)
        async with asyncio.timeout(5):
            line = await resp.content.readline()
    assert json.loads(line)["object"]["metadata"]["name"] == "n1"

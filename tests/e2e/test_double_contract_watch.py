"""The double held to the real API server: watch events, bookmarks, timeoutSeconds, watches without
a version, and /readyz and refused connections while it restarts."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from tests.e2e import contract
from tests.e2e.contract import Backend, Obj, decoded, kinds, pod
from tests.kubeapi import INSTALLING_PATHS, INSTALLING_RETRY_AFTER

backend = contract.backend
own_backend = contract.own_backend


async def relabel(api: Backend, name: str, **labels: str) -> None:
    current = await api.call("GET", api.pods(f"/{name}"))
    current["metadata"]["labels"] = labels
    await api.call("PUT", api.pods(f"/{name}"), current)


async def test_a_selected_watch_sees_objects_enter_change_and_leave_its_selector(
    backend: Backend,
) -> None:
    api = backend
    since = await api.version(api.pods())

    async def changes() -> None:
        await api.call("POST", api.pods(), pod("a", gpu="yes"))
        await relabel(api, "a", gpu="yes", team="ml")
        await api.call("POST", api.pods(), pod("other", gpu="no"))  # never seen
        await relabel(api, "a", gpu="no")
        await relabel(api, "a", gpu="yes")
        await api.call("DELETE", api.pods("/a?gracePeriodSeconds=0"))

    status, events = await api.watch(
        api.pods(f"?watch=1&resourceVersion={since}&labelSelector=gpu%3Dyes"), changes, count=6
    )
    assert status == 200
    assert kinds(events) == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),  # moved out of the selector
        ("ADDED", "a"),  # and back in
        ("MODIFIED", "a"),  # a pod's delete is graceful: its deletionTimestamp first
        ("DELETED", "a"),
    ]
    left = events[2]["object"]
    # Leaving the selector: the object as it was, at the version of the change that moved it.
    assert left["metadata"]["labels"] == {"gpu": "yes", "team": "ml"}
    assert events[4]["object"]["metadata"]["deletionGracePeriodSeconds"] == 0
    assert "deletionTimestamp" in events[5]["object"]["metadata"]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and len(set(versions)) == 6


async def test_a_watch_from_zero_starts_with_every_current_object_added(backend: Backend) -> None:
    for name in ("a", "b"):
        await backend.call("POST", backend.pods(), pod(name))
    status, events = await backend.watch(backend.pods("?watch=1&resourceVersion=0"), count=2)
    assert (status, kinds(events)) == (200, [("ADDED", "a"), ("ADDED", "b")])


async def test_timeout_seconds_ends_a_quiet_watch_with_nothing_sent(backend: Backend) -> None:
    since = await backend.version(backend.pods())
    path = backend.pods(f"?watch=1&resourceVersion={since}&allowWatchBookmarks=true")
    assert await backend.watch(f"{path}&timeoutSeconds=1") == (200, [])


async def test_a_bookmark_comes_once_the_kind_moved_past_the_watch_and_carries_its_version(
    backend: Backend,
) -> None:
    api = backend
    since = await api.version(api.pods())
    created: list[Obj] = []

    async def unseen_change() -> None:
        created.append(await api.call("POST", api.pods(), pod("unlabelled")))

    status, events = await api.watch(
        api.pods(
            f"?watch=1&resourceVersion={since}&labelSelector=gpu%3Dyes"
            "&allowWatchBookmarks=true&timeoutSeconds=4"
        ),
        unseen_change,
    )
    assert status == 200 and events, "a bookmark 2 s before the deadline"
    changed = int(created[0]["metadata"]["resourceVersion"])
    for event in events:
        bookmark = event["object"]
        assert (event["type"], bookmark["kind"], bookmark["apiVersion"]) == (
            "BOOKMARK",
            "Pod",
            "v1",
        )
        # Only the version: no name, and no initial-events-end annotation on a plain watch.
        assert set(bookmark["metadata"]) == {"resourceVersion"}
        assert int(bookmark["metadata"]["resourceVersion"]) >= changed


async def test_no_bookmark_while_the_kind_is_where_the_watch_started(own_backend: Backend) -> None:
    api = own_backend  # a quiet control plane: nothing else changes pods
    since = await api.version(api.pods())
    replayed = await api.call("POST", api.pods(), pod("replayed"))
    # A list not older than the pod is served once the watch cache has it: the watch below then
    # replays it (else the pod could reach the cache after the watch, live, and a bookmark at its
    # version would follow it).
    await api.call("GET", api.pods(f"?resourceVersion={replayed['metadata']['resourceVersion']}"))
    status, events = await api.watch(
        api.pods(f"?watch=1&resourceVersion={since}&allowWatchBookmarks=true&timeoutSeconds=4")
    )
    # The replay brought the watch to the kind's version: a bookmark would say nothing new.
    assert (status, kinds(events)) == (200, [("ADDED", "replayed")])


async def test_on_an_etcd_without_watch_progress_an_unversioned_watch_with_bookmarks_errs(
    backend: Backend,
) -> None:
    backend.on_an_etcd_without_watch_progress()
    await backend.call("POST", backend.pods(), pod("a"))
    for version in ("", "&resourceVersion=0"):
        path = backend.pods(f"?watch=1{version}&allowWatchBookmarks=true&timeoutSeconds=1")
        status, events = await backend.watch(path)
        assert status == 200 and [e["type"] for e in events] == ["ERROR"], (version, events)
        assert events[0]["object"] == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "a watch stream was requested by the client but the required storage "
            "feature RequestWatchProgress is disabled",
            "reason": "InternalError",
            "code": 500,
        }
    # From "0" without bookmarks it works: the current objects, added.
    status, events = await backend.watch(backend.pods("?watch=1&resourceVersion=0"), count=1)
    assert (status, kinds(events)) == (200, [("ADDED", "a")])


async def test_a_deleted_crd_takes_its_objects_and_watches_along_and_comes_back_empty(
    own_backend: Backend,
) -> None:
    api, group = own_backend, "nfd.k8s-sigs.io"
    features = f"/apis/{group}/v1alpha1/namespaces/{api.namespace}/nodefeatures"
    feature = {"apiVersion": f"{group}/v1alpha1", "kind": "NodeFeature", "metadata": {"name": "f"}}
    created = await api.call("POST", features, feature | {"spec": {}})

    async def delete() -> None:
        await api.delete_crds(group)

    since = created["metadata"]["resourceVersion"]
    status, events = await api.watch(f"{features}?watch=1&resourceVersion={since}", delete)
    assert (status, kinds(events)) == (200, [("DELETED", "f")])  # and then the watch ended
    assert await api.request("GET", features) == (404, "404 page not found\n")
    await api.install_crds(group)
    assert (await api.call("GET", features))["items"] == []


async def test_a_restarting_api_server_refuses_then_answers_readyz_500_then_200(
    own_backend: Backend,
) -> None:
    api = own_backend
    await api.stop()
    answers = [await api.readyz()]
    await api.start_restarting()
    async with asyncio.timeout(60):
        while answers[-1][0] != 200:
            answers.append(await api.readyz())
    phases = [status for status, _ in answers]
    # Refused, then 500 while its informers sync, then 200, in that order and never back.
    assert [p for n, p in enumerate(phases) if n == 0 or phases[n - 1] != p] == [
        "refused",
        500,
        200,
    ], phases
    failing = [text for status, text in answers if status == 500]
    assert all("\n[-]" in text and text.endswith("readyz check failed\n") for text in failing)
    assert answers[-1] == (200, "ok")


async def test_a_restarting_api_servers_custom_paths_answer_503_then_429_then_200(
    own_backend: Backend,
) -> None:
    """Whatever of the two phases a restart shows (the real server's depend on the machine's
    speed; the double plays a 503 phase here), each comes in this order with these words: 503
    "before all known HTTP paths have been installed", Retry-After: 5; 429 "storage is
    (re)initializing", Retry-After: 1; then 200."""
    api = own_backend
    path = f"/apis/kubevirt.io/v1/namespaces/{api.namespace}/virtualmachines?limit=1"
    await api.stop()
    await api.start_restarting()
    answers: list[tuple[int, str | None, Any]] = []
    async with asyncio.timeout(60):
        while not answers or answers[-1][0] != 200:
            try:
                async with api.http.get(api.base + path) as response:
                    answer = (
                        response.status,
                        response.headers.get("Retry-After"),
                        decoded(await response.text()),
                    )
            except aiohttp.ClientConnectorError:
                await asyncio.sleep(0.01)
                continue
            if not answers or answers[-1][:2] != answer[:2]:
                answers.append(answer)
            await asyncio.sleep(0.01)
    phases = [status for status, _, _ in answers]
    assert phases in ([200], [503, 200], [429, 200], [503, 429, 200]), answers
    for status, retry_after, body in answers[:-1]:
        message, reason, seconds = {
            503: (INSTALLING_PATHS, "ServiceUnavailable", INSTALLING_RETRY_AFTER),
            429: ("storage is (re)initializing", "TooManyRequests", 1),
        }[status]
        assert retry_after == str(seconds), answers
        assert body == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "details": {"retryAfterSeconds": seconds},
            "code": status,
        }, answers

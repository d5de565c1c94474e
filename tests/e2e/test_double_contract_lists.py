"""The double held to the real API server: lists, their pages and continue tokens, field selectors,
and what etcd compaction and a restart do to continue tokens and watches."""

from __future__ import annotations

import re

import pytest

from tests.e2e import contract
from tests.e2e.contract import Backend, Obj, names, pod, vm
from tests.kubeapi_wire import INCONSISTENT_CONTINUE

backend = contract.backend
own_backend = contract.own_backend


async def test_a_lists_pages_are_the_objects_at_its_first_pages_version(backend: Backend) -> None:
    for n in range(5):
        await backend.call("POST", backend.pods(), pod(f"p{n}"))
    first = await backend.call("GET", backend.pods("?limit=2"))
    version = first["metadata"]["resourceVersion"]
    assert (names(first), first["metadata"]["remainingItemCount"]) == (["p0", "p1"], 3)
    await backend.call("DELETE", backend.pods("/p2?gracePeriodSeconds=0"))
    await backend.call("POST", backend.pods(), pod("p9"))

    second = await backend.call(
        "GET", backend.pods(f"?limit=2&continue={first['metadata']['continue']}")
    )
    last = await backend.call(
        "GET", backend.pods(f"?limit=2&continue={second['metadata']['continue']}")
    )
    assert (names(second), second["metadata"]["remainingItemCount"]) == (["p2", "p3"], 1)
    assert names(last) == ["p4"] and "continue" not in last["metadata"]
    assert {page["metadata"]["resourceVersion"] for page in (second, last)} == {version}
    assert names(await backend.call("GET", backend.pods())) == ["p0", "p1", "p3", "p4", "p9"]


async def test_a_custom_resource_list_says_continue_empty_on_its_last_page(
    backend: Backend,
) -> None:
    for name in ("a", "b"):
        await backend.call("POST", backend.vms(), vm(name))
    whole = await backend.call("GET", backend.vms())
    first = await backend.call("GET", backend.vms("?limit=1"))
    last = await backend.call(
        "GET", backend.vms(f"?limit=1&continue={first['metadata']['continue']}")
    )
    assert whole["metadata"]["continue"] == "" and names(whole) == ["a", "b"]
    assert first["metadata"]["continue"] and names(first) == ["a"]
    assert last["metadata"]["continue"] == "" and names(last) == ["b"]
    assert "remainingItemCount" not in last["metadata"]


async def test_a_continue_token_keeps_its_place_whatever_selectors_come_with_it(
    backend: Backend,
) -> None:
    for n in range(5):
        await backend.call("POST", backend.pods(), pod(f"p{n}", parity=str(n % 2)))
    first = await backend.call("GET", backend.pods("?limit=2"))
    token = first["metadata"]["continue"]
    evens = await backend.call(
        "GET", backend.pods(f"?limit=2&continue={token}&labelSelector=parity%3D0")
    )
    odd = await backend.call("GET", backend.pods("?limit=1&labelSelector=parity%3D1"))
    assert names(evens) == ["p2", "p4"] and evens["metadata"] == {
        "resourceVersion": first["metadata"]["resourceVersion"]
    }
    # With a selector, no remainingItemCount: the API server cannot count what matches.
    assert names(odd) == ["p1"] and odd["metadata"]["continue"]
    assert "remainingItemCount" not in odd["metadata"]


async def test_a_malformed_continue_token_is_a_bad_request(backend: Backend) -> None:
    status, answer = await backend.request("GET", backend.pods("?limit=1&continue=garbage"))
    assert (status, answer["reason"], answer["code"]) == (400, "BadRequest", 400)
    assert answer["message"].startswith("invalid continue token: continue key is not valid: ")


async def test_after_compaction_tokens_and_watches_are_served_from_the_cache_until_a_restart(
    own_backend: Backend,
) -> None:
    api = own_backend
    for n in range(3):
        await api.call("POST", api.pods(), pod(f"p{n}"))
    first = await api.call("GET", api.pods("?limit=1"))
    token, version = first["metadata"]["continue"], int(first["metadata"]["resourceVersion"])
    await api.call("POST", api.pods(), pod("p9"))  # the pods' watch cache moves past the token
    await api.compact()

    kept = await api.call("GET", api.pods(f"?limit=1&continue={token}"))
    assert names(kept) == ["p1"] and kept["metadata"]["resourceVersion"] == str(version)
    status, events = await api.watch(api.pods(f"?watch=1&resourceVersion={version}"), count=1)
    assert (status, events[0]["type"], events[0]["object"]["metadata"]["name"]) == (
        200,
        "ADDED",
        "p9",
    )
    latest = await api.version(api.pods())

    await api.restart()
    status, expired = await api.request("GET", api.pods(f"?limit=1&continue={token}"))
    assert status == 410 and expired == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {"continue": expired["metadata"]["continue"]},
        "status": "Failure",
        "message": INCONSISTENT_CONTINUE,
        "reason": "Expired",
        "code": 410,
    }
    rest = await api.call("GET", api.pods(f"?continue={expired['metadata']['continue']}"))
    assert names(rest) == ["p1", "p2", "p9"]  # the rest, at the latest version
    assert int(rest["metadata"]["resourceVersion"]) > latest
    for since in (version, latest):  # the new watch cache starts after the API server's writes
        status, events = await api.watch(api.pods(f"?watch=1&resourceVersion={since}"))
        assert status == 200 and [e["type"] for e in events] == ["ERROR"], events
        assert too_old(events[0]["object"], since)
    fresh = await api.version(api.pods())
    status, events = await api.watch(api.pods(f"?watch=1&resourceVersion={fresh}&timeoutSeconds=1"))
    assert (status, events) == (200, [])


def too_old(status: Obj, since: int) -> bool:
    """The Status of a watch from a version before the watch cache's first."""
    found = re.fullmatch(rf"too old resource version: {since} \((\d+)\)", status["message"])
    return (
        found is not None
        and int(found[1]) > since
        and status
        == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": status["message"],
            "reason": "Expired",
            "code": 410,
        }
    )


async def test_field_selectors_on_pods_match_as_the_api_server_formats_fields(
    backend: Backend,
) -> None:
    for obj in (pod("on-n1", "n1"), pod("on-n2", "n2"), pod("pending")):
        await backend.call("POST", backend.pods(), obj)

    async def chosen(selector: str) -> list[str]:
        return names(await backend.call("GET", backend.pods(f"?fieldSelector={selector}")))

    assert await chosen("spec.nodeName%3Dn1") == ["on-n1"]
    assert await chosen("spec.nodeName%3D%3Dn1") == ["on-n1"]
    assert await chosen("spec.nodeName%3D") == ["pending"]
    assert await chosen("spec.nodeName!%3Dn1") == ["on-n2", "pending"]
    assert await chosen("metadata.name%3Don-n2") == ["on-n2"]
    assert await chosen("spec.nodeName%3Dn1,metadata.name%3Don-n2") == []
    assert await chosen("spec.hostNetwork%3Dfalse") == ["on-n1", "on-n2", "pending"]


BAD_QUERIES = [
    ("pods", "?fieldSelector=spec.bogus%3D1", 400, "field label not supported: spec.bogus"),
    (
        "pods",
        "?fieldSelector=spec.nodeName",
        400,
        "invalid selector: 'spec.nodeName'; can't understand 'spec.nodeName'",
    ),
    ("vms", "?fieldSelector=spec.running%3Dtrue", 400, "field label not supported: spec.running"),
    (
        "leases",
        "?fieldSelector=spec.holderIdentity%3Dx",
        400,
        '"spec.holderIdentity" is not a known field selector: only "metadata.name", '
        '"metadata.namespace"',
    ),
    (
        "claims",
        "?fieldSelector=spec.devices%3Dx",
        400,
        '"spec.devices" is not a known field selector: only "metadata.name", "metadata.namespace"',
    ),
    ("pods", "?limit=x", 400, 'strconv.ParseInt: parsing "x": invalid syntax'),
    ("pods", "?watch=1&timeoutSeconds=1.5", 400, 'strconv.ParseInt: parsing "1.5": invalid syntax'),
]


@pytest.mark.parametrize(("collection", "query", "code", "message"), BAD_QUERIES)
async def test_a_query_the_api_server_cannot_take_is_answered_with_its_words(
    backend: Backend, collection: str, query: str, code: int, message: str
) -> None:
    path = getattr(backend, collection)(query)
    assert await backend.request("GET", path) == (
        code,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "BadRequest",
            "code": code,
        },
    )


async def test_a_malformed_label_selector_is_a_bad_request(backend: Backend) -> None:
    status, answer = await backend.request("GET", backend.pods("?labelSelector=a%20b"))
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert answer["message"].startswith("unable to parse requirement")


async def test_a_watch_from_a_malformed_version_is_a_500_without_a_reason(
    backend: Backend,
) -> None:
    parsing = 'strconv.ParseUint: parsing "abc": invalid syntax'
    assert await backend.watch(backend.pods("?watch=1&resourceVersion=abc")) == (
        500,
        [
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f'resourceVersion: Invalid value: "abc": {parsing}',
                "code": 500,
            }
        ],
    )


async def test_cluster_scoped_field_selectors_and_a_node_deleted_with_a_status(
    own_backend: Backend,
) -> None:
    api = own_backend
    for node in (
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "plain"}},
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "cordoned"},
            "spec": {"unschedulable": True},
        },
    ):
        await api.call("POST", "/api/v1/nodes", node)
    schedulable = await api.call("GET", "/api/v1/nodes?fieldSelector=spec.unschedulable%3Dfalse")
    assert names(schedulable) == ["plain"]
    slices = "/apis/resource.k8s.io/v1/resourceslices"
    for name in ("plain", "cordoned"):
        await api.call("POST", slices, resource_slice(name))
    on_plain = await api.call("GET", f"{slices}?fieldSelector=spec.nodeName%3Dplain")
    assert names(on_plain) == ["plain-gpu"]
    status, answer = await api.request("GET", f"{slices}?fieldSelector=spec.pool.name%3Dx")
    assert (status, answer["message"]) == (
        400,
        "field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: spec.pool.name",
    )
    uid = schedulable["items"][0]["metadata"]["uid"]
    assert await api.request("DELETE", "/api/v1/nodes/plain") == (
        200,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": "plain", "kind": "nodes", "uid": uid},
        },
    )


def resource_slice(node: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu"},
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": [],
        },
    }

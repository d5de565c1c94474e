"""Typed partial decoding (webhook.wire) keeps every field gpu-guard reads.

Whatever arrives pruned (a state-file item, a list page, a watch event) must read exactly as the
whole object does: every projection, the pod prefilter, the identity check, the override
annotations and labels give the same value, or the same ObjectError, for the example states,
the recorded AdmissionReviews' objects, the synthetic clusters and objects mutated at random.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes_asyncio.client import ApiClient

from bench.synthetic import DraLayout, Layout, cluster, dra_cluster
from policies.cluster.kinds import NODE, POD, WATCHED_KINDS, group_kind_of
from policies.cluster.nodes import UPGRADE_WAIT_START_ANNOTATION, project_scheduling
from policies.cluster.projections import PROJECTIONS, SCHEMAS
from policies.cluster.schemas import Annotations
from policies.state.pod_filter import _may_be_kept
from policies.vocabulary.fields import ObjectError, labels_of
from policies.vocabulary.overrides import (
    OVERRIDE_ANNOTATION,
    OVERRIDE_REASON_ANNOTATION,
    overrides_of,
)
from policies.vocabulary.requests import GroupKind, JSONObject
from tests import FIXTURES
from tests.builders import gpu_pod, node, pod
from tests.conftest import fixtures_missing
from tests.kubeapi import KubeApiDouble
from webhook.state.files import (
    StateFileError,
    _identity_kind,
    file_entries,
    load_state,
    load_state_objects,
)
from webhook.state.live import LiveState
from webhook.wire.decode import decode_list_page, decode_object, decode_watch_event

ROOT = Path(__file__).resolve().parents[1]
#: The examples and the policies' samples (the only files holding some kinds, such as pools).
EXAMPLE_FILES = sorted([*ROOT.glob("examples/**/*.yaml"), *ROOT.glob("policies/samples/**/*.yaml")])
REVIEW_FILES = sorted(FIXTURES.glob("**/admission-reviews/*.json"))

Reader = Callable[[JSONObject], Any]


def _readers(kind: GroupKind) -> dict[str, Reader]:
    """Everything that reads an object of ``kind`` straight from its dict."""
    readers: dict[str, Reader] = {
        "identity": _identity_kind,
        "overrides": overrides_of,
        "labels": labels_of,
        "group kind": group_kind_of,
    }
    if kind in PROJECTIONS:
        readers["projection"] = PROJECTIONS[kind]
    if kind == POD:
        readers["prefilter"] = _may_be_kept
    if kind == NODE:
        readers["scheduling"] = project_scheduling
    return readers


def _outcome(reader: Reader, obj: JSONObject) -> Any:
    try:
        return "read", reader(obj)
    except ObjectError as exc:
        return "refused", str(exc)


def assert_reads_alike(kind: GroupKind, whole: JSONObject) -> None:
    """``whole`` decoded with ``kind``'s schema reads as ``whole`` does, reader by reader."""
    body = orjson.dumps(whole)
    pruned = decode_object(kind, body)
    full = orjson.loads(body)
    for name, reader in _readers(kind).items():
        assert _outcome(reader, pruned) == _outcome(reader, full), (name, kind)


def _kind_of(obj: JSONObject) -> GroupKind:
    try:
        return group_kind_of(obj)
    except ObjectError:
        return GroupKind("", "")


def _example_objects() -> Iterator[JSONObject]:
    for path in EXAMPLE_FILES:
        for entry in file_entries(str(path)):
            if not isinstance(entry, StateFileError):
                yield dict(entry.obj)


def _review_objects() -> Iterator[tuple[GroupKind, JSONObject]]:
    if not REVIEW_FILES:
        fixtures_missing("the recorded AdmissionReviews")
    for path in REVIEW_FILES:
        request = orjson.loads(path.read_bytes())["request"]
        kind = GroupKind(request["kind"]["group"], request["kind"]["kind"])
        for field in ("object", "oldObject"):
            if request.get(field) is not None:
                yield kind, request[field]


def _synthetic_objects() -> Iterator[JSONObject]:
    yield from cluster(Layout.at(scale=0.004, seed=11))
    yield from dra_cluster(DraLayout.at(scale=0.004, seed=11))


def test_every_example_object_reads_alike_pruned() -> None:
    objects = list(_example_objects())
    assert {_kind_of(o) for o in objects} >= set(SCHEMAS)
    for obj in objects:
        assert_reads_alike(_kind_of(obj), obj)


def test_every_recorded_review_object_reads_alike_pruned() -> None:
    for kind, obj in _review_objects():
        assert_reads_alike(kind, obj)


def test_every_synthetic_object_reads_alike_pruned() -> None:
    count = 0
    for obj in _synthetic_objects():
        assert_reads_alike(_kind_of(obj), obj)
        count += 1
    assert count > 1000


def test_pruning_drops_what_no_reader_reads() -> None:
    pod = next(o for o in cluster(Layout.at(scale=0.004, seed=11)) if _kind_of(o) == POD)
    pruned = decode_object(POD, orjson.dumps(pod))
    assert "managedFields" in pod["metadata"] and "managedFields" not in pruned["metadata"]
    assert "image" in pod["spec"]["containers"][0]
    assert "image" not in pruned["spec"]["containers"][0]


def test_the_annotations_the_schema_keeps_are_the_ones_gpu_guard_reads() -> None:
    assert set(Annotations.__annotations__) == {
        OVERRIDE_ANNOTATION,
        OVERRIDE_REASON_ANNOTATION,
        UPGRADE_WAIT_START_ANNOTATION,
    }


def test_every_schema_is_of_a_watched_kind() -> None:
    assert set(SCHEMAS) <= set(WATCHED_KINDS)


# --- mutated objects: a field of any shape reads alike, or fails alike -----------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def _samples() -> list[JSONObject]:
    """One object of each kind the example states and the synthetic cluster hold."""
    seen: dict[GroupKind, JSONObject] = {}
    for obj in itertools.chain(_example_objects(), _synthetic_objects()):
        seen.setdefault(_kind_of(obj), obj)
    return list(seen.values())


SAMPLES = _samples()


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value[:2]):
            yield (*prefix, i)
            yield from _paths(item, (*prefix, i))


@st.composite
def mutated(draw: st.DrawFn) -> JSONObject:
    obj = copy.deepcopy(draw(st.sampled_from(SAMPLES)))
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(obj))
        if not paths:
            break
        *parent_path, last = draw(st.sampled_from(paths))
        parent: Any = obj
        for step in parent_path:
            parent = parent[step]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[last]
        else:
            parent[last] = draw(JSON_VALUES)
    return obj


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_a_mutated_object_reads_alike_or_fails_alike(obj: JSONObject) -> None:
    for kind in {_kind_of(obj), *SCHEMAS}:  # also read as a kind it does not claim to be
        assert_reads_alike(kind, obj)


# --- list pages and watch events --------------------------------------------------------------


def test_a_list_page_is_pruned_item_by_item() -> None:
    pods = [o for o in cluster(Layout.at(scale=0.004, seed=11)) if _kind_of(o) == POD][:50]
    body = orjson.dumps({"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": pods})
    page = decode_list_page(POD, body)
    assert page["metadata"] == {"resourceVersion": "7"}
    assert [PROJECTIONS[POD](p) for p in page["items"]] == [PROJECTIONS[POD](p) for p in pods]


def test_a_page_with_a_malformed_item_is_decoded_whole_for_the_projection_to_judge() -> None:
    body = orjson.dumps({"items": [{"metadata": {"name": "a"}, "spec": {"containers": "x"}}]})
    assert decode_list_page(POD, body) == orjson.loads(body)


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (
            {
                "type": "ADDED",
                "object": {
                    "metadata": {"name": "n", "resourceVersion": "9", "uid": "u"},
                    "spec": {"podCIDR": "x"},
                },
            },
            {
                "type": "ADDED",
                "object": {"metadata": {"name": "n", "resourceVersion": "9"}, "spec": {}},
            },
        ),
        (
            {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "gone"}},
            {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "gone"}},
        ),
        (
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
        ),
    ],
)
def test_a_watch_event_keeps_what_the_watch_reads(event: JSONObject, expected: Any) -> None:
    assert decode_watch_event(NODE, orjson.dumps(event)) == expected


def test_json_that_is_not_json_fails_as_orjson_says() -> None:
    with pytest.raises(orjson.JSONDecodeError):
        decode_list_page(POD, b'{"items": [}')


# --- state files: the pruned load is the full load, and fails with its messages -------------


def _write_list(path: Path, items: list[JSONObject]) -> str:
    path.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(path)


def test_a_json_list_state_loads_pruned_to_the_state_the_full_loader_builds(
    tmp_path: Path,
) -> None:
    objects = list(_synthetic_objects())
    path = _write_list(tmp_path / "state.json", objects)
    pruned, full = load_state([path]), load_state_objects([path])[0]
    assert pruned.counts() == full.counts()
    assert pruned.nodes() == full.nodes()
    assert sorted(pruned.pods(), key=lambda p: p.key) == sorted(full.pods(), key=lambda p: p.key)
    assert pruned.vms() == full.vms() and pruned.vmis() == full.vmis()


NODE_OBJ = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({**NODE_OBJ, "spec": {"taints": "x"}}, "Node n1: spec.taints: expected a list"),
        ({**NODE_OBJ, "metadata": "n1"}, "metadata: missing or not a mapping"),
        ({**NODE_OBJ, "status": {"conditions": [1]}}, "status.conditions[0]: expected a mapping"),
        ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}, "must have a namespace"),
        (
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "d"},
                "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "x"}}}]},
            },
            "spec.containers[0].resources.limits.nvidia.com/gpu: not a quantity",
        ),
    ],
)
def test_a_malformed_item_of_a_json_list_fails_with_the_full_loaders_message(
    tmp_path: Path, item: JSONObject, message: str
) -> None:
    path = _write_list(tmp_path / "bad.json", [NODE_OBJ | {"metadata": {"name": "ok"}}, item])
    with pytest.raises(StateFileError) as streamed:
        load_state([path])
    with pytest.raises(StateFileError) as full:
        load_state_objects([path])
    assert str(streamed.value) == str(full.value)
    assert message in str(streamed.value)


# --- the live list path: pruned into the state, whole for a snapshot, the collector back on ---


@pytest.fixture
async def api() -> AsyncIterator[KubeApiDouble]:
    async with KubeApiDouble() as double:
        for obj in (node("omen1"), gpu_pod("train", "omen1"), pod("web", "omen1")):
            double.create(obj)
        yield double


async def test_a_read_into_the_state_is_pruned_and_leaves_the_collector_on(
    kube: ApiClient, api: KubeApiDouble
) -> None:
    live = LiveState(kube)
    await live.read_once()
    assert gc.isenabled()
    assert [p.key for p in live.state.gpu_pods_on("omen1")] == ["ml/train"]
    assert live.state.counts()["Pod"] == 2


async def test_a_snapshot_read_keeps_whole_objects(kube: ApiClient, api: KubeApiDouble) -> None:
    pages: list[JSONObject] = []
    await LiveState(kube).read_once(lambda _, page: pages.extend(page))
    assert gc.isenabled()
    node_obj = next(o for o in pages if o["kind"] == "Node")
    assert node_obj["metadata"]["uid"] and "status" in node_obj


async def test_a_page_sink_that_fails_leaves_the_collector_on(
    kube: ApiClient, api: KubeApiDouble
) -> None:
    def refuse(_: object, page: list[dict[str, Any]]) -> None:
        raise RuntimeError("sink")

    with pytest.raises(RuntimeError):
        await LiveState(kube).read_once(refuse)
    await asyncio.sleep(0)  # the abandoned page iterator is closed on the next turn
    await asyncio.sleep(0)
    assert gc.isenabled()

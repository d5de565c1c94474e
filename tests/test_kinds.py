"""The kinds table is the API server's: the reviews it sent name the same plurals, and every
reader of the table (live watches, review envelopes, object references, paths) agrees with it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any

import orjson
import pytest

from policies.cluster.kinds import (
    CLUSTER_POLICY,
    KUBEVIRT,
    NODE,
    POD,
    RESOURCE_OF,
    REVIEWED,
    VIRTUAL_MACHINE,
    VIRTUAL_MACHINE_INSTANCE,
    WATCHED,
    WATCHED_KINDS,
    WRITTEN,
    ApiResource,
    object_ref,
)
from policies.cluster.projections import PROJECTIONS, READ_KINDS, ReadKind
from policies.state.cluster import ClusterState
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.requests import GroupKind, GroupVersionResource
from tests.builders import request
from tests.conftest import fixtures_missing
from tests.kubeapi import SERVED as SERVED_BY_THE_DOUBLE
from tests.kubeapi_wire import RULES as DOUBLE_RULES
from tests.test_server import REVIEW_FILES, files_or_missing, present
from webhook.admission.changes import object_key
from webhook.admission.compose import review_of
from webhook.admission.review import parse_review
from webhook.state import live
from webhook.state.files import read_objects

#: What the envelope says about where the object lives; the rest is compared once parsed.
WHERE = ("kind", "resource", "subResource", "requestKind", "requestResource", "requestSubResource")


def _recorded(path: Path) -> dict[str, Any]:
    review: dict[str, Any] = orjson.loads(path.read_bytes())
    return review


@pytest.mark.parametrize("path", files_or_missing(REVIEW_FILES))
def test_a_built_review_names_the_resource_the_api_server_named(path: Path | None) -> None:
    path = present(path)
    sent = _recorded(path)
    parsed = parse_review(path.read_bytes())
    built = review_of(parsed)
    for field in WHERE:
        assert built["request"].get(field) == sent["request"].get(field), field
    assert parse_review(orjson.dumps(built)) == parsed


def test_the_recorded_reviews_cover_every_kind_the_webhooks_receive() -> None:
    if not REVIEW_FILES:
        fixtures_missing("admission-reviews/*.json")
    kinds = {parse_review(p.read_bytes()).group_kind for p in REVIEW_FILES}
    assert kinds >= {NODE, POD, VIRTUAL_MACHINE, VIRTUAL_MACHINE_INSTANCE, KUBEVIRT, CLUSTER_POLICY}


def test_a_review_for_a_kind_outside_the_table_is_refused_not_guessed() -> None:
    ingress = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "i"}}
    refused = r"Ingress\.networking\.k8s\.io.*policies/cluster/kinds\.py"
    with pytest.raises(ValueError, match=refused):
        review_of(request("CREATE", ingress))


@pytest.mark.parametrize("resource", [*WATCHED, *REVIEWED], ids=lambda r: r.plural)
def test_a_built_review_of_each_watched_or_reviewed_kind_parses_back(resource: ApiResource) -> None:
    meta = {"name": "x", "namespace": "ns"} if resource.namespaced else {"name": "x"}
    obj = {"apiVersion": resource.api_version, "kind": resource.kind.kind, "metadata": meta}
    sent = dataclasses.replace(request("CREATE", obj), version=resource.version)
    review = review_of(sent)
    assert review["request"]["resource"]["resource"] == resource.plural
    named = GroupVersionResource(resource.kind.group, resource.version, resource.plural)
    assert parse_review(orjson.dumps(review)) == dataclasses.replace(sent, resource=named)


def test_the_api_server_double_has_rules_only_for_kinds_it_serves() -> None:
    """The double serves the table's rows (tests/kubeapi_wire.py); the table's places are the
    real API server's: tests/e2e/test_control_plane.py asks a real kube-apiserver for each."""
    served = {r.plural for r in SERVED_BY_THE_DOUBLE}
    assert served == {r.plural for r in WATCHED}
    assert set(DOUBLE_RULES) <= served, "a rule of the double names a kind nobody watches"


def test_every_watched_kind_has_one_projection_and_the_live_state_watches_them_all() -> None:
    assert set(PROJECTIONS) == set(WATCHED_KINDS)
    assert live.RESOURCES == WATCHED


def test_no_kind_or_plural_is_in_the_table_twice() -> None:
    rows = (*WATCHED, *REVIEWED, *WRITTEN)
    assert len({r.kind for r in rows}) == len(rows)
    assert len({(r.kind.group, r.plural) for r in rows}) == len(rows)
    assert len(RESOURCE_OF) == len(rows)


PATHS = [
    (RESOURCE_OF[POD], "ml", "/api/v1/pods", "/api/v1/namespaces/ml/pods/x"),
    (RESOURCE_OF[NODE], "ml", "/api/v1/nodes", "/api/v1/nodes/x"),
    (
        RESOURCE_OF[VIRTUAL_MACHINE],
        "vms",
        "/apis/kubevirt.io/v1/virtualmachines",
        "/apis/kubevirt.io/v1/namespaces/vms/virtualmachines/x",
    ),
    (
        RESOURCE_OF[CLUSTER_POLICY],
        "",
        "/apis/nvidia.com/v1/clusterpolicies",
        "/apis/nvidia.com/v1/clusterpolicies/x",
    ),
]


@pytest.mark.parametrize(("resource", "namespace", "collection", "one"), PATHS)
def test_paths_follow_the_group_and_the_scope(
    resource: ApiResource, namespace: str, collection: str, one: str
) -> None:
    assert resource.path == collection
    assert resource.object_path(namespace, "x") == one


@pytest.mark.parametrize(
    ("kind", "api_version"),
    [(POD, "v1"), (NODE, "v1"), (VIRTUAL_MACHINE, "kubevirt.io/v1"), (KUBEVIRT, "kubevirt.io/v1")],
)
def test_an_object_reference_carries_the_served_api_version(
    kind: GroupKind, api_version: str
) -> None:
    ref = object_ref(kind, "ns", "x")
    assert (ref.api_version, ref.kind, ref.namespace, ref.name) == (
        api_version,
        kind.kind,
        "ns",
        "x",
    )


STATE_FILES = sorted(
    str(path)
    for pattern in ("examples/*/*.yaml", "policies/samples/**/*.yaml")
    for path in Path(__file__).resolve().parents[1].glob(pattern)
)


@pytest.mark.parametrize("row", READ_KINDS, ids=lambda row: str(row.kind))
def test_each_watched_kind_is_kept_and_dropped_through_the_store_its_row_names(
    row: ReadKind,
) -> None:
    """Whatever hooks or table the row's store names: every object the examples and samples
    (states and change files) hold of the kind is known after loading, and gone after its
    delete."""
    seen = 0
    for path in STATE_FILES:
        state = ClusterState()
        kept = set()
        for item in read_objects(path):
            obj = dict(item.obj)
            with contextlib.suppress(ObjectError):  # a change file's merge patch (null: remove)
                if state.upsert(obj) == row.kind:
                    kept.add(object_key(obj))
        keys = state.keys(row.kind)
        seen += len(keys)
        assert len(keys) == len(kept), path
        for namespace, name in keys:
            state.delete(row.kind, namespace, name)
        assert state.keys(row.kind) == set(), path
        assert state.counts()[str(row.kind)] == 0, path
    assert seen, f"no example or sample holds a {row.kind}"

"""/validate reads a review's objects pruned to their kinds' schemas (webhook.wire): every
validating policy must answer a pruned review exactly as the whole one, and every body the
typed decoder is not sure of must be refused with the very reason the whole decoder gives.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from bench.harness import review_mix
from bench.synthetic import write_list
from policies.cluster.view import ClusterView
from policies.vocabulary.requests import AdmissionRequest, JSONObject
from tests.builders import request
from tests.test_wire import REVIEW_FILES, SAMPLES, mutated
from webhook.admission.compose import review_of
from webhook.admission.pipeline import MUTATE, VALIDATE
from webhook.admission.response import decision_response
from webhook.admission.review import ReviewError, parse_review
from webhook.engine import Engine
from webhook.state.files import load_state
from webhook.wire.decode import decode_review

ROOT = Path(__file__).resolve().parents[1]
ENGINE = Engine()


@contextmanager
def recursion_limit(limit: int) -> Iterator[None]:
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


@pytest.fixture(scope="module")
def views(tmp_path_factory: pytest.TempPathFactory) -> list[ClusterView]:
    synthetic = tmp_path_factory.mktemp("wire-review") / "synthetic.json"
    write_list(synthetic, "json", scale=0.004, seed=11)
    return [load_state([str(ROOT / "examples/homelab/cluster.yaml")]), load_state([str(synthetic)])]


def _answer(body: bytes, pruned: bool, view: ClusterView, limit: int = 1000) -> Any:
    """The answer to ``body``, parsed under the recursion limit of a server (a test run, or
    celpy once it compiled a CEL selector, may have raised it: no review is pruned then)."""
    try:
        with recursion_limit(limit):
            review = parse_review(body, pruned)
    except ReviewError as exc:
        return "refused", str(exc), exc.status
    return decision_response(review.uid, ENGINE.evaluate(review, view))


def assert_answered_alike(body: bytes, views: list[ClusterView]) -> None:
    for view in views:
        assert _answer(body, True, view) == _answer(body, False, view)


def test_every_recorded_validation_review_is_answered_alike_pruned(
    views: list[ClusterView],
) -> None:
    bodies = [p.read_bytes() for p in REVIEW_FILES if "-mutate-" not in p.name]
    assert bodies
    pruned = 0
    for body in bodies:
        assert_answered_alike(body, views)
        with recursion_limit(1000):
            pruned += decode_review(body) != orjson.loads(body)
    assert pruned > 0  # some objects did lose fields no policy reads


def _review(change: JSONObject, old: JSONObject | None) -> bytes:
    operation = "UPDATE" if old else "CREATE"
    built: AdmissionRequest = request(operation, dict(change), dict(old) if old else None)
    return orjson.dumps(review_of(built))


def test_a_review_of_every_sample_object_is_answered_alike_pruned(
    views: list[ClusterView],
) -> None:
    for obj in SAMPLES:
        assert_answered_alike(_review(obj, None), views)
        assert_answered_alike(_review(obj, obj), views)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_a_review_of_a_mutated_object_is_answered_alike_pruned(obj: JSONObject) -> None:
    view = load_state([str(ROOT / "examples/homelab/cluster.yaml")])
    original = next((s for s in SAMPLES if s.get("kind") == obj.get("kind")), None)
    try:
        bodies = [_review(obj, None), _review(obj, original)]
    except (KeyError, TypeError, AttributeError, ValueError):
        return  # no review can be built around it (no metadata, no kind): nothing to compare
    for body in bodies:
        assert_answered_alike(body, [view])


def test_under_a_raised_recursion_limit_nesting_orjson_refuses_is_still_refused(
    views: list[ClusterView],
) -> None:
    deep = _with_skipped(b"[" * 1500 + b"]" * 1500)
    for view in views:
        assert _answer(deep, True, view, limit=5000) == _answer(deep, False, view)
        assert _answer(deep, True, view, limit=5000)[0] == "refused"


def _node_review() -> dict[str, Any]:
    node = next(s for s in SAMPLES if s.get("kind") == "Node")
    return orjson.loads(_review(node, node))  # type: ignore[no-any-return]


def _with_skipped(value: bytes) -> bytes:
    """The Node review with ``value`` in a field no schema names."""
    body = orjson.dumps(_node_review())
    return body.replace(b'"metadata":{', b'"metadata":{"skipped":' + value + b",", 1)


def _with_kept(value: bytes) -> bytes:
    """The Node review with ``value`` as a label (labels are kept: policies read them)."""
    body = orjson.dumps(_node_review())
    return body.replace(b'"labels":{', b'"labels":{"kept":' + value + b",", 1)


def _with_request_kind(kind: Any) -> bytes:
    review = _node_review()
    review["request"]["kind"]["kind"] = kind
    return orjson.dumps(review)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(_with_skipped(b'"\xff"'), id="invalid UTF-8 in a skipped field"),
        pytest.param(_with_skipped(b'"\\ud800"'), id="a lone surrogate in a skipped field"),
        pytest.param(_with_skipped(b"[" * 5000 + b"]" * 5000), id="5,000 levels, skipped"),
        pytest.param(_with_skipped(b"[1,]"), id="a trailing comma in a skipped field"),
        pytest.param(_with_kept(b"1e309"), id="a number beyond a double in a kept field"),
        pytest.param(_with_kept(b'"\xff"'), id="invalid UTF-8 in a kept field"),
        pytest.param(_with_request_kind(["Node"]), id="a request kind that is a list"),
        pytest.param(_with_request_kind("Pod"), id="a request kind of another schema"),
        pytest.param(_with_request_kind("Deployment"), id="a request kind without a schema"),
    ],
)
def test_a_body_the_typed_decoder_is_unsure_of_gets_the_whole_decoders_answer(
    body: bytes, views: list[ClusterView]
) -> None:
    assert_answered_alike(body, views)


def test_a_request_kind_after_the_object_is_read_as_the_request_says(
    views: list[ClusterView],
) -> None:
    review = _node_review()
    kind = review["request"].pop("kind")
    review["request"]["kind"] = kind  # now written after the objects
    review["request"]["object"]["kind"] = "Pod"
    body = orjson.dumps(review)
    assert_answered_alike(body, views)


def test_only_validation_reads_pruned_objects() -> None:
    # a mutation's JSON patch is computed against the object as sent
    assert {h.endpoint: h.pruned for h in (VALIDATE, MUTATE)} == {
        "validate": True,
        "mutate": False,
    }


def test_the_benchmarks_reviews_are_answered_alike_pruned_and_lose_what_no_policy_reads(
    views: list[ClusterView],
) -> None:
    for review in review_mix("large"):
        assert_answered_alike(review.body, views)
    node = review_mix("large")[0].body  # the 41 KB Node UPDATE, managedFields and all
    with recursion_limit(1000):
        whole, pruned = parse_review(node), parse_review(node, True)
    assert (whole.name, whole.kind, whole.operation) == (pruned.name, pruned.kind, pruned.operation)
    assert whole.obj is not None and "managedFields" in whole.obj["metadata"]
    assert pruned.obj is not None and "managedFields" not in pruned.obj["metadata"]


def test_a_number_beyond_a_double_in_a_skipped_field_is_skipped_as_the_field_is(
    views: list[ClusterView],
) -> None:
    # orjson refuses the body; the API server cannot send it (its encoder writes no such
    # number), and no policy reads the field: the answer is the review's without it
    for view in views:
        with_it = _answer(_with_skipped(b"1e309"), True, view)
        assert with_it == _answer(orjson.dumps(_node_review()), False, view)
        assert _answer(_with_skipped(b"1e309"), False, view)[0] == "refused"

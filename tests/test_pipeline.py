"""The admission pipeline: one path for /validate and /mutate, drivable without aiohttp."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from policies.vocabulary.requests import AdmissionRequest
from tests.builders import gpu_pod, kubevirt, node, request, state_of, vm, with_labels
from webhook.admission.compose import review_of
from webhook.admission.http_input import REVIEW_HEADERS
from webhook.admission.pipeline import (
    MUTATE,
    OVERLOADED,
    VALIDATE,
    Admission,
    Answer,
    Decided,
    Handler,
    Reply,
)
from webhook.admission.response import decision_response, make_response, review_body
from webhook.admission.review import ReviewError, parse_review
from webhook.admission.server import MUTATE_PATH, VALIDATE_PATH, make_app
from webhook.config import GuardConfig
from webhook.engine import Decision, Engine

OMEN1 = node("omen1", labels={"nvidia.com/gpu.workload.config": "container"})
SWITCH = request(
    "UPDATE", with_labels(OMEN1, {"nvidia.com/gpu.workload.config": "vm-passthrough"}), OMEN1
)
"""Denied: omen1 leaves container mode while ml/train uses its GPU."""
GPU_VM = request("CREATE", vm("a", gpus=["nvidia.com/GA102_GEFORCE_RTX_3090"]))
"""Patched by the eviction mutation: KubeVirt's default would live-migrate it."""
EVICTION = "set-eviction-none-on-gpu-vms"


def admission() -> Admission:
    engine = Engine(GuardConfig(mutations=frozenset({EVICTION})))
    view = state_of(OMEN1, gpu_pod("train", "omen1"), kubevirt(eviction_strategy="LiveMigrate"))
    return Admission(engine, view)


def body_of(review: AdmissionRequest) -> bytes:
    return orjson.dumps(review_of(review))


NOT_REVIEWS = [
    pytest.param(b"{", id="not JSON"),
    pytest.param(b"[]", id="not an object"),
    pytest.param(b'{"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}', id="not a review"),
    pytest.param(
        orjson.dumps({**review_of(SWITCH), "request": {"operation": "UPDATE"}}), id="no uid"
    ),
]


def reason(body: bytes) -> str:
    with pytest.raises(ReviewError) as refused:
        parse_review(body)
    return str(refused.value)


def counted(shared: Admission, name: str, **labels: str) -> float:
    return shared.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize("body", NOT_REVIEWS)
async def test_both_endpoints_refuse_a_body_that_is_no_review_with_the_same_one_line_400(
    body: bytes,
) -> None:
    shared = admission()
    async with TestClient(TestServer(make_app(shared))) as client:
        answers = []
        for path in (VALIDATE_PATH, MUTATE_PATH):
            reply = await client.post(path, data=body, headers=REVIEW_HEADERS)
            answers.append((reply.status, reply.content_type, await reply.text()))
    expected = (400, "text/plain", f"invalid AdmissionReview: {reason(body)}\n")
    assert answers == [expected, expected]
    assert counted(shared, "gpu_guard_admission_rejected_total", status="400") == 2


def validated(shared: Admission, review: AdmissionRequest) -> dict[str, Any]:
    return decision_response(review.uid, shared.engine.evaluate(review, shared.view))


def mutated(shared: Admission, review: AdmissionRequest) -> dict[str, Any]:
    result = shared.engine.mutate(review, shared.view)
    return make_response(review.uid, True, "", result.warnings, result.patch)


Expected = Callable[[Admission, AdmissionRequest], dict[str, Any]]
ENDPOINTS = [
    pytest.param(VALIDATE, VALIDATE_PATH, SWITCH, validated, id="validate: a denial"),
    pytest.param(MUTATE, MUTATE_PATH, GPU_VM, mutated, id="mutate: a patch"),
]


@pytest.mark.parametrize(("handler", "path", "review", "expected"), ENDPOINTS)
async def test_the_pipeline_answers_bytes_without_aiohttp_as_the_endpoint_does_over_http(
    handler: Handler, path: str, review: AdmissionRequest, expected: Expected
) -> None:
    shared = admission()
    answer = review_body(expected(shared, review))
    assert await shared.answer(handler, body_of(review)) == Reply(200, answer)
    async with TestClient(TestServer(make_app(shared))) as client:
        over_http = await client.post(path, data=body_of(review), headers=REVIEW_HEADERS)
        assert (over_http.status, await over_http.read()) == (200, answer)


@pytest.mark.parametrize(("handler", "path", "review", "expected"), ENDPOINTS)
async def test_each_review_is_counted_under_its_endpoint_and_logged_in_one_line(
    handler: Handler,
    path: str,
    review: AdmissionRequest,
    expected: Expected,
    caplog: pytest.LogCaptureFixture,
) -> None:
    shared = admission()
    with caplog.at_level(logging.INFO, logger="gpu-guard.server"):
        await shared.answer(handler, body_of(review))
    (logged,) = [r.getMessage() for r in caplog.records]
    subject = f"uid={review.uid} op={review.operation} kind={review.kind} "
    assert logged.startswith(("decision " + subject, "mutation " + subject)), logged
    allowed = str(expected(shared, review)["allowed"]).lower()
    labels = {"kind": review.kind, "operation": review.operation, "allowed": allowed}
    reviews = "gpu_guard_admission_reviews_total"
    assert counted(shared, reviews, endpoint=handler.endpoint, **labels) == 1


async def test_under_overload_validation_fails_by_its_mode_and_mutation_goes_unpatched() -> None:
    """Both endpoints go through one gate: a shed mutation is allowed with no patch and a warning
    that it was not applied (never a denial: a mutation never denies)."""
    shared = admission()
    assert mutated(shared, GPU_VM)["patch"]  # with time to spare, this VM is patched
    shared.lag.lag = 2 * shared.deadline  # every review has already waited past its deadline
    shed = await shared.answer(VALIDATE, body_of(SWITCH))
    unpatched = await shared.answer(MUTATE, body_of(GPU_VM))
    unevaluated = shared.engine.unevaluated(SWITCH, OVERLOADED)
    assert shed == Reply(200, review_body(decision_response(SWITCH.uid, unevaluated)))
    assert orjson.loads(unpatched.body)["response"] == {
        "uid": GPU_VM.uid,
        "allowed": True,
        "warnings": [f"[{EVICTION}] not applied: {OVERLOADED}"],
    }
    assert counted(shared, "gpu_guard_admission_overloaded_total") == 2


class Fixed:
    """A third endpoint: the pipeline needs nothing of it but its handler."""

    endpoint = "fixed"
    pruned = False

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def answer(
        self, admission: Admission, review: AdmissionRequest, started: float
    ) -> Answer:
        self.seen.append(review.uid)
        return Decided.of(review.uid, Decision())


async def test_a_handler_decides_on_the_parsed_review_and_the_pipeline_does_the_rest() -> None:
    shared, handler = admission(), Fixed()
    reply = await shared.answer(handler, body_of(SWITCH), time.perf_counter())
    assert handler.seen == [SWITCH.uid]
    assert reply == Reply(200, review_body({"uid": SWITCH.uid, "allowed": True}))
    assert (
        counted(
            shared,
            "gpu_guard_admission_reviews_total",
            endpoint="fixed",
            kind="Node",
            operation="UPDATE",
            allowed="true",
        )
        == 1
    )
    refused = await shared.answer(handler, b"{")
    assert (refused.status, handler.seen) == (400, [SWITCH.uid])  # it never reached the handler

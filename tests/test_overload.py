"""Above capacity the guard answers by failure mode at once instead of queueing past timeouts."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from policies.vocabulary.requests import AdmissionRequest
from tests.builders import gpu_pod, judged_by, kubevirt, node, request, state_of, vm, with_labels
from webhook.admission.compose import review_of
from webhook.admission.http_input import REVIEW_HEADERS
from webhook.admission.pipeline import OVERLOADED, Admission
from webhook.admission.server import make_app
from webhook.config import GuardConfig
from webhook.engine import Decision, Engine

OMEN1 = node("omen1", labels={"nvidia.com/gpu.workload.config": "container"})
SWITCH = request(
    "UPDATE", with_labels(OMEN1, {"nvidia.com/gpu.workload.config": "vm-passthrough"}), OMEN1
)
VM = request("CREATE", vm("v", gpus=["nvidia.com/x"]))
EVICTION = "set-eviction-none-on-gpu-vms"
"""Patches GPU VMs: KubeVirt's default would live-migrate them."""


class SlowState(Admission):
    async def decide(self, review: AdmissionRequest) -> Decision:
        await asyncio.sleep(0.5)
        return await super().decide(review)


async def test_a_review_that_cannot_get_a_slot_in_time_is_answered_by_failure_mode() -> None:
    shared = SlowState(
        Engine(), state_of(OMEN1, gpu_pod("train", "omen1")), max_in_flight=1, deadline=0.1
    )
    async with TestClient(TestServer(make_app(shared))) as client:
        first = asyncio.create_task(
            client.post("/validate", data=orjson.dumps(review_of(SWITCH)), headers=REVIEW_HEADERS)
        )
        await asyncio.sleep(0.05)
        started = time.monotonic()
        second = await client.post(
            "/validate", data=orjson.dumps(review_of(VM)), headers=REVIEW_HEADERS
        )
        waited = time.monotonic() - started
        answer = (await second.json())["response"]
        denied = (await (await first).json())["response"]
        metrics = await (await client.get("/metrics")).text()
    assert waited < 0.4  # it did not wait for the slow review
    assert answer["allowed"] is True
    expected = (
        "[passthrough-without-ready-provider] gpu-guard could not evaluate this policy: "
        "gpu-guard was overloaded and could not evaluate it in time; not checked"
    )
    assert expected in answer["warnings"]
    assert all(
        w.endswith("overloaded and could not evaluate it in time; not checked")
        for w in answer["warnings"]
    )
    assert denied["allowed"] is False  # the review that got its slot was judged in full
    overloaded = {
        s.name: s.value for f in text_string_to_metric_families(metrics) for s in f.samples
    }
    assert overloaded["gpu_guard_admission_overloaded_total"] == 1


def test_a_fail_closed_policy_denies_what_it_could_not_evaluate() -> None:
    engine = Engine()
    decision = engine.unevaluated(SWITCH, "overloaded")
    policy = next(p for p in engine.policies if p.id == "workload-switch-with-gpu-pods")
    expected_allowed = policy.failure_action.name != "DENY"
    assert decision.allowed is expected_allowed
    assert [v.policy for v in decision.verdicts] == [
        p.id for p in engine.policies if judged_by(p, SWITCH)
    ]


async def test_a_lagging_event_loop_sheds_at_once_what_already_waited_in_the_queue() -> None:
    shared = Admission(Engine(), state_of(OMEN1, gpu_pod("train", "omen1")), deadline=1.0)
    shared.lag.lag = 1.2  # requests sat in socket buffers longer than the deadline
    decision = await shared.admit(VM, time.perf_counter())
    assert decision.allowed
    assert all("overloaded" in v.message for v in decision.verdicts)
    shared.lag.lag = 0.0
    decision = await shared.admit(SWITCH, time.perf_counter())
    assert not decision.allowed  # judged in full once the loop keeps up


async def test_the_lag_ticker_notices_a_blocked_loop() -> None:
    from webhook.admission.pipeline import LoopLag

    lag = LoopLag(period=0.01)
    task = asyncio.create_task(lag.run())
    await asyncio.sleep(0.03)
    time.sleep(0.2)  # the loop is busy, as under CPU saturation
    await asyncio.sleep(0.001)  # the overdue tick runs; the next is 10 ms away
    task.cancel()
    assert lag.lag >= 0.1


async def test_a_mutation_behind_a_validation_holding_the_only_slot_is_allowed_unpatched() -> None:
    """One in-flight cap and one deadline for both endpoints."""
    engine = Engine(GuardConfig(mutations=frozenset({EVICTION})))
    world = state_of(OMEN1, gpu_pod("train", "omen1"), kubevirt(eviction_strategy="LiveMigrate"))
    shared = SlowState(engine, world, max_in_flight=1, deadline=0.1)
    async with TestClient(TestServer(make_app(shared))) as client:
        with_a_free_slot = await (await client.post("/mutate", json=review_of(VM))).json()
        first = asyncio.create_task(client.post("/validate", json=review_of(SWITCH)))
        await asyncio.sleep(0.05)
        behind = await (await client.post("/mutate", json=review_of(VM))).json()
        await first
    assert with_a_free_slot["response"]["patch"]
    assert behind["response"] == {
        "uid": VM.uid,
        "allowed": True,
        "warnings": [f"[{EVICTION}] not applied: {OVERLOADED}"],
    }


@pytest.mark.parametrize(
    ("enabled", "review", "warned"),
    [
        pytest.param({EVICTION}, VM, [EVICTION], id="a GPU VM, the mutation on"),
        pytest.param(set(), VM, [], id="a GPU VM, the mutation off"),
        pytest.param({EVICTION}, SWITCH, [], id="a Node: no mutation changes one"),
    ],
)
def test_a_shed_mutation_warns_for_each_mutation_that_would_have_run_and_patches_nothing(
    enabled: set[str], review: AdmissionRequest, warned: list[str]
) -> None:
    result = Engine(GuardConfig(mutations=frozenset(enabled))).unmutated(review, "overloaded")
    assert (result.patch, result.applied) == ([], [])
    assert result.warnings == [f"[{m}] not applied: overloaded" for m in warned]

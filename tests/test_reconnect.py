"""Backoff, Retry-After and the shared view of whether the API server answers, on their own.

The same pieces against the API double, in a restart as kube-apiserver goes through one, are in
tests/test_live_restart.py.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import pytest

from webhook.metrics import Metrics
from webhook.state.client import UNAVAILABLE_RETRY_MAX, RetryLater, refusal
from webhook.state.reconnect import RETRY_AFTER_MAX, Backoff, Reachability, retry_after


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("attempt", "ceiling"),
    [(0, 0.2), (1, 0.4), (2, 0.8), (3, 1.6), (4, 2.5), (10, 2.5), (5000, 2.5)],
)
def test_the_default_backoff_doubles_from_a_fifth_of_a_second_to_at_most_two_and_a_half(
    attempt: int, ceiling: float
) -> None:
    delays = []
    for _ in range(200):
        backoff = Backoff()
        backoff.attempt = attempt
        delays.append(backoff.next())
    assert all(ceiling / 2 <= d <= ceiling for d in delays)
    assert len(set(delays)) > 150  # jittered: replicas do not retry in lockstep
    assert max(delays) - min(delays) > ceiling / 4  # spread over the half-ceiling band


def test_a_reset_backoff_starts_again_from_its_initial_delay() -> None:
    backoff = Backoff(initial=0.2, maximum=2.5)
    for _ in range(8):
        backoff.next()
    backoff.reset()
    assert 0.1 <= backoff.next() <= 0.2


@pytest.mark.parametrize(
    ("headers", "body", "expected"),
    [
        ({"Retry-After": "1"}, b"", 1.0),
        ({}, b'{"kind":"Status","details":{"retryAfterSeconds":1},"code":429}', 1.0),
        ({"Retry-After": "2"}, b'{"details":{"retryAfterSeconds":7}}', 2.0),  # the header first
        ({"Retry-After": "3600"}, b"", RETRY_AFTER_MAX),
        ({}, b'{"details":{"retryAfterSeconds":120}}', RETRY_AFTER_MAX),
        ({"Retry-After": "0"}, b"", 0.0),
        ({}, b'{"kind":"Status","code":503}', None),
        ({}, b"service unavailable", None),
        ({}, b"", None),
        ({"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}, b"", None),
        ({"Retry-After": "-5"}, b"", None),
        ({"Retry-After": "nan"}, b"", None),
        ({}, b'{"details":{"retryAfterSeconds":true}}', None),
        ({}, b'{"details":"soon"}', None),
    ],
)
def test_retry_after_comes_from_the_header_else_the_status_details_and_is_bounded(
    headers: dict[str, str], body: bytes, expected: float | None
) -> None:
    assert retry_after(headers, body) == expected


async def test_an_outage_is_logged_once_however_many_requests_go_unanswered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    reach = Reachability(clock)
    caplog.set_level(logging.DEBUG, logger="gpu-guard.live")
    for _ in range(30):
        clock.now += 0.5
        reach.unanswered("ClientConnectorError: connection refused", clock.now)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage().split(";")[0] for r in warnings] == [
        "the API server is unavailable: ClientConnectorError: connection refused"
    ]
    assert (reach.outages, reach.reachable, reach.down_since) == (1, False, 100.5)


async def test_a_failure_of_a_request_begun_before_the_last_answer_starts_no_outage() -> None:
    clock = FakeClock()
    reach = Reachability(clock)
    reach.answered()  # at 100.0
    reach.unanswered("TimeoutError", started=99.0)  # it was on its way before that answer
    assert reach.reachable and not reach.in_outage and reach.outages == 0
    reach.unanswered("TimeoutError", started=100.5)
    assert not reach.reachable and reach.outages == 1


async def test_the_first_answer_wakes_every_sleeper_and_resets_every_shared_backoff() -> None:
    clock = FakeClock()
    reach = Reachability(clock)
    backoffs = [reach.share(Backoff()) for _ in range(3)]
    for backoff in backoffs:
        for _ in range(6):
            backoff.next()
    reach.unanswered("ClientConnectorError", clock.now)
    sleepers = [asyncio.create_task(reach.wait_for_answer(600)) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(s.done() for s in sleepers)
    clock.now += 20
    reach.answered()
    async with asyncio.timeout(5):  # a hang guard: they wake at once, not after 600 s
        await asyncio.gather(*sleepers)
    assert [b.attempt for b in backoffs] == [0, 0, 0]
    assert reach.reachable and reach.answered_at == 120.0 and reach.in_outage


async def test_the_outage_ends_when_every_kind_is_in_sync_with_both_durations(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    reach = Reachability(clock)
    caplog.set_level(logging.INFO, logger="gpu-guard.live")
    reach.in_sync()  # no outage: nothing to end
    reach.unanswered("ServerDisconnectedError", clock.now)
    clock.now = 120.0
    reach.in_sync()  # still unavailable: the outage goes on
    reach.answered()
    clock.now = 121.5
    reach.unanswered("ClientConnectorError", clock.now)  # away again before every kind synced
    clock.now = 123.0
    reach.answered()
    clock.now = 125.5
    reach.in_sync()
    assert [r.getMessage() for r in caplog.records] == [
        caplog.records[0].getMessage(),
        "every kind is in sync again, 2.5 s after the API server answered again "
        "(25.5 s after it became unavailable)",
    ]
    assert caplog.records[0].levelno == logging.WARNING
    assert (reach.outages, reach.last_recovery, reach.last_outage) == (1, 2.5, 25.5)
    assert not reach.in_outage and reach.answering_since == 123.0


async def test_the_metrics_show_outages_reachability_and_the_last_recovery() -> None:
    clock = FakeClock()
    reach = Reachability(clock)
    metrics = Metrics()
    metrics.watch_api(reach)
    before = metrics.exposition().decode()
    assert "gpu_guard_api_outages_total 0.0" in before
    assert "gpu_guard_api_reachable 1.0" in before
    assert "\ngpu_guard_api_last_recovery_seconds " not in before  # no outage yet: no value
    reach.unanswered("ClientConnectorError", clock.now)
    assert "gpu_guard_api_reachable 0.0" in metrics.exposition().decode()
    clock.now += 60
    reach.answered()
    clock.now += 3
    reach.in_sync()
    after = metrics.exposition().decode()
    assert "gpu_guard_api_outages_total 1.0" in after
    assert "gpu_guard_api_last_recovery_seconds 3.0" in after
    assert "gpu_guard_api_last_outage_seconds 63.0" in after


@dataclass
class Answer:
    status: int
    headers: dict[str, str]


@pytest.mark.parametrize(
    ("status", "header", "expected"),
    [
        (429, "1", 1.0),
        (429, "5", 5.0),  # flow control or storage initialising: honoured in full
        (503, "5", UNAVAILABLE_RETRY_MAX),  # paths not installed yet: asked again sooner
        (503, "0", 0.0),
        (503, None, None),
        (429, None, None),
    ],
)
def test_a_429s_retry_after_is_honoured_and_a_503s_is_capped_at_a_second(
    status: int, header: str | None, expected: float | None
) -> None:
    headers = {} if header is None else {"Retry-After": header}
    refused = refusal(Answer(status, headers), b"{}", "watch /apis/kubevirt.io/v1/virtualmachines")
    assert isinstance(refused, RetryLater)
    assert refused.after == expected
    assert str(refused) == f"HTTP {status} for watch /apis/kubevirt.io/v1/virtualmachines"

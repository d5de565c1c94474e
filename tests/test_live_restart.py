"""A kube-apiserver restart, as tests/fixtures/apiserver-restart recorded one, against the
real LiveState and kubernetes-asyncio: connections refused, then custom resources answered 503
with Retry-After: 5, then 429 with Retry-After: 1, then normal.

No assertion rests on wall-clock time (the machine is shared): what is held to a bound is what
the code chose, the waits it scheduled (``LiveState.retries``), and the order of what it saw.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio.client import ApiClient

from policies.cluster.kinds import POD
from policies.rules.workload_switch import POLICY as WORKLOAD_SWITCH
from policies.vocabulary.verdicts import Action
from tests.builders import cluster_policy, gpu_pod, kubevirt, node, pod
from tests.conftest import quick_backoff
from tests.kubeapi import KubeApiDouble
from tests.test_live import OMEN1, SWITCH, mirrors
from tests.waits import until
from webhook.engine import Decision, Engine
from webhook.state.live import RESOURCES, LiveState
from webhook.state.reconnect import Backoff

REFUSED = 1.0
"""Seconds the API server refuses connections (the guard has noticed it is away by then)."""
INSTALLING = 1.0
"""Seconds custom resources are answered 503 with Retry-After: 5 once it listens again (paths
not installed yet: tests/fixtures/apiserver-restart/probe-resumed.txt)."""
THROTTLED = 1.5
"""Seconds custom resources are answered 429 with Retry-After: 1 after that."""
RECOVERY_BUDGET = 5.0
CUSTOM_KINDS = {str(r.kind) for r in RESOURCES if r.kind.group and "k8s.io" not in r.kind.group}


@pytest.fixture
async def api() -> AsyncIterator[KubeApiDouble]:
    # Bookmarks as kube-apiserver's watch cache sends them: 2 s before a watch's deadline, and
    # not otherwise within a test (once a minute).
    async with KubeApiDouble(bookmark_interval=60) as double:
        for obj in (
            OMEN1,
            node("nuc1"),
            pod("web", "nuc1"),
            cluster_policy(),
            kubevirt([("10de:2204", "nvidia.com/GA102_GEFORCE_RTX_3090")]),
        ):
            double.create(obj)
        yield double


@pytest.fixture
async def live(kube: ApiClient, api: KubeApiDouble) -> AsyncIterator[LiveState]:
    """Synced and watching, with the production backoff; stale as soon as a watch breaks (so
    a deny that is not downgraded is one the view is in sync for)."""
    state = LiveState(kube, stale_after=0, report_out_of_sync_after=60, watch_timeout=30)
    await state.start()
    try:
        await state.wait_synced(10)
        await until(lambda: api.open_watches == len(RESOURCES), timeout=10)
        yield state
    finally:
        await state.stop()


async def go_away(live: LiveState, api: KubeApiDouble) -> None:
    """The API server stops listening; back when the guard has seen it unavailable."""
    await api.stop()
    await until(lambda: not live.reachability.reachable, timeout=10)


async def first_fresh_decision(live: LiveState) -> tuple[Decision, float]:
    """The first decision on the node switch whose kinds are all in sync, and the clock then.
    Along the way: whenever the view says it is in sync, the pod created at the restart is in
    it (a view in sync that misses it would allow the switch)."""
    async with asyncio.timeout(20):
        while True:
            in_sync = not live.stale_reasons(WORKLOAD_SWITCH.reads)
            decision = Engine().evaluate(SWITCH, live.state, live)
            if in_sync:
                assert [p.key for p in live.state.gpu_pods_on("omen1")] == ["ml/train"]
                return decision, time.monotonic()
            await asyncio.sleep(0.005)


async def test_after_refused_connections_and_429s_the_first_fresh_deny_sees_the_new_pod(
    live: LiveState, api: KubeApiDouble, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gpu-guard.live")
    await go_away(live, api)
    await asyncio.sleep(REFUSED)
    answering = await api.start_restarted(throttled=THROTTLED, retry_after=1, installing=INSTALLING)
    api.create(gpu_pod("train", "omen1"))  # the moment the API server is back
    decision, fresh_at = await first_fresh_decision(live)

    assert not decision.allowed
    (verdict,) = decision.verdicts
    assert verdict.action == Action.DENY and "ml/train" in verdict.message
    # What the kinds waited, from the server answering again to that deny:
    waits: dict[str, list[float]] = defaultdict(list)
    for retry in live.retries:
        if answering <= retry.at <= fresh_at:
            waits[retry.kind].append(retry.seconds)
    assert all(len(w) <= 4 for w in waits.values()), waits
    assert all(sum(w) < RECOVERY_BUDGET for w in waits.values()), waits
    # Retry-After honoured by the custom resources, and only by them: a 429's 1 s in full, a
    # 503's 5 s (paths not installed yet) cut to a second:
    honoured = {r.kind for r in live.retries if r.cause == "retry-after"}
    assert honoured and honoured <= CUSTOM_KINDS
    assert all(r.seconds == 1.0 for r in live.retries if r.cause == "retry-after")
    # While connections were refused: a jittered backoff, bounded, not in lockstep:
    away = [r.seconds for r in live.retries if r.cause == "unreachable"]
    assert away and max(away) <= 2.5 and len(set(away)) > 1

    await until(lambda: not live.reachability.in_outage, timeout=10)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "gpu-guard.live"]
    assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
    assert lines[0][1].startswith("the API server is unavailable: ")
    assert "Error" in lines[0][1].split(";")[0]  # with the error
    assert lines[1][1].startswith("every kind is in sync again, ")
    reach = live.reachability
    assert reach.outages == 1 and reach.reachable
    assert reach.last_recovery is not None and reach.last_outage is not None
    assert reach.last_recovery < reach.last_outage
    await until(lambda: mirrors(live, api))


async def test_a_reconnected_watch_is_not_in_sync_until_it_has_replayed_what_it_missed(
    live: LiveState, api: KubeApiDouble
) -> None:
    await go_away(live, api)
    api.hold_watch_events()  # it will answer 200 and then say nothing for a while
    asked, pod_lists = len(api.watch_requests), api.requests["/api/v1/pods"]
    await api.start()
    api.create(gpu_pod("train", "omen1"))
    await until(lambda: api.open_watches == len(RESOURCES), timeout=10)
    await asyncio.sleep(0.3)  # time for the client to take in the 200s: they must not count
    assert live.stale_reasons([POD])
    assert live.state.gpu_pods_on("omen1") == []
    decision = Engine().evaluate(SWITCH, live.state, live)
    assert decision.allowed and decision.verdicts == []  # the view misses the pod; it says so
    assert live.reachability.in_outage  # not recovered: nothing is in sync yet
    api.hold_watch_events(False)
    # The replay brings the resumed watch to where pods are; the watch cache sends a bookmark
    # only at a newer version (tests/e2e/test_double_contract_watch.py), so pods move on.
    api.create(pod("web-2", "nuc1"))
    decision, _ = await first_fresh_decision(live)
    assert not decision.allowed and "ml/train" in decision.deny_message
    resumed = next(w for w in api.watch_requests[asked:] if w.path == "/api/v1/pods")
    assert resumed.resource_version not in (None, "", "0")  # resumed
    assert resumed.params["timeoutSeconds"] == str(live.catch_up_timeout)
    pod_watches = sum(w.path == "/api/v1/pods" for w in api.watch_requests[asked:])
    assert api.requests["/api/v1/pods"] - pod_lists == pod_watches  # and pods never relisted


async def test_a_kind_out_of_sync_long_while_the_server_answers_is_named_once(
    kube: ApiClient, api: KubeApiDouble, caplog: pytest.LogCaptureFixture
) -> None:
    live = LiveState(kube, report_out_of_sync_after=0.5, backoff=quick_backoff, watch_timeout=30)
    await live.start()
    try:
        await live.wait_synced(10)
        await until(lambda: api.open_watches == len(RESOURCES), timeout=10)
        caplog.set_level(logging.INFO, logger="gpu-guard.live")
        api.throttle_custom_resources(600, retry_after=1)
        api.drop_watches()

        def retried(times: int) -> bool:
            counts = defaultdict(int, {k: 0 for k in CUSTOM_KINDS})
            for r in live.retries:
                counts[r.kind] += r.cause == "retry-after"
            return all(counts[k] >= times for k in CUSTOM_KINDS)

        await until(lambda: retried(3), timeout=20)
        named = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert sorted(m.split()[0] for m in named) == sorted(
            r.plural for r in RESOURCES if str(r.kind) in CUSTOM_KINDS
        )
        assert all("while the API server answers: RetryLater: HTTP 429" in m for m in named)
        api.throttle_custom_resources(0)
        await until(lambda: all(s.broken_since is None for s in live.statuses.values()))
        again = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
        assert len(again) == len(named) and all(" in sync again after " in m for m in again)
    finally:
        await live.stop()


class ForgetfulLists(KubeApiDouble):
    """Answers the first pod list without a resourceVersion, so the watch after it has none;
    its watches without one get the ERROR event of an apiserver without RequestWatchProgress."""

    forgot = False

    def _list(self, request: web.Request, target: Any, selector: Any) -> web.Response:
        response = super()._list(request, target, selector)
        if target.resource.kind != "Pod" or self.forgot:
            return response
        self.forgot = True
        assert isinstance(response.text, str)
        body = json.loads(response.text)
        del body["metadata"]["resourceVersion"]
        return web.json_response(body)


async def test_an_error_event_in_a_watch_ends_it_and_lists_again_never_taken_for_an_object(
    tmp_path: Any,
) -> None:
    from webhook.state.client import connect

    async with ForgetfulLists(bookmark_interval=0.1) as api:
        for obj in (OMEN1, gpu_pod("train", "omen1")):
            api.create(obj)
        api.fail_unversioned_watches()
        client = await connect(str(api.kubeconfig(tmp_path / "kubeconfig")))
        live = LiveState(client, backoff=quick_backoff, watch_timeout=5)
        try:
            await live.start()
            await live.wait_synced(5)
            await until(lambda: api.open_watches == len(RESOURCES))
            pod_watches = [w for w in api.watch_requests if w.path == "/api/v1/pods"]
            assert pod_watches[0].resource_version == ""  # answered with the ERROR event
            assert pod_watches[-1].resource_version not in (None, "")
            assert api.requests["/api/v1/pods"] - api.watches["/api/v1/pods"] == 2  # relisted
            assert [r.cause for r in live.retries if r.kind == str(POD)] == ["watch-error"]
            assert live.state.keys(POD) == {("ml", "train")}  # the Status is no pod
            assert live.statuses[POD].broken_since is None
            api.create(gpu_pod("infer", "omen1"))
            await until(lambda: len(live.state.gpu_pods_on("omen1")) == 2)
            await until(lambda: mirrors(live, api))
        finally:
            await live.stop()
            await client.close()


class PatientBackoff(Backoff):
    """A quick first retry, then a minute: only the API server answering again ends the wait."""

    def next(self) -> float:
        self.attempt += 1
        return 0.05 if self.attempt == 1 else 60.0


async def test_kinds_sleeping_out_a_long_backoff_wake_when_any_request_is_answered(
    kube: ApiClient, api: KubeApiDouble
) -> None:
    live = LiveState(kube, stale_after=0, backoff=PatientBackoff, watch_timeout=30)
    await live.start()
    try:
        await live.wait_synced(10)
        await until(lambda: api.open_watches == len(RESOURCES), timeout=10)
        await go_away(live, api)
        await until(
            lambda: sum(r.cause == "unreachable" for r in live.retries) >= len(RESOURCES)
        )  # every kind is sleeping a minute
        await api.start()
        api.create(gpu_pod("train", "omen1"))
        assert await live.refresh_pods_on("omen1", 2.0)  # one answer, to an admission's question
        await until(lambda: not live.reachability.in_outage, timeout=10)  # not a minute
        decision, _ = await first_fresh_decision(live)
        assert not decision.allowed
    finally:
        await live.stop()


async def test_a_confirm_that_fails_during_an_outage_adds_no_line_to_its_one_warning(
    live: LiveState, api: KubeApiDouble, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="gpu-guard.live")
    await go_away(live, api)
    for _ in range(3):  # three reviews' confirmations, as serve asks them during the outage
        assert not await live.refresh_pods_on("omen1", 0.5)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("the API server is unavailable: ")
    unconfirmed = [r for r in caplog.records if "could not confirm the pods" in r.getMessage()]
    assert [r.levelno for r in unconfirmed] == [logging.DEBUG] * 3
    await api.start()
    api.set_latency(2.0)  # answering, but slower than the budget: that one is worth a WARNING
    await until(lambda: live.reachability.reachable, timeout=10)
    assert not await live.refresh_pods_on("omen1", 0.5)
    assert [r.levelno for r in caplog.records if "could not confirm" in r.getMessage()][-1] == (
        logging.WARNING
    )

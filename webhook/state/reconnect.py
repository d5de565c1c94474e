"""Coming back when the API server does: backoff, Retry-After, and one shared view of whether
the API server answers.

A restarting kube-apiserver first refuses connections, then answers custom-resource requests
429 with ``Retry-After: 1`` while its CRD handlers warm up (tests/fixtures/apiserver-restart).
Every kind's loop shares one ``Reachability``: the first unanswered request starts an outage (one
WARNING, with the error); the first answer after it wakes every kind sleeping out a backoff and
resets their backoffs, so a returning server is noticed by all kinds at once; the outage ends
when every kind is in sync again (one INFO line saying how long that took).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import orjson

log = logging.getLogger("gpu-guard.live")

RETRY_AFTER_MAX = 10.0
"""The longest Retry-After honoured (seconds): a server asking for more is asked again then."""

RetryCause = Literal["unreachable", "retry-after", "error", "watch-error"]


class Backoff:
    """Exponential backoff with jitter (between half the ceiling and the ceiling), so replicas do
    not reconnect in lockstep. The ceiling stays low: while the API server is away, a kind must
    notice within a few seconds that it is back."""

    def __init__(self, initial: float = 0.2, maximum: float = 2.5) -> None:
        self.initial, self.maximum, self.attempt = initial, maximum, 0

    def next(self) -> float:
        ceiling = min(self.maximum, self.initial * (2.0 ** min(self.attempt, 32)))
        self.attempt += 1
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempt = 0


def retry_after(headers: Mapping[str, str], body: bytes) -> float | None:
    """Seconds the server asks a client to wait: the Retry-After header (in seconds), else the
    Status body's ``details.retryAfterSeconds``; None when neither says. At most
    ``RETRY_AFTER_MAX``. (kube-apiserver sends seconds; an HTTP-date counts as not said.)"""
    seconds = _seconds(headers.get("Retry-After"))
    if seconds is None:
        try:
            status = orjson.loads(body)
        except orjson.JSONDecodeError:
            status = None
        details = status.get("details") if isinstance(status, dict) else None
        if isinstance(details, dict):
            seconds = _seconds(details.get("retryAfterSeconds"))
    return None if seconds is None else min(seconds, RETRY_AFTER_MAX)


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0 <= seconds < float("inf") else None


@dataclass(frozen=True)
class Retry:
    """One wait a kind's loop chose: how long, why, and when (the LiveState's clock)."""

    kind: str
    seconds: float
    cause: RetryCause
    at: float


class Reachability:
    """Whether the API server answers, as every kind's loop has seen it; outages, their WARNING
    and INFO lines, and their figures for the metrics."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.down_since: float | None = None
        """When the current outage began (its first unanswered request); None outside one."""
        self.answered_at: float | None = None
        """When the API server answered again in the current outage; None while it does not."""
        self.answering_since = clock()
        """Since when the API server has answered without interruption."""
        self.outages = 0
        self.last_recovery: float | None = None
        """Seconds from the API server answering again to every kind in sync, last outage."""
        self.last_outage: float | None = None
        """Seconds from the start of the last outage to every kind in sync."""
        self._last_answer = float("-inf")
        self._answering = asyncio.Event()
        self._answering.set()
        self._backoffs: list[Backoff] = []

    @property
    def reachable(self) -> bool:
        return self._answering.is_set()

    @property
    def in_outage(self) -> bool:
        return self.down_since is not None

    def share(self, backoff: Backoff) -> Backoff:
        """``backoff``, reset whenever the API server answers again after an outage."""
        self._backoffs.append(backoff)
        return backoff

    def unanswered(self, error: str, started: float) -> None:
        """A request begun at ``started`` got no answer (refused, cut, timed out, or 503)."""
        if started < self._last_answer or not self._answering.is_set():
            return  # asked before the server last answered, or already known to be away
        self._answering.clear()
        self.answered_at = None
        if self.down_since is not None:
            log.debug("the API server is unavailable again: %s", error)
            return
        self.down_since = self._clock()
        self.outages += 1
        log.warning(
            "the API server is unavailable: %s; every kind retries within a few seconds, and "
            "a deny resting on a view older than --stale-after becomes a warning",
            error,
        )

    def answered(self) -> None:
        """The API server answered a request (any status but 503)."""
        now = self._clock()
        self._last_answer = now
        if self._answering.is_set():
            return
        self._answering.set()
        self.answered_at = self.answering_since = now
        for backoff in self._backoffs:
            backoff.reset()
        log.debug("the API server answers again")

    def in_sync(self) -> None:
        """Every kind is in sync with the API server: an outage it answered again in ends."""
        if self.down_since is None or self.answered_at is None:
            return
        now = self._clock()
        self.last_recovery = now - self.answered_at
        self.last_outage = now - self.down_since
        log.info(
            "every kind is in sync again, %.1f s after the API server answered again "
            "(%.1f s after it became unavailable)",
            self.last_recovery,
            self.last_outage,
        )
        self.down_since = self.answered_at = None

    async def wait_for_answer(self, seconds: float) -> None:
        """Sleeps ``seconds``, or less if the API server answers again meanwhile."""
        try:
            async with asyncio.timeout(seconds):
                await self._answering.wait()
        except TimeoutError:
            pass

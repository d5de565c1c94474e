"""Time limits on what a client sends: a request's headers, its body, and the wait between requests.

An API server writes a review's headers and body at once, then reuses its connection or lets it
go. A client that trickles them (one byte every few seconds) or opens a connection and sends
nothing holds a connection, and at ``--max-connections`` a slot, for as long as it likes: aiohttp
limits neither the headers nor the body, and its keep-alive timer runs for an hour by default.
Each limit closes the connection and counts it in ``gpu_guard_connections_cut_total{reason}``:

- ``headers``: from a request's first byte to the end of its headers (``TimedRequestHandler``);
- ``body``: from the end of the headers to the end of the body (``pipeline.read_body``; only the
  review endpoints read a body: any other route answers and, its body unread, closes);
- ``idle``: from the handshake or the last answer to the next request's first byte: aiohttp's
  ``keepalive_timeout``, counted here.

The connection cap's idle eviction (``connections.IDLE_GRACE``) is the sooner limit, applied only
at the cap: an idle connection gives its slot up to a new one after that grace, and closes by
itself after ``idle`` in any case.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from webhook.admission.http_input import PlainErrors
from webhook.defaults import DEFAULT_BODY_TIMEOUT as DEFAULT_BODY_TIMEOUT
from webhook.defaults import DEFAULT_HEADERS_TIMEOUT as DEFAULT_HEADERS_TIMEOUT
from webhook.defaults import DEFAULT_IDLE_TIMEOUT as DEFAULT_IDLE_TIMEOUT

log = logging.getLogger("gpu-guard.server")


@dataclass(frozen=True)
class ClientTimeouts:
    """How long a client may take: see the module's docstring (``serve --*-timeout``)."""

    headers: float = DEFAULT_HEADERS_TIMEOUT
    body: float = DEFAULT_BODY_TIMEOUT
    idle: float = DEFAULT_IDLE_TIMEOUT


class TimedRequestHandler(PlainErrors):
    """The connection handler (``PlainErrors``) with a time limit on each request's headers,
    counted from their first byte, and its keep-alive closes counted as idle cuts.

    It reads two things aiohttp keeps to itself: ``_request_count`` (requests parsed: a new one
    means headers complete) and ``_waiter`` (pending while the handler loop waits for the next
    request: bytes arriving then start a request, they are no body)."""

    __slots__ = ("_cut", "_headers_timeout", "_headers_timer")

    def __init__(
        self,
        manager: web.Server,
        *,
        headers_timeout: float,
        cut: Callable[[str], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(manager, **kwargs)
        self._headers_timeout = headers_timeout
        self._cut = cut
        self._headers_timer: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        parsed = self._request_count
        waiting = self._waiter is not None and not self._waiter.done()
        super().data_received(data)
        if self._request_count != parsed:  # headers complete: the request is being handled
            self._stop_headers_timer()
        elif (
            data
            and (parsed == 0 or waiting)
            and self._headers_timer is None
            and self.transport is not None
        ):
            self._headers_timer = self._loop.call_later(self._headers_timeout, self._headers_late)

    def _headers_late(self) -> None:
        self._headers_timer = None
        if self.transport is None:
            return
        log.info(
            "cut client %s: request headers not received within %g s",
            self.peername,
            self._headers_timeout,
        )
        self.force_close()
        self._cut("headers")

    def _stop_headers_timer(self) -> None:
        if self._headers_timer is not None:
            self._headers_timer.cancel()
            self._headers_timer = None

    def _process_keepalive(self) -> None:
        """aiohttp's keep-alive expiry (it closes an idle connection, or re-arms when the last
        answer was recent), counted. A request that had begun to arrive is cut for its headers."""
        was_open = self.transport is not None
        super()._process_keepalive()
        if was_open and self.transport is None:
            self._cut("headers" if self._headers_timer is not None else "idle")
            self._stop_headers_timer()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_headers_timer()
        super().connection_lost(exc)


def timed_handlers(
    server: web.Server,
    timeouts: ClientTimeouts,
    cut: Callable[[str], None],
    rejected: Callable[[int], None],
) -> Callable[[], TimedRequestHandler]:
    """The protocol factory for ``server``'s connections: what ``server()`` makes (with the
    runner's settings), headers limited, ``keepalive_timeout`` the idle limit, and what the
    parser refuses answered and counted by ``PlainErrors`` (``rejected``)."""
    settings = {**server._kwargs, "keepalive_timeout": timeouts.idle}

    def handler() -> TimedRequestHandler:
        return TimedRequestHandler(
            server,
            loop=asyncio.get_running_loop(),
            headers_timeout=timeouts.headers,
            cut=cut,
            rejected=rejected,
            **settings,
        )

    return handler

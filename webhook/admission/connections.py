"""A cap on open connections, so that latency under overload stays bounded by construction.

Each API server connection carries one review at a time (HTTP/1.1), so a server answering R
reviews/s with C connections open makes each wait about C / R seconds, whatever it does inside:
requests queue in socket buffers it has not read yet, where no deadline can see them. Refusing
connections past ``limit`` bounds C, and a refused API server call fails at once, by the
webhook's failurePolicy, instead of after timeoutSeconds.

The refusal happens before the TLS handshake: a handshake costs the server more CPU than a review,
so refusing after it would spend the capacity the cap is there to protect. The site runs its own
accept loop: a socket over the cap is closed as accepted; one under it is handed, with TLS, to
aiohttp through ``loop.connect_accepted_socket`` (asyncio's loop and uvloop alike).

A cap alone would let anyone who can reach the port hold every slot with connections that do
nothing (a handshake never finished, a connection never used). So at the cap a new connection
first makes room: it takes the slot of a handshake stalled past ``HANDSHAKE_GRACE``, else of the
connection idle the longest, if that is past ``IDLE_GRACE`` (it has no review in flight). Only
when every connection is busy or just used is it refused, which is the overload the cap is for.
Below the cap, idle connections and slow clients are closed by their own time limits
(``webhook.admission.slow_clients``); the grace here is the shorter of ``IDLE_GRACE`` and the idle
limit, so that the cap never waits for a connection longer than the limit would keep it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import Callable

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_runner import BaseSite

from webhook.defaults import DEFAULT_MAX_CONNECTIONS as DEFAULT_MAX_CONNECTIONS

log = logging.getLogger("gpu-guard.server")

BACKLOG = 1024
"""Connections the kernel completes and queues before accept: a burst past the cap is then
accepted and refused at once, not left to SYN retries that take seconds (the kernel caps this at
net.core.somaxconn)."""
HANDSHAKE_TIMEOUT = 3.0
"""Seconds a client may take over its TLS handshake (the webhook's timeoutSeconds: an API server
has given up by then)."""
HANDSHAKE_GRACE = 2.0
"""Past this, a handshake still under way gives its slot up to a new connection at the cap (a
CPU-starved server's own handshakes can take a second; by 3 s the caller has given up)."""
IDLE_GRACE = 10.0
"""A connection idle this long gives its slot up to a new one at the cap. An API server reuses
its busy connections within milliseconds, but keeps rarely used ones pooled (and may pick one
just as it is closed, failing that call); with a short grace, more callers than slots made new
connections close pooled ones and the handshakes ate the capacity (bench/RESULTS.md, Overload).
Ten seconds makes holding a slot cost a review every ten seconds."""
SSL_SHUTDOWN_TIMEOUT = 3.0
"""Seconds a closed connection waits for the client's TLS close_notify before its socket is
dropped: a client that never answers must not keep a cut connection (and its slot) for asyncio's
default 30 s."""
ACCEPT_BATCH = 128
"""Connections taken from the backlog per wake-up of the accept loop."""
ACCEPT_ERROR_PAUSE = 0.1
"""Seconds to wait after accept fails (out of file descriptors) before accepting again."""


class Activity:
    """The connections with no review in flight, least recently used first: the handlers tell
    it (``begin``/``end``), the gate takes the oldest when it must make room at the cap. Kept in
    that order as it changes, so a refusal storm costs a look at one entry, not a scan."""

    def __init__(self) -> None:
        self.idle: dict[RequestHandler, float] = {}
        """Idle connections and since when, oldest first (insertion order)."""

    def begin(self, connection: RequestHandler) -> None:
        self.idle.pop(connection, None)

    def end(self, connection: RequestHandler) -> None:
        self.idle[connection] = time.monotonic()  # re-inserted: now the most recent

    def forget_closed(self) -> None:
        self.idle = {c: t for c, t in self.idle.items() if c.transport is not None}


class Gate:
    """Counts connections (handshaking and open) and admits them up to ``limit``, making room
    by closing a stalled handshake or the longest-idle connection before refusing."""

    def __init__(
        self,
        server: web.Server,
        context: ssl.SSLContext,
        limit: int,
        refused: Callable[[], None],
        evicted: Callable[[], None],
        activity: Activity,
        handler: Callable[[], RequestHandler],
        idle_limit: float,
    ) -> None:
        self.server = server
        self.handler = handler
        """Makes each connection's protocol (``slow_clients.timed_handlers``)."""
        self.idle_limit = idle_limit
        """The idle connection's own limit: the cap's grace is never longer."""
        self.context = context
        self.limit = limit
        self.refused = refused
        self.evicted = evicted
        self.activity = activity
        self.handshakes: dict[asyncio.Task[None], float] = {}
        """Handshakes under way and since when, oldest first (insertion order)."""
        self.closing: set[RequestHandler] = set()
        """Connections closed to make room and not gone yet: their slots are taken already."""
        self._warned = False

    @property
    def open(self) -> int:
        live = self.server.connections
        if self.closing:  # gone from the server's list once the connection is lost
            self.closing &= set(live)
        return len(live) - len(self.closing) + len(self.handshakes)

    async def accept(self, listener: socket.socket) -> None:
        """Accepts for ever: each connection refused or upgraded. After each wake-up, whatever
        else waits in the backlog is taken at once (up to ``ACCEPT_BATCH``), as asyncio's own
        servers do: one accept per loop turn would leave a burst queued for seconds on a busy
        loop, refusals included."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(listener)
            except OSError as exc:  # EMFILE and friends: the next accept may succeed
                log.warning("accept failed: %s", exc)
                await asyncio.sleep(ACCEPT_ERROR_PAUSE)
                continue
            self.admit(conn)
            for _ in range(ACCEPT_BATCH - 1):
                try:
                    conn, _ = listener.accept()
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:
                    log.warning("accept failed: %s", exc)
                    break
                conn.setblocking(False)
                self.admit(conn)

    def admit(self, conn: socket.socket) -> None:
        if len(self.activity.idle) > 2 * self.limit:
            self.activity.forget_closed()
        if self.open >= self.limit and not self._make_room():
            self.refused()
            if not self._warned:  # once per overload episode, not once per connection
                self._warned = True
                log.warning("refusing connections: %d open and busy, the limit", self.limit)
            conn.close()
            return
        self._warned = False
        task = asyncio.get_running_loop().create_task(self._upgrade(conn))
        self.handshakes[task] = time.monotonic()
        task.add_done_callback(self._handshake_done)

    def _handshake_done(self, task: asyncio.Task[None]) -> None:
        self.handshakes.pop(task, None)

    def _make_room(self) -> bool:
        """Closes one stalled handshake or idle connection; False when every one is busy."""
        now = time.monotonic()
        idle_grace = min(IDLE_GRACE, self.idle_limit)
        if self.handshakes:  # oldest first (insertion order), as ``idle`` below
            task, started = next(iter(self.handshakes.items()))
            if now - started > HANDSHAKE_GRACE:
                del self.handshakes[task]  # its slot is the newcomer's from now
                task.cancel()
                self.evicted()
                return True
        idle = self.activity.idle
        while idle:
            connection, since = next(iter(idle.items()))
            if connection.transport is None:  # closed since it was last used
                del idle[connection]
                continue
            if now - since < idle_grace:
                return False  # the oldest is recent: all the others are more so
            del idle[connection]
            self.closing.add(connection)
            # What aiohttp itself does to a keep-alive connection idle past its timeout (its
            # close() would wait for a next request). The one review this can cut is one that
            # arrived in the very loop turn, before its handler started: its caller sees a reset
            # and applies the failurePolicy, as for a refusal.
            connection.force_close()
            self.evicted()
            return True
        return False

    async def _upgrade(self, conn: socket.socket) -> None:
        try:
            _, handler = await asyncio.get_running_loop().connect_accepted_socket(
                self.handler,
                conn,
                ssl=self.context,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT,
                ssl_shutdown_timeout=SSL_SHUTDOWN_TIMEOUT,
            )
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            conn.close()  # a failed or abandoned handshake: nothing was served
            log.debug("TLS handshake failed: %r", exc)
            return
        except asyncio.CancelledError:
            conn.close()
            raise
        self.activity.end(handler)  # idle from now until its first review

    def close(self) -> None:
        for task in list(self.handshakes):
            task.cancel()


class _Listening(asyncio.AbstractServer):
    """The listening socket and its accept loop, as the server object aiohttp's runner keeps
    (it reads ``sockets`` for its addresses and calls ``close()`` when the site stops)."""

    def __init__(self, listener: socket.socket, gate: Gate) -> None:
        self._listener = listener
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(gate.accept(listener))

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return () if self._listener.fileno() < 0 else (self._listener,)

    def close(self) -> None:
        self._task.cancel()
        self._listener.close()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return not self._task.done()

    async def start_serving(self) -> None:
        """Serving starts with the object: nothing to do."""

    async def serve_forever(self) -> None:
        await self._task

    async def wait_closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def _listener(host: str, port: int) -> socket.socket:
    """A non-blocking listening socket on the first address ``host`` resolves to."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class CappedTLSSite(BaseSite):
    """``web.TCPSite`` with TLS, accepting through ``gate``, which caps open connections."""

    __slots__ = ("_gate", "_host", "_port")

    def __init__(self, runner: web.AppRunner, host: str, port: int, gate: Gate) -> None:
        super().__init__(runner, ssl_context=gate.context, backlog=BACKLOG)
        self._host = host
        self._port = port
        self._gate = gate

    @property
    def name(self) -> str:
        return f"https://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        self._server = _Listening(_listener(self._host, self._port), self._gate)

    async def stop(self) -> None:
        await super().stop()
        self._gate.close()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*list(self._gate.handshakes), return_exceptions=True)

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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable

from aiohttp import web
from aiohttp.web_runner import BaseSite

log = logging.getLogger("gpu-guard.server")

DEFAULT_MAX_CONNECTIONS = 512
BACKLOG = 1024
"""Connections the kernel completes and queues before accept: a burst past the cap is then
accepted and refused at once, not left to SYN retries that take seconds (the kernel caps this at
net.core.somaxconn)."""
HANDSHAKE_TIMEOUT = 10.0
"""Seconds a client may take over its TLS handshake while holding a connection slot."""
ACCEPT_ERROR_PAUSE = 0.1
"""Seconds to wait after accept fails (out of file descriptors) before accepting again."""


class Gate:
    """Counts connections (handshaking and open) and admits them up to ``limit``."""

    def __init__(
        self,
        server: web.Server,
        context: ssl.SSLContext,
        limit: int,
        refused: Callable[[], None],
    ) -> None:
        self.server = server
        self.context = context
        self.limit = limit
        self.refused = refused
        self.handshakes: set[asyncio.Task[None]] = set()
        self._warned = False

    @property
    def open(self) -> int:
        return len(self.server.connections) + len(self.handshakes)

    async def accept(self, listener: socket.socket) -> None:
        """Accepts for ever: each connection refused or upgraded."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(listener)
            except OSError as exc:  # EMFILE and friends: the next accept may succeed
                log.warning("accept failed: %s", exc)
                await asyncio.sleep(ACCEPT_ERROR_PAUSE)
                continue
            self.admit(conn)

    def admit(self, conn: socket.socket) -> None:
        if self.open >= self.limit:
            self.refused()
            if not self._warned:  # once per overload episode, not once per connection
                self._warned = True
                log.warning("refusing connections: %d open, the limit", self.limit)
            conn.close()
            return
        self._warned = False
        task = asyncio.get_running_loop().create_task(self._upgrade(conn))
        self.handshakes.add(task)
        task.add_done_callback(self.handshakes.discard)

    async def _upgrade(self, conn: socket.socket) -> None:
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                self.server, conn, ssl=self.context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT
            )
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            conn.close()  # a failed or abandoned handshake: nothing was served
            log.debug("TLS handshake failed: %r", exc)
        except asyncio.CancelledError:
            conn.close()
            raise

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
    """``web.TCPSite`` with TLS, through a :class:`Gate` that caps open connections."""

    __slots__ = ("_gate", "_host", "_port")

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext,
        limit: int,
        refused: Callable[[], None],
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=BACKLOG)
        assert runner.server is not None  # BaseSite refuses a runner that is not set up
        self._host = host
        self._port = port
        self._gate = Gate(runner.server, ssl_context, limit, refused)

    @property
    def name(self) -> str:
        return f"https://{self._host}:{self._port}"

    @property
    def open_connections(self) -> int:
        return self._gate.open

    async def start(self) -> None:
        await super().start()
        self._server = _Listening(_listener(self._host, self._port), self._gate)

    async def stop(self) -> None:
        await super().stop()
        self._gate.close()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._gate.handshakes, return_exceptions=True)

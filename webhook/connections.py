"""A cap on open connections, so that latency under overload stays bounded by construction.

Each API server connection carries one review at a time (HTTP/1.1), so a server answering R
reviews/s with C connections open makes each wait about C / R seconds, whatever it does inside:
requests queue in socket buffers it has not read yet, where no deadline can see them. Refusing
connections past ``limit`` bounds C, and a refused API server call fails at once, by the
webhook's failurePolicy, instead of after timeoutSeconds.

The refusal happens before the TLS handshake: a handshake costs the server more CPU than a review,
so refusing after it would spend the capacity the cap is there to protect. Connections are
accepted as plain TCP, counted, and only then upgraded to TLS and handed to aiohttp.
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

    def __call__(self) -> asyncio.Protocol:
        return _Accepted(self)

    def admit(self, transport: asyncio.Transport) -> None:
        if self.open >= self.limit:
            self.refused()
            if not self._warned:  # once per overload episode, not once per connection
                self._warned = True
                log.warning("refusing connections: %d open, the limit", self.limit)
            transport.abort()
            return
        self._warned = False
        task = asyncio.get_running_loop().create_task(self._upgrade(transport))
        self.handshakes.add(task)
        task.add_done_callback(self.handshakes.discard)

    async def _upgrade(self, transport: asyncio.Transport) -> None:
        handler = self.server()
        try:
            secure = await asyncio.get_running_loop().start_tls(
                transport,
                handler,
                self.context,
                server_side=True,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT,
            )
        except (OSError, ssl.SSLError, TimeoutError, asyncio.CancelledError) as exc:
            transport.abort()  # a failed or abandoned handshake: nothing was served
            log.debug("TLS handshake failed: %s", exc)
            return
        if secure is None:  # the transport closed under the handshake
            return
        handler.connection_made(secure)

    def close(self) -> None:
        for task in list(self.handshakes):
            task.cancel()


class _Accepted(asyncio.Protocol):
    """A plain TCP connection just accepted: admitted (and upgraded) or closed at once."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()  # the ClientHello waits in the socket for start_tls
        self.gate.admit(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        pass  # before the upgrade: start_tls sees the loss and gives up


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
        self._server = await asyncio.get_running_loop().create_server(
            self._gate,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=True,
            family=socket.AF_UNSPEC,
        )

    async def stop(self) -> None:
        await super().stop()
        self._gate.close()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._gate.handshakes, return_exceptions=True)

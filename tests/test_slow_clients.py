"""Slow clients are cut: headers or a body that take too long, a connection left idle.

Each over real TLS on 127.0.0.1 with a throwaway CA (tests/tls.py), with one raw connection
driven by hand, and the limits set to 0.3 s. The only time asserted is that the server closed
the connection before a generous bound: without the limit it would hold it for as long as the
client trickles (tens of seconds here, without end in general).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from tests.builders import node, state_of
from tests.test_server import GOOD, RawConnection
from tests.tls import Material, client_context, make_material
from webhook.admission import connections
from webhook.admission.pipeline import Admission
from webhook.admission.server import HEALTHZ_PATH, VALIDATE_PATH, listen
from webhook.admission.slow_clients import ClientTimeouts
from webhook.admission.tls import make_ssl_context
from webhook.engine import Engine
from webhook.metrics import CUT_REASONS, Metrics

LIMIT = 0.3
"""The limit under test, in seconds."""
LONG = 60.0
"""The other limits: the cut can only come from the one under test."""
GENEROUS = 5.0
"""The server must have closed the connection by then."""
TRICKLE = 0.05
"""Seconds between the bytes of a slow client: each arrives well within the limit, so only a
limit on the whole (not on the silence between bytes) cuts it."""


@dataclass(frozen=True)
class Server:
    port: int
    shared: Admission
    material: Material

    def metric(self, name: str, **labels: str) -> float | None:
        return self.shared.metrics.registry.get_sample_value(name, labels)

    def cut(self, reason: str) -> float:
        return self.metric("gpu_guard_connections_cut_total", reason=reason) or 0.0

    def cuts(self) -> dict[str, float]:
        return {reason: self.cut(reason) for reason in CUT_REASONS}

    async def connect(self) -> Connection:
        return await Connection.open(f"https://127.0.0.1:{self.port}", self.material)


def head(length: int) -> bytes:
    """A review's request line and headers, for a body of ``length`` bytes."""
    return (
        f"POST {VALIDATE_PATH} HTTP/1.1\r\nHost: gpu-guard\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


class Connection(RawConnection):
    """A raw TLS connection (tests/test_server.py) that can also be slow."""

    async def trickle(self, data: bytes) -> None:
        """Sends ``data`` a byte at a time, until done or the server has closed."""
        with contextlib.suppress(ConnectionError, RuntimeError):
            for i in range(len(data)):
                if self.writer.is_closing() or self.reader.at_eof():
                    return
                self.writer.write(data[i : i + 1])
                await self.writer.drain()
                await asyncio.sleep(TRICKLE)

    async def until_closed(self) -> bytes:
        """Everything the server sends until it closes the connection; fails past GENEROUS."""
        received = b""
        async with asyncio.timeout(GENEROUS):
            with contextlib.suppress(ConnectionError):  # a reset after the answer: closed too
                while chunk := await self.reader.read(65536):
                    received += chunk
        return received

    async def review(self) -> int:
        """A review sent at once, as an API server sends it; the answer's status."""
        self.writer.write(head(len(GOOD)) + GOOD)
        return await self.answer_status()

    def close(self) -> None:
        self.writer.transport.abort()


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path, max_connections: int = 16, **limits: float
) -> AsyncIterator[Server]:
    """The guard on 127.0.0.1:0 over TLS, every limit LONG but those given."""
    material = make_material()
    bundle = material.write(tmp_path / "tls")
    timeouts = ClientTimeouts(**{"headers": LONG, "body": LONG, "idle": LONG, **limits})
    shared = Admission(Engine(), state_of(node("omen2")), timeouts=timeouts)
    context = make_ssl_context(str(bundle.cert), str(bundle.key))
    runner, port = await listen(
        shared, "127.0.0.1", 0, context, max_connections=max_connections, shutdown_timeout=1
    )
    try:
        yield Server(port, shared, material)
    finally:
        await runner.cleanup()


SLOW_HEADERS = (
    f"POST {VALIDATE_PATH} HTTP/1.1\r\nHost: gpu-guard\r\nX-Padding: {'a' * 1000}\r\n\r\n".encode()
)
"""Headers that take a minute at one byte every TRICKLE seconds."""


async def test_a_client_trickling_its_headers_is_cut_and_counted(tmp_path: Path) -> None:
    async with serving(tmp_path, headers=LIMIT) as server:
        prompt = await server.connect()
        assert await prompt.review() == 200  # headers sent at once are well within the limit
        slow = await server.connect()
        sending = asyncio.create_task(slow.trickle(SLOW_HEADERS))
        try:
            assert await slow.until_closed() == b""  # closed, nothing answered
        finally:
            sending.cancel()
            slow.close()
        assert await prompt.get(HEALTHZ_PATH) == 200  # the prompt client's connection stays
        prompt.close()
        assert server.cuts() == {"headers": 1, "body": 0, "idle": 0}


async def test_a_client_trickling_its_body_is_answered_408_and_cut(tmp_path: Path) -> None:
    body = orjson.dumps(padded_review())
    async with serving(tmp_path, body=LIMIT) as server:
        prompt = await server.connect()
        assert await prompt.review() == 200  # a body sent at once is well within the limit
        slow = await server.connect()
        slow.writer.write(head(len(body)) + body[:10])
        sending = asyncio.create_task(slow.trickle(body[10:]))
        try:
            answer = await slow.until_closed()
        finally:
            sending.cancel()
            slow.close()
        prompt.close()
        status, _, rest = answer.partition(b"\r\n")
        assert status == b"HTTP/1.1 408 Request Timeout", answer[:200]
        assert rest.endswith(f"request body not received within {LIMIT:g} s\n".encode())
        assert server.cuts() == {"headers": 0, "body": 1, "idle": 0}


def padded_review() -> dict[str, object]:
    """A review of some 2 KB: a minute and a half at one byte every TRICKLE seconds."""
    review = orjson.loads(GOOD)
    review["request"]["object"]["metadata"]["annotations"] = {"example.com/note": "n" * 2000}
    return dict(review)


@pytest.mark.parametrize("used_first", [False, True], ids=["never used", "idle after an answer"])
async def test_an_idle_connection_is_cut_and_counted(tmp_path: Path, used_first: bool) -> None:
    async with serving(tmp_path, idle=LIMIT) as server:
        idle = await server.connect()
        if used_first:
            assert await idle.get(HEALTHZ_PATH) == 200
        try:
            assert await idle.until_closed() == b""
        finally:
            idle.close()
        assert server.cuts() == {"headers": 0, "body": 0, "idle": 1}


def silent_client(port: int, material: Material) -> ssl.SSLSocket:
    """A TLS connection whose client never reads again: it will not answer a close_notify."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=GENEROUS)
    return client_context(material).wrap_socket(raw, server_hostname="127.0.0.1")


async def test_a_connection_cut_for_idleness_gives_its_slot_back_though_its_client_is_silent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server does not wait asyncio's 30 s for a close_notify that never comes."""
    monkeypatch.setattr(connections, "SSL_SHUTDOWN_TIMEOUT", LIMIT)
    async with serving(tmp_path, max_connections=1, idle=LIMIT) as server:
        silent = await asyncio.to_thread(silent_client, server.port, server.material)
        try:
            async with asyncio.timeout(GENEROUS):
                while server.metric("gpu_guard_connections_open") != 0:
                    await asyncio.sleep(0.05)
            newcomer = await server.connect()
            assert await newcomer.get(HEALTHZ_PATH) == 200
            newcomer.close()
        finally:
            silent.close()
        assert server.cut("idle") == 1
        assert server.metric("gpu_guard_connections_refused_total") == 0
        assert server.metric("gpu_guard_connections_evicted_total") == 0


def test_every_reason_to_cut_is_exposed_from_the_start() -> None:
    exposed = Metrics().exposition().decode()
    for reason in CUT_REASONS:
        assert f'gpu_guard_connections_cut_total{{reason="{reason}"}} 0.0' in exposed

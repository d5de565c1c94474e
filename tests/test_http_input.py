"""HTTP below the review: malformed requests, bodies that are not plain JSON, duplicate keys.

Each case is sent as raw bytes over real TLS to the server as ``serve`` runs it (the connection
cap, the time limits, the connection handler of ``webhook.admission.http_input``), with every
logger captured at DEBUG. The offending bytes carry a marker: the answer must be one line that
quotes none of it, and the log one line without a traceback (docs/security.md, "Input").
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gzip
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from tests.builders import node, request, state_of, vm, with_labels
from tests.test_server import GOOD, innocuous_review
from tests.tls import Material, client_context, make_material
from webhook.admission.compose import review_of
from webhook.admission.pipeline import Admission
from webhook.admission.server import MUTATE_PATH, VALIDATE_PATH, listen
from webhook.admission.tls import make_ssl_context
from webhook.engine import Engine

MARKER = "zq-client-bytes-7f3a"
"""In every offending request: never in an answer or a log line."""
M = MARKER.encode()


def head(*lines: bytes, path: str = VALIDATE_PATH) -> bytes:
    return b"\r\n".join([f"POST {path} HTTP/1.1".encode(), b"Host: gpu-guard", *lines, b"", b""])


def json_post(*lines: bytes, body: bytes = GOOD, path: str = VALIDATE_PATH) -> bytes:
    """A review's POST with ``lines`` among its headers and a Content-Length of ``body``."""
    length = f"Content-Length: {len(body)}".encode()
    return head(*lines, length, path=path) + body


JSON_TYPE = b"Content-Type: application/json"

MALFORMED = {
    "Content-Length beside Transfer-Encoding": head(
        JSON_TYPE, b"Content-Length: 5", b"Transfer-Encoding: chunked", b"X-" + M + b": 1"
    )
    + b"0\r\n\r\n",
    "a garbage request line": b"\x16\x03\x01 " + M + b"\r\n\r\n",
    "an unknown HTTP version": f"GET /{MARKER} HTTP/9.9\r\n\r\n".encode(),
    "an invalid method": f"G(T /{MARKER} HTTP/1.1\r\n\r\n".encode(),
    "a 100 KB header": head(b"X-Big: " + M * (100_000 // len(M))),
    "10k headers": head(*(b"X-%d: " % i + M for i in range(10_000))),
    "a 100 KB request line": f"GET /{MARKER * (100_000 // len(MARKER))} HTTP/1.1\r\n\r\n".encode(),
    "a bad chunk size": head(JSON_TYPE, b"Transfer-Encoding: chunked") + M + b"\r\n1\r\n",
    "two Content-Lengths": head(JSON_TYPE, b"Content-Length: 4", b"Content-Length: 5") + M,
    "an unknown Transfer-Encoding": head(JSON_TYPE, b"Transfer-Encoding: " + M),
    "a negative Content-Length": head(JSON_TYPE, b"Content-Length: -" + M),
    "a space before a header's colon": head(b"X-" + M + b" : 1"),
    "a NUL in a header": head(b"X-Bad: " + M + b"\x00"),
}

NOT_PLAIN_JSON = {
    "Content-Type text/plain": json_post(b"Content-Type: text/plain"),
    "Content-Encoding br": json_post(JSON_TYPE, b"Content-Encoding: br"),
    "Content-Encoding gzip": json_post(
        JSON_TYPE, b"Content-Encoding: gzip", body=gzip.compress(GOOD)
    ),
    "an unknown Content-Encoding": json_post(JSON_TYPE, b"Content-Encoding: x-" + M),
}


@dataclass(frozen=True)
class Answer:
    status: int
    headers: bytes
    body: bytes
    closed: bool


@dataclass(frozen=True)
class Server:
    port: int
    material: Material
    shared: Admission

    async def send(self, data: bytes) -> Answer:
        """``data`` on a fresh TLS connection; the answer and whether the server closed."""
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", self.port, ssl=client_context(self.material), server_hostname="localhost"
        )
        try:
            writer.write(data)
            with contextlib.suppress(ConnectionError):  # refused before all of it was read
                await writer.drain()
            raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            length = next(
                int(line.split(b":", 1)[1])
                for line in raw.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            body = await asyncio.wait_for(reader.readexactly(length), 5)
            with contextlib.suppress(ConnectionError):
                closed = await asyncio.wait_for(reader.read(1), 1) == b""
        except TimeoutError:
            closed = False
        finally:
            writer.transport.abort()
        status = int(raw.split(b" ", 2)[1])
        return Answer(status, raw, body, closed)

    def rejected(self, status: int) -> float:
        sample = self.shared.metrics.registry.get_sample_value(
            "gpu_guard_admission_rejected_total", {"status": str(status)}
        )
        return sample or 0.0


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    material = make_material()
    bundle = material.write(tmp_path / "tls")
    context = make_ssl_context(str(bundle.cert), str(bundle.key))
    shared = Admission(Engine(), state_of(node("omen2")))
    runner, port = await listen(shared, "127.0.0.1", 0, context, shutdown_timeout=1)
    try:
        yield Server(port, material, shared)
    finally:
        await runner.cleanup()


def assert_names_no_versions(answer: Answer) -> None:
    """aiohttp's default Server header would say ``Python/3.x aiohttp/3.y``."""
    assert b"\r\nServer: gpu-guard\r\n" in answer.headers, answer.headers
    assert b"aiohttp" not in answer.headers and b"Python" not in answer.headers


def assert_one_plain_line(answer: Answer) -> str:
    assert b"Content-Type: text/plain" in answer.headers
    assert_names_no_versions(answer)
    text = answer.body.decode()
    assert text.endswith("\n") and text.count("\n") == 1, text
    assert MARKER not in text and MARKER not in answer.headers.decode(errors="replace")
    return text


def assert_logged_in_one_line_without_the_bytes(caplog: pytest.LogCaptureFixture) -> None:
    assert caplog.records, "nothing logged"
    for record in caplog.records:
        assert record.levelno < logging.WARNING, record.getMessage()
        assert record.exc_info is None and record.exc_text is None, record.getMessage()
        message = record.getMessage()
        assert "\n" not in message and MARKER not in message, message


REFUSED = [
    *(pytest.param(data, 400, id=name) for name, data in MALFORMED.items()),
    *(pytest.param(data, 415, id=name) for name, data in NOT_PLAIN_JSON.items()),
]


@pytest.mark.parametrize(("data", "status"), REFUSED)
async def test_a_request_the_api_server_never_sends_gets_one_line_quoting_nothing_and_no_traceback(
    server: Server, data: bytes, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        answer = await server.send(data)
    assert answer.status == status
    text = assert_one_plain_line(answer)
    assert_logged_in_one_line_without_the_bytes(caplog)
    assert server.rejected(status) == 1
    if status == 400:  # the parser's refusal: nothing more is read from this client
        assert text.startswith("malformed HTTP request (") and answer.closed


@pytest.mark.parametrize(
    "lines",
    [(JSON_TYPE,), (b"Content-Type: application/json; charset=utf-8",), ()],
    ids=["application/json", "with a charset", "no Content-Type"],
)
async def test_the_same_review_as_the_api_server_sends_it_is_answered(
    server: Server, lines: tuple[bytes, ...]
) -> None:
    answer = await server.send(json_post(*lines))
    assert answer.status == 200
    assert_names_no_versions(answer)
    assert orjson.loads(answer.body)["response"]["allowed"] is True


def with_a_duplicate_label(review: bytes) -> bytes:
    """The review with the VM's ``gpu`` label written twice: ``"off"``, then ``"on"``."""
    return review.replace(b'"gpu":"on"', b'"gpu":"off","gpu":"on"', 1)


DUPLICATES = {
    "in the envelope": GOOD.replace(b'"uid":', b'"uid":"x","uid":', 1),
    "in the object": with_a_duplicate_label(
        orjson.dumps(review_of(request("CREATE", with_labels(vm("v"), {"gpu": "on"}))))
    ),
}


@pytest.mark.parametrize("path", [VALIDATE_PATH, MUTATE_PATH])
@pytest.mark.parametrize("body", list(DUPLICATES.values()), ids=list(DUPLICATES))
async def test_a_key_written_twice_in_one_object_is_a_400_at_both_endpoints(
    server: Server, body: bytes, path: str
) -> None:
    assert body.count(b'"uid":') == 2 or body.count(b'"gpu":') == 2  # the duplicate is there
    answer = await server.send(json_post(JSON_TYPE, body=body, path=path))
    assert answer.status == 400
    text = assert_one_plain_line(answer)
    assert "twice in one object" in text, text


async def test_after_every_malformed_request_the_server_still_answers_a_review(
    server: Server,
) -> None:
    for data in [*MALFORMED.values(), *NOT_PLAIN_JSON.values()]:
        assert (await server.send(data)).status in (400, 415)
    review = copy.deepcopy(innocuous_review())
    answer = await server.send(json_post(JSON_TYPE, body=orjson.dumps(review)))
    assert answer.status == 200

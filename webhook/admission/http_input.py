"""HTTP below the review: the request as bytes on the wire, before it is an AdmissionReview.

The API server always sends the same shape: ``POST``, ``Content-Type: application/json``, no
``Content-Encoding``, a body of ``Content-Length`` bytes. Anything else is refused here, each
with a one-line reason that quotes nothing the client sent:

- what aiohttp's parser refuses (a garbage request line, Content-Length beside
  Transfer-Encoding, a header line over 8 KiB, too many headers, a bad chunk) never reaches a
  route, and no middleware sees it (aio-libs/aiohttp#3287, #9882): aiohttp answers it with its
  own text, which quotes the offending bytes, and logs it at ERROR with a traceback, so anyone
  who can reach the port could fill the log. ``PlainErrors``, the connection handler's
  ``handle_error``, answers a one-line 400 instead, logs one INFO line and counts it;
- a body whose Content-Type is not JSON (one with none is read as JSON), or encoded in any way
  (gzip, br, anything unknown), is a 415 (``read_body``): the server decodes nothing it was not
  asked to, so a compressed body is never inflated (the handlers run with ``auto_decompress``
  off).

Every answer, these included, names its server as ``gpu-guard`` and no more: aiohttp's default
``Server`` header gives the Python and aiohttp versions to anyone who can reach the port.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from webhook.admission.review import ReviewError
from webhook.admission.tls import client_verified

log = logging.getLogger("gpu-guard.server")

JSON = "application/json"
REVIEW_HEADERS = {"Content-Type": JSON}
"""The headers an API server sends with a review that this module reads (for its clients)."""
UNENCODED = frozenset({"", "identity"})
"""The Content-Encodings a body may have: none."""
COULD_NOT = "gpu-guard could not process this request (see the server log)"
SERVER = "gpu-guard"
"""The ``Server`` header of every answer: no versions."""


class ClientGone(Exception):
    """The client hung up before its body arrived (an API server giving up at its timeout)."""


class BodyTooSlow(Exception):
    """The body did not arrive within ``timeouts.body`` of the headers (a client trickling it)."""


def one_line(status: int, text: str) -> web.Response:
    """A ``text/plain`` answer of one line (the parser's refusals bypass the app's signals, so
    it names its server itself)."""
    answer = web.Response(status=status, text=text + "\n", content_type="text/plain")
    answer.headers["Server"] = SERVER
    return answer


async def name_server(request: web.Request, answer: web.StreamResponse) -> None:
    """``on_response_prepare``: aiohttp only sets its own ``Server`` header when none is set."""
    answer.headers["Server"] = SERVER


class PlainErrors(RequestHandler):
    """aiohttp's connection handler whose own error answers are one line, quote nothing of the
    request, and are logged in one line without a traceback (see the module's docstring).

    ``rejected`` counts each by status (``gpu_guard_rejected_total``)."""

    __slots__ = ("_rejected",)

    def __init__(
        self, manager: web.Server, *, rejected: Callable[[int], None], **kwargs: Any
    ) -> None:
        super().__init__(manager, auto_decompress=False, **kwargs)
        self._rejected = rejected

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """Called by aiohttp for a request its parser refused (400, ``exc`` the parser's
        error, whose text quotes the request) and for a route that raised past ``never_500``
        or timed out (a bug of ours: logged with its traceback, which no client chose)."""
        if request.writer.output_size > 0:  # as aiohttp: an answer has begun, none can follow
            raise ConnectionError("an answer was already being sent")
        if status >= 500:
            log.error("could not serve %s", request.remote, exc_info=exc)
            answer = one_line(400, COULD_NOT)
        else:
            what = "malformed HTTP request" if exc is None else type(exc).__name__
            log.info("malformed HTTP request from %s: %s", request.remote, what)
            self._rejected(status)
            answer = one_line(status, f"malformed HTTP request ({what})")
        answer.force_close()
        return answer


async def read_body(request: web.Request, limit: int, timeout: float) -> bytes:
    """The review's bytes: 401 without a verified client certificate (when one is required),
    413 past ``limit`` (refused by Content-Length before reading), 415 for a body that is not
    plain JSON, ``ClientGone`` mid-body, ``BodyTooSlow`` when it has not all arrived within
    ``timeout``."""
    if not client_verified(request):
        raise ReviewError(
            "a client certificate signed by the configured client CA is required", 401
        )
    if request.content_length is not None and request.content_length > limit:
        raise ReviewError(
            f"body of {request.content_length} bytes is over the {limit}-byte limit", 413
        )
    if "Content-Type" in request.headers and request.content_type != JSON:
        raise ReviewError(f"Content-Type must be {JSON}", 415)
    if request.headers.get("Content-Encoding", "").strip().lower() not in UNENCODED:
        raise ReviewError("the body must not be encoded (no Content-Encoding)", 415)
    try:
        if request.content.is_eof():  # all here already (the usual case): no timer to arm
            return await request.read()
        async with asyncio.timeout(timeout):
            return await request.read()
    except TimeoutError:
        raise BodyTooSlow(f"request body not received within {timeout:g} s") from None
    except web.HTTPRequestEntityTooLarge:
        raise ReviewError(f"body is over the {limit}-byte limit", 413) from None
    except (ConnectionError, aiohttp.ClientPayloadError) as exc:
        raise ClientGone(f"{type(exc).__name__}: {exc}") from None

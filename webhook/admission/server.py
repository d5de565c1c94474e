"""The admission server: thin aiohttp plumbing around the engine.

``POST /validate`` answers AdmissionReviews; ``GET /healthz`` says the process lives;
``GET /readyz`` says the state is loaded and the server is not shutting down. Bad input gets a
400 (413 for size) with a one-line reason; nothing a client sends produces a 500 or a traceback.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

from policies.model import AdmissionRequest
from policies.text import printable
from policies.view import ClusterView
from webhook.admission.connections import DEFAULT_MAX_CONNECTIONS, Activity, CappedTLSSite, Gate
from webhook.admission.review import (
    ReviewError,
    decision_response,
    make_response,
    parse_review,
    review_body,
)
from webhook.config import ConfigError, load_config
from webhook.engine import Decision, Engine, Freshness
from webhook.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from webhook.metrics import Metrics

log = logging.getLogger("gpu-guard.server")

DEFAULT_MAX_BODY = 3 * 1024 * 1024
DEFAULT_MAX_IN_FLIGHT = 64
DEFAULT_DEADLINE = 1.0
VALIDATE_PATH = "/validate"
MUTATE_PATH = "/mutate"
HEALTHZ_PATH = "/healthz"
READYZ_PATH = "/readyz"
METRICS_PATH = "/metrics"
CERT_POLL_SECONDS = 10.0
CONFIG_POLL_SECONDS = 5.0


class LoopLag:
    """How late the event loop runs: about how long a request sat queued before its handler.

    Under CPU saturation requests wait in socket buffers, before any handler can see them; a
    per-handler clock never notices. A ticker that measures its own lateness does.
    """

    def __init__(self, period: float = 0.02) -> None:
        self.period = period
        self.lag = 0.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.period)
            late = loop.time() - before - self.period
            self.lag = max(late, self.lag / 2)  # rises at once, decays by half each tick


@dataclass
class ServerState:
    """What the handlers share; ``view`` may be swapped for a new snapshot at any time.

    With live state, ``freshness`` downgrades denies that rest on stale watches, and ``confirm``
    re-reads a node's pods from the API server (within ``confirm_budget`` seconds) before a deny
    that names them stands.
    """

    engine: Engine
    view: ClusterView
    max_body: int = DEFAULT_MAX_BODY
    shutting_down: bool = False
    not_ready_reason: Callable[[], str | None] = field(default=lambda: None)
    freshness: Freshness | None = None
    confirm: Callable[[str, float], Awaitable[bool]] | None = None
    confirm_budget: float = 0.5
    metrics: Metrics = field(default_factory=Metrics)
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    deadline: float = DEFAULT_DEADLINE
    """Seconds a review may wait for its turn; well under the webhook's timeoutSeconds."""
    lag: LoopLag = field(default_factory=LoopLag)
    activity: Activity = field(default_factory=Activity)
    _slots: asyncio.Semaphore | None = field(default=None, init=False, repr=False)

    def _shed(self, review: AdmissionRequest) -> Decision:
        self.metrics.overloaded.inc()
        return self.engine.unevaluated(
            review, "gpu-guard was overloaded and could not evaluate it in time"
        )

    async def admit(self, review: AdmissionRequest, started: float) -> Decision:
        """``decide`` within the concurrency limit and the deadline; past either, the policies'
        failure modes answer at once rather than queueing past the API server's timeout.

        The time already spent counts what the handler saw and the loop's lag: a request that
        waited in a socket buffer behind a backlog has used its budget before it got here.
        """
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_in_flight)
        remaining = self.deadline - (time.perf_counter() - started) - self.lag.lag
        if remaining <= 0:
            return self._shed(review)
        if self._slots.locked():  # a full server: wait for a slot, but not past the deadline
            try:
                async with asyncio.timeout(remaining):
                    await self._slots.acquire()
            except TimeoutError:
                return self._shed(review)
        else:
            await self._slots.acquire()  # free at once: no timer to arm
        try:
            return await self.decide(review)
        finally:
            self._slots.release()

    async def decide(self, review: AdmissionRequest) -> Decision:
        decision = self.engine.evaluate(review, self.view, self.freshness)
        nodes = decision.nodes_to_confirm() if self.confirm is not None else []
        if not nodes or self.confirm is None:
            return decision
        confirmed = [await self.confirm(node, self.confirm_budget) for node in nodes]
        decision = self.engine.evaluate(review, self.view, self.freshness)
        if not all(confirmed):
            decision.annotate_denials(
                f"the API server did not confirm the pods within {self.confirm_budget:g} s; "
                "decided on the cached state"
            )
        return decision


SERVER_STATE = web.AppKey("server_state", ServerState)


def _plain(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n", content_type="text/plain")


class ClientGone(Exception):
    """The client hung up before its body arrived (an API server giving up at its timeout)."""


async def _read_body(request: web.Request, limit: int) -> bytes:
    if not _client_verified(request):
        raise ReviewError(
            "a client certificate signed by the configured client CA is required", 401
        )
    if request.content_length is not None and request.content_length > limit:
        raise ReviewError(
            f"body of {request.content_length} bytes is over the {limit}-byte limit", 413
        )
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ReviewError(f"body is over the {limit}-byte limit", 413) from None
    except (ConnectionError, aiohttp.ClientPayloadError) as exc:
        raise ClientGone(f"{type(exc).__name__}: {exc}") from None


async def validate(request: web.Request) -> web.Response:
    shared = request.app[SERVER_STATE]
    started = time.perf_counter()
    # Yield once: every review that has arrived stamps its start before any of them takes the
    # loop for an evaluation, so time spent queued behind others counts against its deadline.
    await asyncio.sleep(0)
    try:
        body = await _read_body(request, shared.max_body)
        review = parse_review(body)
    except ReviewError as exc:
        return _rejected(shared, request, exc)
    except ClientGone as exc:
        return _gone(request, exc)
    decision = await shared.admit(review, started)
    payload = review_body(decision_response(review.uid, decision))
    elapsed = time.perf_counter() - started
    shared.metrics.record_review(
        "validate", review.kind, review.operation, decision.allowed, elapsed, decision.verdicts
    )
    for used in decision.overrides:
        shared.metrics.overrides.labels(used.policy).inc()
        log.warning(
            "override used uid=%s policy=%s user=%s reason=%r kind=%s namespace=%s name=%s "
            "dry_run=%s",
            printable(review.uid),
            printable(used.policy),
            printable(used.user),
            printable(used.reason),
            printable(review.kind),
            printable(review.namespace or "-"),
            printable(review.name or "-"),
            review.dry_run,
        )
    if log.isEnabledFor(logging.INFO):  # the arguments cost as much as the line: both or neither
        log.info(
            "decision %s allowed=%s verdicts=%s dry_run=%s ms=%.2f",
            _subject(review),
            decision.allowed,
            ",".join(f"{v.policy}:{v.action.label}" for v in decision.verdicts) or "-",
            review.dry_run,
            elapsed * 1000,
        )
    return web.Response(body=payload, content_type="application/json")


def _subject(review: AdmissionRequest) -> str:
    """Who asked what of which object, for a log line; nothing of the object's contents."""
    return (
        f"uid={printable(review.uid)} op={printable(review.operation)} "
        f"kind={printable(review.kind)} namespace={printable(review.namespace or '-')} "
        f"name={printable(review.name or '-')} user={printable(review.user.username or '-')}"
    )


def _rejected(shared: ServerState, request: web.Request, exc: ReviewError) -> web.Response:
    log.info("rejected review from %s: %s", request.remote, printable(exc))
    shared.metrics.rejected.labels(str(exc.status)).inc()
    response = _plain(exc.status, f"invalid AdmissionReview: {exc}")
    if exc.status == 413:
        response.force_close()  # close after answering; with no lingering, read no more
    return response


def _gone(request: web.Request, exc: ClientGone) -> web.Response:
    log.info("client %s hung up before its review arrived: %s", request.remote, printable(exc))
    return _plain(400, "incomplete request")


async def mutate(request: web.Request) -> web.Response:
    """Opt-in mutations as a JSONPatch, each change also a warning. Never denies."""
    shared = request.app[SERVER_STATE]
    started = time.perf_counter()
    try:
        review = parse_review(await _read_body(request, shared.max_body))
    except ReviewError as exc:
        return _rejected(shared, request, exc)
    except ClientGone as exc:
        return _gone(request, exc)
    result = shared.engine.mutate(review, shared.view)
    payload = review_body(make_response(review.uid, True, "", result.warnings, result.patch))
    shared.metrics.record_review(
        "mutate", review.kind, review.operation, True, time.perf_counter() - started
    )
    for applied in result.applied:
        shared.metrics.mutations.labels(applied).inc()
    if log.isEnabledFor(logging.INFO):
        log.info(
            "mutation %s applied=%s dry_run=%s ms=%.2f",
            _subject(review),
            ",".join(result.applied) or "-",
            review.dry_run,
            (time.perf_counter() - started) * 1000,
        )
    return web.Response(body=payload, content_type="application/json")


async def metrics(request: web.Request) -> web.Response:
    body = request.app[SERVER_STATE].metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})


async def healthz(request: web.Request) -> web.Response:
    return _plain(200, "ok")


async def readyz(request: web.Request) -> web.Response:
    shared = request.app[SERVER_STATE]
    if shared.shutting_down:
        return _plain(503, "shutting down")
    reason = shared.not_ready_reason()
    if reason is not None:
        return _plain(503, f"not ready: {reason}")
    return _plain(200, "ready")


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def never_500(handler: Handler) -> Handler:
    """A bug must not become a 500 with a traceback on the API server's critical path.

    A wrapper per route rather than a middleware: aiohttp builds a middleware chain for every
    request, a cost the wrapper does not have. It also tells the connection cap which
    connections are in use (``webhook.admission.connections.Activity``)."""

    @functools.wraps(handler)
    async def guarded(request: web.Request) -> web.StreamResponse:
        activity = request.app[SERVER_STATE].activity
        activity.begin(request.protocol)  # busy: not to be closed to make room at the cap
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except Exception:
            log.exception("unexpected error serving %s %s", request.method, request.path)
            return _plain(400, "gpu-guard could not process this request (see the server log)")
        finally:
            activity.end(request.protocol)

    return guarded


async def _lag_ticker(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(app[SERVER_STATE].lag.run())
    yield
    task.cancel()


def make_app(shared: ServerState) -> web.Application:
    # client_max_size is a second line of defence; _read_body refuses by Content-Length first.
    # No lingering: after a 413 (or any body left unread) close, rather than read and discard
    # what the client still sends for up to 10 s.
    app = web.Application(
        client_max_size=shared.max_body,
        handler_args={"lingering_time": 0.0},
    )
    app[SERVER_STATE] = shared
    app.cleanup_ctx.append(_lag_ticker)
    app.router.add_post(VALIDATE_PATH, never_500(validate))
    app.router.add_post(MUTATE_PATH, never_500(mutate))
    app.router.add_get(HEALTHZ_PATH, never_500(healthz))
    app.router.add_get(READYZ_PATH, never_500(readyz))
    app.router.add_get(METRICS_PATH, never_500(metrics))
    return app


# --- configuration --------------------------------------------------------------------------


async def reload_config(engine: Engine, path: str, every: float) -> None:
    """Applies a changed configuration file (a ConfigMap update) without a restart.

    A bad file is refused with its reason in the log, and the last good configuration stays.
    """
    seen = _mtimes(path)
    while True:
        await asyncio.sleep(every)
        try:
            current = _mtimes(path)
        except OSError as exc:
            log.warning("configuration %s unreadable, keeping the last good one: %s", path, exc)
            continue
        if current == seen:
            continue
        seen = current
        try:
            engine.config = load_config(path)
        except ConfigError as exc:
            log.error("configuration refused, keeping the last good one: %s", exc)
            continue
        except Exception:  # a loader bug must not end reloading for good
            log.exception("configuration %s could not be read, keeping the last good one", path)
            continue
        log.info("configuration reloaded from %s", path)


# --- TLS ------------------------------------------------------------------------------------------


#: TLS 1.2 suites: forward-secret AEAD only (TLS 1.3 suites are all strong and fixed).
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL:!MD5:!DSS:!RC4:!3DES:!SHA1"


def make_ssl_context(cert: str, key: str, client_ca: str | None = None) -> ssl.SSLContext:
    """TLS 1.2 or newer, forward-secret AEAD ciphers, the given serving certificate.

    With ``client_ca``, only clients presenting a certificate signed by it get through: the
    API server, configured with a client certificate for this webhook (AdmissionConfiguration).
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    context.load_cert_chain(cert, key)
    if client_ca is not None:
        # Optional at the handshake: kubelet probes and Prometheus present no certificate.
        # A certificate that is presented must verify; /validate and /mutate demand one.
        context.verify_mode = ssl.CERT_OPTIONAL
        context.load_verify_locations(cafile=client_ca)
    return context


def _client_verified(request: web.Request) -> bool:
    """True without client verification; with it, True only for a verified client certificate."""
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
    if ssl_object is None or ssl_object.context.verify_mode == ssl.CERT_NONE:
        return True
    return bool(ssl_object.getpeercert())


def _mtimes(*paths: str) -> tuple[float, ...]:
    return tuple(os.stat(p).st_mtime_ns for p in paths)


async def reload_certificates(context: ssl.SSLContext, cert: str, key: str, every: float) -> None:
    """Picks up renewed certificate files: new handshakes use them, open connections keep theirs.

    The pair is proven in a scratch context first: loading a half-written pair (new certificate,
    old key) straight into the live context would leave it with no usable key.
    """
    seen = _mtimes(cert, key)
    while True:
        await asyncio.sleep(every)
        try:
            current = _mtimes(cert, key)
            if current == seen:
                continue
            make_ssl_context(cert, key)
            context.load_cert_chain(cert, key)
            seen = current
            log.info("reloaded serving certificate from %s", cert)
        except (OSError, ssl.SSLError) as exc:
            # A half-written pair during renewal: keep serving the old one, try again later.
            log.warning("could not reload the serving certificate yet: %s", exc)


async def listen(
    shared: ServerState,
    host: str,
    port: int,
    context: ssl.SSLContext,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    shutdown_timeout: float = 10.0,
) -> tuple[web.AppRunner, int]:
    """``make_app(shared)`` listening with TLS on host:port behind the connection cap; returns
    the runner (``cleanup()`` stops it) and the port bound (the one chosen when 0 was asked)."""
    runner = web.AppRunner(make_app(shared), shutdown_timeout=shutdown_timeout, access_log=None)
    await runner.setup()
    assert runner.server is not None  # set up above
    gate = Gate(
        runner.server,
        context,
        max_connections,
        refused=shared.metrics.connections_refused.inc,
        evicted=shared.metrics.connections_evicted.inc,
        activity=shared.activity,
    )
    shared.metrics.connections_open.set_function(lambda: gate.open)
    try:
        await CappedTLSSite(runner, host, port, gate).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, int(runner.addresses[0][1])


async def serve(
    shared: ServerState,
    *,
    host: str,
    port: int,
    cert: str,
    key: str,
    shutdown_timeout: float = 10.0,
    drain_delay: float = 0.0,
    config_path: str | None = None,
    client_ca: str | None = None,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    started: Callable[[int], None] | None = None,
) -> None:
    """Serves until SIGTERM or SIGINT, then turns /readyz to 503, keeps answering for
    ``drain_delay`` seconds (endpoints controllers stop sending traffic), stops listening and
    finishes in-flight requests (up to ``shutdown_timeout``). Past ``max_connections`` open,
    new connections are closed at once (see ``webhook.admission.connections``)."""
    for path in (cert, key):
        if not Path(path).is_file():
            raise FileNotFoundError(path)
    context = make_ssl_context(cert, key, client_ca)
    runner, bound = await listen(
        shared,
        host,
        port,
        context,
        max_connections=max_connections,
        shutdown_timeout=shutdown_timeout,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    reloaders = [asyncio.create_task(reload_certificates(context, cert, key, CERT_POLL_SECONDS))]
    if config_path is not None:
        reloaders.append(
            asyncio.create_task(reload_config(shared.engine, config_path, CONFIG_POLL_SECONDS))
        )
    log.info("serving on https://%s:%d", host, bound)
    if started is not None:
        started(bound)
    try:
        await stop.wait()
    finally:
        shared.shutting_down = True
        log.info("shutting down: /readyz now 503; draining for %.1f s", drain_delay)
        for task in reloaders:
            task.cancel()
        await asyncio.sleep(drain_delay)
        await runner.cleanup()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)

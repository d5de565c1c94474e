"""The admission server: routes, probes and lifecycle around the pipeline.

``POST /validate`` and ``POST /mutate`` answer AdmissionReviews through one pipeline
(``webhook.admission.pipeline``); ``GET /healthz`` says the process lives; ``GET /readyz`` says
the state is loaded and the server is not shutting down; ``GET /metrics`` is for Prometheus. Bad
input gets a 400 (413 for size, 401 without a client certificate) with a one-line reason;
nothing a client sends produces a 500 or a traceback. TLS is ``webhook.admission.tls``, the
connection cap ``webhook.admission.connections``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import signal
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from webhook.admission.connections import DEFAULT_MAX_CONNECTIONS, Activity, CappedTLSSite, Gate
from webhook.admission.http_input import COULD_NOT, name_server, one_line
from webhook.admission.pipeline import MUTATE, VALIDATE, Admission, LoopLag
from webhook.admission.slow_clients import timed_handlers
from webhook.admission.tls import certificate_expiry, make_ssl_context, reload_certificates
from webhook.config import GuardConfig, load_config
from webhook.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from webhook.metrics import Metrics
from webhook.reload import in_force, reload_config

log = logging.getLogger("gpu-guard.server")

VALIDATE_PATH = "/validate"
MUTATE_PATH = "/mutate"
HEALTHZ_PATH = "/healthz"
READYZ_PATH = "/readyz"
METRICS_PATH = "/metrics"
CERT_POLL_SECONDS = 10.0
CONFIG_POLL_SECONDS = 5.0


@dataclass
class Lifecycle:
    """What the server knows apart from admission: whether to take traffic (``/readyz``) and
    which connections are busy (the connection cap closes idle ones first)."""

    not_ready_reason: Callable[[], str | None] = field(default=lambda: None)
    shutting_down: bool = False
    activity: Activity = field(default_factory=Activity)

    def readiness(self) -> str | None:
        """Why ``/readyz`` answers 503 (its body); None when ready."""
        if self.shutting_down:
            return "shutting down"
        reason = self.not_ready_reason()
        return None if reason is None else f"not ready: {reason}"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def never_500(activity: Activity, handler: Handler) -> Handler:
    """A bug must not become a 500 with a traceback on the API server's critical path.

    A wrapper per route rather than a middleware: aiohttp builds a middleware chain for every
    request, a cost the wrapper does not have. It also tells the connection cap which
    connections are in use (``webhook.admission.connections.Activity``)."""

    @functools.wraps(handler)
    async def guarded(request: web.Request) -> web.StreamResponse:
        activity.begin(request.protocol)  # busy: not to be closed to make room at the cap
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except Exception:
            log.exception("unexpected error serving %s %s", request.method, request.path)
            return one_line(400, COULD_NOT)
        finally:
            activity.end(request.protocol)

    return guarded


def _probes(lifecycle: Lifecycle, metrics: Metrics) -> dict[str, Handler]:
    async def healthz(request: web.Request) -> web.Response:
        return one_line(200, "ok")

    async def readyz(request: web.Request) -> web.Response:
        unready = lifecycle.readiness()
        return one_line(200, "ready") if unready is None else one_line(503, unready)

    async def exposition(request: web.Request) -> web.Response:
        return web.Response(
            body=metrics.exposition(), headers={"Content-Type": METRICS_CONTENT_TYPE}
        )

    return {HEALTHZ_PATH: healthz, READYZ_PATH: readyz, METRICS_PATH: exposition}


def _lag_ticker(lag: LoopLag) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ticking(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(lag.run())
        yield
        task.cancel()

    return ticking


def make_app(admission: Admission, lifecycle: Lifecycle | None = None) -> web.Application:
    lifecycle = lifecycle if lifecycle is not None else Lifecycle()
    # client_max_size is a second line of defence; read_body refuses by Content-Length first.
    # No lingering: after a 413 (or any body left unread) close, rather than read and discard
    # what the client still sends for up to 10 s.
    app = web.Application(
        client_max_size=admission.max_body,
        handler_args={"lingering_time": 0.0},
    )
    app.cleanup_ctx.append(_lag_ticker(admission.lag))
    app.on_response_prepare.append(name_server)
    guard = functools.partial(never_500, lifecycle.activity)
    app.router.add_post(VALIDATE_PATH, guard(admission.route(VALIDATE)))
    app.router.add_post(MUTATE_PATH, guard(admission.route(MUTATE)))
    for path, probe in _probes(lifecycle, admission.metrics).items():
        app.router.add_get(path, guard(probe))
    admission.metrics.ready.set_function(lambda: float(lifecycle.readiness() is None))
    return app


async def listen(
    admission: Admission,
    host: str,
    port: int,
    context: ssl.SSLContext,
    *,
    lifecycle: Lifecycle | None = None,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    shutdown_timeout: float = 10.0,
) -> tuple[web.AppRunner, int]:
    """``make_app`` listening with TLS on host:port behind the connection cap, each connection
    held to ``admission.timeouts``; returns the runner (``cleanup()`` stops it) and the port
    bound (the one chosen when 0 was asked)."""
    lifecycle = lifecycle if lifecycle is not None else Lifecycle()
    app = make_app(admission, lifecycle)
    runner = web.AppRunner(app, shutdown_timeout=shutdown_timeout, access_log=None)
    await runner.setup()
    assert runner.server is not None  # set up above
    metrics = admission.metrics
    timeouts = admission.timeouts

    def cut(reason: str) -> None:
        metrics.connections_cut.labels(reason).inc()

    def rejected(status: int) -> None:
        metrics.rejected.labels(str(status)).inc()

    gate = Gate(
        runner.server,
        context,
        max_connections,
        refused=metrics.connections_refused.inc,
        evicted=metrics.connections_evicted.inc,
        activity=lifecycle.activity,
        handler=timed_handlers(runner.server, timeouts, cut, rejected),
        idle_limit=timeouts.idle,
    )
    metrics.connections_open.set_function(lambda: gate.open)
    try:
        await CappedTLSSite(runner, host, port, gate).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, int(runner.addresses[0][1])


async def serve(
    admission: Admission,
    lifecycle: Lifecycle | None = None,
    *,
    host: str,
    port: int,
    cert: str,
    key: str,
    shutdown_timeout: float = 10.0,
    drain_delay: float = 0.0,
    config_path: str | None = None,
    config_loader: Callable[[str], GuardConfig] = load_config,
    client_ca: str | None = None,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    started: Callable[[int], None] | None = None,
) -> None:
    """Serves until SIGTERM or SIGINT, then turns /readyz to 503, keeps answering for
    ``drain_delay`` seconds (endpoints controllers stop sending traffic), stops listening and
    finishes in-flight requests (up to ``shutdown_timeout``). Past ``max_connections`` open,
    new connections are closed at once (see ``webhook.admission.connections``)."""
    lifecycle = lifecycle if lifecycle is not None else Lifecycle()
    for path in (cert, key):
        if not Path(path).is_file():
            raise FileNotFoundError(path)
    context = make_ssl_context(cert, key, client_ca)
    admission.metrics.watch_exemptions(lambda now: admission.engine.config.exemption_counts(now))
    expiry = admission.metrics.certificate_expiry

    def served() -> None:
        """After each (re)load: the expiry is read from the file at the next scrape, once."""
        read: list[float] = []

        def value() -> float:
            if not read:
                try:
                    read.append(certificate_expiry(cert))
                except (OSError, ValueError):  # replaced mid-write: the next reload reads it
                    return math.nan
            return read[0]

        expiry.set_function(value)

    served()
    runner, bound = await listen(
        admission,
        host,
        port,
        context,
        lifecycle=lifecycle,
        max_connections=max_connections,
        shutdown_timeout=shutdown_timeout,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    reloaders = [
        asyncio.create_task(reload_certificates(context, cert, key, CERT_POLL_SECONDS, served))
    ]
    in_force(admission.engine, admission.metrics, config_path or "the defaults")
    if config_path is not None:
        reloaders.append(
            asyncio.create_task(
                reload_config(
                    admission.engine,
                    config_path,
                    CONFIG_POLL_SECONDS,
                    admission.metrics,
                    config_loader,
                )
            )
        )
    log.info("serving on https://%s:%d", host, bound)
    if started is not None:
        started(bound)
    try:
        await stop.wait()
    finally:
        lifecycle.shutting_down = True
        log.info("shutting down: /readyz now 503; draining for %.1f s", drain_delay)
        for task in reloaders:
            task.cancel()
        await asyncio.sleep(drain_delay)
        await runner.cleanup()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)

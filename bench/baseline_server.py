"""The baseline: the least an aiohttp + orjson admission webhook can do, on the same TLS setup.

``POST /validate`` (and ``/mutate``) parses the AdmissionReview with orjson and answers it
allowed, echoing the uid; ``GET /readyz`` and ``/healthz`` answer ok. Same TLS context as
``gpu-guard serve`` (``webhook.admission.server.make_ssl_context``: TLS 1.2+, forward-secret
AEAD), same
``AppRunner(access_log=None)``, same body limit. What gpu-guard does beyond this (review
validation, the engine, metrics, the decision log line) is what the admission benchmark's ratio
measures.

    python -m bench.baseline_server --tls-cert C --tls-key K [--host 127.0.0.1] [--port 8443]
        [--uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import signal

import orjson
from aiohttp import web

from webhook.admission.pipeline import DEFAULT_MAX_BODY
from webhook.admission.tls import make_ssl_context

API_VERSION = "admission.k8s.io/v1"


async def validate(request: web.Request) -> web.Response:
    review = orjson.loads(await request.read())
    uid = review["request"]["uid"]
    body = orjson.dumps(
        {
            "apiVersion": API_VERSION,
            "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": True},
        }
    )
    return web.Response(body=body, content_type="application/json")


async def ok(request: web.Request) -> web.Response:
    return web.Response(text="ok\n", content_type="text/plain")


def make_app() -> web.Application:
    app = web.Application(client_max_size=DEFAULT_MAX_BODY)
    app.router.add_post("/validate", validate)
    app.router.add_post("/mutate", validate)
    app.router.add_get("/readyz", ok)
    app.router.add_get("/healthz", ok)
    return app


async def serve(host: str, port: int, cert: str, key: str) -> None:
    runner = web.AppRunner(make_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=make_ssl_context(cert, key))
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"baseline serving on https://{host}:{port}", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.baseline_server")
    parser.add_argument("--tls-cert", required=True)
    parser.add_argument("--tls-key", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop's event loop")
    args = parser.parse_args(argv)
    if args.uvloop:
        import uvloop  # type: ignore[import-not-found, unused-ignore]  # optional

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    asyncio.run(serve(args.host, args.port, args.tls_cert, args.tls_key))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

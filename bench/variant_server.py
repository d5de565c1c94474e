"""gpu-guard's own server (``webhook.admission.server.serve``) with one thing changed, to price it.

Not ``gpu-guard serve``: the admission benchmark runs that for its figures. These variants
answer "what would X save?" for the hotspots it reports, measured in the same run:

* ``--policies none``: the engine runs no policy: what the server costs without them (review
  parsing and checks, the engine's bookkeeping, metrics, the answer; with ``--log-level
  WARNING`` no decision log line either);
* ``--load``: ``state`` (the default) is ``load_state``, as ``gpu-guard serve --state`` loads;
  ``objects`` is ``load_state_objects`` with the raw objects kept for the server's lifetime (as
  ``cmd_serve`` did before commit 83319c7); ``stream`` is ``bench.stream_load``'s prototype of
  decoding a JSON List item by item;
* ``--gc-freeze``: ``gc.collect(); gc.freeze()`` once the state is loaded, so the collector's
  full passes no longer walk the state;
* ``--uvloop``: uvloop's event loop.

It logs as ``gpu-guard serve`` does (``webhook.logs.configure``, batched). The first session's
``--tuned`` prototypes of the request-path suggestions (a free slot without a timer, lazy
log arguments, cached metric children, projections once per request, the provider test without
sorting) were removed once each had landed in the product; they are in git history (commit
37316b6 and before) for the tables of bench/RESULTS.md that name them.

    python -m bench.variant_server --state F --tls-cert C --tls-key K --port P
        [--policies all|none] [--load objects|state|stream] [--gc-freeze] [--uvloop]
        [--log-level INFO]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging

from bench.stream_load import stream_load_state
from policies.registry import ALL_POLICIES
from webhook.admission.pipeline import Admission as ServerState
from webhook.admission.server import serve
from webhook.engine import Engine
from webhook.logs import configure as configure_logging
from webhook.state.files import load_state, load_state_objects


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.variant_server")
    parser.add_argument("--state", nargs="+", required=True)
    parser.add_argument("--tls-cert", required=True)
    parser.add_argument("--tls-key", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--policies", choices=("all", "none"), default="all")
    parser.add_argument("--load", choices=("objects", "state", "stream"), default="state")
    parser.add_argument("--gc-freeze", action="store_true")
    parser.add_argument("--uvloop", action="store_true")
    args = parser.parse_args(argv)
    configure_logging(getattr(logging, args.log_level), batched=True)
    raw = None
    if args.load == "stream":
        state = stream_load_state(args.state)
    elif args.load == "state":
        state = load_state(args.state)
    else:
        state, raw = load_state_objects(args.state)
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    engine = Engine(policies=ALL_POLICIES if args.policies == "all" else ())
    shared = ServerState(engine=engine, view=state)
    if args.uvloop:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    asyncio.run(
        serve(
            shared,
            host=args.host,
            port=args.port,
            cert=args.tls_cert,
            key=args.tls_key,
            drain_delay=0.0,
        )
    )
    del raw
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

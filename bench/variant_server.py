"""gpu-guard's own server (``webhook.admission.server.serve``) with one thing changed, to price it.

Not ``gpu-guard serve``: the admission benchmark runs that for its figures. These variants
answer "what would X save?" for the hotspots it reports, measured in the same run:

* ``--policies none``: the engine runs no policy: what the server costs without them (review
  parsing and checks, the engine's bookkeeping, metrics, the answer; with ``--log-level
  WARNING`` no decision log line either);
* ``--no-freeze``: the loaded state left to the collector, as before issue 17 (``gpu-guard serve
  --state`` freezes it: ``webhook.commands.common.load_frozen_state``; this server does the
  same unless told).

The state is loaded with ``load_state``, as ``gpu-guard serve --state`` does, and the server logs
as it does (``webhook.logs.configure``, batched). Prototypes that have landed in the product
were removed; git history has them for the tables of bench/RESULTS.md that name them.

    python -m bench.variant_server --state F --tls-cert C --tls-key K --port P
        [--policies all|none] [--no-freeze] [--log-level INFO]
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from policies.registry import ALL_POLICIES
from webhook.admission.pipeline import Admission
from webhook.admission.server import serve
from webhook.commands.common import load_frozen_state
from webhook.engine import Engine
from webhook.logs import configure as configure_logging
from webhook.state.files import load_state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.variant_server")
    parser.add_argument("--state", nargs="+", required=True)
    parser.add_argument("--tls-cert", required=True)
    parser.add_argument("--tls-key", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--policies", choices=("all", "none"), default="all")
    parser.add_argument("--no-freeze", action="store_true")
    args = parser.parse_args(argv)
    configure_logging(getattr(logging, args.log_level), batched=True)
    state = load_state(args.state) if args.no_freeze else load_frozen_state(args.state)
    engine = Engine(policies=ALL_POLICIES if args.policies == "all" else ())
    admission = Admission(engine=engine, view=state)
    asyncio.run(
        serve(
            admission,
            host=args.host,
            port=args.port,
            cert=args.tls_cert,
            key=args.tls_key,
            drain_delay=0.0,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

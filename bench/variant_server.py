"""gpu-guard's own server (``webhook.server.serve``) with one thing changed, to price it.

Not ``gpu-guard serve``: the admission benchmark runs that for its figures. These variants
answer "what would X save?" for the hotspots it reports, measured in the same run:

* ``--policies none``: the engine runs no policy: what the server costs without them (review
  parsing and checks, the engine's bookkeeping, metrics, the answer; with ``--log-level
  WARNING`` no decision log line either);
* ``--load state``: the state via ``load_state`` (the raw objects freed once projected) instead
  of ``load_state_objects``, whose raw objects ``cli.cmd_serve`` keeps for the server's
  lifetime; ``--load stream``: ``bench.stream_load`` (a JSON List decoded item by item);
* ``--gc-freeze``: ``gc.collect(); gc.freeze()`` once the state is loaded, so the collector's
  full passes no longer walk the state;
* ``--uvloop``: uvloop's event loop;
* ``--tuned``: prototypes of the request-path suggestions, patched in (see ``tune``): the
  concurrency slot taken without a timer when one is free, the decision line's arguments
  not built when it is not logged, the metrics' labelled children cached, each projection
  of a review's object computed once per request, and ``permitted-device-without-hardware``
  asking whether a resource has providers without sorting them. (The decision log line is
  priced by ``--log-level WARNING``, the load by ``--load stream --gc-freeze``.)

    python -m bench.variant_server --state F --tls-cert C --tls-key K --port P
        [--policies all|none] [--load objects|state|stream] [--gc-freeze] [--uvloop]
        [--log-level INFO] [--tuned]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from bench.stream_load import stream_load_state
from policies import (
    device_not_permitted,
    eviction_strategy,
    external_provider_flip,
    gpu_pod_placement,
    objects,
    passthrough_provider,
    permitted_hardware,
    permitted_in_use,
)
from policies.model import AdmissionRequest, Verdict
from policies.registry import ALL_POLICIES
from webhook import server
from webhook.engine import Decision, Engine
from webhook.metrics import Metrics, bounded
from webhook.server import ServerState, serve
from webhook.statefile import load_state, load_state_objects


def fast_admit() -> None:
    """``ServerState.admit``: a free slot is taken at once, without ``asyncio.timeout``'s timer;
    only a full server (or a review already past its deadline: the original sheds it) pays for
    the deadline machinery."""
    original = ServerState.admit

    async def admit(self: ServerState, review: AdmissionRequest, started: float) -> Decision:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_in_flight)
        lag = getattr(getattr(self, "lag", None), "lag", 0.0)
        spent = time.perf_counter() - started + lag
        if self._slots.locked() or spent >= self.deadline:
            return await original(self, review, started)
        await self._slots.acquire()  # returns at once: a slot is free
        try:
            return await self.decide(review)
        finally:
            self._slots.release()

    ServerState.admit = admit  # type: ignore[method-assign]


def lazy_log_arguments() -> None:
    """The decision line's ``printable()`` arguments not computed when the line is not logged
    (the real change: build them under ``log.isEnabledFor``); with ``--log-level WARNING``
    every clean decision skips them."""
    if hasattr(server, "printable"):
        server.printable = str


def cached_metrics() -> None:
    """``Metrics.record_review`` with the labelled children looked up once per label set."""

    def record_review(
        self: Metrics,
        endpoint: str,
        kind: str,
        operation: str,
        allowed: bool,
        seconds: float,
        verdicts: Iterable[Verdict] = (),
    ) -> None:
        kind, operation = bounded(kind, operation)
        cache: dict[tuple[str, str, str, bool], tuple[Any, Any]] = self.__dict__.setdefault(
            "_children", {}
        )
        key = (endpoint, kind, operation, allowed)
        children = cache.get(key)
        if children is None:
            children = (
                self.latency.labels(endpoint),
                self.reviews.labels(endpoint, kind, operation, str(allowed).lower()),
            )
            cache[key] = children
        children[0].observe(seconds)
        children[1].inc()
        for verdict in verdicts:
            self.verdicts.labels(verdict.policy, verdict.action.label, kind, operation).inc()

    Metrics.record_review = record_review  # type: ignore[method-assign]


def memo_projections() -> Callable[[], None]:
    """project_kubevirt/vm/vmi/pod of the same object computed once: each policy module's
    reference is replaced by a wrapper remembering the last few objects it projected (what
    ``request.once`` would do per request in the real change). Returns a function that forgets
    them (for timing loops that send the same object again)."""
    memories: list[list[tuple[object, object]]] = []
    modules = [
        permitted_hardware,
        permitted_in_use,
        external_provider_flip,
        passthrough_provider,
        device_not_permitted,
        eviction_strategy,
        gpu_pod_placement,
    ]
    for name in ("project_kubevirt", "project_vm", "project_vmi", "project_pod"):
        project = getattr(objects, name)
        recent: list[tuple[object, object]] = []
        memories.append(recent)

        def memo(obj: object, project: Any = project, recent: Any = recent) -> object:
            for seen, result in recent:
                if seen is obj:
                    return result
            result = project(obj)
            recent.insert(0, (obj, result))
            del recent[4:]
            return result

        for module in modules:
            if hasattr(module, name):
                setattr(module, name, memo)

    def forget() -> None:
        for recent in memories:
            recent.clear()

    return forget


def provider_test() -> None:
    """``permitted_hardware._advertising_problem`` asks whether any node advertises the
    resource (a set lookup) instead of sorting every provider's name first."""
    original = permitted_hardware._advertising_problem

    def advertising_problem(resource: str, view: Any, expected: str | None) -> str | None:
        if not resource or view._providers.get(resource):
            return None
        return original(resource, view, expected)

    permitted_hardware._advertising_problem = advertising_problem


def tune() -> None:
    fast_admit()
    lazy_log_arguments()
    cached_metrics()
    memo_projections()
    provider_test()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.variant_server")
    parser.add_argument("--state", nargs="+", required=True)
    parser.add_argument("--tls-cert", required=True)
    parser.add_argument("--tls-key", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--policies", choices=("all", "none"), default="all")
    parser.add_argument("--load", choices=("objects", "state", "stream"), default="objects")
    parser.add_argument("--gc-freeze", action="store_true")
    parser.add_argument("--uvloop", action="store_true")
    parser.add_argument("--tuned", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
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
    if args.tuned:
        tune()
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

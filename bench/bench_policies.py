"""Policy cost, in process: each policy's ``check()`` and ``Engine.evaluate`` per request kind,
against the home-lab state and the large compact state, plus the rest of the request path.

For each review of the admission mix (``bench.harness.review_mix``: Node UPDATE, VirtualMachine
CREATE, Pod CREATE, KubeVirt UPDATE, each aimed at objects of the state), parsed once with
``webhook.admission.review.parse_review`` as /validate parses it (objects pruned to their
kinds' schemas; the whole parse, /mutate's, is timed beside it):

* every policy the engine runs for it (``Engine.policies_for``): ``policy.check(request, view)``
  on a fresh copy of the request each call (``AdmissionRequest`` memoises what policies read:
  a shared copy would flatter all but the first policy);
* ``Engine.evaluate`` (all of them, the memo shared as in the server);
* the rest of ``webhook.admission.server.validate``'s work: ``parse_review``,
  ``decision_response`` +
  ``review_body``, ``Metrics.record_review``, the decision log line (the server's format, to
  /dev/null).

Times are per call in microseconds: the median of ``--repeat`` timings of a loop sized to take
about ``--target-ms`` each. The large state is ``bench.synthetic --compact``'s file (written if
missing).

    python -m bench.bench_policies [--large /tmp/gpu-guard-bench/big.json] [--json FILE]
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from bench import harness
from policies.cluster.view import ClusterView
from policies.state.cluster import ClusterState
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.text import printable
from webhook.admission.response import decision_response, review_body
from webhook.admission.review import parse_review
from webhook.engine import Decision, Engine
from webhook.metrics import Metrics
from webhook.state.files import load_state

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def time_per_call(
    call: Callable[[Any], object],
    prepare: Callable[[int], list[Any]] | None = None,
    repeat: int = 7,
    target_ms: float = 40.0,
) -> float:
    """Microseconds per ``call(arg)``: loops sized to take ~``target_ms``, the median of
    ``repeat``. ``prepare(n)`` makes the n arguments of one loop before it is timed (fresh
    requests); without it the argument is the loop index."""

    def args(n: int) -> list[Any]:
        return prepare(n) if prepare is not None else list(range(n))

    def timed(n: int) -> float:
        items = args(n)
        started = time.perf_counter()
        for item in items:
            call(item)
        return time.perf_counter() - started

    n = 1
    while (took := timed(n)) * 1000 < target_ms / 4 and n < 1 << 18:
        n *= 4
    n = max(1, round(n * (target_ms / 1000) / max(took, 1e-9)))
    return harness.median([timed(n) / n * 1e6 for _ in range(repeat)])


def fresh(request: AdmissionRequest) -> Callable[[int], list[AdmissionRequest]]:
    """n copies of ``request``, each with an empty memo, as each review arrives in the server."""

    def make(n: int) -> list[AdmissionRequest]:
        return [replace(request) for _ in range(n)]

    return make


def decision_logger() -> logging.Logger:
    """A logger like the server's (cli.main's format, INFO) writing to /dev/null."""
    logger = logging.getLogger("bench.decision")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.StreamHandler(open("/dev/null", "w"))  # noqa: SIM115 - lives with the run
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logger.handlers[:] = [handler]
    return logger


def log_decision(logger: logging.Logger, request: AdmissionRequest, decision: Decision) -> None:
    """The server's decision line (webhook/admission/server.py validate), same arguments, each
    through
    ``printable`` as the server does."""
    logger.info(
        "decision uid=%s op=%s kind=%s namespace=%s name=%s user=%s allowed=%s verdicts=%s "
        "dry_run=%s ms=%.2f",
        printable(request.uid),
        printable(request.operation),
        printable(request.kind),
        printable(request.namespace or "-"),
        printable(request.name or "-"),
        printable(request.user.username or "-"),
        decision.allowed,
        ",".join(f"{v.policy}:{v.action.label}" for v in decision.verdicts) or "-",
        request.dry_run,
        0.5,
    )


def measure_state(
    label: str, view: ClusterView, reviews: list[harness.Review], repeat: int, target_ms: float
) -> dict[str, Any]:
    engine = Engine()
    metrics = Metrics()
    logger = decision_logger()
    out: dict[str, Any] = {"state": label, "kinds": {}}
    for review in reviews:
        out["kinds"][review.label] = measure_review(
            review, view, engine, metrics, logger, repeat, target_ms
        )
    return out


def measure_review(
    review: harness.Review,
    view: ClusterView,
    engine: Engine,
    metrics: Metrics,
    logger: logging.Logger,
    repeat: int,
    target_ms: float,
) -> dict[str, Any]:
    request = parse_review(review.body, pruned=True)
    decision = engine.evaluate(replace(request), view)
    copies = fresh(request)
    kind: dict[str, Any] = {
        "bytes": len(review.body),
        "verdicts": [v.to_json() for v in decision.verdicts],
        "policies": {},
    }

    def timing(call: Callable[[Any], object], prepare: Any = None) -> float:
        return time_per_call(call, prepare, repeat, target_ms)

    for policy in engine.policies_for(request):
        kind["policies"][policy.id] = timing(partial(_check, policy.check, view), copies)
    kind["evaluate"] = timing(lambda r: engine.evaluate(r, view), copies)
    body = review.body
    kind["parse_review"] = timing(lambda _: parse_review(body, pruned=True))
    kind["parse_review whole"] = timing(lambda _: parse_review(body))
    whole = fresh(parse_review(body))
    kind["evaluate whole"] = timing(lambda r: engine.evaluate(r, view), whole)
    kind["orjson.loads"] = timing(lambda _: orjson.loads(body))
    kind["respond"] = timing(lambda _: review_body(decision_response(request.uid, decision)))
    kind["metrics"] = timing(
        lambda _: metrics.record_review(
            "validate", request.kind, request.operation, decision.allowed, 0.001, []
        )
    )
    kind["log line"] = timing(lambda _: log_decision(logger, request, decision))
    return kind


def _check(
    check: Callable[[AdmissionRequest, ClusterView], object],
    view: ClusterView,
    request: AdmissionRequest,
) -> object:
    return check(request, view)


def _fmt(value: float) -> str:
    return f"{value:,.1f}"


def render(small: dict[str, Any], large: dict[str, Any]) -> str:
    lines = [
        "| request | policy | small µs | large µs | large / small |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for kind, data in small["kinds"].items():
        other = large["kinds"][kind]
        for policy, us in data["policies"].items():
            big = other["policies"].get(policy, float("nan"))
            lines.append(f"| {kind} | `{policy}` | {_fmt(us)} | {_fmt(big)} | {big / us:.2f} |")
        s, b = data["evaluate"], other["evaluate"]
        lines.append(
            f"| {kind} | **Engine.evaluate** | **{_fmt(s)}** | **{_fmt(b)}** | **{b / s:.2f}** |"
        )
    lines += [
        "",
        "| request | bytes | parse_review | (whole) | (orjson.loads) | evaluate | (whole) "
        "| respond | metrics | log line | sum | evaluate share |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for kind, data in large["kinds"].items():
        parts = [data[k] for k in ("parse_review", "evaluate", "respond", "metrics", "log line")]
        total = sum(parts)
        lines.append(
            f"| {kind} | {data['bytes']:,} | {_fmt(data['parse_review'])} | "
            f"({_fmt(data['parse_review whole'])}) | ({_fmt(data['orjson.loads'])}) | "
            f"{_fmt(data['evaluate'])} | ({_fmt(data['evaluate whole'])}) | "
            f"{_fmt(data['respond'])} | {_fmt(data['metrics'])} | {_fmt(data['log line'])} | "
            f"{_fmt(total)} | {data['evaluate'] / total:.0%} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_policies", description=__doc__)
    parser.add_argument("--large", type=Path, default=harness.LARGE_STATE)
    parser.add_argument("--small", type=Path, default=harness.SMALL_STATE)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--target-ms", type=float, default=40.0)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    harness.ensure_large_state(args.large)
    results = []
    for label, path, target in (("small", args.small, "small"), ("large", args.large, "large")):
        started = time.perf_counter()
        state: ClusterState = load_state([str(path)])
        print(f"{label}: {path} loaded in {time.perf_counter() - started:.1f} s: {state.counts()}")
        results.append(
            measure_state(label, state, harness.review_mix(target), args.repeat, args.target_ms)
        )
    for result in results:
        for kind, data in result["kinds"].items():
            if data["verdicts"]:
                print(f"note: {result['state']} {kind} gets verdicts: {data['verdicts']}")
    print(render(results[0], results[1]))
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

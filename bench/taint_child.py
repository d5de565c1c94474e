"""One side of ``bench.bench_taints``: admission timed in process by the code of one checkout.

Run as a script (not ``-m``) with the checkout to import from first, so the same file measures
this tree and an older one: ``python bench/taint_child.py CODE STATE REVIEWS EVALUATIONS``.
It loads STATE (a JSON List) with CODE's ``load_state`` and freezes it (``gc.freeze``, as
the server does), turns DeviceTaintRules on where CODE models them, then evaluates each
AdmissionReview of REVIEWS (``{label: review}``) EVALUATIONS times in a row (``timed``), each
review parsed once as the server does. Prints one JSON object: the p50
per label in milliseconds, the Python lines one evaluation runs, the verdicts, whether rules
act, the load seconds, where the code came from. Imports only what both sides have
(``load_state``, ``parse_review``, ``Engine``).
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

BUDGET_S = 3.0


def _import_from(code: Path) -> None:
    """CODE's packages, not this file's directory nor an editable install, answer imports."""
    sys.path[0] = str(code)


def lines_run(evaluate: Callable[[], object]) -> int:
    """The Python lines one call runs (``sys.settrace``): the work, counted rather than timed,
    so it compares across cluster sizes on a noisy machine. Loops in C (``sorted``) count once."""
    count = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        count += event == "line"
        return tracer

    sys.settrace(tracer)
    try:
        evaluate()
    finally:
        sys.settrace(None)
    return count


def timed(engine: Any, request: Any, state: Any, evaluations: int) -> list[float]:
    """``evaluations`` of one request in a row (at most ``BUDGET_S`` seconds, at least 5), after
    a collection: one request's garbage (a slow rule's device lists) must not be timed as the
    next one's."""
    gc.collect()
    times: list[float] = []
    deadline = time.perf_counter() + BUDGET_S
    while len(times) < evaluations and (len(times) < 5 or time.perf_counter() < deadline):
        begun = time.perf_counter()
        engine.evaluate(request, state)
        times.append(time.perf_counter() - begun)
    return times


def main(argv: list[str]) -> int:
    code, state_path, reviews_path, evaluations = Path(argv[0]).resolve(), argv[1], argv[2], argv[3]
    _import_from(code)
    from webhook.admission.review import parse_review
    from webhook.engine import Engine
    from webhook.state.files import load_state

    imported = Path(sys.modules["webhook"].__file__ or "").resolve()
    if code not in imported.parents:
        raise SystemExit(f"webhook imported from {imported}, not from {code}")
    gc.disable()  # as the server holds a state: loaded with the collector off, then frozen
    started = time.perf_counter()
    state = load_state([state_path])
    load_s = time.perf_counter() - started
    gc.enable()
    gc.freeze()
    follow = getattr(state, "follow_device_taint_rules", None)  # absent before issue 37
    if follow is not None:
        follow(lambda: True)
    raw = json.loads(Path(reviews_path).read_bytes())
    requests = {label: parse_review(json.dumps(review).encode()) for label, review in raw.items()}
    engine = Engine()
    times = {label: timed(engine, r, state, int(evaluations)) for label, r in requests.items()}
    verdicts = {
        label: [f"{v.policy}:{v.action.label}" for v in engine.evaluate(r, state).verdicts]
        for label, r in requests.items()
    }
    lines = {label: lines_run(partial(engine.evaluate, r, state)) for label, r in requests.items()}
    out = {
        "code": str(code),
        "load_s": load_s,
        "rules_act": follow is not None,
        "p50_ms": {label: statistics.median(t) * 1000 for label, t in times.items()},
        "verdicts": verdicts,
        "lines": lines,
    }
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

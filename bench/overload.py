"""Overload: a real ``gpu-guard serve`` driven above its capacity; who waits, who is shed.

The server runs as its own process (``python -m webhook.cli serve --state ...`` over TLS on
127.0.0.1, INFO logging to a file). A short closed-loop probe first measures what it answers per
second; then ``--clients`` client processes (not this one: their CPU is not the server's) send the
recorded validating reviews open-loop at ``--factor`` times that rate, as an API server under a
burst sends them whether or not earlier ones were answered, over up to ``--connections``
connections in all, for ``--duration`` seconds. Each client first opens its connections (one
uncounted review each), as an API server's pool is open in steady state; ``--cold`` opens them
during the load instead, so each first review also waits for its TLS handshake (a reconnect
storm after a restart). An arrival that finds every connection busy is counted and not sent, so
latency is what the server adds, not a queue inside a client; each client also reports how late
its own event loop ran. ``--server-nice`` lowers the server's CPU priority, as a CPU limit
throttles its pod.

Reported: answered in full, answered by failure mode (a warning or denial saying gpu-guard was
"overloaded"), refused (4xx), calls whose connection the server closed unanswered (past its
``--max-connections``: the API server fails those at once by the failurePolicy) and how long
they took, 5xx, errors (client timeouts and the like), latency p50, p99 and max, how many waited
past the deadline plus a margin and past the webhook's 3 s timeout, and the server's
``gpu_guard_admission_overloaded_total`` and ``gpu_guard_connections_refused_total``. The
verdict is "inconclusive" when the clients' own loops ran late by more than half the margin (the
load generator, not the server, was saturated). With ``--record`` the figures are added to the
"Overload" section of bench/RESULTS.md.

    python -m bench.overload [--duration 20] [--factor 2] [--clients 2] [--connections 1024]
                             [--cold] [--server-nice 0] [--record]

Everything talks to 127.0.0.1 only; the run stops by itself (duration + at most ``--drain``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import multiprocessing
import os
import platform
import ssl
import sys
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import orjson

from bench.harness import cpu_seconds
from bench.loadgen import percentile
from bench.soak import (
    DEFAULT_STATE,
    RESULTS,
    ROOT,
    TIMEOUT_SECONDS,
    Recorded,
    Server,
    metric,
    recorded_reviews,
    running_server,
)
from webhook.admission.connections import DEFAULT_MAX_CONNECTIONS
from webhook.admission.pipeline import DEFAULT_DEADLINE, DEFAULT_MAX_IN_FLIGHT

MARGIN = 0.5
"""What the deadline may be exceeded by: TLS, HTTP and the answer itself."""
OVERLOADED = "overloaded"
SECTION = "\n## Overload\n"


@dataclass
class Outcome:
    sent: int = 0
    full: int = 0
    shed: int = 0
    refused: int = 0
    server_errors: int = 0
    cut: list[float] = field(default_factory=list)
    """How long each call lasted whose connection the server closed unanswered (past
    ``--max-connections``): an API server fails such a call by the failurePolicy at once."""
    errors: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    not_sent: int = 0
    """Arrivals dropped in the client because ``--connections`` x 4 were already outstanding."""
    elapsed: float = 0.0
    late_start: float = 0.0
    """How far past the common start the slowest client finished opening its connections."""
    lags: list[float] = field(default_factory=list)
    """How late this client's event loop woke up (every 20 ms): when it is busy, the latencies
    it measures include its own delay, not only the server's."""

    @property
    def answered(self) -> int:
        return self.full + self.shed

    def merge(self, other: Outcome) -> None:
        for name in ("sent", "full", "shed", "refused", "server_errors", "not_sent"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.cut.extend(other.cut)
        self.errors.update(other.errors)
        self.latencies.extend(other.latencies)
        self.lags.extend(other.lags)
        self.elapsed = max(self.elapsed, other.elapsed)
        self.late_start = max(self.late_start, other.late_start)

    def past(self, seconds: float) -> int:
        return sum(1 for v in self.latencies if v > seconds)


async def _one(
    session: aiohttp.ClientSession, base: str, review: Recorded, outcome: Outcome
) -> None:
    started = time.perf_counter()
    try:
        uid, status, body = await review.send(session, base)
        outcome.latencies.append(time.perf_counter() - started)
        if status >= 500:
            outcome.server_errors += 1
        elif status >= 400:
            outcome.refused += 1
        else:
            response = orjson.loads(body)["response"]
            if response.get("uid") != uid:
                outcome.errors["uid not echoed"] += 1
            elif any(OVERLOADED in w for w in response.get("warnings", [])) or (
                OVERLOADED in response.get("status", {}).get("message", "")
            ):
                outcome.shed += 1
            else:
                outcome.full += 1
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
        outcome.cut.append(time.perf_counter() - started)
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError, KeyError) as exc:
        outcome.errors[type(exc).__name__] += 1


def _session(server: Server, connections: int, timeout: float) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(ssl=server.client_ssl(), limit=connections)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout))


async def probe(server: Server, reviews: Sequence[Recorded], seconds: float) -> float:
    """Answers per second with 16 requests always outstanding (closed loop)."""
    outcome = Outcome()
    mix = itertools.cycle(reviews)
    async with _session(server, 16, 10.0) as session:
        ends = time.perf_counter() + seconds

        async def worker() -> None:
            while time.perf_counter() < ends:
                await _one(session, server.base, next(mix), outcome)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(16)))
        return outcome.answered / (time.perf_counter() - started)


@dataclass(frozen=True)
class ClientLoad:
    """What one client process offers (sent to it whole: it is pickled across the spawn)."""

    base: str
    ca: str
    reviews: Sequence[Recorded]
    rate: float
    duration: float
    connections: int
    drain: float
    start_at: float
    warm: bool


async def overload(load: ClientLoad) -> Outcome:
    """Open loop: arrivals at ``rate`` per second whatever is outstanding. An arrival that finds
    all ``connections`` busy is not sent (counted): latency is then what the server and the
    network add, not a queue inside this client.

    ``warm`` opens every connection first (one request each, not counted), as an API server's
    pool is open in steady state; without it the first request on each connection also waits
    for its TLS handshake behind every other one (a reconnect storm after a restart)."""
    outcome = Outcome()
    mix = itertools.cycle(load.reviews)
    tasks: set[asyncio.Task[None]] = set()
    connector = aiohttp.TCPConnector(
        ssl=ssl.create_default_context(cafile=load.ca), limit=load.connections
    )
    timeout = aiohttp.ClientTimeout(total=load.drain)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        if load.warm:
            ignored = Outcome()
            await asyncio.gather(
                *(_one(session, load.base, next(mix), ignored) for _ in range(load.connections))
            )
            outcome.late_start = max(0.0, time.time() - load.start_at)
        await asyncio.sleep(max(0.0, load.start_at - time.time()))
        started = time.perf_counter()
        ticker = asyncio.create_task(_lag(outcome))
        for i in range(int(load.rate * load.duration)):
            delay = started + i / load.rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if len(tasks) >= load.connections:
                outcome.not_sent += 1
                continue
            task = asyncio.create_task(_one(session, load.base, next(mix), outcome))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            outcome.sent += 1
        ticker.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=load.drain + 1)
        outcome.elapsed = time.perf_counter() - started
    return outcome


async def _lag(outcome: Outcome, every: float = 0.02) -> None:
    while True:
        before = time.perf_counter()
        await asyncio.sleep(every)
        outcome.lags.append(time.perf_counter() - before - every)


def _client_process(load: ClientLoad) -> Outcome:
    return asyncio.run(overload(load))


def drive(
    server: Server,
    reviews: list[Recorded],
    rate: float,
    duration: float,
    clients: int,
    connections: int,
    drain: float,
    warm: bool,
) -> Outcome:
    """``clients`` processes, each offering rate/clients over connections/clients."""
    # every process has imported (and, warm, opened its connections: a few ms each) by then
    start_at = time.time() + 2.0 + (0.005 * connections if warm else 0.0)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=clients, mp_context=context) as pool:
        load = ClientLoad(
            server.base,
            str(server.ca),
            reviews,
            rate / clients,
            duration,
            max(1, connections // clients),
            drain,
            start_at,
            warm,
        )
        futures = [pool.submit(_client_process, load) for _ in range(clients)]
        total = Outcome()
        for future in futures:
            total.merge(future.result(timeout=duration + drain + 60))
    return total


async def scrape(server: Server) -> str:
    async with _session(server, 1, 10.0) as session, session.get(server.base + "/metrics") as r:
        return await r.text()


def _ms(values: Sequence[float], quantiles: Sequence[int]) -> str:
    if not values:
        return "-"
    shown = [percentile(values, q) for q in quantiles] + [max(values)]
    return " / ".join(f"{v * 1000:.0f}" for v in shown)


@dataclass
class Report:
    capacity: float
    rate: float
    duration: float
    connections: int
    clients: int
    nice: int
    warm: bool
    outcome: Outcome
    overloaded_metric: float
    refused_metric: float
    reviews_metric: float
    server_cpu: float

    def rows(self) -> list[tuple[str, str]]:
        o = self.outcome
        lat = o.latencies
        errors = ", ".join(f"{k}: {v}" for k, v in o.errors.most_common()) or "none"
        ms = (
            "-"
            if not lat
            else " / ".join(
                f"{v * 1000:.0f}" for v in (percentile(lat, 50), percentile(lat, 99), max(lat))
            )
        )
        limit = DEFAULT_DEADLINE + MARGIN
        return [
            ("capacity, closed loop with 16 outstanding (answers/s)", f"{self.capacity:.0f}"),
            ("offered rate, open loop (/s)", f"{self.rate:.0f} for {self.duration:g} s"),
            ("server niceness", str(self.nice)),
            ("client processes / connections in all", f"{self.clients} / {self.connections}"),
            (
                "connections",
                "opened before the load (steady state)"
                if self.warm
                else "opened by the load (reconnect storm: TLS handshakes counted)",
            ),
            ("warm-up overran the common start by (s)", f"{o.late_start:.1f}"),
            ("sent", str(o.sent)),
            ("not sent (every connection busy)", str(o.not_sent)),
            ("answered in full", str(o.full)),
            ('answered by failure mode ("overloaded" warning)', str(o.shed)),
            ("refused 4xx", str(o.refused)),
            ("connection closed unanswered (fail fast)", str(len(o.cut))),
            ("  time to the close p50 / p99 / max (ms)", _ms(o.cut, (50, 99))),
            ("5xx", str(o.server_errors)),
            ("errors", f"{sum(o.errors.values())} ({errors})"),
            ("achieved answers/s", f"{o.answered / o.elapsed:.0f}" if o.elapsed else "-"),
            ("latency p50 / p99 / max (ms)", ms),
            (f"waited past deadline + margin ({limit:g} s)", str(o.past(limit))),
            (
                f"waited past the webhook timeout ({TIMEOUT_SECONDS:g} s)",
                str(o.past(TIMEOUT_SECONDS)),
            ),
            ("client event-loop lag p99 / max (ms)", _ms(o.lags, (99,))),
            ("gpu_guard_admission_overloaded_total", f"{self.overloaded_metric:.0f}"),
            ("gpu_guard_connections_refused_total", f"{self.refused_metric:.0f}"),
            ("gpu_guard_admission_reviews_total", f"{self.reviews_metric:.0f}"),
            ("server CPU during the overload (s)", f"{self.server_cpu:.1f}"),
        ]

    @property
    def client_saturated(self) -> bool:
        """The clients' own loops ran late by a good part of the margin: what they measured is
        their queue as much as the server's, and the server had CPU to spare."""
        lags = self.outcome.lags
        return bool(lags) and percentile(lags, 99) > MARGIN / 2

    @property
    def verdict(self) -> str:
        if self.bounded:
            return "bounded"
        if self.client_saturated and self.outcome.server_errors == 0:
            return "inconclusive: the clients were saturated (their event-loop lag p99 > 0.25 s)"
        return "**not bounded**: answers waited past the deadline"

    @property
    def bounded(self) -> bool:
        """Nothing waited past the deadline plus the margin, and no 5xx."""
        o = self.outcome
        return o.past(DEFAULT_DEADLINE + MARGIN) == 0 and o.server_errors == 0

    def text(self) -> str:
        width = max(len(k) for k, _ in self.rows())
        verdict = self.verdict.replace("**", "")
        return "\n".join([*(f"{k:<{width}}  {v}" for k, v in self.rows()), f"verdict: {verdict}"])

    def markdown(self, state: Path, argv: Sequence[str], first: bool) -> str:
        when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        shown = state.relative_to(ROOT) if state.is_relative_to(ROOT) else state
        rows = "\n".join(f"| {k} | {v} |" for k, v in self.rows())
        heading = (
            f"{SECTION}\n"
            f"`gpu-guard serve --state {shown}` as its own process (TLS, INFO logging to a file; "
            f"max in flight {DEFAULT_MAX_IN_FLIGHT}, deadline {DEFAULT_DEADLINE:g} s, at most "
            f"{DEFAULT_MAX_CONNECTIONS} connections), driven by "
            f"client processes on 127.0.0.1 with the recorded validating reviews. Machine: "
            f"{os.cpu_count()} cores (shared), Python {platform.python_version()}. Limit: nothing "
            f"may wait past the deadline + {MARGIN:g} s; no 5xx.\n"
            if first
            else ""
        )
        verdict = self.verdict
        return (
            f"{heading}\n### `python -m bench.overload {' '.join(argv)}` ({when}): {verdict}\n\n"
            f"| measure | value |\n|---|---|\n{rows}\n"
        )


def into_section(text: str, run: str) -> str:
    """``text`` with ``run`` at the end of its Overload section (which ``run`` opens when the
    section is missing), so that runs stay together whatever follows them in the file."""
    if SECTION not in text:
        return text + run
    start = text.index(SECTION) + len(SECTION)
    end = text.find("\n## ", start)
    if end < 0:
        return text.rstrip("\n") + "\n" + run
    return text[:end].rstrip("\n") + "\n" + run + text[end:]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=20.0, metavar="SECONDS")
    parser.add_argument("--factor", type=float, default=2.0, help="offered rate / capacity")
    parser.add_argument(
        "--rate", type=float, default=None, help="offered rate (overrides --factor)"
    )
    parser.add_argument("--connections", type=int, default=1024, help="in all clients")
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument("--probe", type=float, default=3.0, metavar="SECONDS")
    parser.add_argument(
        "--server-nice",
        type=int,
        default=0,
        metavar="N",
        help="lower the server's CPU priority (0-19), as a CPU limit throttles its pod: the "
        "server, not the clients, is then what runs out of CPU",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="open connections during the load, not before (the first request on each also "
        "waits for its TLS handshake: a reconnect storm after a restart)",
    )
    parser.add_argument("--drain", type=float, default=15.0, metavar="SECONDS")
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE)
    parser.add_argument(
        "--record", action="store_true", help=f"add the run to 'Overload' in {RESULTS}"
    )
    args = parser.parse_args(argv)
    if not 0 < args.duration <= 600 or not 0 < args.connections <= 4000:
        parser.error("--duration must be in (0, 600] and --connections in (0, 4000]")
    if not 0 < args.clients <= 8:
        parser.error("--clients must be in (0, 8]")
    reviews = [r for r in recorded_reviews() if r.path == "/validate"]
    with running_server(args.state) as server:
        if args.server_nice:
            os.setpriority(os.PRIO_PROCESS, server.pid, args.server_nice)
        capacity = asyncio.run(probe(server, reviews, args.probe))
        rate = args.rate or capacity * args.factor
        print(
            f"pid {server.pid}: capacity {capacity:.0f}/s; offering {rate:.0f}/s for "
            f"{args.duration:g} s from {args.clients} processes over up to {args.connections} "
            "connections",
            file=sys.stderr,
        )
        before = asyncio.run(scrape(server))
        cpu = cpu_seconds(server.pid)
        outcome = drive(
            server,
            reviews,
            rate,
            args.duration,
            args.clients,
            args.connections,
            args.drain,
            not args.cold,
        )
        cpu = cpu_seconds(server.pid) - cpu
        after = asyncio.run(scrape(server))
    name = "gpu_guard_admission_overloaded_total"
    report = Report(
        capacity,
        rate,
        args.duration,
        args.connections,
        args.clients,
        args.server_nice,
        not args.cold,
        outcome,
        metric(after, name) - metric(before, name),
        metric(after, "gpu_guard_connections_refused_total")
        - metric(before, "gpu_guard_connections_refused_total"),
        metric(after, "gpu_guard_admission_reviews_total")
        - metric(before, "gpu_guard_admission_reviews_total"),
        cpu,
    )
    print(report.text())
    if args.record:
        text = RESULTS.read_text() if RESULTS.exists() else ""
        run = report.markdown(
            args.state, sys.argv[1:] if argv is None else argv, SECTION not in text
        )
        RESULTS.write_text(into_section(text, run))
        print(f"recorded in {RESULTS}", file=sys.stderr)
    return 0 if report.bounded else 1


if __name__ == "__main__":
    sys.exit(main())

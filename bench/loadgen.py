"""The load generator when wrk is not installed: aiohttp, keep-alive, N connections.

Run it in its own process (``bench.harness`` pins it to the other core). Closed loop by default:
N workers, one keep-alive connection each, each sending its next request as soon as the last
is answered, rotating through the bodies (``PATH<TAB>BODY`` lines, as for wrk_rotate.lua).
With ``--rate R`` it is open loop: requests start at R per second whatever the answers, over
at most N connections (a request that finds no free connection waits for one, and its latency
counts from when it was due: no coordinated omission).

Prints one JSON line: requests, seconds, errors, non_2xx, requests/s, latency mean, p50, p90,
p99, max in milliseconds. Everything goes to the URL given (127.0.0.1 in the benchmarks), and
the run ends after ``--duration`` seconds plus at most ``--drain`` for answers in flight.

    python -m bench.loadgen https://127.0.0.1:PORT/ --bodies FILE --cafile CA \
        [--connections 32] [--duration 10] [--rate 0]

Python on one core is slower than wrk: against a fast server it can be the bottleneck, so
compare servers under the same generator only (the benchmark does).
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp
import orjson


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``th percentile (NaN for no values); the bench's one definition."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


class Stats:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors = 0
        self.non_2xx = 0


async def _send(
    session: aiohttp.ClientSession, url: str, body: bytes, stats: Stats, due: float
) -> None:
    try:
        async with session.post(
            url, data=body, headers={"Content-Type": "application/json"}
        ) as response:
            await response.read()
            if not 200 <= response.status < 300:
                stats.non_2xx += 1
    except (TimeoutError, aiohttp.ClientError, OSError):
        stats.errors += 1
        return
    stats.latencies.append(time.perf_counter() - due)


async def run(
    base: str,
    bodies: list[tuple[str, bytes]],
    context: ssl.SSLContext,
    connections: int,
    duration: float,
    rate: float,
    drain: float,
) -> dict[str, float]:
    stats = Stats()
    connector = aiohttp.TCPConnector(limit=connections, ssl=context, force_close=False)
    timeout = aiohttp.ClientTimeout(total=10)
    urls = [(base.rstrip("/") + path, body) for path, body in bodies]
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        started = time.perf_counter()
        end = started + duration
        if rate <= 0:

            async def worker(offset: int) -> None:
                i = offset
                while time.perf_counter() < end:
                    url, body = urls[i % len(urls)]
                    i += 1
                    await _send(session, url, body, stats, time.perf_counter())

            await asyncio.gather(*(worker(n) for n in range(connections)))
        else:
            tasks: set[asyncio.Task[None]] = set()
            interval = 1.0 / rate
            n = 0
            while True:
                due = started + n * interval
                if due >= end:
                    break
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                url, body = urls[n % len(urls)]
                task = asyncio.create_task(_send(session, url, body, stats, due))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                n += 1
            if tasks:
                await asyncio.wait(tasks, timeout=drain)
        elapsed = time.perf_counter() - started
    ordered = sorted(stats.latencies)
    ms = 1000.0
    return {
        "requests": len(ordered),
        "seconds": round(elapsed, 3),
        "errors": stats.errors,
        "non_2xx": stats.non_2xx,
        "rps": round(len(ordered) / elapsed, 1) if elapsed else 0.0,
        "mean_ms": round(sum(ordered) / len(ordered) * ms, 3) if ordered else float("nan"),
        "p50_ms": round(percentile(ordered, 50) * ms, 3),
        "p90_ms": round(percentile(ordered, 90) * ms, 3),
        "p99_ms": round(percentile(ordered, 99) * ms, 3),
        "max_ms": round(ordered[-1] * ms, 3) if ordered else float("nan"),
    }


def read_bodies(path: Path) -> list[tuple[str, bytes]]:
    out = []
    for line in path.read_bytes().splitlines():
        if line:
            route, _, body = line.partition(b"\t")
            out.append((route.decode(), body))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen", description=__doc__)
    parser.add_argument("url", help="base URL, e.g. https://127.0.0.1:8443/")
    parser.add_argument("--bodies", type=Path, required=True)
    parser.add_argument("--cafile", help="CA of the server certificate (else: not verified)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=0.0, help="requests/s, open loop; 0: closed")
    parser.add_argument("--drain", type=float, default=5.0)
    args = parser.parse_args(argv)
    if not args.url.startswith(("https://127.", "https://localhost", "https://[::1]")):
        parser.error("the load generator only targets the loopback address")
    bodies = read_bodies(args.bodies)
    if not bodies:
        parser.error(f"no bodies in {args.bodies}")
    if args.cafile:
        context = ssl.create_default_context(cafile=args.cafile)
    else:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    result = asyncio.run(
        run(args.url, bodies, context, args.connections, args.duration, args.rate, args.drain)
    )
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

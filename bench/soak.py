"""Soak: a real ``gpu-guard serve`` at a fixed request rate for a long time; memory and fds flat.

The server runs as its own process (``python -m webhook.cli serve --state ...`` over TLS on
127.0.0.1, a throwaway CA); this process is the client: the recorded AdmissionReviews from
``tests/fixtures/admission-reviews`` in a round-robin mix (validating ones to /validate,
mutating ones to /mutate, each with a fresh uid) at ``--rate`` per second over a few keep-alive
connections, as an API server sends them. Every ``--sample-every`` seconds it reads the server's
``VmRSS`` (/proc/<pid>/status) and open file descriptors (/proc/<pid>/fd).

Expected: zero errors (anything but a 200 with a well-formed AdmissionReview echoing the uid),
RSS at the end within 10% of RSS at the end of the warm-up, and the fd count flat after warm-up.
Prints a table; with ``--record`` appends a "Soak" section to bench/RESULTS.md.

    python -m bench.soak [--duration 600] [--rate 200] [--record]

Everything talks to 127.0.0.1 only; the run stops by itself after ``--duration`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import platform
import re
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.harness import cpu_seconds, gpu_guard_argv, make_certs, proc_status, stop_process
from bench.loadgen import percentile
from tests import FIXTURES

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STATE = ROOT / "examples" / "homelab" / "cluster.yaml"
RESULTS = ROOT / "bench" / "RESULTS.md"
SERVING = re.compile(rb"serving on https://127\.0\.0\.1:(\d+)")
TIMEOUT_SECONDS = 3.0
"""The API server's timeoutSeconds for gpu-guard's webhooks: an answer later than this is lost."""


# --- the reviews ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    """One recorded review: the endpoint it was sent to and its parsed body."""

    path: str
    review: dict[str, Any]
    name: str

    def body(self, uid: str) -> bytes:
        review = dict(self.review)
        review["request"] = {**self.review["request"], "uid": uid}
        return orjson.dumps(review)

    async def send(self, session: aiohttp.ClientSession, base: str) -> tuple[str, int, bytes]:
        """POSTs the review with a fresh uid: the uid, the status and the body that came back."""
        uid = str(uuid.uuid4())
        async with session.post(
            base + self.path, data=self.body(uid), headers={"Content-Type": "application/json"}
        ) as reply:
            return uid, reply.status, await reply.read()


def recorded_reviews(directory: Path | None = None) -> list[Recorded]:
    """Every recorded AdmissionReview, in file order (the order the API server sent them)."""
    where = (directory or FIXTURES) / "admission-reviews"
    files = sorted(where.glob("*.json"))
    if not files:
        raise SystemExit(f"no recorded reviews in {where}")
    return [
        Recorded(
            "/mutate" if "-mutate-" in p.name else "/validate", orjson.loads(p.read_bytes()), p.name
        )
        for p in files
    ]


def well_formed(body: bytes, uid: str) -> str | None:
    """None when ``body`` is an AdmissionReview v1 answer for ``uid``, else what is wrong."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "not JSON"
    if not isinstance(answer, dict) or answer.get("kind") != "AdmissionReview":
        return "not an AdmissionReview"
    response = answer.get("response")
    if not isinstance(response, dict) or response.get("uid") != uid:
        return "uid not echoed"
    if not isinstance(response.get("allowed"), bool):
        return "no allowed"
    return None


# --- the server process -----------------------------------------------------------------------


@dataclass
class Server:
    """``gpu-guard serve`` as a child process on 127.0.0.1, its log in a file."""

    process: subprocess.Popen[bytes]
    port: int
    workdir: Path
    ca: Path
    log: Path

    @property
    def base(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def client_ssl(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))

    def stop(self, timeout: float = 15.0) -> int | None:
        return stop_process(self.process, timeout)


def start_server(
    workdir: Path, state: Path, extra: Sequence[str] = (), log_level: str = "INFO"
) -> Server:
    """A fresh CA and serving certificate for 127.0.0.1, then the server on an ephemeral port;
    returns when it logs the port it listens on (within 60 s, else raises)."""
    certs = make_certs(workdir)
    log = workdir / "server.log"
    argv = [*gpu_guard_argv(state, 0, certs, log_level=log_level, audit=True), *extra]
    with log.open("wb") as sink:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (match := SERVING.search(log.read_bytes())) is not None:
            return Server(process, int(match[1]), workdir, certs.ca, log)
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}:\n{log.read_text()}")
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"the server did not listen within 60 s:\n{log.read_text()}")


@contextlib.contextmanager
def running_server(
    state: Path, extra: Sequence[str] = (), log_level: str = "INFO"
) -> Iterator[Server]:
    with tempfile.TemporaryDirectory(prefix="gpu-guard-bench-") as tmp:
        server = start_server(Path(tmp), state, extra, log_level)
        try:
            yield server
        finally:
            server.stop()


def rss_kib(pid: int) -> int:
    return proc_status(pid)["VmRSS"]


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def metric(exposition: str, name: str) -> float:
    """The sum of every sample of ``name`` in a Prometheus exposition (0 when absent)."""
    total = 0.0
    for line in exposition.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
    return total


# --- the soak ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    at: float
    rss_kib: int
    fds: int
    cpu: float
    sent: int


@dataclass
class Soak:
    duration: float
    rate: float
    warmup: float
    connections: int
    sent: int = 0
    answered: int = 0
    late: int = 0
    """Answered, but after the webhook's timeoutSeconds: the API server would have given up."""
    errors: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    behind: int = 0
    """Requests that could not be sent on schedule because every in-flight slot was taken."""
    elapsed: float = 0.0
    reviews_metric: float = 0.0
    log_bytes: int = 0

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def after_warmup(self) -> list[Sample]:
        return [s for s in self.samples if s.at >= self.warmup] or self.samples[-1:]

    @property
    def rss_growth(self) -> float:
        later = self.after_warmup()
        return (later[-1].rss_kib - later[0].rss_kib) / later[0].rss_kib

    @property
    def fd_spread(self) -> int:
        later = self.after_warmup()
        return max(s.fds for s in later) - min(s.fds for s in later)

    @property
    def fd_bound(self) -> int:
        """What a server without a leak holds: its fds before the run (listener, log, epoll,
        ...), one per client connection, and two of slack."""
        return self.samples[0].fds + self.connections + 2

    @property
    def fds_flat(self) -> bool:
        return max(s.fds for s in self.after_warmup()) <= self.fd_bound

    @property
    def passed(self) -> bool:
        return (
            self.error_count == 0
            and abs(self.rss_growth) <= 0.10
            and self.fds_flat
            and self.late == 0
        )


async def _send(session: aiohttp.ClientSession, base: str, recorded: Recorded, soak: Soak) -> None:
    started = time.perf_counter()
    try:
        uid, status, body = await recorded.send(session, base)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        soak.errors[type(exc).__name__] += 1
        return
    elapsed = time.perf_counter() - started
    if status != 200:
        soak.errors[f"HTTP {status}"] += 1
        return
    problem = well_formed(body, uid)
    if problem is not None:
        soak.errors[problem] += 1
        return
    soak.answered += 1
    soak.latencies.append(elapsed)
    if elapsed > TIMEOUT_SECONDS:
        soak.late += 1


async def _sample(server: Server, soak: Soak, every: float, started: float) -> None:
    while True:
        soak.samples.append(
            Sample(
                time.monotonic() - started,
                rss_kib(server.pid),
                open_fds(server.pid),
                cpu_seconds(server.pid),
                soak.sent,
            )
        )
        await asyncio.sleep(every)


async def run_soak(server: Server, reviews: Sequence[Recorded], soak: Soak, every: float) -> None:
    connector = aiohttp.TCPConnector(ssl=server.client_ssl(), limit=soak.connections)
    timeout = aiohttp.ClientTimeout(total=10.0)
    slots = asyncio.Semaphore(soak.connections * 8)
    total = int(soak.duration * soak.rate)
    mix = itertools.cycle(reviews)
    tasks: set[asyncio.Task[None]] = set()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        started = time.monotonic()
        sampler = asyncio.create_task(_sample(server, soak, every, started))
        try:
            for i in range(total):
                due = started + i / soak.rate
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if slots.locked():
                    soak.behind += 1
                await slots.acquire()
                task = asyncio.create_task(_send(session, server.base, next(mix), soak))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                task.add_done_callback(lambda _: slots.release())
                soak.sent += 1
            if tasks:
                await asyncio.wait(tasks, timeout=15)
            soak.elapsed = time.monotonic() - started
            soak.samples.append(
                Sample(
                    soak.elapsed,
                    rss_kib(server.pid),
                    open_fds(server.pid),
                    cpu_seconds(server.pid),
                    soak.sent,
                )
            )
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        async with session.get(server.base + "/metrics") as reply:
            soak.reviews_metric = metric(await reply.text(), "gpu_guard_admission_reviews_total")


# --- the report -------------------------------------------------------------------------------


def _mib(kib: int) -> str:
    return f"{kib / 1024:.1f}"


def table(soak: Soak, every_nth: int = 1) -> str:
    rows = ["| t (s) | sent | RSS (MiB) | fds | server CPU (s) |", "|---:|---:|---:|---:|---:|"]
    for i, s in enumerate(soak.samples):
        if i % every_nth == 0 or i == len(soak.samples) - 1:
            rows.append(f"| {s.at:.0f} | {s.sent} | {_mib(s.rss_kib)} | {s.fds} | {s.cpu:.1f} |")
    return "\n".join(rows)


def summary(soak: Soak) -> list[tuple[str, str]]:
    later = soak.after_warmup()
    cpu = soak.samples[-1].cpu - soak.samples[0].cpu if soak.samples else 0.0
    errors = ", ".join(f"{k}: {v}" for k, v in soak.errors.most_common()) or "none"
    return [
        ("duration (s)", f"{soak.elapsed:.1f}"),
        ("target rate (/s)", f"{soak.rate:g}"),
        ("achieved rate (/s)", f"{soak.sent / soak.elapsed:.1f}" if soak.elapsed else "-"),
        ("requests sent", str(soak.sent)),
        ("answered 200, well-formed", str(soak.answered)),
        ("errors", f"{soak.error_count} ({errors})"),
        (f"answered after {TIMEOUT_SECONDS:g} s", str(soak.late)),
        ("sent late (client saturated)", str(soak.behind)),
        ("server's reviews counter", f"{soak.reviews_metric:.0f}"),
        ("latency p50 / p99 / max (ms)", _latency(soak.latencies)),
        ("server CPU over the run (s)", f"{cpu:.1f}"),
        (
            f"RSS start / warm-up end ({soak.warmup:.0f} s) / end (MiB)",
            f"{_mib(soak.samples[0].rss_kib)} / {_mib(later[0].rss_kib)} / "
            f"{_mib(later[-1].rss_kib)}",
        ),
        ("RSS growth after warm-up", f"{soak.rss_growth * 100:+.2f}% (limit ±10%)"),
        (
            "RSS min / max after warm-up (MiB)",
            f"{_mib(min(s.rss_kib for s in later))} / {_mib(max(s.rss_kib for s in later))}",
        ),
        (
            "fds start / warm-up end / end / max after warm-up",
            f"{soak.samples[0].fds} / {later[0].fds} / {later[-1].fds} / "
            f"{max(s.fds for s in later)} (bound {soak.fd_bound}: start + "
            f"{soak.connections} connections + 2)",
        ),
        ("verdict", "PASS" if soak.passed else "FAIL"),
    ]


def _latency(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return " / ".join(
        f"{v * 1000:.1f}" for v in (percentile(values, 50), percentile(values, 99), max(values))
    )


def render(soak: Soak) -> str:
    width = max(len(k) for k, _ in summary(soak))
    lines = [f"{k:<{width}}  {v}" for k, v in summary(soak)]
    return "\n".join(lines)


def markdown(soak: Soak, state: Path, reviews: int) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    shown = state.relative_to(ROOT) if state.is_relative_to(ROOT) else state
    nth = max(1, len(soak.samples) // 20)
    rows = "\n".join(f"| {k} | {v} |" for k, v in summary(soak))
    return (
        f"\n## Soak\n\n"
        f"`python -m bench.soak --duration {soak.duration:g} --rate {soak.rate:g}` on {when}: "
        f"`gpu-guard serve --state {shown}` "
        f"as its own process (TLS, INFO logging to a file), the {reviews} recorded reviews "
        f"round-robin over {soak.connections} keep-alive connections from a second process on "
        f"127.0.0.1. Machine: {os.cpu_count()} cores (shared), Python "
        f"{platform.python_version()}. Samples every few seconds from /proc/<pid>.\n\n"
        f"| measure | value |\n|---|---|\n{rows}\n\n"
        f"Server samples (every {nth}th):\n\n{table(soak, nth)}\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=600.0, metavar="SECONDS")
    parser.add_argument("--rate", type=float, default=200.0, metavar="PER_SECOND")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--sample-every", type=float, default=5.0, metavar="SECONDS")
    parser.add_argument(
        "--warmup",
        type=float,
        default=None,
        metavar="SECONDS",
        help="RSS and fds are compared from the end of the warm-up (default: min(60, 1/5 of "
        "the duration))",
    )
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE)
    parser.add_argument(
        "--record", action="store_true", help=f"append a 'Soak' section to {RESULTS}"
    )
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.duration > 24 * 3600 or args.rate <= 0 or args.rate > 5000:
        parser.error("--duration must be in (0, 86400] and --rate in (0, 5000]")
    warmup = args.warmup if args.warmup is not None else min(60.0, args.duration / 5)
    reviews = recorded_reviews()
    soak = Soak(args.duration, args.rate, warmup, args.connections)
    with running_server(args.state) as server:
        print(
            f"soaking pid {server.pid} at {server.base}: {args.rate:g}/s for {args.duration:g} s "
            f"({len(reviews)} recorded reviews round-robin)",
            file=sys.stderr,
        )
        asyncio.run(run_soak(server, reviews, soak, args.sample_every))
        soak.log_bytes = server.log.stat().st_size
    print(table(soak, max(1, len(soak.samples) // 30)))
    print()
    print(render(soak))
    if args.record:
        with RESULTS.open("a") as out:
            out.write(markdown(soak, args.state, len(reviews)))
        print(f"\nappended to {RESULTS}", file=sys.stderr)
    return 0 if soak.passed else 1


if __name__ == "__main__":
    sys.exit(main())

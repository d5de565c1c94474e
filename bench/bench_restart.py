"""Time from a restarted API server answering again to gpu-guard's first fresh deny.

The restart is the one tests/fixtures/apiserver-restart recorded from kube-apiserver v1.36,
played by tests/kubeapi.py's double in this process: connections refused for the outage (the
port closed), then for ``--throttle`` seconds custom resources answered 429 "storage is
(re)initializing" with Retry-After: 1, /readyz 500 for a second, and watches without a
resourceVersion answered with an ERROR event; bookmarks only as kube-apiserver's watch cache
sends them (2 s before a watch's deadline, and once a minute).

The guard runs in a process of its own (this module with ``--guard CODE``), importing
``webhook`` from the checkout ``CODE``, so the code of another branch (``--before``, e.g. main)
is measured the same way in the same run. It holds a LiveState with ``stale_after=0`` (any kind
out of sync downgrades a deny) and evaluates switching a node with a CUDA pod to vm-passthrough
every 10 ms, printing each change between deny, warn and allow with its CLOCK_MONOTONIC time,
which both processes share. Reported per outage: seconds from the port listening again to the
first deny (a deny only the whole view in sync allows).

    python -m bench.bench_restart                       # 20 s and 60 s outages, this checkout
    python -m bench.bench_restart --before /work/main   # and main's code, same run
    python -m bench.bench_restart --outages 5 --json /tmp/restart.json

Wall-clock figures belong here, never in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLL = 0.01


@dataclass
class Run:
    code: str
    outage_s: float
    throttle_s: float
    recovery_s: float
    """From the port listening again to the first deny."""
    log_lines: int
    """Lines gpu-guard.live logged at INFO and up, from the port closing to 5 s past the deny."""


# --- the guard's side (a process of its own) ------------------------------------------------


async def guard(kubeconfig: str) -> None:
    from tests.test_live import SWITCH  # the checkout's own: relabel omen1 to vm-passthrough
    from webhook.engine import Engine
    from webhook.state.live import LiveState, connect

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    api = await connect(kubeconfig)
    live = LiveState(api, stale_after=0)  # the code of any branch: its own defaults otherwise
    engine = Engine()
    await live.start()
    await live.wait_synced(60)
    print("ready", time.monotonic(), flush=True)
    said = ""
    stdin = asyncio.create_task(asyncio.to_thread(sys.stdin.read))
    while not stdin.done():
        decision = engine.evaluate(SWITCH, live.state, live)
        now = "allow" if not decision.verdicts else "warn" if decision.allowed else "deny"
        if now != said:
            print(now, time.monotonic(), flush=True)
            said = now
        await asyncio.sleep(POLL)
    await live.stop()
    await api.close()


# --- the API server's side --------------------------------------------------------------------


async def measure(
    code: Path, outage: float, throttle: float, kubeconfig: Path, double: object
) -> Run:
    from tests.kubeapi import KubeApiDouble

    assert isinstance(double, KubeApiDouble)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.bench_restart",
        "--guard",
        str(code),
        "--kubeconfig",
        str(kubeconfig),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    assert process.stdout is not None and process.stdin is not None
    said: list[tuple[str, float]] = []
    logged: list[tuple[str, float]] = []

    async def read() -> None:
        assert process.stdout is not None
        async for line in process.stdout:
            word, at = line.decode().split()
            said.append((word, float(at)))

    async def read_log() -> None:
        assert process.stderr is not None
        async for line in process.stderr:
            logged.append((line.decode(), time.monotonic()))

    reader = asyncio.create_task(read())
    log_reader = asyncio.create_task(read_log())

    async def until(condition: str, after: float, timeout: float) -> float:
        async with asyncio.timeout(timeout):
            while True:
                for word, at in said:
                    if word == condition and at >= after:
                        return at
                await asyncio.sleep(POLL)

    try:
        await until("deny", 0, 120)  # synced, and denying
        closed = time.monotonic()
        await double.stop()
        await asyncio.sleep(outage)
        answering = await double.start_restarted(throttled=throttle, retry_after=1)
        denied = await until("deny", answering, outage + 180)
        await asyncio.sleep(5)  # the line saying every kind is in sync may follow the deny
        lines = [
            text
            for text, at in logged
            if at >= closed
            and text.split()[:2] in (["WARNING", "gpu-guard.live"], ["INFO", "gpu-guard.live"])
        ]
        return Run(
            code=str(code),
            outage_s=outage,
            throttle_s=throttle,
            recovery_s=round(denied - answering, 2),
            log_lines=len(lines),
        )
    finally:
        double.fail_unversioned_watches(False)
        process.stdin.close()
        try:
            async with asyncio.timeout(20):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()
        reader.cancel()
        log_reader.cancel()


async def bench(codes: list[Path], outages: list[float], throttle: float, repeat: int) -> list[Run]:
    from tests.builders import cluster_policy, gpu_pod, kubevirt
    from tests.kubeapi import KubeApiDouble
    from tests.test_live import OMEN1

    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        async with KubeApiDouble(bookmark_interval=60) as double:
            devices = [("10de:2204", "nvidia.com/GA102_GEFORCE_RTX_3090")]
            for obj in (OMEN1, gpu_pod("train", "omen1"), cluster_policy(), kubevirt(devices)):
                double.create(obj)
            kubeconfig = double.kubeconfig(Path(tmp) / "kubeconfig")
            for outage in [o for o in outages for _ in range(repeat)]:
                for code in codes:
                    run = await measure(code, outage, throttle, kubeconfig, double)
                    print(json.dumps(asdict(run)), flush=True)
                    runs.append(run)
    return runs


def table(runs: list[Run]) -> str:
    lines = [
        "| code | outage s | 429 phase s | **first fresh deny, s after the server answers** "
        "| log lines |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in runs:
        lines.append(
            f"| {r.code} | {r.outage_s:g} | {r.throttle_s:g} | **{r.recovery_s:.2f}** "
            f"| {r.log_lines} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outages", default="20,60", help="outage lengths, seconds (%(default)s)")
    parser.add_argument("--throttle", type=float, default=2.0, help="429 phase, seconds")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each outage and code")
    parser.add_argument("--before", type=Path, help="another checkout to measure the same way")
    parser.add_argument("--json", type=Path, help="write the runs here too")
    parser.add_argument("--guard", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.guard is not None:
        sys.path.insert(0, str(args.guard.resolve()))
        asyncio.run(guard(args.kubeconfig))
        return 0
    codes = [*([args.before] if args.before else []), ROOT]
    outages = [float(o) for o in args.outages.split(",")]
    runs = asyncio.run(bench(codes, outages, args.throttle, args.repeat))
    print(table(runs))
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

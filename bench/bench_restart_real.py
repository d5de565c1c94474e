"""Time from a real kube-apiserver restarted on the same etcd to gpu-guard's first fresh deny,
measured from outside (``make bench-restart`` when KUBEBUILDER_ASSETS is set).

The scenario is tests/e2e/restart.py's, the one test_restart.py holds to its outcomes: etcd and
kube-apiserver v1.36 from ``KUBEBUILDER_ASSETS``, ``gpu-guard serve`` as a process against it,
two GPU nodes, a CUDA pod on omen1 and none on omen2. Per run the API server is SIGKILLed, stays
down for the outage, and is started again on the same port and etcd; the pod ``ml/infer`` is
created on omen2 the moment the API server takes a write, and a review relabelling omen2 to
vm-passthrough is posted to the guard every 20 ms until one is denied (a deny only a view that
took in the new pod gives, and not downgraded as stale). Reported per run, in seconds:

- ``listen``: from the process started to its port accepting connections;
- ``ready``: from the port listening to /readyz 200;
- ``deny_after_listen`` and ``deny_after_ready``: the first fresh deny after each;
- ``guard_in_sync``: the guard's own figure (its INFO line: every kind in sync again, X s after
  the API server answered again), and its outage lines (one WARNING, one INFO expected).

    python -m bench.bench_restart_real                  # 5 runs of a 20 s outage
    python -m bench.bench_restart_real --runs 3 --outage 60 --json /tmp/real.json

Wall-clock figures belong here, never in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.e2e import crds
from tests.e2e.controlplane import ControlPlane
from tests.e2e.guard import Guard, start_guard
from tests.e2e.objects import load
from tests.e2e.restart import (
    AFTER,
    IN_SYNC_AGAIN,
    SERVE_ARGS,
    cluster,
    create_when_accepted,
    denied,
    listening,
    moment,
    outage_lines,
    review_relabel,
)

POLL = 0.02
RECOVERY = re.compile(r"in sync again, ([\d.]+) s after the API server answered again")


@dataclass
class Run:
    outage_s: float
    listen_s: float
    ready_s: float
    created_after_listen_s: float
    deny_after_listen_s: float
    deny_after_ready_s: float
    guard_in_sync_s: float | None
    log_lines: int


async def first_fresh_deny(guard: Guard, omen2: dict[str, Any], timeout: float = 120) -> float:
    async with asyncio.timeout(timeout):
        while True:
            answer = await review_relabel(guard, omen2)
            if denied(answer):
                return time.monotonic()
            await asyncio.sleep(POLL)


async def clear(plane: ControlPlane, guard: Guard, omen2: dict[str, Any]) -> None:
    """No pod on omen2, and the guard allows relabelling it again (its view has the delete)."""
    path = f"/api/v1/namespaces/ml/pods/{AFTER['metadata']['name']}?gracePeriodSeconds=0"
    status, _ = await asyncio.to_thread(plane.request, "DELETE", path)
    assert status in (200, 404), status
    async with asyncio.timeout(60):
        while denied(await review_relabel(guard, omen2)):
            await asyncio.sleep(0.1)


async def measure(plane: ControlPlane, guard: Guard, outage: float) -> Run:
    omen2 = await asyncio.to_thread(plane.call, "GET", "/api/v1/nodes/omen2")
    await clear(plane, guard, omen2)
    await asyncio.sleep(2)  # the watches settled after the delete
    since = guard.log_offset()
    await asyncio.to_thread(plane.stop_api_server, signal.SIGKILL)
    await asyncio.sleep(outage)
    started = time.monotonic()
    await asyncio.to_thread(plane.start_api_server, False)
    listen = asyncio.create_task(moment(lambda: listening(plane.port), every=0.005))
    ready = asyncio.create_task(moment(lambda: plane.readyz() == 200, every=0.02))
    created = await create_when_accepted(plane, AFTER)
    denied_at = await first_fresh_deny(guard, omen2)
    listened, readied = await listen, await ready

    async with asyncio.timeout(60):
        while not any(r.message.startswith(IN_SYNC_AGAIN) for r in guard.records(since)):
            await asyncio.sleep(0.1)
    records = guard.records(since)
    match = next((m for r in records if (m := RECOVERY.search(r.message))), None)
    return Run(
        outage_s=outage,
        listen_s=round(listened - started, 2),
        ready_s=round(readied - listened, 2),
        created_after_listen_s=round(created - listened, 2),
        deny_after_listen_s=round(denied_at - listened, 2),
        deny_after_ready_s=round(denied_at - readied, 2),
        guard_in_sync_s=float(match.group(1)) if match else None,
        log_lines=len(outage_lines(records)),
    )


async def bench(
    runs: int, outage: float, serve_args: list[str], print_log: bool = False, debug: bool = False
) -> list[Run]:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        plane = ControlPlane(Path(tmp) / "control-plane")
        try:
            plane.start()
            crds.install(plane, crds.every_crd())
            load(plane, cluster())
            guard = await start_guard(
                plane,
                Path(tmp) / "guard",
                *SERVE_ARGS,
                *serve_args,
                log_level="DEBUG" if debug else "INFO",
            )
            try:
                await guard.wait_ready()
                for _ in range(runs):
                    run = await measure(plane, guard, outage)
                    print(json.dumps(asdict(run)), flush=True)
                    results.append(run)
            finally:
                await guard.stop()
                if print_log:
                    print(guard.log_text())
        finally:
            plane.stop()
    return results


def summary(runs: list[Run]) -> str:
    lines = [
        "| figure, s | median | min | max |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name in (
        "listen_s",
        "ready_s",
        "created_after_listen_s",
        "deny_after_listen_s",
        "deny_after_ready_s",
        "guard_in_sync_s",
    ):
        values = [v for r in runs if (v := getattr(r, name)) is not None]
        if values:
            lines.append(
                f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} "
                f"| {max(values):.2f} |"
            )
    lines.append(f"| log lines per outage | {sorted({r.log_lines for r in runs})} | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="outages, one after another")
    parser.add_argument("--outage", type=float, default=20.0, help="seconds down (%(default)s)")
    parser.add_argument("--json", type=Path, help="write the runs here too")
    parser.add_argument("--print-log", action="store_true", help="print serve's log at the end")
    parser.add_argument("--debug", action="store_true", help="serve logs at DEBUG (a profile)")
    parser.add_argument("serve_args", nargs="*", help="more serve flags (after --)")
    args = parser.parse_args(argv)
    runs = asyncio.run(bench(args.runs, args.outage, args.serve_args, args.print_log, args.debug))
    print(summary(runs))
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

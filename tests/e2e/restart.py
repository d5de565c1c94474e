"""An API server restart under a running ``gpu-guard serve``: the scenario that
test_restart.py holds to its outcomes and ``bench.bench_restart --real`` times.

Two GPU nodes in container mode, a CUDA pod on omen1 (relabelling omen1 to vm-passthrough is
denied), none on omen2 (allowed) until ``AFTER`` is created on it once the API server is back:
only a view that took in what happened after the restart denies relabelling omen2.
"""

from __future__ import annotations

import asyncio
import copy
import socket
import time
from collections.abc import Sequence
from typing import Any

from tests.builders import gpu_pod, node
from tests.e2e.controlplane import ControlPlane
from tests.e2e.guard import Guard, LogRecord
from tests.e2e.rest import ControlPlaneError

WORKLOAD = "nvidia.com/gpu.workload.config"
NODES = ("omen1", "omen2")
BEFORE = gpu_pod("train", "omen1")
"""On omen1 from the start."""
AFTER = gpu_pod("infer", "omen2")
"""Created on omen2 after the restart."""
STALE_AFTER = 5.0
"""serve's --stale-after: shorter than the outage, so the view goes stale during it."""
SERVE_ARGS = ("--stale-after", f"{STALE_AFTER:g}", "--audit-interval", "0")
UNAVAILABLE = "the API server is unavailable: "
IN_SYNC_AGAIN = "every kind is in sync again, "
STALE = "not denied: gpu-guard's view is stale"


def cluster() -> list[dict[str, Any]]:
    nodes = [
        node(name, labels={WORKLOAD: "container"}, allocatable={"nvidia.com/gpu": "1"})
        for name in NODES
    ]
    return [*nodes, BEFORE]


def relabel(current: dict[str, Any]) -> dict[str, Any]:
    """``current`` (a Node as the server holds it) switched to vm-passthrough."""
    changed = copy.deepcopy(current)
    changed["metadata"]["labels"][WORKLOAD] = "vm-passthrough"
    return changed


async def review_relabel(guard: Guard, current: dict[str, Any]) -> dict[str, Any]:
    return await guard.validate(relabel(current), current)


def denied(answer: dict[str, Any]) -> bool:
    return answer["allowed"] is False


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


async def moment(condition: Any, timeout: float = 60, every: float = 0.01) -> float:
    """The monotonic time ``condition()`` (synchronous, run in a thread) first held."""
    async with asyncio.timeout(timeout):
        while not await asyncio.to_thread(condition):
            await asyncio.sleep(every)
    return time.monotonic()


async def create_when_accepted(plane: ControlPlane, obj: dict[str, Any]) -> float:
    """Creates ``obj`` as soon as the API server takes it; the monotonic time it did."""
    async with asyncio.timeout(60):
        while True:
            try:
                await asyncio.to_thread(plane.create, obj)
                return time.monotonic()
            except (ControlPlaneError, OSError):
                await asyncio.sleep(0.02)


NOT_INSTALLED = "API group not installed; counted as empty"
"""webhook/state/live.py's line for a kind whose group the API server does not serve."""


def outage_lines(records: Sequence[LogRecord]) -> list[LogRecord]:
    """What serve logged about an outage: every WARNING and up, and the live state's INFO
    lines (a decision line is INFO of another logger), but for a kind's "API group not
    installed", said once per process when its first list answers 404, which can fall after
    ready (an absent kind counts as synced) and so after the test's mark."""
    return [
        r
        for r in records
        if r.level in ("WARNING", "ERROR", "CRITICAL", "")
        or (r.level == "INFO" and r.logger == "gpu-guard.live" and NOT_INSTALLED not in r.message)
    ]

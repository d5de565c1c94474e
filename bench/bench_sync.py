"""Time to first sync and memory of the real LiveState against a large synthetic cluster.

The API server (bench/apiserver.py, or tests/kubeapi.py's double with ``--server double``) runs
in a separate process per scale, so its CPU is not counted against the client. Each measurement
runs the client in a fresh process of its own (this module with ``--client URL``): the real
``webhook.state.live.connect(kubeconfig)`` and ``LiveState``, started and awaited with
``wait_synced``,
so a measurement's RSS baseline is not polluted by the one before. It reports

* first sync: ``LiveState.start()`` to ``wait_synced()`` returning, wall clock, with the client
  process's CPU seconds beside it, and when each kind synced;
* memory attributable to the state: RSS once synced minus RSS just before the LiveState was made
  (imports, the API client and the PCI database already loaded), RSS after ``gc.collect()``, the
  peak RSS during the sync (VmHWM, reset before the start), and a gc-walk estimate of the bytes
  reachable from the ClusterState (the PCI database excluded); tracemalloc with ``--tracemalloc``;
* ``state.counts()`` and the pods kept.

Timed numbers belong here, never in tests; compare ratios to the baseline scale of the same run.

    python -m bench.bench_sync                       # scales 0.1 and 1.0, two runs each
    python -m bench.bench_sync --scales 0.1,1.0 --repeat 2 --json /tmp/sync.json
    python -m bench.bench_sync --scales 1.0 --repeat 0 --profile /tmp/sync.prof
    python -m bench.bench_sync --server double --scales 0.02,0.1 --sync-timeout 300
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import ctypes
import gc
import io
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from bench.synthetic import DEFAULT_SEED, Layout

TARGET_STATE_MB = 300.0
TARGET_SYNC_S = 15.0
MB = 1024 * 1024

Result = dict[str, Any]


# --- the client: one measurement in this process --------------------------------------------------


def self_status() -> dict[str, int]:
    """VmRSS and VmHWM in bytes."""
    found: dict[str, int] = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0]) * 1024
    return found


def reset_peak() -> bool:
    """Resets VmHWM to the current RSS (Linux >= 4.0); False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


def malloc_trim() -> bool:
    """Hands glibc's free heap memory back to the system: what is left is live or fragmented."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return True


_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)


def reachable_bytes(
    root: object, exclude: Sequence[object] = (), seen: set[int] | None = None
) -> int:
    """sys.getsizeof summed over every object reachable from ``root`` through gc referents,
    each counted once (also across calls sharing ``seen``); classes, modules, functions and
    ``exclude`` (and what only they reach) are not walked."""
    seen = set() if seen is None else seen
    seen.update(id(o) for o in exclude)
    stack = [root]
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _OPAQUE):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


def state_breakdown(state: object, database: object) -> dict[str, float]:
    """MB reachable from each attribute of the ClusterState, in declaration order (an object
    reachable from two attributes counts for the first), largest first."""
    seen: set[int] = {id(state)}
    sizes = {
        name: reachable_bytes(value, exclude=[database], seen=seen) / MB
        for name, value in vars(state).items()
    }
    return {k: round(v, 1) for k, v in sorted(sizes.items(), key=lambda kv: -kv[1]) if v >= 0.05}


def _kubeconfig(url: str, directory: str) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "bench", "cluster": {"server": url}}],
        "users": [{"name": "bench", "user": {"token": "bench-token"}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
        "current-context": "bench",
    }
    path = Path(directory) / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


async def _measure(
    url: str, *, timeout: float, profile: str | None, trace: bool, top: int
) -> Result:
    from policies.kinds import WATCHED_KINDS
    from webhook.state.live import LiveState, connect
    from webhook.state.pciids import default_database

    with tempfile.TemporaryDirectory() as tmp:
        api = await connect(_kubeconfig(url, tmp))
    database = default_database()  # loaded once per process whatever the state: not the state's
    gc.collect()
    before = self_status()["VmRSS"]
    peak_reset = reset_peak()
    profiler = cProfile.Profile() if profile else None
    if trace:
        tracemalloc.start()
    load = os.getloadavg()[0]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if profiler is not None:
        profiler.enable()
    live = LiveState(api, watch_timeout=290)
    await live.start()
    synced_at: dict[str, float] = {}

    async def watch_progress() -> None:
        while len(synced_at) < len(live.statuses):
            for kind, status in live.statuses.items():
                if status.synced and str(kind) not in synced_at:
                    synced_at[str(kind)] = round(time.perf_counter() - wall0, 3)
            await asyncio.sleep(0.01)

    progress = asyncio.create_task(watch_progress())
    error = ""
    try:
        await live.wait_synced(timeout)
    except TimeoutError as exc:
        error = f"not synced within {timeout:g} s: {exc}"
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    if profiler is not None:
        profiler.disable()
    progress.cancel()
    await asyncio.gather(progress, return_exceptions=True)
    after = self_status()
    traced: tuple[int, int] | None = None
    if trace:
        traced = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    gc.collect()
    after_gc = self_status()["VmRSS"]
    trimmed = self_status()["VmRSS"] if malloc_trim() else None
    walk0 = time.perf_counter()
    state_bytes = reachable_bytes(live.state, exclude=[database])
    walk = time.perf_counter() - walk0
    breakdown = state_breakdown(live.state, database)
    state = live.state
    result: Result = {
        "url": url,
        "error": error,
        "sync_seconds": round(wall, 3),
        "client_cpu_seconds": round(cpu, 3),
        "synced_at": synced_at,
        "loadavg_1m": round(load, 2),
        "rss_before_mb": round(before / MB, 1),
        "rss_synced_delta_mb": round((after["VmRSS"] - before) / MB, 1),
        "rss_after_gc_delta_mb": round((after_gc - before) / MB, 1),
        "rss_after_trim_delta_mb": None if trimmed is None else round((trimmed - before) / MB, 1),
        "peak_rss_delta_mb": round((after["VmHWM"] - before) / MB, 1) if peak_reset else None,
        "state_walk_mb": round(state_bytes / MB, 1),
        "state_walk_seconds": round(walk, 2),
        "state_breakdown_mb": breakdown,
        "tracemalloc_mb": None if traced is None else round(traced[0] / MB, 1),
        "tracemalloc_peak_mb": None if traced is None else round(traced[1] / MB, 1),
        "counts": state.counts(),
        "objects": sum(state.counts().values()),
        "pods_kept": len(state.pods()),
        "expected_kinds": len(WATCHED_KINDS),
        "profiled": profiler is not None,
    }
    await live.stop()
    await api.close()
    if profiler is not None and profile:
        profiler.dump_stats(profile)
        result["profile"] = {"file": profile, **_profile_tops(profiler, top)}
    return result


def _profile_tops(profiler: cProfile.Profile, top: int) -> dict[str, str]:
    tops = {}
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.strip_dirs().sort_stats(order).print_stats(top)
        tops[order] = out.getvalue()
    return tops


def measure(
    url: str,
    *,
    timeout: float = 600.0,
    profile: str | None = None,
    trace: bool = False,
    top: int = 25,
) -> Result:
    """One cold first sync of a LiveState against ``url``, in this process."""
    return asyncio.run(_measure(url, timeout=timeout, profile=profile, trace=trace, top=top))


# --- the orchestrator: servers and client processes -----------------------------------------------


class Server:
    """bench/apiserver.py in a child process; stopped by closing its stdin (then by its pid)."""

    def __init__(self, scale: float, seed: int, double: bool, bookmark_interval: float) -> None:
        command = [
            sys.executable,
            "-m",
            "bench.apiserver",
            "--scale",
            str(scale),
            "--seed",
            str(seed),
            "--bookmark-interval",
            str(bookmark_interval),
        ]
        if double:
            command.append("--double")
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=_root(), env=_env()
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.stop()
            raise RuntimeError(f"the API server for scale {scale} exited before it listened")
        self.info: Result = orjson.loads(line)
        self.url = str(self.info["url"])

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()  # this child only, by its pid
            self.process.wait()


def _root() -> str:
    return str(Path(__file__).resolve().parent.parent)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_root(), env.get("PYTHONPATH", "")) if p)
    return env


def run_client(url: str, args: argparse.Namespace, *, profile: str | None = None) -> Result:
    command = [
        sys.executable,
        "-m",
        "bench.bench_sync",
        "--client",
        url,
        "--sync-timeout",
        str(args.sync_timeout),
    ]
    if profile:
        command += ["--profile", profile, "--top", str(args.top)]
    if args.tracemalloc and not profile:
        command.append("--tracemalloc")
    done = subprocess.run(
        command, stdout=subprocess.PIPE, cwd=_root(), env=_env(), check=False, timeout=None
    )
    if done.returncode != 0:
        return {"error": f"client exited with {done.returncode}", "url": url}
    result: Result = orjson.loads(done.stdout.splitlines()[-1])
    return result


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


COLUMNS = (
    ("scale", "scale", 2),
    ("run", "run", 0),
    ("objects", "objects", 0),
    ("pods_kept", "pods kept", 0),
    ("sync_seconds", "first sync s", 2),
    ("client_cpu_seconds", "client CPU s", 2),
    ("rss_synced_delta_mb", "RSS Δ synced MB", 1),
    ("rss_after_gc_delta_mb", "RSS Δ after gc MB", 1),
    ("rss_after_trim_delta_mb", "RSS Δ gc+malloc_trim MB", 1),
    ("peak_rss_delta_mb", "peak RSS Δ MB", 1),
    ("state_walk_mb", "state (gc walk) MB", 1),
    ("tracemalloc_mb", "tracemalloc MB", 1),
    ("tracemalloc_peak_mb", "tracemalloc peak MB", 1),
    ("loadavg_1m", "load 1m", 2),
)


def table(results: list[Result]) -> str:
    """A Markdown table, one row per measurement."""
    columns = [c for c in COLUMNS if any(r.get(c[0]) is not None for r in results)]
    lines = [
        "| " + " | ".join(title for _, title, _ in columns) + " |",
        "|" + "|".join("---:" for _ in columns) + "|",
    ]
    for r in results:
        cells = [
            _fmt(r.get(key), digits) if digits else _fmt(r.get(key)) for key, _, digits in columns
        ]
        if r.get("error"):
            cells[-1] += f" ({r['error'][:80]})"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratios(results: list[Result], baseline: float, full: float) -> list[str]:
    """Medians at ``full`` over medians at ``baseline``, for the figures that scale."""

    def median(scale: float, key: str) -> float | None:
        values = [r[key] for r in results if r.get("scale") == scale and r.get(key) is not None]
        return statistics.median(values) if values else None

    out = []
    for key, title, _ in COLUMNS[2:11]:
        low, high = median(baseline, key), median(full, key)
        if low and high is not None:
            out.append(f"{title}: {high:,.6g} / {low:,.6g} = x{high / low:.1f}")
    return out


def verdicts(results: list[Result], full: float) -> list[str]:
    at_full = [r for r in results if r.get("scale") == full and not r.get("error")]
    if not at_full:
        return [f"no successful measurement at scale {full}"]
    worst_sync = max(r["sync_seconds"] for r in at_full)
    worst_mem = max(r["rss_synced_delta_mb"] for r in at_full)
    worst_peak = max(r["peak_rss_delta_mb"] or 0.0 for r in at_full)
    out = []
    for name, worst, target, unit in (
        ("first sync", worst_sync, TARGET_SYNC_S, "s"),
        ("state memory (RSS Δ synced)", worst_mem, TARGET_STATE_MB, "MB"),
    ):
        verdict = "met" if worst < target else f"MISSED by {worst - target:,.1f} {unit}"
        out.append(f"{name}: worst {worst:,.1f} {unit} vs target < {target:g} {unit}: {verdict}")
    out.append(
        f"peak RSS Δ during the sync (not a target, what a memory limit must allow): "
        f"worst {worst_peak:,.1f} MB"
    )
    return out


def orchestrate(args: argparse.Namespace) -> int:
    scales = [float(s) for s in args.scales.split(",")]
    results: list[Result] = []
    servers: list[Result] = []
    for scale in scales:
        layout = Layout.at(scale, args.seed)
        print(f"scale {scale:g}: starting the {args.server} API server ...", file=sys.stderr)
        server = Server(scale, args.seed, args.server == "double", args.bookmark_interval)
        try:
            info = {"scale": scale, **server.info}
            servers.append(info)
            total = sum(info["bytes"].values()) if info.get("bytes") else None
            print(
                f"  listening at {server.url} after {info['prepare_seconds']} s, "
                f"{sum(info['objects'].values()):,} objects"
                + (f", {total / 1e6:,.0f} MB serialised" if total else ""),
                file=sys.stderr,
            )
            for run in range(1, args.repeat + 1):
                result = {"scale": scale, "run": run, **run_client(server.url, args)}
                if not result.get("error") and result["counts"] != layout.expected_counts():
                    result["error"] = "counts differ from the synthetic layout"
                results.append(result)
                print(f"  run {run}: {_summary(result)}", file=sys.stderr)
            if args.profile and scale == max(scales):
                result = run_client(server.url, args, profile=args.profile)
                print(f"  profiled run: {_summary(result)}", file=sys.stderr)
                for order, text in (result.get("profile") or {}).items():
                    if order != "file":
                        print(f"\n--- cProfile, top {args.top} by {order} ---\n{text}")
                results.append({"scale": scale, "run": "profiled", **result})
        finally:
            server.stop()
    timed = [r for r in results if r.get("run") != "profiled"]
    print(_header(args))
    if not timed:
        print("no timed runs (--repeat 0): profiles only")
        return 0 if all(not r.get("error") for r in results) else 1
    print(table(timed))
    if len(scales) >= 2:
        baseline, full = min(scales), max(scales)
        print(f"\nratios, median at scale {full:g} / median at scale {baseline:g}:")
        for line in ratios(timed, baseline, full):
            print(f"  {line}")
    print(f"\ntargets at scale {max(scales):g} (state < 300 MB, first sync < 15 s):")
    for line in verdicts(timed, max(scales)):
        print(f"  {line}")
    first = next(
        (r for r in timed if r.get("scale") == max(scales) and r.get("state_breakdown_mb")), None
    )
    if first is not None:
        parts = ", ".join(f"{k} {v}" for k, v in first["state_breakdown_mb"].items())
        print(f"  state (gc walk) by ClusterState attribute, MB: {parts}")
    for r in timed:
        if r.get("synced_at"):
            order = sorted(r["synced_at"].items(), key=lambda kv: kv[1])
            print(
                f"  synced at (s), scale {r['scale']:g} run {r['run']}: "
                + ", ".join(f"{k} {v}" for k, v in order)
            )
    if args.json:
        Path(args.json).write_bytes(
            orjson.dumps({"servers": servers, "results": results}, option=orjson.OPT_INDENT_2)
        )
    return 0 if all(not r.get("error") for r in results) else 1


def _summary(result: Result) -> str:
    if result.get("error"):
        return f"ERROR {result['error']}"
    return (
        f"synced in {result['sync_seconds']:.2f} s (client CPU {result['client_cpu_seconds']:.2f}"
        f" s), RSS Δ {result['rss_synced_delta_mb']:.0f} MB, peak Δ "
        f"{_fmt(result['peak_rss_delta_mb'], 0)} MB, state walk {result['state_walk_mb']:.0f} MB"
    )


def _commit() -> str:
    """The checked-out commit, "+dirty" when webhook/ or policies/ differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=_root()
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "diff", "--quiet", "HEAD", "--", "webhook", "policies"], cwd=_root()
        ).returncode
    except OSError:
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


def _header(args: argparse.Namespace) -> str:
    return (
        f"\nbench_sync: server={args.server} seed={args.seed} nproc={os.cpu_count()} "
        f"python={sys.version.split()[0]} machine={os.uname().machine} commit={_commit()}\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_sync", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--scales", default="0.1,1.0", help="comma-separated; min is baseline")
    parser.add_argument("--repeat", type=int, default=2, help="timed runs per scale")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--server", choices=("lean", "double"), default="lean")
    parser.add_argument("--bookmark-interval", type=float, default=5.0)
    parser.add_argument("--sync-timeout", type=float, default=600.0)
    parser.add_argument("--tracemalloc", action="store_true", help="also trace allocations")
    parser.add_argument("--profile", help="cProfile one extra run at the largest scale to FILE")
    parser.add_argument("--top", type=int, default=25, help="functions shown per profile order")
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument("--client", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(None if argv is None else list(argv))
    if args.client:
        result = measure(
            args.client,
            timeout=args.sync_timeout,
            profile=args.profile,
            trace=args.tracemalloc,
            top=args.top,
        )
        sys.stdout.write(orjson.dumps(result).decode() + "\n")
        return 0
    return orchestrate(args)


if __name__ == "__main__":
    raise SystemExit(main())

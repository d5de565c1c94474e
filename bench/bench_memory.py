"""Start-up and memory of ``gpu-guard serve --state``: time to /readyz 200, resident memory
(VmRSS from /proc) when ready and after a load test, and the peak (VmHWM).

States: the home lab, the compact large state (``bench.synthetic --compact``, ~70 MB), and with
``--realistic`` the realistic 849 MB ``bench.synthetic`` file (written if missing; run once: it
needs ~7 GB and half a minute). ``--variant`` adds ``bench/variant_server.py`` without the
``gc.freeze()`` after loading that ``gpu-guard serve`` does (as before issue 17), on each large
file.

Each server is pinned to core 0 and loaded from core 1 with the admission mix for
``--load-seconds`` (wrk, else bench.loadgen; 32 connections).

    python -m bench.bench_memory [--large F] [--realistic [F]] [--variant] [--load-seconds 10]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from bench import harness

TARGET_RSS_MIB = 300.0
TARGET_READY_S = 15.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_memory", description=__doc__)
    parser.add_argument("--large", type=Path, default=harness.LARGE_STATE)
    parser.add_argument(
        "--realistic", nargs="?", type=Path, const=harness.REALISTIC_STATE, default=None
    )
    parser.add_argument("--variant", action="store_true")
    parser.add_argument("--load-seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    large = harness.ensure_large_state(args.large)
    if args.realistic is not None and not args.realistic.exists():
        args.realistic.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "bench.synthetic", "-o", str(args.realistic)],
            cwd=harness.ROOT,
            check=True,
            timeout=900,
        )
    tool = "wrk" if harness.wrk_path() else "loadgen"
    workdir = Path(tempfile.mkdtemp(prefix="gpu-guard-bench-memory-"))
    certs = harness.make_certs(workdir)
    bodies = {
        m: harness.write_bodies(harness.review_mix(m), workdir / f"{m}.bodies")
        for m in ("small", "large")
    }
    runs: list[tuple[str, Path, str, list[str]]] = []

    def serve(name: str, state: Path, mix: str, argv: list[str]) -> None:
        runs.append((name, state, mix, argv))

    port = harness.free_port()
    serve(
        "gpu-guard serve",
        harness.SMALL_STATE,
        "small",
        harness.gpu_guard_argv(harness.SMALL_STATE, port, certs),
    )
    serve("gpu-guard serve", large, "large", harness.gpu_guard_argv(large, port, certs))

    def variant(state: Path) -> list[str]:
        return harness.variant_argv(state, port, certs, "--no-freeze")

    if args.variant:
        serve("variant: no gc.freeze", large, "large", variant(large))
    if args.realistic is not None:
        serve(
            "gpu-guard serve",
            args.realistic,
            "large",
            harness.gpu_guard_argv(args.realistic, port, certs),
        )
        if args.variant:
            serve("variant: no gc.freeze", args.realistic, "large", variant(args.realistic))
    print(
        f"# load average {harness.load_average()}; load: {tool}, {args.connections} "
        f"connections, {args.load_seconds:g} s"
    )
    rows: list[dict[str, Any]] = []
    for name, state, mix, argv in runs:
        server = harness.start_server(
            name.split(":")[0].replace(" ", "-"), argv, port, certs, workdir, timeout=600
        )
        try:
            row: dict[str, Any] = {
                "server": name,
                "state": str(state),
                "state_mb": state.stat().st_size / 1e6,
                "ready_s": server.ready_seconds,
                "rss_ready_mib": harness.rss_mib(server.pid),
                "peak_at_ready_mib": harness.hwm_mib(server.pid),
            }
            result = harness.run_load(
                tool,
                server,
                bodies[mix],
                connections=args.connections,
                duration=args.load_seconds,
            )
            row["rss_after_mib"] = harness.rss_mib(server.pid)
            row["peak_mib"] = harness.hwm_mib(server.pid)
            row["load"] = result.to_json()
        finally:
            server.stop()
        rows.append(row)
        print(
            f"# {name} {state.name}: ready {row['ready_s']:.2f} s, RSS {row['rss_ready_mib']:.0f}"
            f" -> {row['rss_after_mib']:.0f} MiB, peak {row['peak_mib']:.0f} MiB",
            flush=True,
        )
    print(
        "| server | state file | MB | ready (s) | RSS ready MiB | RSS after load MiB "
        "| peak RSS MiB | req/s under load |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(
            f"| {row['server']} | {Path(row['state']).name} | {row['state_mb']:.1f} | "
            f"{row['ready_s']:.2f} | {row['rss_ready_mib']:.0f} | {row['rss_after_mib']:.0f} | "
            f"{row['peak_mib']:.0f} | {row['load']['rps']:,.0f} |"
        )
    for row in rows:
        if row["server"] == "gpu-guard serve" and Path(row["state"]) == large:
            rss = max(row["rss_ready_mib"], row["rss_after_mib"])
            print(
                f"\ntarget RSS < {TARGET_RSS_MIB:.0f} MB with the large state: {rss:.0f} MiB "
                f"({'met' if rss < TARGET_RSS_MIB else 'missed'})"
            )
            print(
                f"target ready < {TARGET_READY_S:g} s: {row['ready_s']:.2f} s "
                f"({'met' if row['ready_s'] < TARGET_READY_S else 'missed'})"
            )
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

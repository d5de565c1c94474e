"""Admission throughput, latency, scale invariance and memory: ``gpu-guard serve`` side by side
with a minimal aiohttp + orjson baseline, under the same load, in the same run.

Every server is its own process on 127.0.0.1 over TLS (one throwaway CA), pinned to core 0; the
load generator is another process pinned to core 1 (``taskset``, when there are 2 cores): wrk
with ``bench/wrk_rotate.lua`` when installed, else ``bench.loadgen`` (aiohttp). Both keep
``--connections`` (32) connections alive and send the next request as soon as one is answered
(closed loop), rotating through four AdmissionReviews (``bench.harness.review_mix``): an 18-20 KB
Node UPDATE (a GFD label bump: object and oldObject, ~41 KB), a GPU VirtualMachine CREATE, a GPU
Pod CREATE and a KubeVirt CR UPDATE, each allowed after every applicable policy ran.

Servers (``--servers`` picks; the default runs all that can run here):

* ``baseline``: ``bench/baseline_server.py`` (parse the review, answer allowed);
* ``small``: ``gpu-guard serve --state examples/homelab/cluster.yaml`` (8 nodes);
* ``large``: ``gpu-guard serve --state big.json`` (``bench.synthetic --compact``: 5,000 nodes,
  150,000 pods, 10,000 VMs, 10,000 VMIs, ~70 MB);
* ``large-warn``: the same with ``--log-level WARNING`` (no per-decision log line);
* ``large-uvloop`` / ``baseline-uvloop``: on uvloop (``bench/uvloop_serve.py``), if installed;
* ``noop``: gpu-guard's server with no policies and no decision log
  (``bench/variant_server.py``): what the plumbing costs;
* ``large-nofreeze``: gpu-guard's server with the loaded large state left to the collector (no
  ``gc.freeze()``, as before issue 17)
  (``bench/variant_server.py``);

With ``--rate R`` (default 1000) the ``--rate-servers`` also get an open-loop run at R
requests/s from ``bench.loadgen`` (latency counted from when each request was due): the
latency at a load they sustain, where the closed loop measures it at saturation.

Each run is ``--warmup`` s of load, then ``--duration`` s measured; ``--repeat`` rounds, the
servers in a rotated order each round so the host's noise hits all alike; medians are reported.
Also: each server's time to /readyz 200 and its RSS (VmRSS) when ready and after all the load,
and, with ``--profile S``, a py-spy profile of the ``large`` server under the same load.

    python -m bench.bench_admission [--duration 10] [--repeat 3] [--profile 10] [--json FILE]
"""

from __future__ import annotations

import argparse
import functools
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench import harness, profile_summary
from bench.harness import LoadResult, ServerProcess, median

TARGET_RATIO = 0.75
"""Issue 17 (0.85 before it)."""
TARGET_P99_RATIO = 1.3
"""p99 at saturation over the baseline's (issue 17)."""
TARGET_SINGLE_P50_MS = 0.25
"""One keep-alive connection, closed loop (issue 17)."""
TARGET_P99_MS = 10.0
TARGET_SCALE = 1.2
TARGET_RSS_MIB = 300.0
TARGET_READY_S = 2.0
"""The large state served and /readyz 200 (issue 17; 15 s before it)."""


@dataclass
class Spec:
    name: str
    description: str
    mix: str  # "small" or "large": which bodies it gets
    argv: list[str]
    gpu_guard: bool = True
    results: list[LoadResult] = field(default_factory=list)
    single: list[LoadResult] = field(default_factory=list)
    """One keep-alive connection, closed loop: the latency of a review with nothing queued."""
    server: ServerProcess | None = None
    rss_ready: float = 0.0
    rss_after: float = 0.0
    hwm: float = 0.0
    cwd: Path = harness.ROOT
    """The tree whose code the server runs (``--reference`` for the ``*-ref`` servers)."""


def specs(
    names: list[str],
    large: Path,
    certs: harness.Certs,
    ports: dict[str, int],
    reference: Path | None = None,
) -> list[Spec]:
    def variant(port: int, *extra: str) -> list[str]:
        return harness.variant_argv(large, port, certs, *extra)

    catalogue = {
        "baseline": lambda p: Spec(
            "baseline",
            "aiohttp + orjson: parse, answer allowed",
            "large",
            harness.baseline_argv(p, certs),
            gpu_guard=False,
        ),
        "small": lambda p: Spec(
            "small",
            "gpu-guard serve, home lab (8 nodes)",
            "small",
            harness.gpu_guard_argv(harness.SMALL_STATE, p, certs),
        ),
        "large": lambda p: Spec(
            "large",
            "gpu-guard serve, 5,000 nodes / 150,000 pods",
            "large",
            harness.gpu_guard_argv(large, p, certs),
        ),
        "large-warn": lambda p: Spec(
            "large-warn",
            "gpu-guard serve --log-level WARNING, large",
            "large",
            harness.gpu_guard_argv(large, p, certs, log_level="WARNING"),
        ),
        "large-uvloop": lambda p: Spec(
            "large-uvloop",
            "gpu-guard serve on uvloop, large",
            "large",
            harness.gpu_guard_argv(large, p, certs, uvloop=True),
        ),
        "baseline-uvloop": lambda p: Spec(
            "baseline-uvloop",
            "baseline on uvloop",
            "large",
            harness.baseline_argv(p, certs, uvloop=True),
            gpu_guard=False,
        ),
        "noop": lambda p: Spec(
            "noop",
            "gpu-guard's server, no policies, no decision log, large",
            "large",
            variant(p, "--policies", "none", "--log-level", "WARNING"),
        ),
        "large-nofreeze": lambda p: Spec(
            "large-nofreeze",
            "gpu-guard's server, state not frozen, large",
            "large",
            variant(p, "--no-freeze"),
        ),
    }
    if reference is not None:  # the same servers, running another tree's code
        for name in ("small", "large", "large-warn"):
            catalogue[f"{name}-ref"] = functools.partial(
                _reference, catalogue[name], reference, f"{name}-ref"
            )
    unknown = [n for n in names if n not in catalogue]
    if unknown:
        raise SystemExit(f"unknown servers: {', '.join(unknown)} (known: {', '.join(catalogue)})")
    return [catalogue[name](ports[name]) for name in names]


def _reference(make: Callable[[int], Spec], tree: Path, name: str, port: int) -> Spec:
    spec = make(port)
    spec.name, spec.cwd = name, tree
    spec.description += f" ({tree})"
    return spec


def default_servers() -> list[str]:
    names = ["baseline", "small", "large", "large-warn", "noop", "large-nofreeze"]
    if harness.have_uvloop():
        names += ["large-uvloop", "baseline-uvloop"]
    return names


def profile_server(
    server: ServerProcess, bodies: Path, tool: str, seconds: float, connections: int, out: Path
) -> tuple[str, LoadResult] | None:
    """py-spy (100 Hz, blocking) on ``server`` while the load runs; the summary as Markdown."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        print("py-spy is not installed: no profile (pip install py-spy)", file=sys.stderr)
        return None
    out.mkdir(parents=True, exist_ok=True)
    raw = out / f"{server.name}.pyspy.txt"
    argv = [py_spy, "record", "-p", str(server.pid), "-d", str(round(seconds) + 1)]
    argv += ["-r", "100", "-f", "raw", "-o", str(raw)]
    spy = subprocess.Popen(
        harness.pinned(argv, harness.LOAD_CPU), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    time.sleep(0.5)
    result = harness.run_load(tool, server, bodies, connections=connections, duration=seconds)
    output = spy.communicate(timeout=seconds + 60)[0].decode(errors="replace")
    if spy.returncode != 0 or not raw.exists():
        print(f"py-spy failed ({spy.returncode}): {output[-1000:]}", file=sys.stderr)
        return None
    profile = profile_summary.read_raw(raw)
    us = 1e6 / result.rps if result.rps else None
    text = f"{profile.total} samples at {result.rps:,.0f} req/s; raw stacks in {raw}\n\n"
    text += profile_summary.render(profile, 20, us)
    return text, result


def fmt_ms(value: float) -> str:
    return f"{value:.2f}"


def summary_row(spec: Spec, base: Spec | None) -> str:
    rps = median([r.rps for r in spec.results])
    p50 = median([r.p50_ms for r in spec.results])
    p99 = median([r.p99_ms for r in spec.results])
    cpu = median([r.server_cpu / r.seconds for r in spec.results])
    cpu_us = cpu_per_request(spec)
    spread = f"{min(r.rps for r in spec.results):,.0f}-{max(r.rps for r in spec.results):,.0f}"
    ratio = ""
    p99_ratio = ""
    cpu_ratio = ""
    if base is not None and base.results:
        brps = median([r.rps for r in base.results])
        bp99 = median([r.p99_ms for r in base.results])
        ratio = f"{rps / brps:.2f}"
        p99_ratio = f"{p99 / bp99:.2f}"
        cpu_ratio = f"{cpu_per_request(base) / cpu_us:.2f}"
    errors = sum(r.errors + r.non_2xx for r in spec.results)
    return (
        f"| {spec.name} | {spec.description} | {rps:,.0f} | {spread} | {fmt_ms(p50)} | "
        f"{fmt_ms(p99)} | {ratio} | {p99_ratio} | {cpu:.2f} | {cpu_us:,.0f} | {cpu_ratio} | "
        f"{errors} |"
    )


def cpu_per_request(spec: Spec) -> float:
    """Server CPU microseconds per answered request (median of the rounds): the server's cost
    whoever limits the run (with bench.loadgen the client can be the bottleneck)."""
    return median([r.server_cpu / r.requests * 1e6 for r in spec.results if r.requests])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_admission", description=__doc__)
    parser.add_argument("--large", type=Path, default=harness.LARGE_STATE)
    parser.add_argument("--servers", help="comma-separated; default: all that can run here")
    parser.add_argument("--tool", choices=("auto", "wrk", "loadgen"), default="auto")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument(
        "--profile-servers", default="baseline,small,large,noop", help="comma-separated"
    )
    parser.add_argument("--rate", type=float, default=1000.0, help="open-loop req/s; 0: none")
    parser.add_argument("--rate-servers", default="baseline,small,large")
    parser.add_argument(
        "--single",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="one keep-alive connection, closed loop, per server and round; 0: none",
    )
    parser.add_argument(
        "--reference",
        type=Path,
        metavar="DIR",
        help="another tree (e.g. git archive of main): adds small-ref, large-ref, large-warn-ref",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args(argv)

    tool = args.tool
    if tool == "auto":
        tool = "wrk" if harness.wrk_path() else "loadgen"
    names = args.servers.split(",") if args.servers else default_servers()
    large = harness.ensure_large_state(args.large)
    info = harness.machine()
    print("# machine: " + "; ".join(f"{k}: {v}" for k, v in info.items()))
    print(
        f"# load: {tool}, {args.connections} connections, {args.warmup:g} s warm-up + "
        f"{args.duration:g} s measured, {args.repeat} rounds; large state {large} "
        f"({large.stat().st_size / 1e6:.1f} MB)"
    )

    workdir = Path(tempfile.mkdtemp(prefix="gpu-guard-bench-admission-"))
    certs = harness.make_certs(workdir)
    mixes = {m: harness.review_mix(m) for m in ("small", "large")}
    bodies = {m: harness.write_bodies(r, workdir / f"{m}.bodies") for m, r in mixes.items()}
    for m, reviews in mixes.items():
        print(f"# {m} mix: " + ", ".join(f"{r.label} {len(r.body):,} B" for r in reviews))
    ports = {name: harness.free_port() for name in names}
    all_specs = specs(names, large, certs, ports, args.reference)
    servers: list[ServerProcess] = []
    out: dict[str, Any] = {"machine": info, "tool": tool, "servers": {}}
    with harness.stopping(servers):
        for spec in all_specs:
            server = harness.start_server(
                spec.name, spec.argv, ports[spec.name], certs, workdir, cwd=spec.cwd
            )
            servers.append(server)
            spec.server = server
            spec.rss_ready = harness.rss_mib(server.pid)
            print(
                f"# {spec.name}: ready in {server.ready_seconds:.2f} s, "
                f"RSS {spec.rss_ready:.0f} MiB",
                flush=True,
            )
            if spec.gpu_guard:
                problems = harness.check_answers(server, mixes[spec.mix])
                if problems:
                    print("\n".join(f"# warning: {p}" for p in problems), file=sys.stderr)
        for round_ in range(args.repeat):
            order = all_specs[round_ % len(all_specs) :] + all_specs[: round_ % len(all_specs)]
            for spec in order:
                assert spec.server is not None
                if args.warmup > 0:
                    harness.run_load(
                        tool,
                        spec.server,
                        bodies[spec.mix],
                        connections=args.connections,
                        duration=args.warmup,
                    )
                result = harness.run_load(
                    tool,
                    spec.server,
                    bodies[spec.mix],
                    connections=args.connections,
                    duration=args.duration,
                )
                spec.results.append(result)
                print(
                    f"round {round_ + 1} {spec.name:<16} {result.rps:8,.0f} req/s  "
                    f"p50 {result.p50_ms:6.2f}  p99 {result.p99_ms:6.2f}  max "
                    f"{result.max_ms:7.2f} ms  cpu {result.server_cpu / result.seconds:.2f}  "
                    f"errors {result.errors + result.non_2xx}  (load {harness.load_average()})",
                    flush=True,
                )
                if args.single > 0:
                    single = harness.run_load(
                        tool, spec.server, bodies[spec.mix], connections=1, duration=args.single
                    )
                    spec.single.append(single)
                    print(
                        f"round {round_ + 1} {spec.name:<16} one connection: "
                        f"{single.rps:8,.0f} req/s  p50 {single.p50_ms:6.3f}  p99 "
                        f"{single.p99_ms:6.3f} ms  server CPU "
                        f"{single.server_cpu / max(single.requests, 1) * 1e6:,.0f} µs/req",
                        flush=True,
                    )
        for spec in all_specs:
            assert spec.server is not None
            spec.rss_after = harness.rss_mib(spec.server.pid)
            spec.hwm = harness.hwm_mib(spec.server.pid)
        open_loop: dict[str, LoadResult] = {}
        if args.rate > 0:
            for spec in all_specs:
                if spec.name in args.rate_servers.split(",") and spec.server is not None:
                    result = harness.run_loadgen(
                        spec.server.url("/"),
                        bodies[spec.mix],
                        certs.ca,
                        connections=args.connections,
                        duration=args.duration,
                        rate=args.rate,
                    )
                    open_loop[spec.name] = result
                    print(
                        f"open loop {spec.name:<16} {result.rps:8,.0f} req/s  p50 "
                        f"{result.p50_ms:6.2f}  p90 {result.p90_ms:6.2f}  p99 "
                        f"{result.p99_ms:6.2f}  max {result.max_ms:7.2f} ms  errors "
                        f"{result.errors + result.non_2xx}",
                        flush=True,
                    )
        profiles: dict[str, str] = {}
        if args.profile > 0:
            for spec in all_specs:
                if spec.name in args.profile_servers.split(",") and spec.server is not None:
                    done = profile_server(
                        spec.server,
                        bodies[spec.mix],
                        tool,
                        args.profile,
                        args.connections,
                        harness.WORKDIR / "profiles",
                    )
                    if done is not None:
                        profiles[spec.name] = done[0]
                        print(f"# profile of {spec.name} under load: {done[1].rps:,.0f} req/s")

    by_name = {s.name: s for s in all_specs}
    base = by_name.get("baseline")
    print()
    print(
        "| server | what | req/s (median) | req/s range | p50 ms | p99 ms | req/s / baseline "
        "| p99 / baseline | server CPU (cores) | server CPU µs/req | capacity / baseline "
        "| errors |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for spec in all_specs:
        reference = by_name.get("baseline-uvloop") if spec.name.endswith("uvloop") else base
        if spec.name.startswith("baseline") and not spec.name.endswith("uvloop"):
            reference = None
        print(summary_row(spec, reference))
    print()
    print("| server | ready (s) | RSS ready MiB | RSS after load MiB | peak RSS MiB |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for spec in all_specs:
        assert spec.server is not None
        print(
            f"| {spec.name} | {spec.server.ready_seconds:.2f} | {spec.rss_ready:.0f} | "
            f"{spec.rss_after:.0f} | {spec.hwm:.0f} |"
        )
    if any(spec.single for spec in all_specs):
        print()
        print("One keep-alive TLS connection, closed loop, the same mix (medians of the rounds):")
        print()
        print("| server | req/s | p50 ms | p99 ms | p50 / baseline | server CPU µs/req |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        base_p50 = median([r.p50_ms for r in base.single]) if base and base.single else None
        for spec in all_specs:
            if not spec.single:
                continue
            p50 = median([r.p50_ms for r in spec.single])
            ratio = f"{p50 / base_p50:.2f}" if base_p50 else ""
            cpu = median([r.server_cpu / r.requests * 1e6 for r in spec.single if r.requests])
            print(
                f"| {spec.name} | {median([r.rps for r in spec.single]):,.0f} | {p50:.3f} | "
                f"{median([r.p99_ms for r in spec.single]):.3f} | {ratio} | {cpu:,.0f} |"
            )
    if open_loop:
        print()
        print(
            f"Open loop at {args.rate:g} req/s (bench.loadgen, up to {args.connections} "
            "connections, latency from when each request was due):"
        )
        print()
        print("| server | req/s answered | p50 ms | p90 ms | p99 ms | max ms | errors |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, r in open_loop.items():
            print(
                f"| {name} | {r.rps:,.0f} | {r.p50_ms:.2f} | {r.p90_ms:.2f} | {r.p99_ms:.2f} | "
                f"{r.max_ms:.2f} | {r.errors + r.non_2xx} |"
            )
    if base is not None and base.results:
        busy = median([r.server_cpu / r.seconds for r in base.results])
        if busy < 0.8:
            print(
                f"\nnote: the baseline used {busy:.2f} of its core: the load generator ({tool}) "
                "limited this run, not the servers. Compare 'capacity / baseline' (server CPU "
                "per request), not req/s."
            )
    verdicts = targets(by_name, open_loop, args.rate)
    if verdicts:
        print()
        print("| target | got | verdict |")
        print("| --- | --- | --- |")
        for line in verdicts:
            print(line)
    for name, text in profiles.items():
        print(f"\n## where the time goes: {name}\n\n{text}")

    for spec in all_specs:
        assert spec.server is not None
        out["servers"][spec.name] = {
            "description": spec.description,
            "ready_seconds": spec.server.ready_seconds,
            "rss_ready_mib": spec.rss_ready,
            "rss_after_mib": spec.rss_after,
            "peak_rss_mib": spec.hwm,
            "runs": [r.to_json() for r in spec.results],
            "one_connection": [r.to_json() for r in spec.single],
        }
    out["profiles"] = profiles
    out["open_loop"] = {name: r.to_json() for name, r in open_loop.items()}
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    if args.keep:
        print(f"# logs and bodies kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def targets(by_name: dict[str, Spec], open_loop: dict[str, LoadResult], rate: float) -> list[str]:
    def med(spec: Spec, attr: str) -> float:
        return median([float(getattr(r, attr)) for r in spec.results])

    lines = []
    base, small, large = by_name.get("baseline"), by_name.get("small"), by_name.get("large")
    if base and large and base.results and large.results:
        ratio = med(large, "rps") / med(base, "rps")
        verdict = "met" if ratio >= TARGET_RATIO else f"missed ({ratio / TARGET_RATIO:.0%} of it)"
        lines.append(
            f"| throughput >= {TARGET_RATIO} x baseline (large) | {ratio:.2f} "
            f"({med(large, 'rps'):,.0f} / {med(base, 'rps'):,.0f} req/s) | {verdict} |"
        )
        capacity = cpu_per_request(base) / cpu_per_request(large)
        verdict = "met" if capacity >= TARGET_RATIO else f"missed ({capacity / TARGET_RATIO:.0%})"
        lines.append(
            f"| same, as server CPU per request (large) | {capacity:.2f} "
            f"({cpu_per_request(large):,.0f} / {cpu_per_request(base):,.0f} µs) | {verdict} |"
        )
        p99_ratio = med(large, "p99_ms") / med(base, "p99_ms")
        verdict = (
            "met"
            if p99_ratio <= TARGET_P99_RATIO
            else f"missed by {p99_ratio - TARGET_P99_RATIO:.2f}"
        )
        lines.append(
            f"| p99 at saturation <= {TARGET_P99_RATIO} x baseline p99 (large) | {p99_ratio:.2f} "
            f"({med(large, 'p99_ms'):.2f} / {med(base, 'p99_ms'):.2f} ms) | {verdict} |"
        )
        p99 = med(large, "p99_ms")
        verdict = "met" if p99 <= TARGET_P99_MS else f"missed by {p99 - TARGET_P99_MS:.1f} ms"
        lines.append(
            f"| p99 <= {TARGET_P99_MS:g} ms at that load (large) | {p99:.2f} ms | {verdict} |"
        )
        if "large" in open_loop:
            p99 = open_loop["large"].p99_ms
            verdict = "met" if p99 <= TARGET_P99_MS else f"missed by {p99 - TARGET_P99_MS:.1f} ms"
            lines.append(
                f"| p99 <= {TARGET_P99_MS:g} ms at {rate:g} req/s open loop (large) | "
                f"{p99:.2f} ms | {verdict} |"
            )
    if large and large.single:
        p50 = median([r.p50_ms for r in large.single])
        verdict = (
            "met"
            if p50 <= TARGET_SINGLE_P50_MS
            else f"missed by {p50 - TARGET_SINGLE_P50_MS:.3f} ms"
        )
        lines.append(
            f"| one connection p50 <= {TARGET_SINGLE_P50_MS} ms | {p50:.3f} ms | {verdict} |"
        )
    if small and large and small.results and large.results:
        scale = med(large, "p99_ms") / med(small, "p99_ms")
        verdict = "met" if scale <= TARGET_SCALE else f"missed by {scale - TARGET_SCALE:.2f}"
        lines.append(f"| p99 large <= {TARGET_SCALE} x p99 small | {scale:.2f} | {verdict} |")
    if large and large.server is not None:
        rss = max(large.rss_ready, large.rss_after)
        verdict = "met" if rss < TARGET_RSS_MIB else f"missed by {rss - TARGET_RSS_MIB:.0f} MiB"
        lines.append(
            f"| RSS with the large state < {TARGET_RSS_MIB:.0f} MB | ready "
            f"{large.rss_ready:.0f}, after load {large.rss_after:.0f} MiB | {verdict} |"
        )
        ready = large.server.ready_seconds
        verdict = "met" if ready < TARGET_READY_S else f"missed by {ready - TARGET_READY_S:.1f} s"
        lines.append(
            f"| large state loaded, /readyz 200 < {TARGET_READY_S:g} s | {ready:.2f} s "
            f"| {verdict} |"
        )
    return lines


if __name__ == "__main__":
    raise SystemExit(main())

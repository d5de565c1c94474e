"""Audit of the large state: ``gpu-guard audit --state big.json -o json`` end to end, and its parts.

* **wall**: the CLI in a child process (loading the file, the audit, rendering JSON to a file),
  with its peak RSS (``getrusage`` of the child);
* **in process**: ``load_state`` alone, then ``run_audit`` alone (median of ``--repeat``),
  ``Engine.audit`` in it (the policies' audits and the diagnoses), the diagnoses alone
  (``policies.registry.diagnose_all``), and the JSON rendering (``AuditReport.to_json`` + orjson);
* objects per second: the state's objects over the ``run_audit`` time and over the wall time;
* with ``--profile``: cProfile of one ``run_audit``, the top functions by cumulative time.

``--now`` is fixed (2026-10-30T12:00:00Z) so every run audits the same durations. Also measured
against the home-lab state for scale.

    python -m bench.bench_audit [--large /tmp/gpu-guard-bench/big.json] [--repeat 3] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench import harness
from policies.registry import diagnose_all as diagnose
from webhook.audit.now import parse_now
from webhook.audit.report import run_audit
from webhook.engine import Engine
from webhook.state.files import load_state

NOW = "2026-10-30T12:00:00Z"
TARGET_SECONDS = 5.0


def cli_audit(path: Path) -> dict[str, Any]:
    """The CLI end to end in a child process: wall seconds, exit code, peak RSS, findings."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        argv = [sys.executable, "-m", "webhook.cli", "audit", "--state", str(path)]
        argv += ["-o", "json", "--now", NOW]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        with open(out.name, "wb") as sink:
            done = subprocess.run(
                argv, cwd=harness.ROOT, stdout=sink, stderr=subprocess.PIPE, timeout=600
            )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode not in (0, 1):
            raise RuntimeError(f"audit exited {done.returncode}: {done.stderr.decode()[-2000:]}")
        report = orjson.loads(Path(out.name).read_bytes())
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "exit": done.returncode,
        "peak_rss_mib": after.ru_maxrss / 1024,
        "findings": len(report["findings"]),
        "summary": report["summary"],
        "bytes": os.path.getsize(out.name) if os.path.exists(out.name) else 0,
    }


def in_process(path: Path, repeat: int, profile: bool) -> dict[str, Any]:
    now = parse_now(NOW)
    started = time.perf_counter()
    state = load_state([str(path)])
    load_s = time.perf_counter() - started
    objects = sum(state.counts().values())
    engine = Engine()
    audits, policies, diagnoses, renders = [], [], [], []
    report = None
    for _ in range(repeat):
        started = time.perf_counter()
        report = run_audit(engine, state, now)
        audits.append(time.perf_counter() - started)
        started = time.perf_counter()
        engine.audit(state, now)
        policies.append(time.perf_counter() - started)
        started = time.perf_counter()
        diagnose(state, now)
        diagnoses.append(time.perf_counter() - started)
        started = time.perf_counter()
        orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2)
        renders.append(time.perf_counter() - started)
    assert report is not None
    out: dict[str, Any] = {
        "objects": objects,
        "load_s": load_s,
        "run_audit_s": harness.median(audits),
        "engine_audit_s": harness.median(policies),
        "diagnose_s": harness.median(diagnoses),
        "render_json_s": harness.median(renders),
        "findings": len(report.findings),
    }
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        run_audit(engine, state, now)
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
        out["profile"] = text.getvalue()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_audit", description=__doc__)
    parser.add_argument("--large", type=Path, default=harness.LARGE_STATE)
    parser.add_argument("--small", type=Path, default=harness.SMALL_STATE)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    harness.ensure_large_state(args.large)
    print(f"# load average {harness.load_average()}")
    results: dict[str, Any] = {}
    for label, path in (("small", args.small), ("large", args.large)):
        walls = [cli_audit(path) for _ in range(args.repeat)]
        inner = in_process(path, args.repeat, args.profile and label == "large")
        results[label] = {"cli": walls, "in_process": inner}
    print(
        "| state | objects | CLI wall s (median) | CLI CPU s | CLI peak RSS MiB | load_state s "
        "| run_audit s | Engine.audit s | diagnose s | JSON render s "
        "| objects/s (run_audit) | objects/s (wall) | findings |"
    )
    print(
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: |"
    )
    for label, data in results.items():
        inner = data["in_process"]
        wall = harness.median([w["wall_s"] for w in data["cli"]])
        cpu = harness.median([w["cpu_s"] for w in data["cli"]])
        peak = max(w["peak_rss_mib"] for w in data["cli"])
        objects = inner["objects"]
        print(
            f"| {label} | {objects:,} | {wall:.2f} | {cpu:.2f} | {peak:.0f} | "
            f"{inner['load_s']:.2f} | {inner['run_audit_s']:.3f} | "
            f"{inner['engine_audit_s']:.3f} | {inner['diagnose_s']:.3f} | "
            f"{inner['render_json_s']:.3f} | {objects / inner['run_audit_s']:,.0f} | "
            f"{objects / wall:,.0f} | {data['cli'][0]['findings']:,} |"
        )
    large = results["large"]
    wall = harness.median([w["wall_s"] for w in large["cli"]])
    verdict = "met" if wall < TARGET_SECONDS else f"missed by {wall - TARGET_SECONDS:.1f} s"
    inner_s = large["in_process"]["run_audit_s"]
    print(
        f"\ntarget: audit of the large state < {TARGET_SECONDS:g} s: CLI wall {wall:.2f} s "
        f"({verdict}); run_audit alone {inner_s:.2f} s"
    )
    if "profile" in large["in_process"]:
        print("\n" + large["in_process"]["profile"])
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

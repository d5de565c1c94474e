"""DRA at scale (issue 14 item 9): the synthetic DRA cluster (``bench.synthetic --dra``) loaded,
admitted against and audited, each figure beside a baseline measured in the same run.

* **load** (a): for each DRA scale (default 0.1 and 1.0) and the device-plugin cluster of the
  largest scale, a fresh child process loads the compact state file (``load_state``): wall
  seconds, RSS attributable to the state (after the load; after ``gc.collect()`` + glibc
  ``malloc_trim``), peak RSS during the load, and the MB reachable from the DRA index
  (``ClusterState._dra``) and from the whole state (a gc walk);
* **audit** (c): the largest DRA state and the device-plugin state of the same node count, both
  loaded, audited in turn: ``run_audit``, ``Engine.audit`` (the policies' audits) and the
  diagnoses alone, median of ``--repeat``, and the findings per policy; ``gpu-guard audit
  --state FILE -o json`` end to end (wall, CPU, peak RSS) for each. Target: the DRA state's
  ``run_audit`` within the device-plugin state's;
* **admission** (b): ``Engine.evaluate`` in process on reviews built with
  ``webhook.admission.changes.proposed_request`` + ``review_of`` and parsed as the server does,
  each on a fresh copy of the request: a ResourceClaim CREATE (one H100 by product), a Node
  UPDATE relabelling to vm-passthrough a Ready container node where pods hold GPUs through
  allocated claims, a VirtualMachine CREATE taking its GPU from a claim template. Against the
  small DRA state (``--small-scale``, 20 nodes) and the largest, interleaved in rounds so load on
  the host hits both alike; p50/p99 per state and the p99 ratio large/small (target <= 1.2).
  Whatever verdicts the registry's policies give are listed, so new policies need no change here.

State files go to ``$GPU_GUARD_BENCH_DIR`` (``/tmp/gpu-guard-bench``), written when missing.

    python -m bench.bench_dra [--scales 0.1,1.0] [--small-scale 0.004] [--evaluations 3000]
    python -m bench.bench_dra --scales 0.02,0.2 --repeat 1 --json /tmp/dra.json   # quicker
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from bench import harness
from bench.bench_audit import NOW, cli_audit
from bench.bench_sync import MB, malloc_trim, reachable_bytes, reset_peak, self_status
from bench.synthetic import DraLayout, dra_plan
from bench.synthetic.dra_claims import claim_spec
from bench.synthetic.dra_layout import DRA_GPU_MODELS, GPU_CLASS
from bench.synthetic.dra_nodes import RESOURCE_API, dra_nodes
from bench.synthetic.dra_plan import PlannedClaim, Request, product_is
from bench.synthetic.dra_workloads import dra_virtual_machines
from policies.cluster.workload import WORKLOAD_LABEL
from policies.registry import diagnose_all
from policies.state.cluster import ClusterState
from policies.vocabulary.requests import AdmissionRequest
from webhook.admission.changes import proposed_request
from webhook.admission.compose import review_of
from webhook.admission.review import parse_review
from webhook.audit.now import parse_now
from webhook.audit.report import run_audit
from webhook.engine import Engine
from webhook.state.files import load_state

TARGET_P99_RATIO = 1.2
Result = dict[str, Any]


# --- state files ---------------------------------------------------------------------------------


def state_file(scale: float, dra: bool) -> Path:
    """The compact state file of that cluster and scale, written by bench.synthetic if missing."""
    name = f"dra-{scale:g}.json" if dra else ("big.json" if scale == 1.0 else f"big-{scale:g}.json")
    path = harness.WORKDIR / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "bench.synthetic", "--compact", "-o", str(path)]
        argv += ["--scale", str(scale), *(["--dra"] if dra else [])]
        subprocess.run(argv, cwd=harness.ROOT, check=True, timeout=900)
    return path


# --- (a) load and memory, in a fresh process per state -------------------------------------------


def child(path: Path, walk: bool) -> Result:
    """Load ``path`` and measure what the state costs."""
    gc.collect()
    before = self_status()["VmRSS"]
    peak_reset = reset_peak()
    started = time.perf_counter()
    state = load_state([str(path)])
    load_s = time.perf_counter() - started
    after = self_status()
    gc.collect()
    trimmed = self_status()["VmRSS"]
    if malloc_trim():
        trimmed = self_status()["VmRSS"]
    result: Result = {
        "file_mb": path.stat().st_size / 1e6,
        "load_s": load_s,
        "rss_delta_mb": (after["VmRSS"] - before) / MB,
        "rss_after_trim_delta_mb": (trimmed - before) / MB,
        "peak_rss_delta_mb": (after["VmHWM"] - before) / MB if peak_reset else None,
        "objects": sum(state.counts().values()),
        "devices": len(state._dra.devices),
        "kept_pods": len(state._pods),
    }
    if walk:
        database = state._db
        result["dra_index_mb"] = reachable_bytes(state._dra, exclude=[database]) / MB
        result["state_walk_mb"] = reachable_bytes(state, exclude=[database]) / MB
    return result


def in_child(*args: str) -> Result:
    """``bench_dra`` with ``args`` in a fresh process: its JSON line. (A fresh process also
    keeps ``getrusage(RUSAGE_CHILDREN)`` to the one CLI run it waits for.)"""
    argv = [sys.executable, "-m", "bench.bench_dra", *args]
    done = subprocess.run(argv, cwd=harness.ROOT, capture_output=True, timeout=1800, check=False)
    if done.returncode != 0:
        why = done.stderr.decode()[-2000:]
        raise RuntimeError(f"{' '.join(args)}: child exited {done.returncode}: {why}")
    result: Result = orjson.loads(done.stdout)
    return result


# --- (c) audit, the DRA and the device-plugin state interleaved ----------------------------------


def audits(states: dict[str, ClusterState], repeat: int) -> Result:
    """``run_audit``, ``Engine.audit`` and the diagnoses alone, median of ``repeat``, each round
    over every state so that load on the host falls on all of them."""
    now = parse_now(NOW)
    engine = Engine()
    times: dict[str, dict[str, list[float]]] = {label: {} for label in states}
    findings: dict[str, dict[str, int]] = {}
    for _ in range(repeat):
        for label, state in states.items():
            started = time.perf_counter()
            report = run_audit(engine, state, now)
            lap = time.perf_counter()
            engine.audit(state, now)
            lap2 = time.perf_counter()
            diagnose_all(state, now)
            done = time.perf_counter()
            for key, took in (("run_audit_s", lap - started), ("engine_audit_s", lap2 - lap)):
                times[label].setdefault(key, []).append(took)
            times[label].setdefault("diagnose_s", []).append(done - lap2)
            findings[label] = dict(Counter(f.verdict.policy for f in report.findings).most_common())
    return {
        label: {key: harness.median(values) for key, values in by_key.items()}
        | {"findings": findings[label]}
        for label, by_key in times.items()
    }


# --- (b) admission -------------------------------------------------------------------------------


def switch_node(layout: DraLayout) -> str:
    """A Ready container node (the device plugin off) where Running pods hold GPUs through
    allocated claims: the one a relabel to vm-passthrough would hurt."""
    held = {c.node for c in dra_plan(layout).claims}
    for node, _ in layout.gpu_nodes():
        if node in held and node not in layout.not_ready | layout.managed_twice:
            return node
    raise RuntimeError(f"no container node with allocated claims at scale {layout.scale}")


def _claim_of_a_job(layout: DraLayout) -> PlannedClaim:
    return next(c for c in dra_plan(layout).claims if c.request.device_class == GPU_CLASS)


def reviews(layout: DraLayout) -> dict[str, AdmissionRequest]:
    """The three requests, as the server parses them, aimed at objects of ``layout``'s state."""
    node_name = switch_node(layout)
    node = next(n for n in dra_nodes(layout) if n["metadata"]["name"] == node_name)
    relabel = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node_name, "labels": {WORKLOAD_LABEL: "vm-passthrough"}},
    }
    request = Request(GPU_CLASS, (product_is(DRA_GPU_MODELS[0].product),), 1)
    claim = {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaim",
        "metadata": {"name": "bench-train-gpu", "namespace": _claim_of_a_job(layout).namespace},
        "spec": claim_spec(request),
    }
    running = next(vm for vm in dra_virtual_machines(layout) if vm["status"]["ready"])
    vm = {
        "apiVersion": running["apiVersion"],
        "kind": "VirtualMachine",
        "metadata": {"name": "bench-gpu-vm", "namespace": running["metadata"]["namespace"]},
        "spec": running["spec"],
    }
    changes = {
        "ResourceClaim CREATE": (claim, None),
        "Node UPDATE (relabel to vm-passthrough)": (relabel, node),
        "VirtualMachine CREATE (claim template)": (vm, None),
    }
    return {
        label: parse_review(
            orjson.dumps(review_of(proposed_request(change, old, harness.ADMIN, dry_run=False)))
        )
        for label, (change, old) in changes.items()
    }


def percentile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def admission(
    states: dict[str, tuple[ClusterState, dict[str, AdmissionRequest]]],
    evaluations: int,
    rounds: int,
) -> Result:
    """µs per ``Engine.evaluate``, each on a fresh copy of the request, the states interleaved
    in ``rounds`` so that load on the host falls on both."""
    engine = Engine()
    timings: dict[tuple[str, str], list[float]] = {}
    per_round = max(1, evaluations // rounds)
    for _ in range(rounds):
        for label, (state, requests) in states.items():
            for kind, request in requests.items():
                copies = [replace(request) for _ in range(per_round)]
                times = timings.setdefault((label, kind), [])
                for copy in copies:
                    started = time.perf_counter_ns()
                    engine.evaluate(copy, state)
                    times.append((time.perf_counter_ns() - started) / 1000)
    out: Result = {}
    for (label, kind), times in timings.items():
        ordered = sorted(times)
        state, requests = states[label]
        decision = engine.evaluate(replace(requests[kind]), state)
        out.setdefault(kind, {})[label] = {
            "n": len(ordered),
            "p50_us": percentile(ordered, 0.5),
            "p99_us": percentile(ordered, 0.99),
            "allowed": decision.allowed,
            "verdicts": [f"{v.policy}:{v.action.label}" for v in decision.verdicts],
        }
    return out


# --- the run -------------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render(
    loads: dict[str, Result],
    audited: dict[str, Result],
    clis: dict[str, Result],
    adm: Result,
    large: str,
) -> str:
    lines = [
        "| state | file MB | objects | devices | kept pods | load s | RSS Δ MB | RSS Δ trimmed MB "
        "| peak RSS Δ MB | DRA index MB | state MB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, r in loads.items():
        lines.append(
            f"| {label} | {r['file_mb']:.1f} | {r['objects']:,} | {r['devices']:,} | "
            f"{r['kept_pods']:,} | {r['load_s']:.2f} | {_fmt(r['rss_delta_mb'])} | "
            f"{_fmt(r['rss_after_trim_delta_mb'])} | {_fmt(r['peak_rss_delta_mb'])} | "
            f"{_fmt(r.get('dra_index_mb'))} | {_fmt(r.get('state_walk_mb'))} |"
        )
    lines += [
        "",
        "| state | run_audit s | Engine.audit s | diagnose s | CLI wall s | CLI CPU s "
        "| CLI peak RSS MiB | findings |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for label, r in audited.items():
        cli = clis[label]
        found = ", ".join(f"{policy} {n:,}" for policy, n in r["findings"].items())
        lines.append(
            f"| {label} | {r['run_audit_s']:.3f} | {r['engine_audit_s']:.3f} | "
            f"{r['diagnose_s']:.3f} | {cli['wall_s']:.2f} | {cli['cpu_s']:.2f} | "
            f"{cli['peak_rss_mib']:.0f} | {found} |"
        )
    lines += [
        "",
        f"| request | small p50 µs | small p99 µs | {large} p50 µs | {large} p99 µs "
        "| p50 ratio | **p99 ratio** | verdicts (small / large) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for kind, by_state in adm.items():
        s, b = by_state["small"], by_state[large]
        verdicts = f"{', '.join(s['verdicts']) or 'none'} / {', '.join(b['verdicts']) or 'none'}"
        lines.append(
            f"| {kind} | {s['p50_us']:.1f} | {s['p99_us']:.1f} | {b['p50_us']:.1f} | "
            f"{b['p99_us']:.1f} | {b['p50_us'] / s['p50_us']:.2f} | "
            f"**{b['p99_us'] / s['p99_us']:.2f}** | {verdicts} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_dra", description=__doc__)
    parser.add_argument("--scales", default="0.1,1.0", help="DRA scales to load")
    parser.add_argument("--small-scale", type=float, default=0.004)
    parser.add_argument("--evaluations", type=int, default=3000, help="per request and state")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5, help="audits per state (median)")
    parser.add_argument("--no-walk", action="store_true", help="skip the gc walk of the state")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--walk", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cli", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        sys.stdout.write(orjson.dumps(child(args.child, args.walk)).decode())
        return 0
    if args.cli is not None:
        sys.stdout.write(orjson.dumps(cli_audit(args.cli)).decode())
        return 0
    scales = sorted(float(s) for s in args.scales.split(","))
    large = f"{scales[-1]:g}"
    dra_large, dp_large = f"DRA {large}", f"device plugin {large}"
    print(f"# load average {harness.load_average()}", flush=True)
    files = {f"DRA {s:g}": state_file(s, dra=True) for s in scales}
    files[dp_large] = state_file(scales[-1], dra=False)
    small_file = state_file(args.small_scale, dra=True)
    walk = [] if args.no_walk else ["--walk"]
    loads = {label: in_child("--child", str(path), *walk) for label, path in files.items()}
    clis = {label: in_child("--cli", str(files[label])) for label in (dra_large, dp_large)}
    print(f"# loads and CLI audits done; load average {harness.load_average()}", flush=True)
    small_layout, large_layout = DraLayout.at(args.small_scale), DraLayout.at(scales[-1])
    loaded = {dra_large: load_state([str(files[dra_large])])}
    loaded[dp_large] = load_state([str(files[dp_large])])
    audited = audits(loaded, args.repeat)
    states = {
        "small": (load_state([str(small_file)]), reviews(small_layout)),
        large: (loaded[dra_large], reviews(large_layout)),
    }
    adm = admission(states, args.evaluations, args.rounds)
    print(render(loads, audited, clis, adm, large))
    worst = max(by[large]["p99_us"] / by["small"]["p99_us"] for by in adm.values())
    dra_audit, dp_audit = audited[dra_large]["run_audit_s"], audited[dp_large]["run_audit_s"]
    print(
        f"\ntargets: admission p99 large/small <= {TARGET_P99_RATIO}: worst {worst:.2f} "
        f"({'met' if worst <= TARGET_P99_RATIO else 'missed'}); DRA audit within the "
        f"device-plugin audit of {large_layout.nodes:,} nodes: {dra_audit:.3f} s vs "
        f"{dp_audit:.3f} s ({'met' if dra_audit <= dp_audit else 'missed'}, "
        f"x{dra_audit / dp_audit:.2f}); load average {harness.load_average()}"
    )
    if args.json is not None:
        results = {"machine": harness.machine(), "loads": loads, "audits": audited}
        results |= {"cli": clis, "admission": adm}
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

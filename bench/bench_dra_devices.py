"""What a DRA device costs to load (issue 38 item 6): the DRA state and the same cluster under
DynamicMIG (each container GPU also published as seven partitions drawing on its counters, the
counters in a slice of their own: eight times the devices), each loaded in a fresh process by
this checkout's code and by another checkout's (``--before``, e.g. main), in the same run.

Per state and code: load seconds, RSS attributable to the state after a trim, peak RSS; per
device, the marginal cost of the DynamicMIG devices (the DynamicMIG state minus the plain one,
divided by the devices added), so nodes, pods and claims are left out; each load ``--repeat``
times, interleaved, the fastest kept. Target: this checkout's
marginal bytes and load time per device within 1.2 times the other's.

    python -m bench.bench_dra_devices --scale 0.1 --before ../main
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from bench import harness

TARGET_PER_DEVICE = 1.2
Result = dict[str, Any]


def state_file(scale: float, dynamic_mig: bool) -> Path:
    """The compact DRA state at ``scale`` (``dynamic_mig``: under DynamicMIG), made if missing."""
    name = f"dra-{'dmig-' if dynamic_mig else ''}{scale:g}.json"
    path = harness.WORKDIR / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "bench.synthetic", "--dra", "--compact", "-o", str(path)]
        argv += ["--scale", str(scale), *(["--dynamic-mig"] if dynamic_mig else [])]
        subprocess.run(argv, cwd=harness.ROOT, check=True, timeout=1800)
    return path


def load_in(code: Path, path: Path) -> Result:
    """``bench.bench_dra --child`` of ``code``'s checkout, in a fresh process: its JSON line."""
    argv = [sys.executable, "-m", "bench.bench_dra", "--child", str(path)]
    done = subprocess.run(argv, cwd=code, capture_output=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{code}: load of {path} exited {done.returncode}: {done.stderr[-2000:]!r}"
        )
    result: Result = orjson.loads(done.stdout)
    return result


def marginal(plain: Result, dynamic: Result) -> Result:
    """Per device the DynamicMIG state adds: bytes (trimmed RSS) and load microseconds."""
    added = dynamic["devices"] - plain["devices"]
    rss = (dynamic["rss_after_trim_delta_mb"] - plain["rss_after_trim_delta_mb"]) * 2**20
    return {
        "devices_added": added,
        "bytes_per_device": rss / added,
        "load_us_per_device": (dynamic["load_s"] - plain["load_s"]) * 1e6 / added,
    }


def render(loads: dict[str, dict[str, Result]], per: dict[str, Result]) -> str:
    lines = [
        "| code | state | devices | load s | RSS Δ trimmed MB | peak RSS Δ MB |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for code, by_state in loads.items():
        for state, r in by_state.items():
            peak = r["peak_rss_delta_mb"]
            lines.append(
                f"| {code} | {state} | {r['devices']:,} | {r['load_s']:.2f} | "
                f"{r['rss_after_trim_delta_mb']:.1f} | {'-' if peak is None else f'{peak:.1f}'} |"
            )
    lines += [
        "",
        "| code | devices added | bytes per device | load µs per device |",
        "| --- | ---: | ---: | ---: |",
    ]
    for code, m in per.items():
        lines.append(
            f"| {code} | {m['devices_added']:,} | {m['bytes_per_device']:.0f} | "
            f"{m['load_us_per_device']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_dra_devices", description=__doc__)
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--before", type=Path, help="another checkout to measure the same way")
    parser.add_argument("--repeat", type=int, default=3, help="loads per state and code (fastest)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    files = {name: state_file(args.scale, name == "DynamicMIG") for name in ("DRA", "DynamicMIG")}
    codes = {"this checkout": harness.ROOT}
    if args.before is not None:
        codes = {f"before ({args.before})": args.before.resolve(), **codes}
    runs: dict[str, dict[str, list[Result]]] = {c: {s: [] for s in files} for c in codes}
    for _ in range(args.repeat):  # interleaved, so load on the host hits every code alike
        for code, path in codes.items():
            for state, file in files.items():
                runs[code][state].append(load_in(path, file))
    loads = {
        code: {s: min(rs, key=lambda r: r["load_s"]) for s, rs in by.items()}
        for code, by in runs.items()
    }
    per = {code: marginal(by["DRA"], by["DynamicMIG"]) for code, by in loads.items()}
    print(f"# scale {args.scale:g}; load average {harness.load_average()}")
    print(render(loads, per))
    if args.before is not None:
        before, now = per[next(iter(per))], per["this checkout"]
        ratios = {
            key: now[key] / before[key] if before[key] > 0 else float("inf")
            for key in ("bytes_per_device", "load_us_per_device")
        }
        met = all(r <= TARGET_PER_DEVICE for r in ratios.values())
        print(
            f"\ntarget: per device within x{TARGET_PER_DEVICE} of before: bytes "
            f"x{ratios['bytes_per_device']:.2f}, load x{ratios['load_us_per_device']:.2f} "
            f"({'met' if met else 'missed'})"
        )
    if args.json is not None:
        results = {"machine": harness.machine(), "loads": loads, "per_device": per}
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

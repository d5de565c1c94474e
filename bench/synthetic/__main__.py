"""``python -m bench.synthetic``: writes the cluster as one ``kind: List``, or checks that the
compact form loads to the same state and audits to the same report."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench.synthetic import DEFAULT_SEED, write_list
from bench.synthetic.compact import verify


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.synthetic", description="A large, realistic, deterministic cluster."
    )
    parser.add_argument("-o", "--output", help="file to write (a kind: List)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every count")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--format", choices=("json", "yaml"), default="json")
    parser.add_argument("--compact", action="store_true", help="only the fields gpu-guard reads")
    parser.add_argument(
        "--dra", action="store_true", help="the DRA cluster: GPUs in ResourceSlices, claims"
    )
    parser.add_argument(
        "--dynamic-mig",
        action="store_true",
        help="with --dra: container GPUs under DynamicMIG (counters, seven partitions each)",
    )
    parser.add_argument(
        "--if-missing", action="store_true", help="do nothing when --output already exists"
    )
    parser.add_argument(
        "--verify-compact",
        action="store_true",
        help="check the compact form loads to the same ClusterState and audit report",
    )
    parser.add_argument("--verify-scale", type=float, default=0.02)
    args = parser.parse_args(argv)
    if args.output is None and not args.verify_compact:
        parser.error("-o/--output or --verify-compact is required")
    if args.verify_compact:
        started = time.perf_counter()
        problems = verify(args.verify_scale, args.seed, args.dra)
        for problem in problems:
            print(f"compact: {problem}", file=sys.stderr)
        verdict = "FAILED" if problems else "same ClusterState and audit report"
        took = time.perf_counter() - started
        print(f"compact form at scale {args.verify_scale}: {verdict} ({took:.1f} s)")
        if problems:
            return 1
    if args.output is None:
        return 0
    output = Path(args.output)
    if args.if_missing and output.exists():
        print(f"{output}: exists, kept", file=sys.stderr)
        return 0
    started = time.perf_counter()
    output.parent.mkdir(parents=True, exist_ok=True)
    counts = write_list(
        output,
        args.format,
        scale=args.scale,
        seed=args.seed,
        compact=args.compact,
        dra=args.dra,
        dynamic_mig=args.dynamic_mig,
    )
    size = counts.pop("bytes")
    print(
        f"{output}: {sum(counts.values()):,} objects, {size / 1e6:,.1f} MB in "
        f"{time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    for label, n in counts.items():
        print(f"  {label:<36} {n:>8,}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Device taints at scale (issue 37 item 6): 5,000 nodes x 8 GPUs published by NVIDIA's DRA
driver, 1 % of the devices tainted by their slices (the driver's gpu-lost), NoExecute
DeviceTaintRules over a rack's nodes (one per node's pool, ``RACK`` of them), rules acting.

Admission timed in process (``Engine.evaluate`` on reviews parsed as the server does) by three
codes on the same inputs, in the same run: this tree; the baseline, the commit before the DRA
taints work was merged (the first parent of the merge of branch dra-taints); and that merge.
The older two are ``git archive`` copies in a temporary directory (no network). Each side is a
fresh process (``bench/taint_child.py``) that loads the same state file and evaluates the same
AdmissionReviews, each ``--evaluations`` times in a row after a collection; ``--pairs`` rounds
of one process per side, the order reversed every other round. Requests: a DeviceTaintRule
CREATE over one node's pool (the warned blast radius), over the driver (denied on the bound),
naming a device only (on every node: denied on the bound), a ResourceClaim CREATE for one GPU,
and the core switch (a Node relabelled vm-passthrough under a pod holding its GPU through a
claim).

Figures, ratios only (the machine is shared): this tree's p50 over the baseline's, pair by pair;
DeviceTaintRules, which the baseline does not judge, over the core switch in the same process;
and the p50 at ``--nodes`` over the same at ``--small-nodes``, with the Python lines one
evaluation runs at each (counted: an index hit runs as many lines, and stays near 1 in time,
while the nodes grow fivefold).

    python -m bench.bench_taints [--nodes 5000] [--small-nodes 1000] [--pairs 3] [--baseline REV]
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import orjson

from bench import harness
from webhook.admission.changes import proposed_request
from webhook.admission.compose import review_of

Result = dict[str, Any]
CHILD = Path(__file__).resolve().parent / "taint_child.py"
RULE_ONE_POOL = "DeviceTaintRule CREATE, one pool (warned)"
RULE_DRIVER = "DeviceTaintRule CREATE, the driver (denied)"
RULE_NAME_ONLY = "DeviceTaintRule CREATE, a device name only"
CLAIM = "ResourceClaim CREATE, one GPU"
SWITCH = "Node UPDATE to vm-passthrough (core switch)"
NO_BASELINE = (RULE_ONE_POOL, RULE_DRIVER, RULE_NAME_ONLY)
TARGET = 100
"""The node the requests name (node-00100): relabelled, its pool tainted."""
BASELINE = "before taints"
MERGED = "taints merged"
THIS = "this tree"
SMALL = "this tree, fewer nodes"
BASE_SMALL = "before taints, fewer nodes"
GPUS = 8
RACK = 16
TAINTED_SHARE = 0.01
GPU_CLASS_EXPRESSION = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
)
WORKLOAD = "nvidia.com/gpu.workload.config"
NVIDIA = "gpu.nvidia.com"
PIN = {"key": "metadata.name", "operator": "In"}


def _node(name: str) -> dict[str, Any]:
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {WORKLOAD: "container"}},
        "status": {"conditions": [ready], "allocatable": {"cpu": "64"}},
    }


def _slice(node: str, tainted: set[int]) -> dict[str, Any]:
    devices = []
    for i in range(GPUS):
        device: dict[str, Any] = {
            "name": f"gpu-{i}",
            "attributes": {"type": {"string": "gpu"}, "productName": {"string": "NVIDIA H100"}},
        }
        if i in tainted:
            device["taints"] = [{"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"}]
        devices.append(device)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _rule(name: str, **selector: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": selector,
            "taint": {"key": "example.com/rack-maintenance", "effect": "NoExecute"},
        },
    }


def _claim(name: str, node: str | None) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
            }
        },
    }
    if node is not None:
        claim["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": "gpu.nvidia.com",
                            "pool": node,
                            "device": "gpu-7",
                        }
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": f"{name}-uid"}],
        }
    return claim


def _pod(name: str, node: str, claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "nodeName": node,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
        },
        "status": {"phase": "Running"},
    }


def objects(nodes: int, seed: int = 37) -> list[dict[str, Any]]:
    """The cluster: the GPU class, ``nodes`` nodes and their slices (1 % of the devices tainted),
    a pod on a claim on every tenth node, and ``RACK`` NoExecute rules over one pool each."""
    rng = random.Random(seed)
    names = [f"node-{i:05d}" for i in range(nodes)]
    tainted = rng.sample(range(nodes * GPUS), int(nodes * GPUS * TAINTED_SHARE))
    by_node: dict[int, set[int]] = {}
    for index in tainted:
        by_node.setdefault(index // GPUS, set()).add(index % GPUS)
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": GPU_CLASS_EXPRESSION}}]},
        }
    ]
    for i, name in enumerate(names):
        out += [_node(name), _slice(name, by_node.get(i, set()))]
        if i % 10 == 0:  # a tenth of the nodes run a pod on gpu-7 through a claim
            out += [_claim(f"c-{i}", name), _pod(f"c-{i}-pod", name, f"c-{i}")]
    out += [_rule(f"rack-{name}", pool=name) for name in names[:RACK]]
    return out


def reviews() -> dict[str, Any]:
    """The AdmissionReviews both sides evaluate, as the API server would send them."""
    target = f"node-{TARGET:05d}"
    relabel = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": target}}
    relabel["metadata"]["labels"] = {WORKLOAD: "vm-passthrough"}  # type: ignore[index]
    changes = {
        RULE_ONE_POOL: (_rule("drain", pool=target), None),
        RULE_DRIVER: (_rule("drain-all", driver=NVIDIA), None),
        RULE_NAME_ONLY: (_rule("drain-gpu-3", device="gpu-3"), None),
        CLAIM: (_claim("bench-claim", None), None),
        SWITCH: (relabel, _node(target)),
    }
    return {
        label: review_of(proposed_request(change, old, harness.ADMIN, dry_run=False))
        for label, (change, old) in changes.items()
    }


# --- the two sides ------------------------------------------------------------------------------


def revisions(baseline: str | None, merged: str | None) -> dict[str, str]:
    """The older codes to measure: the baseline (default: the first parent of the merge of
    branch dra-taints into main) and that merge (left out when git log has no such merge and
    a baseline is given)."""
    merge = _git("log", "--merges", "-1", "--format=%H", "--grep=^Merge branch 'dra-taints'")
    if not merge and baseline is None:
        raise SystemExit("bench_taints: no merge of branch dra-taints in git log; give --baseline")
    found = {BASELINE: baseline or f"{merge}^1"}
    if merged or merge:
        found[MERGED] = merged or merge
    return found


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(harness.ROOT), *args], capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise SystemExit(f"bench_taints: git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def checkout(revision: str, into: Path) -> str:
    """``revision``'s tree written under ``into`` (git archive: no network, no work tree of
    this repository touched); returns the commit."""
    commit = _git("rev-parse", "--verify", revision + "^{commit}")
    archive = subprocess.run(
        ["git", "-C", str(harness.ROOT), "archive", "--format=tar", commit],
        capture_output=True,
        timeout=300,
        check=True,
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return commit


def run_side(code: Path, state: Path, requests: Path, evaluations: int) -> Result:
    """``taint_child`` with ``code``'s packages, in a fresh process: its JSON line."""
    argv = [sys.executable, str(CHILD), str(code), str(state), str(requests), str(evaluations)]
    done = subprocess.run(argv, cwd=code, capture_output=True, timeout=1800, check=False)
    if done.returncode != 0:
        why = done.stderr.decode()[-2000:]
        raise SystemExit(f"bench_taints: {code}: the child exited {done.returncode}: {why}")
    result: Result = orjson.loads(done.stdout)
    return result


# --- the figures --------------------------------------------------------------------------------


def spread(values: list[float]) -> str:
    """The median of ``values``, then min-max across the pairs."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def report(runs: dict[str, list[Result]], nodes: int, small: int) -> list[str]:
    """Markdown: per request, each code's p50 and its ratio to the baseline's (pair by pair),
    this tree's p50 over the core switch's in the same process (DeviceTaintRules have no
    baseline), and this tree's p50 at ``nodes`` over the same at ``small`` nodes (an index hit
    stays near 1 while the nodes grow)."""
    now, before = runs[THIS], runs[BASELINE]
    others = [side for side in runs if side not in (BASELINE, SMALL, BASE_SMALL)]
    lines = [
        f"| request | {BASELINE} p50 ms | "
        + " | ".join(f"{side} p50 ms | {side} / {BASELINE}" for side in others)
        + f" | {THIS} / core switch | {THIS}, p50 at {nodes:,} / {small:,} nodes | lines run "
        f"| {BASELINE}, p50 at {nodes:,} / {small:,} nodes | lines run |",
        "| --- | ---: | "
        + " | ".join("---: | ---:" for _ in others)
        + " | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label in now[0]["p50_ms"]:
        theirs = [r["p50_ms"][label] for r in before]
        cells = [f"{statistics.median(theirs):.3f}"]
        for side in others:
            mine = [r["p50_ms"][label] for r in runs[side]]
            ratio = "not judged before"
            if label not in NO_BASELINE:
                ratio = spread([a / b for a, b in zip(mine, theirs, strict=True)])
            cells += [f"{statistics.median(mine):.3f}", ratio]
        cells.append(spread([r["p50_ms"][label] / r["p50_ms"][SWITCH] for r in now]))
        for big, little in ((THIS, SMALL), (BASELINE, BASE_SMALL)):
            pairs = zip(runs[big], runs[little], strict=True)
            cells.append(spread([a["p50_ms"][label] / b["p50_ms"][label] for a, b in pairs]))
            work = runs[big][0]["lines"][label], runs[little][0]["lines"][label]
            cells.append(f"{work[0]:,} / {work[1]:,}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    for side in (BASELINE, *others):
        first = runs[side][0]
        lines.append(f"- {side}: rules act: {first['rules_act']}; verdicts:")
        verdicts = first["verdicts"].items()
        lines += [f"  - {label}: {', '.join(v) or 'none'}" for label, v in verdicts]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--small-nodes", type=int, default=1000, help="the growth's base")
    parser.add_argument("--evaluations", type=int, default=300, help="per request and process")
    parser.add_argument("--pairs", type=int, default=3, help="rounds of one process per side")
    parser.add_argument("--baseline", help="git revision (default: before dra-taints merged)")
    parser.add_argument(
        "--merged", help="git revision also measured (default: the merge of dra-taints)"
    )
    args = parser.parse_args()
    if min(args.nodes, args.small_nodes) <= TARGET:
        parser.error(
            f"--nodes and --small-nodes: above {TARGET} (the requests name node-{TARGET:05d})"
        )
    harness.WORKDIR.mkdir(parents=True, exist_ok=True)
    states = {}
    for count in (args.nodes, args.small_nodes):
        states[count] = harness.WORKDIR / f"taints-{count}.json"
        listed = {"apiVersion": "v1", "kind": "List", "items": objects(count)}
        states[count].write_bytes(orjson.dumps(listed))
    requests = harness.WORKDIR / "taints-reviews.json"
    requests.write_bytes(orjson.dumps(reviews()))
    older = revisions(args.baseline, args.merged)
    with tempfile.TemporaryDirectory(prefix="gpu-guard-baseline-") as tmp:
        commits = {side: checkout(rev, Path(tmp) / side) for side, rev in older.items()}
        sides = {side: (Path(tmp) / side, args.nodes) for side in older}
        sides[THIS] = (harness.ROOT, args.nodes)
        sides[SMALL] = (harness.ROOT, args.small_nodes)
        sides[BASE_SMALL] = (Path(tmp) / BASELINE, args.small_nodes)
        runs: dict[str, list[Result]] = {side: [] for side in sides}
        for pair in range(args.pairs):  # interleaved, the order reversed every other round
            for side in list(sides) if pair % 2 == 0 else list(reversed(sides)):
                code, count = sides[side]
                runs[side].append(run_side(code, states[count], requests, args.evaluations))
    named = ", ".join(f"{side} {commit[:10]}" for side, commit in commits.items())
    print(
        f"# {args.nodes:,} nodes x {GPUS} GPUs, {TAINTED_SHARE:.0%} tainted, {RACK} rules; "
        f"{named}; {args.pairs} rounds x {args.evaluations} evaluations; medians (min-max) of "
        f"the rounds; load average {harness.load_average()}"
    )
    print("\n".join(report(runs, args.nodes, args.small_nodes)))


if __name__ == "__main__":
    main()

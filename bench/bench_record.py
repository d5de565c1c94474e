"""The record the API server's own policy reads (policies/cluster/record.py): its size at scale,
the cost of recomputing it, and how often the leader writes it under churn.

* bytes: 5,000 nodes of 8 GPU pods each (node names of 40 characters, pod names of 60), against
  a ConfigMap's 1 MiB;
* compute: one ``record_data`` over that state, the leader's work every recompute interval;
* writes per minute: the keeper's rule (write only when the content changed) replayed over one
  simulated minute of recompute rounds (``DEFAULT_RECORD_INTERVAL`` apart), with GPU pods
  starting at ``--churn`` per second; with no churn it writes nothing;
* lag from a pod's start to the record: at most one recompute interval plus the compute plus the
  write; measured end to end by bench/bench_record_lag.py.

    python -m bench.bench_record [--nodes 5000] [--churn 5]
"""

from __future__ import annotations

import argparse
import random
import time

from policies.cluster.record import (
    CARRIED,
    MAX_BYTES,
    configured,
    content_changed,
    record_data,
    size,
)
from policies.state.cluster import ClusterState
from tests.builders import gpu_pod, node
from webhook.defaults import DEFAULT_RECORD_INTERVAL
from webhook.state.feeding import new_state

GPUS = 8
SETTINGS = configured(CARRIED, CARRIED, CARRIED)


def cluster(nodes: int) -> tuple[ClusterState, list[str]]:
    state = new_state()
    names = [f"gpu-node-{i:04d}.rack-{i % 40:02d}.example.internal" for i in range(nodes)]
    for name in names:
        state.upsert(node(name))
    for i, name in enumerate(names):
        for g in range(GPUS):
            state.upsert(
                gpu_pod(f"training-job-{i:04d}-worker-{g}-{'x' * 30}", name, namespace="ml")
            )
    return state, names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--churn", type=float, default=5.0, help="pod starts+ends per second")
    args = parser.parse_args()
    state, names = cluster(args.nodes)
    started = time.perf_counter()
    data = record_data(state, SETTINGS)
    compute = time.perf_counter() - started
    print(
        f"record: {args.nodes} nodes x {GPUS} GPU pods: {size(data):,} bytes "
        f"(limit {MAX_BYTES:,}, a ConfigMap 1,048,576), computed in {compute:.2f} s"
    )
    rng = random.Random(7)
    written = data
    rounds = int(60 / DEFAULT_RECORD_INTERVAL)
    writes = 0
    for tick in range(rounds):
        for k in range(int(args.churn * DEFAULT_RECORD_INTERVAL)):
            where = rng.choice(names)
            state.upsert(gpu_pod(f"churn-{tick}-{k}", where, namespace="ml"))
        current = record_data(state, SETTINGS)
        if content_changed(written, current):
            writes += 1
            written = current
    idle = sum(content_changed(written, record_data(state, SETTINGS)) for _ in range(3))
    print(
        f"writes per minute at {args.churn:g} pod changes/s: {writes} (at most {rounds}: "
        f"one per {DEFAULT_RECORD_INTERVAL:g} s round); with no change: {idle}"
    )
    print(
        f"lag from a pod's start to the record: at most {DEFAULT_RECORD_INTERVAL:g} s + "
        f"{compute:.2f} s compute + the write"
    )


if __name__ == "__main__":
    main()

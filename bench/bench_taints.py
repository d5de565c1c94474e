"""Device taints at scale (issue 37 item 6): 5,000 nodes x 8 GPUs published by NVIDIA's DRA
driver, 1 % of the devices tainted by their slices (the driver's gpu-lost), NoExecute
DeviceTaintRules over a rack's nodes (one per node's pool, ``RACK`` of them), rules acting.

Admission in process (``Engine.evaluate`` on reviews parsed as the server does), each request
``--evaluations`` times, interleaved: a DeviceTaintRule CREATE over one node's pool (the warned
blast radius), one over the driver (denied on the index of nodes), a ResourceClaim CREATE for
one GPU, and the core switch (a Node relabelled vm-passthrough under a pod holding its GPU
through a claim). Beside each, the same request on the same state with taints not modelled
(``may_keep_off`` answering False: what the code did before issue 37) measured in the same run;
the ratio p50 taint-aware / taint-blind is the figure (target: about 1, an index hit).

    python -m bench.bench_taints [--nodes 5000] [--evaluations 500]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

import orjson

from bench import harness
from policies.state.cluster import ClusterState
from policies.vocabulary.requests import AdmissionRequest
from webhook.admission.changes import proposed_request
from webhook.admission.compose import review_of
from webhook.admission.review import parse_review
from webhook.engine import Engine
from webhook.state.feeding import new_state

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


def build(nodes: int, seed: int = 37) -> ClusterState:
    rng = random.Random(seed)
    names = [f"node-{i:05d}" for i in range(nodes)]
    tainted = rng.sample(range(nodes * GPUS), int(nodes * GPUS * TAINTED_SHARE))
    by_node: dict[int, set[int]] = {}
    for index in tainted:
        by_node.setdefault(index // GPUS, set()).add(index % GPUS)
    state = new_state()
    state.follow_device_taint_rules(lambda: True)
    state.upsert(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": GPU_CLASS_EXPRESSION}}]},
        }
    )
    for i, name in enumerate(names):
        state.upsert(_node(name))
        state.upsert(_slice(name, by_node.get(i, set())))
        if i % 10 == 0:  # a tenth of the nodes run a pod on gpu-7 through a claim
            state.upsert(_claim(f"c-{i}", name))
            state.upsert(_pod(f"c-{i}-pod", name, f"c-{i}"))
    for name in names[:RACK]:
        state.upsert(_rule(f"rack-{name}", pool=name))
    return state


def reviews(state: ClusterState) -> dict[str, AdmissionRequest]:
    node = state.node("node-00100")
    assert node is not None
    relabel = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-00100"}}
    relabel["metadata"]["labels"] = {WORKLOAD: "vm-passthrough"}  # type: ignore[index]
    existing = _node("node-00100")
    changes = {
        "DeviceTaintRule CREATE (one pool)": (_rule("drain", pool="node-00100"), None),
        "DeviceTaintRule CREATE (the driver)": (_rule("drain-all", driver="gpu.nvidia.com"), None),
        "ResourceClaim CREATE": (_claim("bench-claim", None), None),
        "Node UPDATE (relabel to vm-passthrough)": (relabel, existing),
    }
    return {
        label: parse_review(
            orjson.dumps(review_of(proposed_request(change, old, harness.ADMIN, dry_run=False)))
        )
        for label, (change, old) in changes.items()
    }


def _timed(engine: Engine, request: AdmissionRequest, state: ClusterState, aware: bool) -> float:
    """One evaluation, with taints modelled or (``aware`` False) as before issue 37."""
    real = ClusterState.may_keep_off
    if not aware:
        ClusterState.may_keep_off = lambda self, node: False  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        engine.evaluate(request, state)
        return time.perf_counter() - started
    finally:
        ClusterState.may_keep_off = real  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--evaluations", type=int, default=500)
    args = parser.parse_args()
    started = time.perf_counter()
    state = build(args.nodes)
    built = time.perf_counter() - started
    print(f"state: {args.nodes} nodes x {GPUS} GPUs, built in {built:.1f} s")
    engine = Engine()
    requests = reviews(state)
    times: dict[tuple[str, bool], list[float]] = {}
    for round_ in range(args.evaluations):
        for label, request in requests.items():
            for aware in (True, False) if round_ % 2 else (False, True):  # neither always first
                times.setdefault((label, aware), []).append(_timed(engine, request, state, aware))
    for label, request in requests.items():
        decision = engine.evaluate(request, state)
        verdicts = [f"{v.policy}:{v.action.label}" for v in decision.verdicts]
        now_ms = statistics.median(times[(label, True)]) * 1000
        before_ms = statistics.median(times[(label, False)]) * 1000
        print(
            f"{label}: p50 {now_ms:.3f} ms taint-aware, {before_ms:.3f} ms taint-blind, "
            f"ratio {now_ms / before_ms:.2f}; verdicts {verdicts}"
        )


if __name__ == "__main__":
    main()

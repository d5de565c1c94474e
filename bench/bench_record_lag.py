"""Lag from a GPU pod's start to the record listing it, end to end: what bounds how stale the
API server's own policy (manifests/base/record.yaml) can be while the leader is up.

``gpu-guard serve`` as its own process keeps the record (``--record-interval``, the keeper's
round; the background audit off, so only the record's work is measured) from its live state,
against a real kube-apiserver v1.36 with KUBEBUILDER_ASSETS set (the enforce overlay's record
and Role applied, the guard on its ServiceAccount token), else against the in-process API
double. The home lab is loaded. Per run, after a random pause within one round (so a start
falls anywhere in the keeper's cycle), a GPU pod is created on omen3 (no GPU user before) with
its status Running, and the record is read every 10 ms until ``pods.omen3`` names it
(``joined``); after another random pause it is deleted, until the record no longer names it
(``left``). Each lag is watch delivery + the wait for the next round + the round's forked
compute + the GET and PUT of the record: at most about one interval plus the rest.

    python -m bench.bench_record_lag                      # 10 runs at the default interval
    python -m bench.bench_record_lag --runs 20 --record-interval 0.5 --double

Wall-clock figures belong here, never in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from tests.builders import gpu_pod
from webhook.defaults import DEFAULT_RECORD_INTERVAL

NODE, NAMESPACE = "omen3", "gpu-guard"
POLL = 0.01


@dataclass
class Cluster:
    """What a run does to the cluster and reads from it, on either server."""

    add: Callable[[dict[str, Any]], object]
    remove: Callable[[str], object]
    record: Callable[[], dict[str, str]]
    server: str


async def _serve(*args: str, kubeconfig: Path, directory: Path) -> Any:
    from tests.e2e.guard import Guard
    from tests.test_serve_live import start_serve
    from tests.tls import make_bundle

    _, bundle = make_bundle(directory / "tls", hosts=("127.0.0.1",))
    log = directory / "serve.log"
    with log.open("ab") as stderr:
        process, port = await start_serve(
            "--kubeconfig",
            str(kubeconfig),
            "--tls-cert",
            str(bundle.cert),
            "--tls-key",
            str(bundle.key),
            *args,
            stderr=stderr,
            env={"POD_NAMESPACE": NAMESPACE},
        )
    return Guard(process, port, log, bundle, args)


@asynccontextmanager
async def real(directory: Path, interval: float) -> AsyncIterator[Cluster]:
    from tests.e2e import crds
    from tests.e2e.controlplane import ControlPlane
    from tests.e2e.objects import load
    from tests.e2e.record import RECORD, installed, serve_args

    plane = ControlPlane(directory / "control-plane")
    plane.start()
    try:
        crds.install(plane, crds.every_crd())
        _, config, kubeconfig = installed(plane, directory, under_fail=())
        guard = await _serve(
            *serve_args(config),
            "--record-interval",
            str(interval),
            kubeconfig=kubeconfig,
            directory=directory,
        )
        try:

            def remove(name: str) -> None:
                path = f"/api/v1/namespaces/ml/pods/{name}?gracePeriodSeconds=0"
                plane.request("DELETE", path)

            yield Cluster(
                add=lambda pod: load(plane, [pod]),
                remove=remove,
                record=lambda: plane.call("GET", RECORD).get("data") or {},
                server="kube-apiserver v1.36 (KUBEBUILDER_ASSETS)",
            )
        finally:
            await guard.stop()
    finally:
        plane.stop()


@asynccontextmanager
async def double(directory: Path, interval: float) -> AsyncIterator[Cluster]:
    from tests.kubeapi import SERVED, WRITTEN, KubeApiDouble, Resource
    from tests.test_cli import STATE
    from webhook.state.files import read_objects

    config_maps = Resource("ConfigMap", "", "v1", "configmaps", True)
    async with KubeApiDouble(resources=(*SERVED, *WRITTEN, config_maps)) as api:
        for item in read_objects(STATE):
            api.create(item.obj)
        meta = {"name": "gpu-guard-record", "namespace": NAMESPACE}
        api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
        guard = await _serve(
            "--audit-interval",
            "0",
            "--record-interval",
            str(interval),
            kubeconfig=api.kubeconfig(directory / "kubeconfig"),
            directory=directory,
        )
        try:
            yield Cluster(
                add=api.create,
                remove=lambda name: api.delete("Pod", "ml", name),
                record=lambda: (
                    (api.get("ConfigMap", NAMESPACE, meta["name"]) or {}).get("data") or {}
                ),
                server="the API double (tests/kubeapi.py)",
            )
        finally:
            await guard.stop()


async def _until(cluster: Cluster, holds: Callable[[str], bool], timeout: float = 60) -> float:
    async with asyncio.timeout(timeout):
        while not holds((await asyncio.to_thread(cluster.record)).get(f"pods.{NODE}", "")):
            await asyncio.sleep(POLL)
    return time.monotonic()


def _names(key: str, text: str) -> bool:
    return key in text


def _lacks(key: str, text: str) -> bool:
    return key not in text


async def measure(cluster: Cluster, runs: int, interval: float) -> list[tuple[float, float]]:
    rng = random.Random(39)
    await _until(cluster, lambda _: "pods.omen1" in cluster.record(), timeout=120)
    lags = []
    for run in range(runs):
        name = f"lag-{run}"
        key = f"ml/{name}"
        await asyncio.sleep(rng.uniform(0, interval))
        started = time.monotonic()
        await asyncio.to_thread(cluster.add, gpu_pod(name, NODE, namespace="ml"))
        joined = await _until(cluster, partial(_names, key)) - started
        await asyncio.sleep(rng.uniform(0, interval))
        started = time.monotonic()
        await asyncio.to_thread(cluster.remove, name)
        left = await _until(cluster, partial(_lacks, key)) - started
        print(f"run {run}: joined {joined:.2f} s, left {left:.2f} s", flush=True)
        lags.append((joined, left))
    return lags


def summary(lags: list[tuple[float, float]], interval: float, server: str) -> str:
    lines = [
        f"record lag on {server}, --record-interval {interval:g} s, {len(lags)} runs:",
        "| lag, s | median | p90 | max |",
        "| --- | ---: | ---: | ---: |",
    ]
    for label, values in (
        ("a GPU pod started -> listed", [j for j, _ in lags]),
        ("a GPU pod deleted -> gone", [g for _, g in lags]),
    ):
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        lines.append(
            f"| {label} | {statistics.median(values):.2f} | {p90:.2f} | {max(values):.2f} |"
        )
    lines.append(
        f"bound: one round ({interval:g} s) + watch delivery + the round's forked compute + "
        "the record's GET and PUT (bench/bench_record.py: the compute at 5,000 nodes)"
    )
    return "\n".join(lines)


async def bench(runs: int, interval: float, use_double: bool) -> str:
    from tests.e2e.controlplane import assets

    with tempfile.TemporaryDirectory() as tmp:
        start = double if use_double or assets() is None else real
        async with start(Path(tmp), interval) as cluster:
            lags = await measure(cluster, runs, interval)
            return summary(lags, interval, cluster.server)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--record-interval", type=float, default=DEFAULT_RECORD_INTERVAL)
    parser.add_argument("--double", action="store_true", help="the API double even with assets")
    args = parser.parse_args(argv)
    print(asyncio.run(bench(args.runs, args.record_interval, args.double)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

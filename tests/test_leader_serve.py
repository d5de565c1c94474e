"""Two ``gpu-guard serve --leader-elect`` processes against the API double: one audit writer.

The leader is frozen (SIGSTOP, a hung process), killed (SIGKILL) and stopped (SIGTERM) in turn;
each time the other replica takes over, the frozen one writes nothing after it resumes, and both
answer admission throughout. Durations are short; every wait is for a condition.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import ssl
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.kubeapi import LEASE, SERVED, WRITTEN, KubeApiDouble
from tests.test_cli import STATE
from tests.test_serve_live import get, poll, start_serve, stop
from tests.waits import until
from webhook.admission.changes import proposed_request
from webhook.admission.compose import review_of
from webhook.admission.http_input import REVIEW_HEADERS
from webhook.admission.pipeline import OVERLOADED
from webhook.certs.issue import make_ca, make_serving_cert, write_bundle
from webhook.state.files import read_objects

NAMESPACE, LEASE_NAME = "gpu-guard", "gpu-guard-audit"
REPORTS = frozenset({"ClusterPolicyReport", "PolicyReport"})


@dataclass
class Server:
    name: str
    process: subprocess.Popen[bytes]
    base: str

    async def leads(self, session: aiohttp.ClientSession) -> float | None:
        status, text = await get(session, f"{self.base}/metrics")
        if status != 200:
            return None
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "gpu_guard_leader":
                    return float(sample.value)
        return None

    async def denies_the_workload_switch(
        self, session: aiohttp.ClientSession, api: KubeApiDouble
    ) -> None:
        change = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "omen1",
                "labels": {"nvidia.com/gpu.workload.config": "vm-passthrough"},
            },
        }
        request = proposed_request(change, api.get("Node", None, "omen1"), dry_run=False)
        url = f"{self.base}/validate"
        async with asyncio.timeout(60):
            while True:  # every review is answered; one shed under the machine's load is retried
                async with session.post(
                    url, data=orjson.dumps(review_of(request)), headers=REVIEW_HEADERS
                ) as response:
                    assert response.status == 200, self.name
                    answer = orjson.loads(await response.read())["response"]
                if not any(OVERLOADED in w for w in answer.get("warnings", [])):
                    break
                await asyncio.sleep(0.1)
        assert answer["allowed"] is False, (self.name, answer)


@pytest.fixture
async def homelab() -> AsyncIterator[KubeApiDouble]:
    async with KubeApiDouble(resources=SERVED + WRITTEN) as api:
        for item in read_objects(STATE):
            api.create(item.obj)
        yield api


async def start(name: str, api: KubeApiDouble, tmp_path: Path) -> Server:
    process, port = await start_serve(
        "--kubeconfig",
        str(api.kubeconfig(tmp_path / f"kubeconfig-{name}", token=name)),
        "--tls-cert",
        str(tmp_path / "tls.crt"),
        "--tls-key",
        str(tmp_path / "tls.key"),
        "--audit-interval",
        "0.3",
        "--leader-elect",
        "--leader-election-namespace",
        NAMESPACE,
        "--leader-election-identity",
        name,
        "--leader-election-lease-duration",
        "4",
        "--leader-election-renew-deadline",
        "2.5",
        "--leader-election-retry-period",
        "0.3",
    )
    return Server(name, process, f"https://127.0.0.1:{port}")


def holder(api: KubeApiDouble) -> str | None:
    lease = api.get(LEASE.kind, NAMESPACE, LEASE_NAME)
    return None if lease is None else lease["spec"].get("holderIdentity")


def report_writers(api: KubeApiDouble, since: int = 0) -> list[str]:
    return [w.token for w in api.writes[since:] if w.kind in REPORTS]


until_true = functools.partial(until, timeout=60.0, every=0.05)


async def test_two_replicas_elect_one_writer_that_hands_over_when_frozen_killed_or_stopped(
    homelab: KubeApiDouble, tmp_path: Path
) -> None:
    ca = make_ca()
    write_bundle(str(tmp_path), ca, make_serving_cert(ca, ["127.0.0.1"]))
    servers = {name: await start(name, homelab, tmp_path) for name in ("replica-a", "replica-b")}
    context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
            for server in servers.values():
                await poll(session, f"{server.base}/readyz", 200, timeout=60)

            # One leader; it alone writes reports, and the metric says so on both.
            await until_true(lambda: holder(homelab) in servers and report_writers(homelab))
            first = servers[str(holder(homelab))]
            second = next(s for s in servers.values() if s is not first)
            await until_true(lambda: len(report_writers(homelab)) >= 6)
            assert set(report_writers(homelab)) == {first.name}
            assert await first.leads(session) == 1
            assert await second.leads(session) == 0
            for server in servers.values():
                await server.denies_the_workload_switch(session, homelab)

            # Frozen: the other takes over; thawed, the frozen one writes nothing more.
            first.process.send_signal(signal.SIGSTOP)
            await until_true(lambda: holder(homelab) == second.name)
            taken = len(homelab.writes)
            await until_true(lambda: len(report_writers(homelab, taken)) >= 3)
            await second.denies_the_workload_switch(session, homelab)
            first.process.send_signal(signal.SIGCONT)
            async with asyncio.timeout(60):
                while await first.leads(session) != 0:
                    await asyncio.sleep(0.05)
            await first.denies_the_workload_switch(session, homelab)
            await until_true(lambda: len(report_writers(homelab, taken)) >= 9)
            assert set(report_writers(homelab, taken)) == {second.name}
            assert await second.leads(session) == 1

            # Killed while leading: replaced once its lease expires.
            second.process.kill()
            await until_true(lambda: holder(homelab) == first.name)
            retaken = len(homelab.writes)
            await until_true(lambda: len(report_writers(homelab, retaken)) >= 3)
            assert set(report_writers(homelab, retaken)) == {first.name}
            assert await first.leads(session) == 1
            await first.denies_the_workload_switch(session, homelab)

            # Stopped: the Lease is released on the way out.
            err = await stop(first.process)
            assert first.process.returncode == 0, err
            last = [w for w in homelab.writes if w.kind == LEASE.kind][-1]
            assert (last.token, last.holder) == (first.name, "")
            lease = homelab.get(LEASE.kind, NAMESPACE, LEASE_NAME)
            assert lease is not None
            assert lease["spec"]["leaseTransitions"] == 2
    finally:
        for server in servers.values():
            if server.process.poll() is None:
                server.process.send_signal(signal.SIGCONT)
            await stop(server.process)

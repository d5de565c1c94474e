"""Two ``gpu-guard serve --leader-elect`` replicas on a real Lease: one leader, the only one that
writes PolicyReports; the leader frozen (SIGSTOP) is replaced, and once thawed (SIGCONT) writes
nothing and steps down; the leader killed (SIGKILL) is replaced once its lease runs out.

Each replica runs on a token of its own ServiceAccount, so the API server's audit log says who
sent every write. The durations are short (flags); the one bound on time is the takeover's,
a generous multiple of the configured lease duration, as the issue asks.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.conftest import ServeGuard
from tests.e2e.controlplane import ControlPlane
from tests.e2e.guard import Guard
from tests.e2e.objects import load
from tests.test_cli import STATE
from tests.waits import until

NAMESPACE, LEASE = "gpu-guard", "gpu-guard-audit"
REPLICAS = ("replica-a", "replica-b")
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 6.0, 4.0, 0.5
TAKEOVER_BOUND = 3 * LEASE_DURATION + 10
"""A generous bound on a takeover: the lease duration after the last renew seen, plus a retry
period, on a loaded machine (the issue: "within the lease duration")."""
WRITES = frozenset({"create", "update", "patch", "delete"})
REPORTS = frozenset({"policyreports", "clusterpolicyreports"})


def user(name: str) -> str:
    return f"system:serviceaccount:{NAMESPACE}:{name}"


def holder(plane: ControlPlane) -> str | None:
    status, lease = plane.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}"
    )
    if status != 200 or not isinstance(lease, dict):
        return None
    return (lease.get("spec") or {}).get("holderIdentity") or None


def writes(plane: ControlPlane, name: str) -> list[tuple[str, str, int]]:
    """Every write request replica ``name`` sent: (verb, resource, status code)."""
    return [
        (e["verb"], e["objectRef"]["resource"], e["responseStatus"]["code"])
        for e in plane.audit_events(user(name))
        if e["verb"] in WRITES
    ]


def lease_reads(plane: ControlPlane, name: str) -> int:
    # a discovery read (the report format's, at each publish) is a non-resource get: no objectRef
    return sum(
        e["verb"] == "get" and e.get("objectRef", {}).get("resource") == "leases"
        for e in plane.audit_events(user(name))
    )


def report_writes(plane: ControlPlane, name: str) -> int:
    return sum(resource in REPORTS for _, resource, _ in writes(plane, name))


async def leads(guard: Guard) -> float:
    (value,) = [v for _, v in await guard.samples("gpu_guard_leader")]
    return value


async def a_replica(plane: ControlPlane, serve: ServeGuard, name: str, tmp_path: Path) -> Guard:
    token = plane.kubeconfig_for(plane.token(NAMESPACE, name), tmp_path / f"{name}.kubeconfig")
    guard = await serve(
        plane,
        "--audit-interval",
        "0.5",
        "--leader-elect",
        "--leader-election-namespace",
        NAMESPACE,
        "--leader-election-identity",
        name,
        "--leader-election-lease-duration",
        f"{LEASE_DURATION:g}",
        "--leader-election-renew-deadline",
        f"{RENEW_DEADLINE:g}",
        "--leader-election-retry-period",
        f"{RETRY_PERIOD:g}",
        kubeconfig=token,
        name=name,
    )
    return guard


def installed(plane: ControlPlane) -> None:
    """The home lab, and two ServiceAccounts bound to cluster-admin: who wrote what is then
    in the audit log under each replica's name."""
    load(plane, yaml.safe_load(Path(STATE).read_text())["items"])
    plane.create_namespace(NAMESPACE)
    for name in REPLICAS:
        plane.ensure_service_account(NAMESPACE, name)
        plane.kubectl(
            "create",
            "clusterrolebinding",
            name,
            "--clusterrole=cluster-admin",
            f"--serviceaccount={NAMESPACE}:{name}",
        )


async def test_two_replicas_one_leader_a_frozen_one_writes_nothing_a_killed_one_is_replaced(
    own_control_plane: ControlPlane, serve: ServeGuard, tmp_path: Path
) -> None:
    plane = own_control_plane
    installed(plane)
    replicas = {name: await a_replica(plane, serve, name, tmp_path) for name in REPLICAS}
    for guard in replicas.values():
        await guard.wait_ready()

    # One leader, and it alone writes reports.
    await until(lambda: holder(plane) in replicas, timeout=60, every=0.1)
    first_name = str(holder(plane))
    second_name = next(n for n in REPLICAS if n != first_name)
    first, second = replicas[first_name], replicas[second_name]
    await until(lambda: report_writes(plane, first_name) >= 4, timeout=60, every=0.1)
    assert (await leads(first), await leads(second)) == (1, 0)
    assert report_writes(plane, second_name) == 0, writes(plane, second_name)
    assert holder(plane) == first_name

    # Frozen: the other takes the Lease and writes; thawed, the frozen one writes nothing.
    first.process.send_signal(signal.SIGSTOP)
    try:
        await until(lambda: holder(plane) == second_name, timeout=TAKEOVER_BOUND, every=0.1)
        await until(lambda: report_writes(plane, second_name) >= 2, timeout=60, every=0.1)
        before_thaw = len(writes(plane, first_name))
        reads_before_thaw = lease_reads(plane, first_name)
    finally:
        first.process.send_signal(signal.SIGCONT)
    async with asyncio.timeout(60):
        while await leads(first) != 0:
            await asyncio.sleep(0.05)
    # Long enough thawed to have written, had it still trusted its lease: several campaign
    # rounds (each a read of the Lease), and the new leader's reports going on meanwhile.
    written_by_second = report_writes(plane, second_name)
    await until(
        lambda: (
            lease_reads(plane, first_name) >= reads_before_thaw + 4
            and report_writes(plane, second_name) >= written_by_second + 2
        ),
        timeout=60,
        every=0.1,
    )
    assert writes(plane, first_name)[before_thaw:] == []
    assert holder(plane) == second_name
    assert (await leads(first), await leads(second)) == (0, 1)
    assert any("lost the lease" in r.message for r in first.records()), first.log_text()[-2000:]

    # Killed while leading: replaced once its lease runs out.
    await second.stop(signal.SIGKILL)
    await until(lambda: holder(plane) == first_name, timeout=TAKEOVER_BOUND, every=0.1)
    resumed = report_writes(plane, first_name)
    await until(lambda: report_writes(plane, first_name) >= resumed + 2, timeout=60, every=0.1)
    assert await leads(first) == 1
    lease: Any = plane.call(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}"
    )
    assert lease["spec"]["leaseTransitions"] == 2
    refused = [w for name in REPLICAS for w in writes(plane, name) if w[2] >= 400 and w[2] != 409]
    assert refused == []

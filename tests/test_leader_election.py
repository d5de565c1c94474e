"""Leader election on a Lease, in process: two electors against the API double, one writer.

Each elector has its own client and bearer token, so the double tells their writes apart and
can stall one's Lease calls. Durations are short; every wait is for a condition, never a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient
from prometheus_client.parser import text_string_to_metric_families

from tests import waits
from tests.kubeapi import LEASE, SERVED, WRITTEN, KubeApiDouble, Write
from webhook.audit import election
from webhook.audit.election import ElectionConfig, NotLeader
from webhook.audit.leader import LeaderElector, stop
from webhook.audit.publish import ReportPublisher
from webhook.cli import build_parser, main
from webhook.commands.serve import election_config
from webhook.metrics import Metrics
from webhook.state.client import connect

NAMESPACE, LEASE_NAME = "gpu-guard", "gpu-guard-audit"
REPORT_KIND = "ClusterPolicyReport"


def report() -> dict[str, Any]:
    return {
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": REPORT_KIND,
        "metadata": {"name": "gpu-guard"},
        "results": [],
    }


class Clock:
    """The monotonic clock, plus a jump: what a process sees after it was frozen."""

    def __init__(self) -> None:
        self.skipped = 0.0

    def __call__(self) -> float:
        return asyncio.get_running_loop().time() + self.skipped


@dataclass
class Replica:
    """One candidate: its elector, its metrics, and a leader's work that writes a report every
    few milliseconds through the fenced publisher, as the background audit does."""

    name: str
    api: ApiClient
    elector: LeaderElector
    metrics: Metrics
    clock: Clock
    campaign: asyncio.Task[None] | None = None
    terms: int = 0
    refused: list[str] = field(default_factory=list)

    async def lead(self) -> None:
        self.terms += 1
        publisher = ReportPublisher(self.api, self.elector.holds)
        while True:
            try:
                await publisher.publish([report()])
            except NotLeader as exc:
                self.refused.append(str(exc))
                return
            await asyncio.sleep(0.02)

    def start(self) -> None:
        self.campaign = asyncio.create_task(self.elector.run(self.lead))

    def kill(self) -> None:
        """Gone without a word, as a killed pod: no release."""
        assert self.campaign is not None
        self.campaign.cancel()

    def metric(self, name: str) -> float:
        text = self.metrics.exposition().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name:
                    return float(sample.value)
        raise AssertionError(f"{name} not exported")


Config = Callable[[str], ElectionConfig]


def quick(identity: str, lease: float = 3.0) -> ElectionConfig:
    return ElectionConfig(
        NAMESPACE, LEASE_NAME, identity, lease_duration=lease, renew_deadline=2.0, retry_period=0.2
    )


@pytest.fixture
async def double() -> AsyncIterator[KubeApiDouble]:
    async with KubeApiDouble(resources=SERVED + WRITTEN) as api:
        yield api


@contextlib.asynccontextmanager
async def replicas(
    double: KubeApiDouble, tmp_path: Path, config: Config = quick, names: str = "ab"
) -> AsyncIterator[dict[str, Replica]]:
    made: dict[str, Replica] = {}
    never_both = asyncio.create_task(_never_two_leaders(made))
    try:
        for name in names:
            api = await connect(str(double.kubeconfig(tmp_path / f"kc-{name}", token=name)))
            metrics, clock = Metrics(), Clock()
            elector = LeaderElector(api, config(name), metrics, clock=clock)
            made[name] = Replica(name, api, elector, metrics, clock)
        yield made
        assert not never_both.done(), never_both.result()
    finally:
        never_both.cancel()
        for replica in made.values():
            if replica.campaign is not None:
                replica.campaign.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await replica.campaign
            await replica.api.close()


async def _never_two_leaders(made: dict[str, Replica]) -> None:
    """Watches the whole test: two replicas that both trust their lease would both write."""
    while True:
        leading = [r.name for r in made.values() if r.elector.holds()]
        assert len(leading) <= 1, f"two leaders at once: {leading}"
        await asyncio.sleep(0.005)


until = functools.partial(waits.until, timeout=30.0)


async def leader_of(group: dict[str, Replica]) -> tuple[Replica, Replica]:
    await until(lambda: any(r.elector.holds() for r in group.values()))
    leader = next(r for r in group.values() if r.elector.holds())
    follower = next(r for r in group.values() if r is not leader)
    return leader, follower


def report_writes(double: KubeApiDouble, since: int = 0) -> list[Write]:
    return [w for w in double.writes[since:] if w.kind == REPORT_KIND]


def holder(double: KubeApiDouble) -> str | None:
    lease = double.get(LEASE.kind, NAMESPACE, LEASE_NAME)
    return None if lease is None else lease["spec"].get("holderIdentity")


async def test_of_two_candidates_exactly_one_leads_writes_and_says_so_in_its_metrics(
    double: KubeApiDouble, tmp_path: Path
) -> None:
    async with replicas(double, tmp_path) as group:
        for replica in group.values():
            replica.start()
        leader, follower = await leader_of(group)
        await until(lambda: len(report_writes(double)) >= 5)
        assert {w.token for w in report_writes(double)} == {leader.name}
        assert holder(double) == leader.name
        assert (leader.metric("gpu_guard_leader"), follower.metric("gpu_guard_leader")) == (1, 0)
        assert leader.metric("gpu_guard_leader_transitions_total") == 1
        assert follower.metric("gpu_guard_leader_transitions_total") == 0
        assert (leader.terms, follower.terms) == (1, 0)


async def test_a_leader_killed_without_releasing_is_replaced_once_its_lease_expires(
    double: KubeApiDouble, tmp_path: Path
) -> None:
    async with replicas(double, tmp_path) as group:
        for replica in group.values():
            replica.start()
        leader, follower = await leader_of(group)
        leader.kill()
        await until(follower.elector.holds)
        lease = double.get(LEASE.kind, NAMESPACE, LEASE_NAME)
        assert lease is not None
        assert lease["spec"]["holderIdentity"] == follower.name
        assert lease["spec"]["leaseTransitions"] == 1
        mark = len(double.writes)
        await until(lambda: len(report_writes(double, mark)) >= 3)
        assert {w.token for w in report_writes(double, mark)} == {follower.name}


async def test_a_leader_whose_lease_calls_hang_stops_writing_and_the_other_takes_over(
    double: KubeApiDouble, tmp_path: Path
) -> None:
    async with replicas(double, tmp_path) as group:
        for replica in group.values():
            replica.start()
        leader, follower = await leader_of(group)
        await until(lambda: len(report_writes(double)) >= 2)
        double.stall(LEASE.kind, token=leader.name)  # its renewals hang; its report writes don't
        await until(lambda: not leader.elector.holds())
        stopped = len(double.writes)
        await until(lambda: not leader.elector.leading)  # the hung renew was given up on
        assert leader.metric("gpu_guard_leader") == 0
        await until(follower.elector.holds)
        taken = len(double.writes)
        await until(lambda: len(report_writes(double, taken)) >= 3)
        double.unstall()
        await until(lambda: leader.elector.observed_holder == follower.name)  # saw who leads
        await until(lambda: len(report_writes(double, taken)) >= 6)
        assert {w.token for w in report_writes(double, stopped)} == {follower.name}
        assert not leader.elector.holds()
        assert leader.terms == 1


async def test_a_leader_frozen_past_its_renew_deadline_writes_nothing_when_it_resumes(
    double: KubeApiDouble, tmp_path: Path
) -> None:
    async with replicas(double, tmp_path, names="a") as group:
        replica = group["a"]
        replica.start()
        await until(replica.elector.holds)
        await until(lambda: len(report_writes(double)) >= 1)
        replica.clock.skipped = 2.0  # as if its process had been stopped for the renew deadline
        mark = len(double.writes)
        with pytest.raises(NotLeader):
            await ReportPublisher(replica.api, replica.elector.holds).publish([report()])
        assert report_writes(double, mark) == []


async def test_a_graceful_stop_releases_the_lease_and_the_other_leads_before_it_would_expire(
    double: KubeApiDouble, tmp_path: Path
) -> None:
    def long_lease(identity: str) -> ElectionConfig:
        return quick(identity, lease=600.0)  # waiting for expiry would outlast the test

    async with replicas(double, tmp_path, long_lease) as group:
        for replica in group.values():
            replica.start()
        leader, follower = await leader_of(group)
        assert leader.campaign is not None
        await stop(leader.elector, leader.campaign)
        released = [w for w in double.writes if w.kind == LEASE.kind and w.token == leader.name]
        assert released[-1].holder == ""
        assert leader.metric("gpu_guard_leader") == 0
        await until(follower.elector.holds)
        assert holder(double) == follower.name


async def test_a_candidate_keeps_campaigning_through_an_api_outage_and_then_leads(
    double: KubeApiDouble, tmp_path: Path
) -> None:
    double.set_down(True)
    async with replicas(double, tmp_path, names="a") as group:
        replica = group["a"]
        replica.start()
        await until(lambda: double.requests[_lease_path()] >= 2)
        assert not replica.elector.holds()
        double.set_down(False)
        await until(replica.elector.holds)


def _lease_path() -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE_NAME}"


@pytest.mark.parametrize(
    "lease, renew, retry, says",
    [
        (10.0, 10.0, 2.0, "lease duration (10 s) must be longer than the renew deadline (10 s)"),
        (15.0, 2.0, 2.0, "renew deadline (2 s) must be longer than 1.2 x the retry period"),
    ],
    ids=["lease not longer than renew deadline", "renew deadline within a retry period"],
)
def test_unsafe_durations_are_named(lease: float, renew: float, retry: float, says: str) -> None:
    config = ElectionConfig(NAMESPACE, LEASE_NAME, "a", lease, renew, retry)
    assert says in (config.problem() or "")


def test_client_go_defaults_are_sound() -> None:
    assert ElectionConfig(NAMESPACE, LEASE_NAME, "a").problem() is None


# --- the command line -----------------------------------------------------------------------------

LIVE_SERVE = ["serve", "--tls-cert", "c", "--tls-key", "k", "--leader-elect"]


@pytest.mark.parametrize(
    "flags, says",
    [
        (
            ["--leader-election-lease-duration", "5"],
            "gpu-guard: --leader-elect: the lease duration (5 s) must be longer than the renew "
            "deadline (10 s)",
        ),
        (
            ["--leader-election-renew-deadline", "2"],
            "gpu-guard: --leader-elect: the renew deadline (2 s) must be longer than 1.2 x the "
            "retry period (2 s)",
        ),
    ],
    ids=["lease shorter than the renew deadline", "renew deadline within a retry period"],
)
def test_serve_refuses_unsafe_election_durations_in_one_line_before_reading_the_cluster(
    capsys: pytest.CaptureFixture[str], flags: list[str], says: str
) -> None:
    code = main([*LIVE_SERVE, "--kubeconfig", "/nonexistent/kubeconfig", *flags])
    err = capsys.readouterr().err
    assert (code, err) == (2, says + "\n")


@pytest.mark.parametrize(
    "flag",
    [
        "--leader-election-lease-duration",
        "--leader-election-renew-deadline",
        "--leader-election-retry-period",
    ],
)
def test_election_durations_must_be_positive_seconds(
    capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        main([*LIVE_SERVE, flag, "-1"])
    assert caught.value.code == 2
    assert f"argument {flag}: must be a positive number of seconds, not -1" in (
        capsys.readouterr().err
    )


def test_the_election_defaults_are_client_gos_and_the_pods_own_name_and_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAME", "gpu-guard-7d9f-abcde")
    monkeypatch.setenv("POD_NAMESPACE", "guards")
    config = election_config(build_parser().parse_args(LIVE_SERVE))
    assert config == ElectionConfig(
        "guards", "gpu-guard-audit", "gpu-guard-7d9f-abcde", 15.0, 10.0, 2.0
    )


def test_without_pod_variables_the_namespace_comes_from_the_service_account_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("POD_NAME", raising=False)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    account = tmp_path / "namespace"
    account.write_text("from-the-token\n")
    monkeypatch.setattr(election, "SERVICE_ACCOUNT_NAMESPACE", str(account))
    assert election.own_namespace("fallback") == "from-the-token"
    account.unlink()
    assert election.own_namespace("fallback") == "fallback"


def test_two_processes_on_one_host_without_a_pod_name_never_share_an_identity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("POD_NAME", raising=False)
    first, second = election.default_identity(), election.default_identity()
    assert first != second
    assert first.startswith(socket.gethostname() + "_")


def test_without_leader_elect_there_is_no_election() -> None:
    args = build_parser().parse_args(["serve", "--tls-cert", "c", "--tls-key", "k"])
    assert election_config(args) is None


class ManualClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_dead_leaders_last_renew_expires_a_lease_duration_after_the_read_before_it(
    double: KubeApiDouble, tmp_path: Path
) -> None:
    """client-go dates a change by when it was seen, up to a retry period late; the change came
    after the previous read, so a follower polling every retry period replaces a dead leader
    within the lease duration of its last renew, and never while the leader still trusts it."""
    config = ElectionConfig(NAMESPACE, LEASE_NAME, "a", 15.0, 10.0, 2.0)
    apis = [
        await connect(str(double.kubeconfig(tmp_path / f"kc-{who}", token=who))) for who in "ab"
    ]
    try:
        clocks = ManualClock(), ManualClock()
        a = LeaderElector(apis[0], config, Metrics(), clock=clocks[0])
        b_config = ElectionConfig(NAMESPACE, LEASE_NAME, "b", 15.0, 10.0, 2.0)
        b = LeaderElector(apis[1], b_config, Metrics(), clock=clocks[1])
        assert await a._attempt(5.0)
        assert not await b._attempt(5.0)  # b's first read, at 0
        clocks[0].now = 1.0
        assert await a._attempt(5.0)  # a's last renew, then a dies
        clocks[1].now = 2.0
        assert not await b._attempt(5.0)  # b sees the renew, after its read at 0
        clocks[1].now = 14.9
        assert not await b._attempt(5.0)
        clocks[0].now = 11.0
        assert not a.holds()  # a stopped trusting its lease before b may take it
        clocks[1].now = 15.1
        assert await b._attempt(5.0)
        assert holder(double) == "b"
    finally:
        for api in apis:
            await api.close()

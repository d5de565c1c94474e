"""The metrics the alerts of manifests/overlays/monitoring read: readiness, the certificate's
expiry, the background audit's success and failures, and the GPU nodes' health per node."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from policies.cluster.kinds import NODE, object_ref
from policies.vocabulary.audit import AuditFinding, Link
from policies.vocabulary.verdicts import Action, Severity, Verdict
from tests.builders import dead_node, node, state_of
from tests.test_cli import STATE
from tests.test_metrics import samples
from tests.test_server import POLL, eventually, serving
from tests.tls import Material, client_context, make_material
from webhook.admission import server
from webhook.admission.pipeline import Admission
from webhook.admission.server import METRICS_PATH, Lifecycle, make_app
from webhook.audit.background import BackgroundAudit
from webhook.audit.election import NotLeader
from webhook.audit.publish import ReportPublisher
from webhook.audit.report import run_audit
from webhook.certs.issue import make_serving_cert
from webhook.certs.rotation import not_after
from webhook.engine import Engine
from webhook.metrics import Metrics
from webhook.state.files import load_state

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scraped(metrics: Metrics) -> Samples:
    return samples(metrics.exposition().decode())


def series(got: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (n, labels), value in got.items() if n == name}


def stamp(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


async def homelab_audit(metrics: Metrics) -> BackgroundAudit:
    audit = BackgroundAudit(
        Engine(), load_state([STATE]), metrics, interval=120.0, clock=lambda: NOW
    )
    await audit.run_once()
    return audit


async def test_the_home_lab_audit_says_which_gpu_nodes_are_down_since_when_and_what_fails() -> None:
    metrics = Metrics()
    audit = await homelab_audit(metrics)
    got = scraped(metrics)
    report = audit.last
    assert report is not None
    down = {n.name: n.since for n in report.gpu_nodes if n.not_ready}
    assert set(down) == {"omen2", "omen3", "tower2", "tower3"}
    assert series(got, "gpu_guard_gpu_node_not_ready_since_timestamp_seconds") == {
        (("node", name),): since.timestamp() for name, since in down.items() if since
    }
    assert got[("gpu_guard_gpu_node_not_ready_since_timestamp_seconds", (("node", "omen2"),))] == (
        stamp("2026-07-10T03:12:41+00:00")  # its Ready condition's lastTransitionTime
    )
    assert series(got, "gpu_guard_gpu_operand_pods_unhealthy") == {
        (("node", n.name),): sum(c for _, c in n.operand_problems)
        for n in report.gpu_nodes
        if n.operand_problems
    }
    assert got[("gpu_guard_gpu_operand_pods_unhealthy", (("node", "omen2"),))] == 3
    assert got[("gpu_guard_gpu_nodes", ())] == len(report.gpu_nodes) == 6
    trap = (("action", "deny"), ("node", "omen2"), ("policy", "recovery-trap-vm-passthrough"))
    assert got[("gpu_guard_audit_node_findings", trap)] == 1
    by_severity = series(got, "gpu_guard_audit_findings_by_severity")
    assert sum(by_severity.values()) == len(report.findings)
    assert by_severity[(("policy", "recovery-trap-vm-passthrough"), ("severity", "high"))] == 1
    assert got[("gpu_guard_audit_last_success_timestamp_seconds", ())] == NOW.timestamp()
    assert got[("gpu_guard_audit_interval_seconds", ())] == 120.0
    assert got[("gpu_guard_audit_failures_total", ())] == 0


AUDIT_DERIVED = (
    "gpu_guard_audit_findings",
    "gpu_guard_sole_provider_workloads",
    "gpu_guard_audit_findings_by_severity",
    "gpu_guard_audit_node_findings",
    "gpu_guard_gpu_node_not_ready_since_timestamp_seconds",
    "gpu_guard_gpu_operand_pods_unhealthy",
)


async def test_a_replica_that_stops_leading_drops_its_finding_series_not_its_last_success() -> None:
    metrics = Metrics()
    await homelab_audit(metrics)
    before = scraped(metrics)
    assert all(series(before, name) for name in AUDIT_DERIVED), "the home lab fills each"
    metrics.forget_audit()
    after = scraped(metrics)
    assert [name for name in AUDIT_DERIVED if series(after, name)] == []
    assert after[("gpu_guard_audit_last_success_timestamp_seconds", ())] == NOW.timestamp()


def test_the_audit_overview_and_the_node_diagnosis_agree_on_which_nodes_are_not_ready() -> None:
    report = run_audit(Engine(), load_state([STATE]), NOW)
    diagnosed = {
        f.verdict.resource.name for f in report.findings if f.verdict.policy == "gpu-node-not-ready"
    }
    assert {n.name for n in report.gpu_nodes if n.not_ready} == diagnosed


def test_a_not_ready_node_without_a_ready_condition_keeps_the_time_it_was_first_seen() -> None:
    silent = node("fresh", labels={"nvidia.com/gpu.present": "true"})
    silent["status"]["conditions"] = []
    metrics = Metrics()
    name = "gpu_guard_gpu_node_not_ready_since_timestamp_seconds"
    for hours in (0, 1):
        report = run_audit(Engine(), state_of(silent), NOW + timedelta(hours=hours))
        metrics.record_audit_report(report.findings, report.gpu_nodes, 0.1, report.now)
        assert scraped(metrics)[(name, (("node", "fresh"),))] == NOW.timestamp()
    report = run_audit(Engine(), state_of(node("fresh")), NOW + timedelta(hours=2))
    metrics.record_audit_report(report.findings, report.gpu_nodes, 0.1, report.now)
    assert series(scraped(metrics), name) == {}, "a Ready node has no series"


def test_a_node_that_recovers_loses_its_not_ready_and_operand_series() -> None:
    metrics = Metrics()
    gpu = {"nvidia.com/gpu.present": "true"}
    for obj in (dead_node("omen2", labels=gpu), node("omen2", labels=gpu)):
        report = run_audit(Engine(), state_of(obj), NOW)
        metrics.record_audit_report(report.findings, report.gpu_nodes, 0.1, report.now)
    got = scraped(metrics)
    assert series(got, "gpu_guard_gpu_node_not_ready_since_timestamp_seconds") == {}
    assert series(got, "gpu_guard_audit_node_findings") == {}


def test_findings_are_counted_by_severity_as_the_audit_gave_it() -> None:
    metrics = Metrics()
    verdict = Verdict("p", Action.WARN, object_ref(NODE, "", "n"), "m")
    findings = [
        AuditFinding(verdict, Severity.CRITICAL, Link("x")),
        AuditFinding(verdict, Severity.CRITICAL, Link("y")),
        AuditFinding(verdict, Severity.LOW, Link("z")),
    ]
    metrics.record_audit_report(findings, (), 0.1, NOW)
    got = scraped(metrics)
    assert series(got, "gpu_guard_audit_findings_by_severity") == {
        (("policy", "p"), ("severity", "critical")): 2,
        (("policy", "p"), ("severity", "low")): 1,
    }
    assert (
        got[("gpu_guard_audit_node_findings", (("action", "warn"), ("node", "n"), ("policy", "p")))]
        == 3
    )


async def test_a_failing_audit_is_counted_and_keeps_the_last_success_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    metrics = Metrics()
    clock = [NOW]
    audit = BackgroundAudit(Engine(), load_state([STATE]), metrics, clock=lambda: clock[0])
    await audit.run_once()

    def broken(*args: object) -> None:
        raise RuntimeError("the audit child failed")

    monkeypatch.setattr(audit.engine, "audit", broken)  # the forked child inherits it
    clock[0] = NOW + timedelta(minutes=5)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            await audit.run_once()
    got = scraped(metrics)
    assert got[("gpu_guard_audit_failures_total", ())] == 2
    assert got[("gpu_guard_audit_last_success_timestamp_seconds", ())] == NOW.timestamp()


class Demoted:
    """A publisher whose replica lost the lease before its first write."""

    async def publish(self, reports: object) -> dict[str, int]:
        raise NotLeader("not the leader: PUT ... not sent")


async def test_a_lease_lost_during_an_audit_is_no_audit_failure() -> None:
    metrics = Metrics()
    publisher = cast(ReportPublisher, Demoted())
    audit = BackgroundAudit(Engine(), load_state([STATE]), metrics, publisher=publisher)
    await audit.run()  # returns: the new leader audits
    assert scraped(metrics)[("gpu_guard_audit_failures_total", ())] == 0


async def test_the_ready_gauge_says_what_readyz_says() -> None:
    reason: list[str | None] = ["waiting for the first sync of Node"]
    lifecycle = Lifecycle(not_ready_reason=lambda: reason[0])
    admission = Admission(Engine(), state_of())
    async with TestClient(TestServer(make_app(admission, lifecycle))) as client:
        for why, status, ready in ((reason[0], 503, 0), (None, 200, 1), ("shutting", 503, 0)):
            reason[0] = why if why != "shutting" else None
            lifecycle.shutting_down = why == "shutting"
            assert (await client.get("/readyz")).status == status
            got = samples(await (await client.get(METRICS_PATH)).text())
            assert got[("gpu_guard_ready", ())] == ready, why


async def scraped_expiry(base: str, trusted: Material) -> float:
    connector = aiohttp.TCPConnector(ssl=client_context(trusted))
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.get(base + METRICS_PATH) as reply,
    ):
        got = samples(await reply.text())
    return got[("gpu_guard_certificate_expiry_timestamp_seconds", ())]


async def test_the_certificate_expiry_is_the_served_certificates_and_follows_a_renewal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "CERT_POLL_SECONDS", POLL)
    material = make_material()
    bundle = material.publish(tmp_path / "tls", "v1")
    first = not_after(material.serving.cert_pem).timestamp()
    async with serving(Admission(Engine(), state_of()), bundle) as base:
        assert await scraped_expiry(base, material) == first
        short = make_serving_cert(material.ca, ["127.0.0.1", "localhost"], days=3)
        Material(material.ca, short).publish(tmp_path / "tls", "v2")
        renewed = not_after(short.cert_pem).timestamp()
        assert renewed < first

        async def follows() -> bool:
            return await scraped_expiry(base, material) == renewed

        await eventually(follows)

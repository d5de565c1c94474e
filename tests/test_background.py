"""The background audit: a forked snapshot gives the same report; reports stay in place."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client.parser import text_string_to_metric_families

from tests.fakeapi import FakeApi
from tests.test_cli import STATE
from webhook.audit.background import BackgroundAudit, audit_snapshot
from webhook.audit.publish import ReportPublisher
from webhook.audit.report import run_audit
from webhook.engine import Engine
from webhook.metrics import Metrics
from webhook.state.client import connect
from webhook.state.files import load_state

NOW = datetime(2026, 10, 30, 12, tzinfo=UTC)


async def test_the_forked_audit_reports_exactly_what_the_in_process_audit_does() -> None:
    state = load_state([STATE])
    forked = await audit_snapshot(Engine(), state, NOW)
    assert forked.to_json() == run_audit(Engine(), state, NOW).to_json()
    assert {f.verdict.policy for f in forked.findings} >= {
        "recovery-trap-vm-passthrough",
        "passthrough-without-ready-provider",
    }


async def test_repeated_background_audits_keep_the_same_report_objects(
    fake_api: tuple[FakeApi, str],
) -> None:
    fake, kubeconfig = fake_api
    api = await connect(kubeconfig)
    try:
        metrics = Metrics()
        audit = BackgroundAudit(
            Engine(),
            load_state([STATE]),
            metrics,
            publisher=ReportPublisher(api),
            clock=lambda: NOW,
        )
        counts = []
        for _ in range(3):
            await audit.run_once()
            counts.append(sorted(p for p in fake.objects if "policyreports" in p))
        assert counts[0] == counts[1] == counts[2]
        assert "/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports/gpu-guard" in counts[0]
        assert "/apis/wgpolicyk8s.io/v1alpha2/namespaces/vms/policyreports/gpu-guard" in counts[0]
        scraped = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(metrics.exposition().decode())
            for s in f.samples
        }
        assert scraped[("gpu_guard_audit_runs_total", ())] == 3
        trap = (("action", "deny"), ("policy", "recovery-trap-vm-passthrough"))
        assert scraped[("gpu_guard_audit_findings", trap)] == 1
    finally:
        await api.close()

"""GET /metrics: Prometheus text a scraper parses, counting what the guard decided and how fast."""

from __future__ import annotations

import orjson
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from policies.vocabulary.verdicts import Action, Verdict
from tests.builders import gpu_pod, node, request, state_of, with_labels
from webhook.admission.compose import review_of
from webhook.admission.http_input import REVIEW_HEADERS
from webhook.admission.pipeline import Admission
from webhook.admission.server import METRICS_PATH, make_app
from webhook.engine import Engine
from webhook.metrics import Metrics

OMEN1 = node("omen1", labels={"nvidia.com/gpu.workload.config": "container"})
SWITCHED = with_labels(OMEN1, {"nvidia.com/gpu.workload.config": "vm-passthrough"})


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def test_metrics_count_reviews_verdicts_rejections_and_latency() -> None:
    shared = Admission(Engine(), state_of(OMEN1, gpu_pod("train", "omen1")))
    shared.metrics.watch_state(lambda: {"Node": (True, 1.5), "Pod": (False, None)})
    async with TestClient(TestServer(make_app(shared))) as client:
        deny = orjson.dumps(review_of(request("UPDATE", SWITCHED, OMEN1)))
        for _ in range(2):
            await client.post("/validate", data=deny, headers=REVIEW_HEADERS)
        await client.post("/validate", data=b"not json", headers=REVIEW_HEADERS)
        odd = review_of(request("UPDATE", SWITCHED, OMEN1))
        odd["request"]["kind"]["kind"] = "SomethingNobodyRegistered"
        await client.post("/validate", data=orjson.dumps(odd), headers=REVIEW_HEADERS)
        response = await client.get(METRICS_PATH)
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        got = samples(await response.text())
    verdict = (
        ("action", "deny"),
        ("kind", "Node"),
        ("operation", "UPDATE"),
        ("policy", "workload-switch-with-gpu-pods"),
    )
    assert got[("gpu_guard_admission_verdicts_total", verdict)] == 2
    denied = (
        ("allowed", "false"),
        ("endpoint", "validate"),
        ("kind", "Node"),
        ("operation", "UPDATE"),
    )
    assert got[("gpu_guard_admission_reviews_total", denied)] == 2
    other = (
        ("allowed", "true"),
        ("endpoint", "validate"),
        ("kind", "other"),
        ("operation", "UPDATE"),
    )
    assert got[("gpu_guard_admission_reviews_total", other)] == 1  # bounded label values
    assert got[("gpu_guard_admission_rejected_total", (("status", "400"),))] == 1
    assert got[("gpu_guard_admission_duration_seconds_count", (("endpoint", "validate"),))] == 3
    assert got[("gpu_guard_state_synced", (("kind", "Node"),))] == 1
    assert got[("gpu_guard_state_synced", (("kind", "Pod"),))] == 0
    assert got[("gpu_guard_state_age_seconds", (("kind", "Node"),))] == 1.5


def test_an_audit_replaces_the_findings_gauge_rather_than_adding_to_it() -> None:
    metrics = Metrics()
    ref = request("CREATE", node("n")).ref
    first = [Verdict("p", Action.WARN, ref, "m"), Verdict("p", Action.WARN, ref, "m2")]
    metrics.record_audit(first, 0.25)
    metrics.record_audit(first[:1], 0.5)
    got = samples(metrics.exposition().decode())
    assert got[("gpu_guard_audit_findings", (("action", "warn"), ("policy", "p")))] == 1
    assert got[("gpu_guard_audit_duration_seconds", ())] == 0.5
    assert got[("gpu_guard_audit_runs_total", ())] == 2

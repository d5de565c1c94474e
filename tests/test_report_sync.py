"""Publishing PolicyReports: created once, then replaced in place; stale ones deleted."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.fakeapi import FakeApi
from webhook.audit.publish import ReportPublisher
from webhook.state.client import call_json, connect

REPORTS = "/apis/wgpolicyk8s.io/v1alpha2"
CLUSTER = f"{REPORTS}/clusterpolicyreports/gpu-guard"


def report(kind: str, name: str, namespace: str = "", results: int = 1) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": kind,
        "metadata": meta,
        "results": [{"policy": "p", "result": "warn"}] * results,
    }


def ours(fake: FakeApi) -> list[str]:
    return sorted(
        p
        for p, o in fake.objects.items()
        if o.get("metadata", {}).get("labels", {}).get("app.kubernetes.io/managed-by")
        == "gpu-guard"
    )


async def test_repeated_audits_update_reports_in_place_and_never_grow(
    fake_api: tuple[FakeApi, str],
) -> None:
    fake, kubeconfig = fake_api
    api = await connect(kubeconfig)
    try:
        publisher = ReportPublisher(api)
        first = [
            report("ClusterPolicyReport", "gpu-guard"),
            report("PolicyReport", "gpu-guard", "vms"),
            report("PolicyReport", "gpu-guard", "ml"),
        ]
        assert await publisher.publish(first) == {
            "created": 3,
            "updated": 0,
            "deleted": 0,
            "failed": 0,
        }
        for _ in range(3):
            counts = await publisher.publish(
                [
                    report("ClusterPolicyReport", "gpu-guard", results=2),
                    report("PolicyReport", "gpu-guard", "vms"),
                    report("PolicyReport", "gpu-guard", "ml"),
                ]
            )
            assert counts == {"created": 0, "updated": 3, "deleted": 0, "failed": 0}
            assert len(ours(fake)) == 3
        assert len(fake.objects[CLUSTER]["results"]) == 2
        # The ml namespace is clean now: its report goes, the others stay.
        counts = await publisher.publish(
            [report("ClusterPolicyReport", "gpu-guard"), report("PolicyReport", "gpu-guard", "vms")]
        )
        assert counts["deleted"] == 1
        assert ours(fake) == [
            "/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports/gpu-guard",
            "/apis/wgpolicyk8s.io/v1alpha2/namespaces/vms/policyreports/gpu-guard",
        ]
    finally:
        await api.close()


async def test_reports_someone_else_wrote_are_left_alone(fake_api: tuple[FakeApi, str]) -> None:
    fake, kubeconfig = fake_api
    kyverno = "/apis/wgpolicyk8s.io/v1alpha2/namespaces/ml/policyreports/kyverno-pol"
    fake.put(
        kyverno,
        {
            "metadata": {
                "name": "kyverno-pol",
                "namespace": "ml",
                "labels": {"app.kubernetes.io/managed-by": "kyverno"},
            }
        },
    )
    api = await connect(kubeconfig)
    try:
        await ReportPublisher(api).publish([report("ClusterPolicyReport", "gpu-guard")])
        assert kyverno in fake.objects
    finally:
        await api.close()


async def test_a_cluster_without_the_report_crds_is_said_once_and_publishing_resumes_with_them(
    fake_api: tuple[FakeApi, str], caplog: pytest.LogCaptureFixture
) -> None:
    fake, kubeconfig = fake_api
    fake.unserved = {REPORTS + "/clusterpolicyreports", REPORTS + "/namespaces/"}
    api = await connect(kubeconfig)
    try:
        publisher = ReportPublisher(api)
        wanted = [
            report("ClusterPolicyReport", "gpu-guard"),
            report("PolicyReport", "gpu-guard", "vms"),
        ]
        with caplog.at_level(logging.INFO, "gpu-guard.reports"):
            for _ in range(3):
                counts = await publisher.publish(wanted)
                assert counts == {"created": 0, "updated": 0, "deleted": 0, "failed": 0}
        assert publisher.unserved == {"ClusterPolicyReport", "PolicyReport"}
        chose, *said = [r.getMessage() for r in caplog.records]
        assert chose == (
            "publishing the audit as wgpolicyk8s.io/v1alpha2 policyreports and "
            "clusterpolicyreports (--report-format auto)"  # no openreports.io/v1alpha1 served
        )
        assert len(said) == 2, said  # once per kind, not once per audit or per report
        assert said[0].startswith("ClusterPolicyReports not published: the cluster serves no ")
        assert "wgpolicyk8s.io/v1alpha2 clusterpolicyreports" in said[0]
        assert "(install the wgpolicyk8s.io CRDs, or OpenReports' (openreports.io))" in said[0]
        assert fake.writes == []  # nothing was sent to a path the cluster does not serve

        caplog.clear()
        fake.unserved = set()  # the CRDs are installed
        with caplog.at_level(logging.INFO, "gpu-guard.reports"):
            counts = await publisher.publish(wanted)
        assert counts == {"created": 2, "updated": 0, "deleted": 0, "failed": 0}
        assert publisher.unserved == set()
        assert sorted(r.getMessage() for r in caplog.records) == [
            "ClusterPolicyReports are served again: publishing",
            "PolicyReports are served again: publishing",
        ]
    finally:
        await api.close()


async def test_call_json_gives_a_body_that_is_not_json_back_as_text(
    fake_api: tuple[FakeApi, str],
) -> None:
    fake, kubeconfig = fake_api
    fake.unserved = {"/apis/example.com/"}
    api = await connect(kubeconfig)
    try:
        assert await call_json(api, "GET", "/apis/example.com/v1/things") == (
            404,
            "404 page not found",
        )
    finally:
        await api.close()

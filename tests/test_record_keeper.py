"""The audit leader's record writer (webhook/audit/record.py) on the fake API server: it writes
only when the content changes (never on a timer), never without the lease, and never creates
the record the chart and overlays declare."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from policies.cluster.record import AS_OF, RECORD_NAME
from policies.state.cluster import ClusterState
from policies.vocabulary.verdicts import Action
from tests.builders import gpu_pod, node
from tests.fakeapi import FakeApi
from webhook.audit.record import RecordKeeper
from webhook.config import GuardConfig
from webhook.engine import Engine
from webhook.state.client import connect

RECORD = "/api/v1/namespaces/gpu-guard/configmaps/gpu-guard-record"
WHEN = datetime(2026, 12, 5, 14, 0, tzinfo=UTC)


def state() -> ClusterState:
    view = ClusterState()
    for obj in (node("gpu-1"), gpu_pod("train-0", "gpu-1", namespace="ml")):
        view.upsert(obj)
    return view


async def test_the_record_is_written_once_per_change_and_only_with_the_lease(
    fake_api: tuple[FakeApi, str],
) -> None:
    fake, kubeconfig = fake_api
    fake.put(RECORD, {"metadata": {"name": "gpu-guard-record", "namespace": "gpu-guard"}})
    view = state()
    leading = [True]
    api = await connect(kubeconfig)
    try:
        keeper = RecordKeeper(
            api, Engine(), view, "gpu-guard", holds=lambda: leading[0], clock=lambda: WHEN
        )
        assert await keeper.sync_once()
        data = fake.objects[RECORD]["data"]
        assert data["pods.gpu-1"] == "1: ml/train-0" and data[AS_OF] == "2026-12-05T14:00:00Z"
        assert not await keeper.sync_once()  # the same content: no write

        view.upsert(gpu_pod("train-1", "gpu-1", namespace="ml"))
        leading[0] = False
        assert not await keeper.sync_once()  # lost the lease: nothing written
        leading[0] = True
        assert await keeper.sync_once()
        assert fake.objects[RECORD]["data"]["pods.gpu-1"] == "2: ml/train-0, ml/train-1"

        # A reload that sets a carried policy to warn reaches the record.
        keeper.engine = Engine(GuardConfig(actions={"mig-reconfig-with-gpu-pods": Action.WARN}))
        assert await keeper.sync_once()
        assert "mig-reconfig-with-gpu-pods" not in fake.objects[RECORD]["data"]["deny"].split(",")
        assert [w for w in fake.writes if w.endswith(RECORD)] == [f"PUT {RECORD}"] * 3
    finally:
        await api.close()


async def test_a_missing_record_is_not_created_and_said_once(
    fake_api: tuple[FakeApi, str], caplog: pytest.LogCaptureFixture
) -> None:
    fake, kubeconfig = fake_api
    api = await connect(kubeconfig)
    try:
        view = state()
        keeper = RecordKeeper(api, Engine(), view, "gpu-guard")
        with caplog.at_level(logging.WARNING, logger="gpu-guard.record"):
            assert not await keeper.sync_once()
            view.upsert(gpu_pod("train-1", "gpu-1", namespace="ml"))  # a new content
            assert not await keeper.sync_once()
        assert RECORD not in fake.objects and fake.writes == []
        assert len(caplog.records) == 1, "its absence is said once, not at each change"
    finally:
        await api.close()


async def test_the_record_is_kept_with_the_background_audit_off(tmp_path: Path) -> None:
    """The record is the leader's own work, not the audit's: ``--audit-interval 0`` keeps it."""
    from tests.kubeapi import SERVED, WRITTEN, KubeApiDouble, Resource
    from tests.test_cli import STATE
    from tests.test_serve_live import start_serve
    from tests.tls import make_bundle
    from tests.waits import until
    from webhook.state.files import read_objects

    _, bundle = make_bundle(tmp_path / "tls", hosts=("127.0.0.1",))
    config_maps = Resource("ConfigMap", "", "v1", "configmaps", True)
    async with KubeApiDouble(resources=(*SERVED, *WRITTEN, config_maps)) as api:
        for item in read_objects(STATE):
            api.create(item.obj)
        api.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": RECORD_NAME, "namespace": "gpu-guard"},
            }
        )
        process, _ = await start_serve(
            "--kubeconfig",
            str(api.kubeconfig(tmp_path / "kubeconfig")),
            "--tls-cert",
            str(bundle.cert),
            "--tls-key",
            str(bundle.key),
            "--audit-interval",
            "0",
            "--record-interval",
            "0.2",
            env={"POD_NAMESPACE": "gpu-guard"},
        )
        try:

            def listed() -> bool:
                record = api.get("ConfigMap", "gpu-guard", RECORD_NAME) or {}
                return "pods.omen1" in (record.get("data") or {})

            await until(listed, timeout=60, every=0.05)
        finally:
            process.terminate()
            await asyncio.to_thread(process.wait, 30)


async def test_an_outage_is_said_once_and_its_end_once(
    fake_api: tuple[FakeApi, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A round every interval: an API server away for several rounds must not write a line each."""
    _, kubeconfig = fake_api
    api = await connect(kubeconfig)
    rounds: list[BaseException | None] = [
        *[OSError("connection refused")] * 3,
        None,
        None,
        OSError("connection refused"),
    ]
    done = asyncio.Event()

    async def scripted() -> bool:
        if not rounds:
            done.set()
            await asyncio.sleep(3600)
        outcome = rounds.pop(0)
        if outcome is not None:
            raise outcome
        return False

    try:
        keeper = RecordKeeper(api, Engine(), state(), "gpu-guard", interval=0)
        keeper.sync_once = scripted  # type: ignore[method-assign]
        with caplog.at_level(logging.DEBUG, logger="gpu-guard.record"):
            task = asyncio.create_task(keeper.run())
            await asyncio.wait_for(done.wait(), 5)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        await api.close()
    said = [(r.levelname, r.getMessage().split(":")[0]) for r in caplog.records]
    assert said == [
        ("WARNING", "record not written (said once until it is)"),
        ("INFO", "the record's API server is reachable again"),
        ("WARNING", "record not written (said once until it is)"),
    ]

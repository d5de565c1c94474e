"""Fixtures shared by several test modules."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from tests.fakeapi import FakeApi, serve_fake_api
from tests.kubeapi import KubeApiDouble
from webhook.state.live import Backoff, LiveState, connect

LiveFactory = Callable[..., Any]


def quick_backoff() -> Backoff:
    """Retries within tens of milliseconds: tests wait on recovery, not on politeness."""
    return Backoff(initial=0.02, maximum=0.1)


@pytest.fixture
async def fake_api(tmp_path: Path) -> AsyncIterator[tuple[FakeApi, str]]:
    async with serve_fake_api(tmp_path) as served:
        yield served


@pytest.fixture
async def kube(api: KubeApiDouble, tmp_path: Path) -> AsyncIterator[ApiClient]:
    """A real kubernetes-asyncio client for the module's ``api`` double, from a kubeconfig."""
    client = await connect(str(api.kubeconfig(tmp_path / "kubeconfig")))
    yield client
    await client.close()


@pytest.fixture
async def make_live(kube: ApiClient) -> AsyncIterator[LiveFactory]:
    """Starts LiveStates on ``kube``, synced, and stops them after the test."""
    started: list[LiveState] = []

    async def factory(**kwargs: Any) -> LiveState:
        kwargs.setdefault("backoff", quick_backoff)
        kwargs.setdefault("watch_timeout", 5)
        live = LiveState(kube, **kwargs)
        started.append(live)
        await live.start()
        await live.wait_synced(5)
        return live

    yield factory
    for live in started:
        await live.stop()

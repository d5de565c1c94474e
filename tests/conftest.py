"""Fixtures shared by several test modules."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from _pytest.terminal import TerminalReporter
from kubernetes_asyncio.client import ApiClient

from tests import FIXTURES
from tests.fakeapi import FakeApi, serve_fake_api
from tests.helm import NOT_FOUND
from tests.kubeapi import KubeApiDouble
from webhook.state.client import connect
from webhook.state.live import Backoff, LiveState
from webhook.state.pciids import PCI_IDS_ENV

LiveFactory = Callable[..., Any]


def fixtures_missing(what: str) -> NoReturn:
    """Fails the test that needs ``what`` from tests/fixtures: a skip would read as a pass."""
    pytest.fail(
        f"{what} is missing: tests/fixtures is part of the repository; restore it from git "
        "(git checkout -- tests/fixtures), do not skip",
        pytrace=False,
    )


def require_fixture(path: Path) -> Path:
    """``path`` (under tests/fixtures) for a test that cannot run without it; missing, the test
    fails naming it (``fixtures_missing``)."""
    if not path.exists():
        fixtures_missing(str(path))
    return path


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    """One line, not one per test, when the chart's tests were skipped for want of helm."""
    skipped = terminalreporter.stats.get("skipped", [])
    if any(NOT_FOUND in str(getattr(report, "longrepr", "")) for report in skipped):
        terminalreporter.write_line(NOT_FOUND)


@pytest.fixture(autouse=True)
def _collector_unfrozen() -> Iterator[None]:
    """Commands freeze the heap once their state is loaded (they end with it); a test process
    runs many, so each test gives the frozen objects back to the collector."""
    yield
    gc.unfreeze()


@pytest.fixture
def committed_pci_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """No system pci.ids, whatever the machine has: for a test whose expected text names devices
    as the committed files do (a newer system database may spell them otherwise)."""
    monkeypatch.setenv(PCI_IDS_ENV, "")


@pytest.fixture
def dra_fixtures() -> Path:
    """tests/fixtures/dra (``tests.dra_builders.needs_fixtures``), or the test fails."""
    return require_fixture(FIXTURES / "dra")


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


@pytest.fixture
async def homelab_api() -> AsyncIterator[KubeApiDouble]:
    """The API double holding the home lab (examples/homelab/cluster.yaml)."""
    from tests.test_cli import STATE
    from webhook.state.files import read_objects

    async with KubeApiDouble() as api:
        for item in read_objects(STATE):
            api.create(item.obj)
        yield api

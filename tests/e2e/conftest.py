"""The e2e tier: tests against a real kube-apiserver and etcd from ``KUBEBUILDER_ASSETS``.

Every test under tests/e2e is marked ``e2e``. Without the binaries they are skipped and one line
in the terminal summary says how to get them; with ``GPU_GUARD_REQUIRE_E2E=1`` (CI) an e2e test
that did not run fails the run. A failed test gets the last lines of the logs of every control
plane and guard it used. The fixtures' surface is in tests/e2e/README.md.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from _pytest.terminal import TerminalReporter

from tests.e2e import crds
from tests.e2e.controlplane import (
    ASSETS_VARIABLE,
    HOW_TO_GET,
    ControlPlane,
    assets,
    missing_binaries,
)
from tests.e2e.guard import Guard, start_guard

HERE = Path(__file__).resolve().parent
REQUIRE_VARIABLE = "GPU_GUARD_REQUIRE_E2E"
LOG_LINES = 60
_not_run = pytest.StashKey[str]()
_logs = pytest.StashKey[list["AttachedLog"]]()
_namespaces = itertools.count(1)


def required() -> bool:
    return os.environ.get(REQUIRE_VARIABLE) == "1"


def _why_not_runnable() -> str | None:
    folder = assets()
    if folder is None:
        return f"{ASSETS_VARIABLE} is not set"
    missing = missing_binaries(folder)
    if missing:
        return f"{ASSETS_VARIABLE}={folder} lacks {', '.join(missing)}"
    return None


# --- the tier's hooks ----------------------------------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks the tests under tests/e2e ``e2e`` (before ``-m`` selects) and, without the
    binaries, skips them."""
    ours = [item for item in items if HERE in item.path.parents]
    for item in ours:
        item.add_marker(pytest.mark.e2e)
    reason = _why_not_runnable()
    if reason is None or not ours:
        return
    config.stash[_not_run] = reason
    for item in ours:
        item.add_marker(pytest.mark.skip(reason=f"{reason}: {HOW_TO_GET}"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Under GPU_GUARD_REQUIRE_E2E=1 an e2e test that was skipped fails; a failed e2e test
    carries the tails of the logs attached to it."""
    report = yield
    if item.get_closest_marker("e2e") is None:
        return report
    if report.skipped and required() and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"{REQUIRE_VARIABLE}=1 and this e2e test did not run: {reason}"
    if report.failed:
        for log in item.stash.get(_logs, []):
            report.sections.append((f"{log.title} (last {LOG_LINES} lines)", log.tail()))
    return report


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    """One line when e2e tests were selected but could not run: why, and how to get the
    binaries."""
    reason = terminalreporter.config.stash.get(_not_run, None)
    if reason is None:
        return
    not_run = {
        report.nodeid
        for outcome in ("skipped", "failed", "error")
        for report in terminalreporter.stats.get(outcome, [])
        if "e2e" in getattr(report, "keywords", {})
    }
    if not_run:
        terminalreporter.write_line(
            f"e2e: {len(not_run)} tests against a real API server not run: {reason}; {HOW_TO_GET}"
        )


# --- logs attached to a failure ------------------------------------------------------------------


@dataclass
class AttachedLog:
    title: str
    path: Path
    offset: int

    def tail(self) -> str:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                text = handle.read().decode(errors="replace")
        except OSError as exc:
            return f"(unreadable: {exc})"
        return "\n".join(text.splitlines()[-LOG_LINES:])


def attach_log(node: pytest.Item, title: str, path: Path) -> None:
    """Shows the lines ``path`` gains from now on under ``title`` if the test fails."""
    offset = path.stat().st_size if path.exists() else 0
    node.stash.setdefault(_logs, []).append(AttachedLog(title, path, offset))


def attach_plane_logs(node: pytest.Item, plane: ControlPlane, name: str) -> None:
    attach_log(node, f"{name}: kube-apiserver log", plane.apiserver_log)
    attach_log(node, f"{name}: etcd log", plane.etcd_log)


# --- fixtures ------------------------------------------------------------------------------------


#: What a control plane needs to serve every kind gpu-guard watches: DeviceTaintRules are served
#: by 1.36 in resource.k8s.io/v1beta2 only with this runtime config (and act only with the gates).
DRA_TAINT_ARGS = (
    "--feature-gates=DRADeviceTaints=true,DRADeviceTaintRules=true",
    "--runtime-config=resource.k8s.io/v1beta2=true",
)


def _started(
    directory: Path,
    with_crds: bool = True,
    extra_args: tuple[str, ...] = (),
    node_authorizer: bool = False,
) -> ControlPlane:
    reason = _why_not_runnable()
    if reason is not None:
        pytest.skip(f"{reason}: {HOW_TO_GET}")
    plane = ControlPlane(directory, node_authorizer=node_authorizer)
    plane.extra_args = extra_args
    try:
        plane.start()
        if with_crds:
            crds.install(plane, crds.every_crd())
    except BaseException:
        plane.stop()
        raise
    return plane


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The session's shared control plane, every CRD installed. Only for tests that add
    namespaced objects, each in its own ``namespace``; never stop it or leave cluster-scoped
    objects on it (``own_control_plane`` is for those)."""
    plane = _started(tmp_path_factory.mktemp("control-plane"))
    yield plane
    plane.stop()


@pytest.fixture(autouse=True)
def _shared_plane_logs(request: pytest.FixtureRequest) -> None:
    if "control_plane" in request.fixturenames:
        plane: ControlPlane = request.getfixturevalue("control_plane")
        attach_plane_logs(request.node, plane, "shared control plane")


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> str:
    """A namespace on the shared control plane made for this test alone (never reused: a
    deleted one stays Terminating), with its ``default`` ServiceAccount."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")
    name = f"t{next(_namespaces)}-{slug}"[:63].rstrip("-")
    return control_plane.create_namespace(name)


@pytest.fixture
def own_control_plane(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A control plane for this test alone, every CRD installed; stopped after it. For tests
    that stop or restart the API server, compact etcd, register failurePolicy Fail webhooks or
    leave cluster-scoped objects."""
    plane = _started(tmp_path / "control-plane")
    attach_plane_logs(request.node, plane, "own control plane")
    yield plane
    plane.stop()


@pytest.fixture
def every_kind_control_plane(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[ControlPlane]:
    """``own_control_plane`` serving every kind gpu-guard watches, DeviceTaintRules included
    (``DRA_TAINT_ARGS``): for tests of what the guard reads of all of them."""
    plane = _started(tmp_path / "control-plane", extra_args=DRA_TAINT_ARGS)
    attach_plane_logs(request.node, plane, "control plane serving every kind")
    yield plane
    plane.stop()


@pytest.fixture
def node_authorized_control_plane(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[ControlPlane]:
    """``own_control_plane`` with ``--authorization-mode=Node,RBAC`` and NodeRestriction, as
    clusters run: a kubelet's identity may write only its own Node."""
    plane = _started(tmp_path / "control-plane", node_authorizer=True)
    attach_plane_logs(request.node, plane, "node-authorized control plane")
    yield plane
    plane.stop()


@pytest.fixture
def bare_control_plane(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A control plane for this test alone with no CRD at all (no GPU Operator, KubeVirt, NFD
    or PolicyReports): what a cluster gpu-guard is installed on before them looks like."""
    plane = _started(tmp_path / "control-plane", with_crds=False)
    attach_plane_logs(request.node, plane, "bare control plane")
    yield plane
    plane.stop()


ServeGuard = Callable[..., Awaitable[Guard]]


@pytest.fixture
async def serve(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[ServeGuard]:
    """``await serve(plane, *args, kubeconfig=None, env=None, name="guard")``: starts
    ``gpu-guard serve`` against ``plane`` on 127.0.0.1 (``tests.e2e.guard.start_guard``) and
    returns its ``Guard``; every guard started is stopped after the test, its log attached to
    a failure."""
    started: list[Guard] = []

    async def start(
        plane: ControlPlane,
        *args: str,
        kubeconfig: Path | None = None,
        env: dict[str, str] | None = None,
        name: str = "guard",
    ) -> Guard:
        guard = await start_guard(
            plane, tmp_path / f"{name}-{len(started)}", *args, kubeconfig=kubeconfig, env=env
        )
        started.append(guard)
        attach_log(request.node, f"{name}: gpu-guard serve log", guard.log)
        return guard

    yield start
    for guard in started:
        await guard.stop()

"""The live state (list, then watch) against a real API server: the first sync, objects added,
updated and deleted, and a watch whose resourceVersion is gone relisting on its 410."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from policies.cluster.kinds import POD, VIRTUAL_MACHINE
from policies.vocabulary.requests import GroupKind
from tests.builders import gpu_pod, pod, vm
from tests.conftest import quick_backoff
from tests.e2e.controlplane import ControlPlane
from tests.waits import until
from webhook.state.client import connect
from webhook.state.live import KindStatus, LiveState

Obj = dict[str, Any]


class JournalingLiveState(LiveState):
    """A LiveState that notes, in order, each list it makes and each ERROR event it is sent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.journal: list[tuple[str, GroupKind, Any]] = []

    async def _list_into_state(self, status: KindStatus) -> str:
        self.journal.append(("list", status.resource.kind, None))
        return await super()._list_into_state(status)

    def _apply_event(self, status: KindStatus, event: Mapping[str, Any]) -> None:
        if event.get("type") == "ERROR":
            self.journal.append(
                ("error", status.resource.kind, (event.get("object") or {}).get("code"))
            )
        super()._apply_event(status, event)


@pytest.fixture
async def admin(control_plane: ControlPlane) -> AsyncIterator[ApiClient]:
    client = await connect(str(control_plane.kubeconfig))
    yield client
    await client.close()


async def started(api: ApiClient) -> JournalingLiveState:
    live = JournalingLiveState(api, backoff=quick_backoff, watch_timeout=30)
    await live.start()
    await live.wait_synced(30)
    return live


@dataclass(frozen=True)
class Case:
    kind: GroupKind
    make: Callable[[str, str], Obj]
    change: Callable[[Obj], Obj]
    """The object as the update leaves it (sent as a PUT)."""
    seen: Callable[[Any], object]
    """What of its projection in the state shows the update."""


CASES = [
    Case(
        POD,
        lambda name, ns: pod(name, namespace=ns, limits={"nvidia.com/gpu": "1"}, phase="Pending"),
        lambda obj: {**obj, "status": {**obj["status"], "phase": "Succeeded"}},
        lambda info: info.phase,
    ),
    Case(
        VIRTUAL_MACHINE,
        lambda name, ns: vm(name, namespace=ns, gpus=["nvidia.com/GA102_GEFORCE_RTX_3090"]),
        lambda obj: {**obj, "spec": {**obj["spec"], "runStrategy": "Halted"}},
        lambda info: info.run_strategy,
    ),
]


def projections(live: LiveState, kind: GroupKind, namespace: str) -> dict[str, Any]:
    """The state's projections of ``kind`` in ``namespace`` by name (pods: those holding a
    device; the others are only counted)."""
    every = live.state.pods() if kind == POD else live.state.vms()
    return {info.name: info for info in every if info.namespace == namespace}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.kind.kind)
async def test_the_live_state_syncs_then_sees_objects_added_updated_and_deleted(
    case: Case, control_plane: ControlPlane, namespace: str, admin: ApiClient
) -> None:
    plane = control_plane
    before = await asyncio.to_thread(plane.create, case.make("before", namespace))
    live = await started(admin)
    try:
        assert set(projections(live, case.kind, namespace)) == {"before"}

        added = await asyncio.to_thread(plane.create, case.make("added", namespace))
        await until(lambda: "added" in projections(live, case.kind, namespace), timeout=30)
        old = case.seen(projections(live, case.kind, namespace)["added"])

        path = plane.path_of(added)
        updated = case.change(added)
        if case.kind == POD:  # a pod's status has its own endpoint
            path += "/status"
        await asyncio.to_thread(plane.call, "PUT", path, updated)
        await until(
            lambda: case.seen(projections(live, case.kind, namespace)["added"]) != old, timeout=30
        )

        await asyncio.to_thread(
            plane.call, "DELETE", plane.path_of(before) + "?gracePeriodSeconds=0"
        )
        await until(lambda: set(projections(live, case.kind, namespace)) == {"added"}, timeout=30)
    finally:
        await live.stop()


async def test_a_watch_whose_version_is_gone_gets_410_and_the_kind_relists(
    own_control_plane: ControlPlane,
) -> None:
    plane = own_control_plane
    plane.create_namespace("ml")
    gone = plane.create(gpu_pod("gone", "", namespace="ml"))
    api = await connect(str(plane.kubeconfig))
    live = await started(api)
    try:
        listed = len(live.journal)
        # Nothing on this loop runs until these calls return: the live state is as frozen as a
        # stopped process while the API server dies (SIGKILL: a frozen client would hold up a
        # graceful stop), etcd moves on without it (as another API server's writes would move
        # it) and is compacted, and the API server starts with a watch cache that begins after
        # every version the live state has seen. Then the pods change.
        plane.stop_api_server(signal.SIGKILL)
        for n in range(3):
            plane.etcdctl("put", f"/e2e/elsewhere-{n}", "x")
        plane.compact()
        plane.start_api_server()
        plane.create(gpu_pod("new", "", namespace="ml"))
        plane.call("DELETE", plane.path_of(gone) + "?gracePeriodSeconds=0")

        await until(lambda: set(projections(live, POD, "ml")) == {"new"}, timeout=60)
        after = live.journal[listed:]
        assert ("error", POD, 410) in after, after
        assert ("list", POD, None) in after[after.index(("error", POD, 410)) :], after
    finally:
        await live.stop()
        await api.close()


async def test_the_live_state_reads_a_gpucluster_through_its_real_crd(
    control_plane: ControlPlane, admin: ApiClient
) -> None:
    """GPU Operator 26.7's CRD (tests/fixtures/crds/platform): the example object is valid
    there, its status comes through the status subresource, and the watch sees it go."""
    import yaml

    from tests import FIXTURES

    plane = control_plane
    example_file = FIXTURES.parent.parent / "examples" / "dra" / "gpucluster.yaml"
    (example,) = yaml.safe_load_all(example_file.read_text())
    created = await asyncio.to_thread(plane.create, example)
    live = await started(admin)
    try:
        (cluster,) = live.state.gpu_clusters()
        assert (cluster.name, cluster.state) == ("gpu-cluster", "ready")
        assert cluster.dra_feature_gates == ("DeviceMetadata", "PassthroughSupport")
        assert cluster.compute_domains is False
        await asyncio.to_thread(plane.call, "DELETE", plane.path_of(created))
        await until(lambda: live.state.gpu_clusters() == [], timeout=30)
    finally:
        await live.stop()

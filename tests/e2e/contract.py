"""Two backends for one contract: the test double (tests/kubeapi.py) and a real kube-apiserver.

Why: a double that drifts from the real API server lets CI pass on behaviour no cluster has. The
test_double_contract_*.py modules send the same raw HTTP requests, through the same aiohttp client,
to both, and assert the same answers: each behaviour of the double a real server can show is held
to one. Only where they must differ does a backend say how it does a thing (how it compacts, how
it restarts, who is a stranger to it).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from tests.e2e import crds
from tests.e2e.controlplane import ControlPlane
from tests.kubeapi import SERVED, WRITTEN, KubeApiDouble

Obj = dict[str, Any]
Answer = tuple[int, Any]
"""The status and the body, decoded from JSON when it is JSON, else the text."""
STRANGER = "system:serviceaccount:contract:nobody"
"""An identity no role grants anything."""
_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=60)


class Backend:
    """An API server the contract talks to: at ``base``, in ``namespace`` (a new one each test on
    the real server), with what differs between the two behind a method."""

    name: str

    def __init__(self, base: str, namespace: str, tls: ssl.SSLContext | None) -> None:
        self.base = base
        self.namespace = namespace
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=tls if tls is not None else False),
            timeout=_TIMEOUT,
        )

    async def close(self) -> None:
        await self.http.close()

    @property
    def stranger(self) -> dict[str, str]:
        """Headers that make a request come from ``STRANGER``."""
        raise NotImplementedError

    async def compact(self) -> None:
        """Compact etcd at its current revision."""
        raise NotImplementedError

    async def restart(self) -> None:
        """Restart the API server on the same etcd, and wait until /readyz answers 200."""
        raise NotImplementedError

    async def stop(self) -> None:
        """Stop the API server (connections refused)."""
        raise NotImplementedError

    async def start_restarting(self) -> None:
        """Start it again, not waiting for it to be ready."""
        raise NotImplementedError

    def on_an_etcd_without_watch_progress(self) -> None:
        """Answer as kube-apiserver does on an etcd without RequestWatchProgress (the real
        server's 3.5.1 always does; the double's default is a newer etcd's)."""

    async def delete_crds(self, group: str) -> None:
        """Delete the CRDs of ``group`` and wait until it is not served."""
        raise NotImplementedError

    async def install_crds(self, group: str) -> None:
        """Install them again, and wait until they are served."""
        raise NotImplementedError

    # --- the same requests to both -------------------------------------------------------------

    async def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Answer:
        async with self.http.request(
            method, self.base + path, json=body, headers=headers or {}
        ) as response:
            return response.status, decoded(await response.text())

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        status, answer = await self.request(method, path, body)
        assert 200 <= status < 300, (method, path, status, answer)
        return answer

    async def watch(
        self,
        path: str,
        during: Callable[[], Awaitable[None]] | None = None,
        count: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, list[Obj]]:
        """A watch read to its end (or to ``count`` events): its status and events. ``during``
        runs once the response's headers are in, when the API server has registered the watch
        (it answers the headers after), so what it changes reaches the watch live."""
        async with self.http.get(self.base + path, headers=headers or {}) as response:
            if response.status != 200:
                return response.status, [decoded(await response.text())]
            if during is not None:
                await during()
            events: list[Obj] = []
            while count is None or len(events) < count:
                line = await response.content.readline()
                if not line:
                    break
                if line.strip():
                    events.append(json.loads(line))
            return 200, events

    async def readyz(self) -> tuple[int | str, str]:
        """/readyz's status and text; ("refused", "") when nothing listens."""
        try:
            async with self.http.get(self.base + "/readyz") as response:
                return response.status, await response.text()
        except aiohttp.ClientConnectorError as exc:
            assert isinstance(exc.os_error, ConnectionRefusedError), exc
            return "refused", ""

    # --- paths and objects -----------------------------------------------------------------------

    def pods(self, query: str = "") -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods{query}"

    def vms(self, query: str = "") -> str:
        return f"/apis/kubevirt.io/v1/namespaces/{self.namespace}/virtualmachines{query}"

    def leases(self, query: str = "") -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases{query}"

    def claims(self, query: str = "") -> str:
        return f"/apis/resource.k8s.io/v1/namespaces/{self.namespace}/resourceclaims{query}"

    async def version(self, collection: str) -> int:
        """The resourceVersion a list of ``collection`` answers now."""
        return int((await self.call("GET", collection))["metadata"]["resourceVersion"])


def decoded(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


class DoubleBackend(Backend):
    name = "double"

    def __init__(self, api: KubeApiDouble) -> None:
        super().__init__(api.url, "contract", None)
        self.api = api
        api.forbid("stranger", STRANGER)

    @property
    def stranger(self) -> dict[str, str]:
        return {"Authorization": "Bearer stranger"}

    async def compact(self) -> None:
        self.api.compact()

    async def restart(self) -> None:
        await self.stop()
        await self.start_restarting()

    async def stop(self) -> None:
        await self.api.stop()

    async def start_restarting(self) -> None:
        await self.api.start_restarted(throttled=0, installing=0.3)

    def on_an_etcd_without_watch_progress(self) -> None:
        self.api.fail_unversioned_watches()

    async def delete_crds(self, group: str) -> None:
        self.api.uninstall(group)

    async def install_crds(self, group: str) -> None:
        self.api.install(group)


class RealBackend(Backend):
    name = "real"

    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        tls = ssl.create_default_context(cadata=plane.pki.ca.cert_pem.decode())
        tls.load_cert_chain(plane.pki.admin_cert, plane.pki.admin_key)
        super().__init__(plane.url, namespace, tls)
        self.plane = plane

    @property
    def stranger(self) -> dict[str, str]:
        return {"Impersonate-User": STRANGER}  # the admin may impersonate anyone

    async def compact(self) -> None:
        await asyncio.to_thread(self.plane.compact)

    async def restart(self) -> None:
        await asyncio.to_thread(self.plane.restart_api_server)

    async def stop(self) -> None:
        await asyncio.to_thread(self.plane.stop_api_server)

    async def start_restarting(self) -> None:
        await asyncio.to_thread(self.plane.start_api_server, False)

    async def delete_crds(self, group: str) -> None:
        for crd in _crds_of(group):
            name = crd["metadata"]["name"]
            await self.call(
                "DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            )
        collection = f"/apis/{group}"
        async with asyncio.timeout(60):
            while (await self.request("GET", collection))[0] != 404:
                await asyncio.sleep(0.05)

    async def install_crds(self, group: str) -> None:
        await asyncio.to_thread(crds.install, self.plane, _crds_of(group))


def _crds_of(group: str) -> list[Obj]:
    return [crd for crd in crds.every_crd() if crd["spec"]["group"] == group]


BACKENDS = ["double", "real"]


async def _backend(request: pytest.FixtureRequest, plane_fixture: str) -> AsyncIterator[Backend]:
    chosen: Backend
    if request.param == "double":
        async with KubeApiDouble(resources=SERVED + WRITTEN, bookmark_interval=60) as api:
            chosen = DoubleBackend(api)
            try:
                yield chosen
            finally:
                await chosen.close()
        return
    plane: ControlPlane = request.getfixturevalue(plane_fixture)
    if plane_fixture == "control_plane":
        namespace: str = request.getfixturevalue("namespace")
    else:
        namespace = plane.create_namespace("contract")
    chosen = RealBackend(plane, namespace)
    try:
        yield chosen
    finally:
        await chosen.close()


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """The double, or the session's shared control plane in a namespace of the test's own."""
    async for chosen in _backend(request, "control_plane"):
        yield chosen


@pytest.fixture(params=BACKENDS)
async def own_backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """The double, or a control plane of the test's own (compacted, restarted, quiet)."""
    async for chosen in _backend(request, "own_control_plane"):
        yield chosen


def pod(name: str, node: str | None = None, **labels: str) -> Obj:
    spec: Obj = {"containers": [{"name": "c", "image": "busybox"}]}
    if node is not None:
        spec["nodeName"] = node  # bound as created: no scheduler needed
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def vm(name: str) -> Obj:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {"running": False},
    }


def lease(name: str, holder: str = "replica-a") -> Obj:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }


def names(listing: Obj) -> list[str]:
    return [item["metadata"]["name"] for item in listing["items"]]


def kinds(events: list[Obj]) -> list[tuple[str, str | None]]:
    """(type, name) of each event."""
    return [(e["type"], e["object"]["metadata"].get("name")) for e in events]

"""A Kubernetes API server test double that speaks the real list/watch protocol.

Why: the informer-style code in gpu-guard must be tested against the *real*
kubernetes-asyncio client (its watch loop, its 410 handling, its reconnects), so
a mock of the client would prove nothing. This double is an aiohttp server on
127.0.0.1 that answers list, get, watch and write requests the way kube-apiserver v1.36
does (its wording lives in tests/kubeapi_wire.py), holds objects the test puts into it,
and can be made to misbehave (dropped streams, outages, latency, CRD groups that vanish,
identities refused), and can go through what a restarting kube-apiserver answers in its
first seconds (tests/fixtures/apiserver-restart): connections refused (``stop()``, then
``start_restarted()`` on the same port), custom resources answered 429 with Retry-After,
/readyz 500, watches without a resourceVersion answered with an ERROR event, and a watch
cache that begins after every version handed out before.

Held to the real server: every behaviour here that a real kube-apiserver can be made to
show is checked against one by tests/e2e/test_double_contract.py (the list is in
tests/e2e/README.md, with what stays double-only and why).

It runs on the test's own event loop, so every control method is a plain call.

    async with KubeApiDouble() as api:
        api.create(node_obj)
        api.kubeconfig(tmp_path / "kubeconfig")
        ...  # point kubernetes-asyncio at the file
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
import socket
import string
import time
import uuid
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal

import yaml
from aiohttp import web

from tests.kubeapi_wire import (
    DRA_RESOURCES,
    LEASE,
    OPENREPORTS,
    RESOURCES,
    SERVED,
    WRITTEN,
    ApiError,
    BadRequest,
    JsonObj,
    Resource,
    Selector,
    built_in,
    conflict,
    decode_continue,
    deleted,
    encode_continue,
    expired_continue,
    forbidden,
    invalid_name,
    merge_patch,
    method_not_allowed,
    not_found,
    parse_field_selector,
    parse_label_selector,
    query_bool,
    query_int,
    status_body,
    too_old_resource_version,
    unversioned_update,
    watch_version,
)

__all__ = [
    "DRA_RESOURCES",
    "LEASE",
    "OPENREPORTS",
    "RESOURCES",
    "SERVED",
    "WRITTEN",
    "DownMode",
    "EventType",
    "JsonObj",
    "KubeApiDouble",
    "Resource",
    "WatchRequest",
    "Write",
    "merge_patch",
    "status_body",
]

EventType = Literal["ADDED", "MODIFIED", "DELETED"]
DownMode = Literal["close", "503"]
Verb = Literal["get", "list", "watch", "create", "update", "delete"]


@dataclass(frozen=True)
class WatchRequest:
    """A watch as the server saw it, so tests can assert where a client resumed."""

    path: str
    params: Mapping[str, str]

    @property
    def resource_version(self) -> str | None:
        return self.params.get("resourceVersion")


# --- the server --------------------------------------------------------------


@dataclass(frozen=True)
class _Event:
    rv: int
    type: EventType
    obj: JsonObj
    old: JsonObj | None  # previous state, so selector watches can see objects move in/out


_Signal = Literal["drop", "end"]


@dataclass(eq=False)
class _Watcher:
    resource: Resource
    namespace: str | None
    selector: Selector
    request: web.Request
    queue: asyncio.Queue[_Event | _Signal] = field(default_factory=asyncio.Queue)

    def view(self, event: _Event) -> tuple[str, JsonObj] | None:
        """What this watcher sees of an event; like the watch cache, a MODIFIED that moves an
        object into the selector is sent as ADDED, and one that moves it out as DELETED with
        the object as it was, at the event's resourceVersion."""
        ns = event.obj.get("metadata", {}).get("namespace")
        if self.namespace is not None and ns != self.namespace:
            return None
        now = self.selector.matches(event.obj)
        if event.type != "MODIFIED" or event.old is None:
            return (event.type, event.obj) if now else None
        before = self.selector.matches(event.old)
        if before and now:
            return ("MODIFIED", event.obj)
        if now:
            return ("ADDED", event.obj)
        if before:
            gone = copy.deepcopy(event.old)
            gone["metadata"]["resourceVersion"] = str(event.rv)
            return ("DELETED", gone)
        return None


@dataclass(frozen=True)
class Write:
    """A write the server accepted: who sent it (its bearer token), what and where."""

    token: str
    method: str
    kind: str
    namespace: str | None
    name: str
    body: JsonObj

    @property
    def holder(self) -> str | None:
        """A Lease write's holderIdentity ("" when released)."""
        holder = (self.body.get("spec") or {}).get("holderIdentity")
        return holder if isinstance(holder, str) else None


@dataclass(frozen=True)
class _Target:
    resource: Resource
    namespace: str | None
    name: str | None

    def key(self, stored: tuple[str, str]) -> str:
        """The object's etcd key under the list's prefix: lists come in this order, and a
        continue token resumes after one."""
        namespace, name = stored
        return name if self.namespace is not None or not namespace else f"{namespace}/{name}"


_Store = dict[tuple[str, str], JsonObj]


class _NotServed(Exception):
    """A path the apiserver serves nothing at: plain text "404 page not found"."""


class KubeApiDouble:
    """In-process kube-apiserver double: list/get/watch and writes over HTTP, mutations and
    fault injection as Python calls from the test."""

    def __init__(
        self,
        *,
        resources: Iterable[Resource] = SERVED,
        bookmark_interval: float = 1.0,
        history_limit: int = 1000,
        host: str = "127.0.0.1",
    ) -> None:
        #: how often an open watch may get a bookmark; kube-apiserver's is a minute, tests
        #: shorten it (the bookmark 2 s before a watch's deadline comes either way)
        self.bookmark_interval = bookmark_interval
        self.host = host
        self._resources = {r.kind: r for r in resources}
        self._by_path = {(r.group, r.version, r.plural): r for r in self._resources.values()}
        self._store: dict[str, _Store] = {k: {} for k in self._resources}
        # The watch cache, per kind: its window of events, the oldest version it can serve a
        # watch from, and its own version (its kind's last change; what bookmarks carry).
        self._history: dict[str, deque[_Event]] = {
            k: deque(maxlen=history_limit) for k in self._resources
        }
        self._floor: dict[str, int] = dict.fromkeys(self._resources, 0)
        self._cache_rv: dict[str, int] = dict.fromkeys(self._resources, 0)
        self._rv = 0
        self._compacted = 0  # etcd's compaction revision
        # What a continue token resumes: the kind's objects at the token's revision.
        self._snapshots: dict[tuple[str, int], _Store] = {}
        self._uninstalled: set[str] = set()
        self._forbidden: dict[str, tuple[str, frozenset[str] | None]] = {}
        self._expired: set[str] = set()
        self._watchers: set[_Watcher] = set()
        self._down: DownMode | None = None
        self._latency = 0.0
        self._throttled_until = 0.0
        self._installing_until = 0.0
        self._retry_after = 1
        self._readyz_failing_until = 0.0
        self._unversioned_watch_error = False
        self._watch_events = asyncio.Event()
        self._watch_events.set()
        #: requests answered 429 by throttle_custom_resources(), per URL path
        self.throttled: Counter[str] = Counter()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        #: requests per URL path (query stripped), counted even when they fail
        self.requests: Counter[str] = Counter()
        #: watch requests per URL path, counted even when they end in 410
        self.watches: Counter[str] = Counter()
        #: every watch request in arrival order, with its query parameters
        self.watch_requests: list[WatchRequest] = []
        #: every accepted POST/PUT/DELETE in order, with the token that sent it
        self.writes: list[Write] = []
        self._stalls: set[tuple[str, str | None]] = set()  # (kind, token or None for all)
        self._unstalled = asyncio.Event()

    # -- lifecycle ------------------------------------------------------------

    async def start(self) -> str:
        """Listen on an ephemeral port (the same one again after stop(), so a client keeps its
        kubeconfig); returns the URL. Started again this way it is the same server listening
        again, its watch cache intact, as behind a network cut; ``start_restarted`` is a
        restarted kube-apiserver."""
        if self._runner is not None:
            raise RuntimeError("KubeApiDouble is already running")
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a client that hangs up cancels its watch handler at
        # once, so watcher bookkeeping is exact; short shutdown so stop() is fast.
        runner = web.AppRunner(
            app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None
        )
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._port or 0))  # port 0: parallel runs never collide
        await web.SockSite(runner, sock).start()
        self._port = int(sock.getsockname()[1])
        self._runner = runner
        return self.url

    async def stop(self) -> None:
        """Cut open watches (else shutdown waits for them) and close the listener (connections
        are refused); stored objects and history survive, as etcd would."""
        self.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> KubeApiDouble:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("KubeApiDouble is not started")
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def kubeconfig_dict(
        self, *, namespace: str = "default", token: str = "kubeapi-double-token"
    ) -> JsonObj:
        """A kubeconfig for this server: plain http, a dummy bearer token (one per client
        when a test tells clients apart: ``writes``, ``stall`` and ``forbid`` go by it)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "double", "cluster": {"server": self.url}}],
            "users": [{"name": "double", "user": {"token": token}}],
            "contexts": [
                {
                    "name": "double",
                    "context": {"cluster": "double", "user": "double", "namespace": namespace},
                }
            ],
            "current-context": "double",
            "preferences": {},
        }

    def kubeconfig(
        self, path: str | Path, *, namespace: str = "default", token: str = "kubeapi-double-token"
    ) -> Path:
        """Write the kubeconfig to `path` (for code that loads one from disk)."""
        out = Path(path)
        out.write_text(yaml.safe_dump(self.kubeconfig_dict(namespace=namespace, token=token)))
        return out

    # -- state from the test's side ------------------------------------------

    @property
    def resource_version(self) -> int:
        """The current global resourceVersion (what a list would report)."""
        return self._rv

    def resource(self, kind: str) -> Resource:
        """Look a resource up by kind ("Pod") or plural ("pods")."""
        if kind in self._resources:
            return self._resources[kind]
        for r in self._resources.values():
            if kind in (r.plural, r.kind.lower()):
                return r
        raise KeyError(f"unknown kind {kind!r}")

    def objects(self, kind: str) -> list[JsonObj]:
        """What the server holds, in the order a list gives it (etcd's key order:
        namespace/name), as deep copies."""
        res = self.resource(kind)
        target = _Target(res, None, None)
        store = self._store[res.kind]
        return [copy.deepcopy(store[key]) for key in sorted(store, key=target.key)]

    def get(self, kind: str, namespace: str | None, name: str) -> JsonObj | None:
        res = self.resource(kind)
        obj = self._store[res.kind].get(self._key(res, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def create(self, obj: Mapping[str, Any]) -> JsonObj:
        """Add a new object (ADDED); fills uid, creationTimestamp, resourceVersion."""
        res, new = self._prepare(obj)
        key = self._key(res, new["metadata"].get("namespace"), new["metadata"]["name"])
        if key in self._store[res.kind]:
            raise ValueError(f"{res.kind} {key} already exists")
        meta = new["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        return self._commit(res, key, "ADDED", new, None)

    def update(self, obj: Mapping[str, Any]) -> JsonObj:
        """Replace an existing object (MODIFIED); uid and creationTimestamp carry over."""
        res, new = self._prepare(obj)
        key = self._key(res, new["metadata"].get("namespace"), new["metadata"]["name"])
        old = self._store[res.kind].get(key)
        if old is None:
            raise KeyError(f"{res.kind} {key} not found")
        for kept in ("uid", "creationTimestamp"):
            new["metadata"][kept] = old["metadata"][kept]
        return self._commit(res, key, "MODIFIED", new, old)

    def apply(self, obj: Mapping[str, Any]) -> JsonObj:
        """Create or update, whichever applies (handy for test set-up)."""
        res, new = self._prepare(obj)
        key = self._key(res, new["metadata"].get("namespace"), new["metadata"]["name"])
        return self.update(obj) if key in self._store[res.kind] else self.create(obj)

    def patch(
        self, kind: str, namespace: str | None, name: str, patch: Mapping[str, Any]
    ) -> JsonObj:
        """JSON-merge-patch an object (MODIFIED), e.g. flip a node's Ready condition."""
        current = self.get(kind, namespace, name)
        if current is None:
            raise KeyError(f"{kind} {namespace}/{name} not found")
        patched = merge_patch(current, patch)
        assert isinstance(patched, dict)
        return self.update(patched)

    def patch_labels(
        self, kind: str, namespace: str | None, name: str, labels: Mapping[str, str | None]
    ) -> JsonObj:
        """Merge labels into an object; a None value removes that label."""
        return self.patch(kind, namespace, name, {"metadata": {"labels": dict(labels)}})

    def delete(self, kind: str, namespace: str | None, name: str) -> JsonObj:
        """Remove an object at once (DELETED, carrying the deletion's resourceVersion), as the
        API server does for an unscheduled pod or with gracePeriodSeconds=0."""
        res = self.resource(kind)
        key = self._key(res, namespace, name)
        old = self._store[res.kind].get(key)
        if old is None:
            raise KeyError(f"{res.kind} {key} not found")
        return self._commit(res, key, "DELETED", copy.deepcopy(old), old)

    def compact(self) -> None:
        """Compact etcd at the current revision. As on the real server, watches are still
        served from the watch cache, and so are continue tokens (from its snapshots) until the
        API server restarts (``start_restarted``); then a token from before now is 410. For a
        watch's 410 see ``expire_watch_cache``."""
        self._compacted = self._rv
        self._forget_snapshots()

    def _held(self, kind: str, rv: int) -> bool:
        """Whether a list at ``rv`` can still be served: from etcd until it compacts that
        revision away, from the watch cache's snapshots while its window reaches back to it."""
        return rv >= self._compacted or rv >= self._floor[kind]

    def _forget_snapshots(self) -> None:
        self._snapshots = {k: v for k, v in self._snapshots.items() if self._held(*k)}

    def expire_watch_cache(self, kind: str | None = None) -> None:
        """The watch cache (of all kinds, or one) no longer reaches back before now: a watch
        from any older version gets the 410 Expired ERROR event, as from a restarted API server
        (whose new cache starts after every version it handed out) or one whose window of
        events moved on, without the outage of a restart."""
        kinds = [self.resource(kind).kind] if kind else list(self._resources)
        for k in kinds:
            self._history[k].clear()
            self._floor[k] = self._rv
        self._forget_snapshots()

    # -- fault injection -----------------------------------------------------

    def uninstall(self, group: str) -> None:
        """The group's CRDs deleted, as the API server goes through it: every object of the
        group deleted (DELETED to open watches), the watches ended cleanly, then the group not
        served ("404 page not found") until install(), which brings it back empty."""
        for res in self._resources.values():
            if res.group == group:
                for namespace, name in list(self._store[res.kind]):
                    self.delete(res.kind, namespace or None, name)
        self._uninstalled.add(group)
        for w in list(self._watchers):
            if w.resource.group == group:
                w.queue.put_nowait("end")

    def install(self, group: str) -> None:
        self._uninstalled.discard(group)

    def installed(self, group: str) -> bool:
        return group not in self._uninstalled

    def forbid(self, token: str, user: str, verbs: Iterable[Verb] | None = None) -> None:
        """Requests with ``token`` (for ``verbs``, or any) are refused 403 as RBAC words it for
        ``user``, whom no role grants them, until ``allow(token)``."""
        self._forbidden[token] = (user, None if verbs is None else frozenset(verbs))

    def allow(self, token: str) -> None:
        self._forbidden.pop(token, None)
        self._expired.discard(token)

    def expire(self, token: str) -> None:
        """Requests with ``token`` are refused 401, as kube-apiserver answers an expired or
        revoked token before anything else, until ``allow(token)``."""
        self._expired.add(token)

    def drop_watches(self) -> int:
        """Abort every open watch connection mid-stream (no terminating chunk), like a
        dying apiserver or load balancer. Returns how many were cut."""
        watchers = list(self._watchers)
        for w in watchers:
            transport = w.request.transport
            if transport is not None:
                transport.abort()
            w.queue.put_nowait("drop")
        return len(watchers)

    def set_down(self, down: bool, mode: DownMode = "503", *, cut_watches: bool = True) -> None:
        """Fail every request: mode "close" drops the connection without a response,
        "503" answers ServiceUnavailable. By default open watches are cut too."""
        self._down = mode if down else None
        if down and cut_watches:
            self.drop_watches()

    def set_latency(self, seconds: float) -> None:
        """Delay every response (watches: the response headers) by `seconds`."""
        self._latency = seconds

    def stall(self, kind: str, *, token: str | None = None) -> None:
        """Hold every request for ``kind`` (from the client with ``token``, or all) unanswered
        until ``unstall()``: an API call that hangs, as behind a dead connection."""
        self._stalls.add((self.resource(kind).kind, token))
        self._unstalled.clear()

    def unstall(self) -> None:
        self._stalls.clear()
        self._unstalled.set()

    def _stalled(self, request: web.Request) -> bool:
        if not self._stalls:
            return False
        token = _token(request)
        parts = [p for p in request.path.split("/") if p]
        return any(
            self._resources[kind].plural in parts and who in (None, token)
            for kind, who in self._stalls
        )

    # -- a restarting apiserver (tests/fixtures/apiserver-restart) -----------

    def throttle_custom_resources(self, seconds: float, retry_after: int = 1) -> None:
        """For the next `seconds`, answer lists and watches of custom resources (groups
        outside *.k8s.io and core) 429 "storage is (re)initializing", with Retry-After
        and details.retryAfterSeconds, as a restarted apiserver does while its CRD
        handlers warm up. 0 ends it.

        Double-only: the real server shows it only by chance, in the first tenth of a second
        after it listens again (tests/fixtures/apiserver-restart/probe.txt, 0.83 s after the
        process started); a test cannot make it appear on demand."""
        self._throttled_until = time.monotonic() + seconds
        self._retry_after = retry_after

    def install_paths_late(self, seconds: float) -> None:
        """For the next `seconds`, answer custom resources' paths 503 "the request has been
        made before all known HTTP paths have been installed, please try again" with a fixed
        Retry-After: 5, as a restarted kube-apiserver does before its CRD handlers are
        registered (tests/fixtures/apiserver-restart/probe-resumed.txt: about 1.3 s, while
        core paths already answer); 0 ends it. Held against the real server's wording by
        tests/e2e/test_double_contract_watch.py whenever a restart shows it."""
        self._installing_until = time.monotonic() + seconds

    def fail_readyz(self, seconds: float) -> None:
        """/readyz answers 500 (informer-sync failed) for the next `seconds`, else 200."""
        self._readyz_failing_until = time.monotonic() + seconds

    def fail_unversioned_watches(self, failing: bool = True) -> None:
        """A watch without a resourceVersion, or from "0" with allowWatchBookmarks, is answered
        200 with one ERROR event (a Status, reason InternalError) and ends: what kube-apiserver
        answers, restarting or not, on an etcd without RequestWatchProgress (3.5.1, the e2e
        tier's). On a newer etcd such a watch starts with the current objects (the default)."""
        self._unversioned_watch_error = failing

    async def start_restarted(
        self, throttled: float, retry_after: int = 1, installing: float = 0.0
    ) -> float:
        """Listen again (after stop()) as a restarted kube-apiserver answers: custom resources
        503 for `installing` seconds (``install_paths_late``), then 429 for `throttled`
        seconds, /readyz 500 for a second, watches without a
        resourceVersion an ERROR event; its new watch cache starts after its own start-up
        writes, past every version handed out before (a watch resumed from one gets 410), and
        a continue token from before the last compaction is 410. Returns the monotonic time it
        listened again."""
        self._rv += 1  # the API server's own writes at start-up (its Lease, its bootstrap)
        self.expire_watch_cache()
        self._cache_rv = dict.fromkeys(self._resources, self._rv)
        self.install_paths_late(installing)
        self.throttle_custom_resources(installing + throttled, retry_after)
        self.fail_readyz(max(1.0, installing))
        self.fail_unversioned_watches()
        listening = time.monotonic()
        await self.start()
        return listening

    def hold_watch_events(self, holding: bool = True) -> None:
        """Watches answer 200 at once but send nothing (backlog, events, bookmarks)
        until released: a client must not take a reconnected watch for caught up."""
        if holding:
            self._watch_events.clear()
        else:
            self._watch_events.set()

    @property
    def open_watches(self) -> int:
        return len(self._watchers)

    def reset_counters(self) -> None:
        self.requests.clear()
        self.watches.clear()
        self.watch_requests.clear()

    # -- internals: storage --------------------------------------------------

    def _key(self, res: Resource, namespace: str | None, name: str) -> tuple[str, str]:
        if res.namespaced and not namespace:
            raise ValueError(f"{res.kind} is namespaced: a namespace is required")
        return ((namespace or "") if res.namespaced else "", name)

    def _prepare(self, obj: Mapping[str, Any]) -> tuple[Resource, JsonObj]:
        new = copy.deepcopy(dict(obj))
        res = self.resource(str(new.get("kind", "")))
        new["kind"] = res.kind
        new.setdefault("apiVersion", res.api_version)
        meta = new.setdefault("metadata", {})
        if not meta.get("name"):
            raise ValueError("metadata.name is required")
        if res.namespaced:
            meta.setdefault("namespace", "default")
        else:
            meta.pop("namespace", None)
        return res, new

    def _commit(
        self,
        res: Resource,
        key: tuple[str, str],
        kind: EventType,
        new: JsonObj,
        old: JsonObj | None,
    ) -> JsonObj:
        """Bump the global RV, store, record history and fan out; synchronous so no
        watcher can register between the change and its event. Stored objects are never
        changed in place (a snapshot shares them)."""
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        store = self._store[res.kind]
        if kind == "DELETED":
            del store[key]
        else:
            store[key] = new
        history = self._history[res.kind]
        if history.maxlen is not None and len(history) == history.maxlen:
            self._floor[res.kind] = history[0].rv
        event = _Event(self._rv, kind, copy.deepcopy(new), copy.deepcopy(old) if old else None)
        history.append(event)
        self._cache_rv[res.kind] = self._rv
        for w in self._watchers:
            if w.resource is res:
                w.queue.put_nowait(event)
        return copy.deepcopy(new)

    def _select(
        self, target: _Target, selector: Selector, store: _Store, start: str = ""
    ) -> list[tuple[str, JsonObj]]:
        """The objects of ``store`` a list answers, by key, from ``start`` on; shared with the
        store, never to be changed."""
        chosen = sorted(
            (
                (target.key(key), obj)
                for key, obj in store.items()
                if (target.namespace is None or key[0] == target.namespace)
                and selector.matches(obj)
            ),
            key=lambda item: item[0],
        )
        return [item for item in chosen if item[0] >= start] if start else chosen

    # -- internals: HTTP ------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests[request.path] += 1
        if self._latency > 0:
            await asyncio.sleep(self._latency)
        while self._stalled(request):
            await self._unstalled.wait()
        if self._down == "close":
            if request.transport is not None:
                request.transport.abort()
            # Nothing reaches the client; aiohttp swallows the write to the dead socket.
            return web.Response(status=503)
        if self._down == "503":
            return _json_response(
                status_body(503, "ServiceUnavailable", "KubeApiDouble is down"), 503
            )
        if (restarting := self._restarting(request)) is not None:
            return restarting
        if _token(request) in self._expired:
            return _json_response(status_body(401, "Unauthorized", "Unauthorized"), 401)
        try:
            if request.method not in ("GET", *_WRITES):
                raise method_not_allowed()
            return await self._route(request)
        except ApiError as err:
            return _json_response(err.body, err.code)
        except _NotServed:
            return web.Response(status=404, text="404 page not found\n")

    def _restarting(self, request: web.Request) -> web.Response | None:
        """The answers of a restarting apiserver's first seconds, when one applies."""
        now = time.monotonic()
        if request.path == "/readyz":
            if now < self._readyz_failing_until:
                return web.Response(status=500, text=_READYZ_FAILING)
            return web.Response(text="ok")
        parts = [p for p in request.path.split("/") if p]
        custom = len(parts) >= 4 and parts[0] == "apis" and not built_in(parts[1])
        if custom and now < self._installing_until:
            self.throttled[request.path] += 1
            body = status_body(
                503,
                "ServiceUnavailable",
                INSTALLING_PATHS,
                retryAfterSeconds=INSTALLING_RETRY_AFTER,
            )
            headers = {"Retry-After": str(INSTALLING_RETRY_AFTER)}
            return _json_response(body, 503, headers=headers)
        if custom and now < self._throttled_until:
            self.throttled[request.path] += 1
            body = status_body(
                429,
                "TooManyRequests",
                "storage is (re)initializing",
                retryAfterSeconds=self._retry_after,
            )
            return _json_response(body, 429, headers={"Retry-After": str(self._retry_after)})
        return None

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if parts == ["api"]:
            return _json_response({"kind": "APIVersions", "versions": ["v1"]})
        if parts == ["apis"]:
            return _json_response(self._group_list())
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 2 and parts[0] == "apis":
            group = parts[1]
            if group in self._uninstalled:
                raise _NotServed
            if len(parts) == 2:
                return self._group_discovery(group)
            version, rest = parts[2], parts[3:]
        else:
            raise _NotServed
        if group in self._uninstalled:
            raise _NotServed
        if not rest:
            return self._version_discovery(group, version)
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        res = self._by_path.get((group, version, rest[0]))
        if res is None or len(rest) > 2 or (namespace is not None and not res.namespaced):
            raise _NotServed
        if res.namespaced and namespace is None and len(rest) == 2:
            raise _NotServed  # /api/v1/pods/NAME: a namespaced name needs its namespace
        target = _Target(res, namespace, rest[1] if len(rest) == 2 else None)
        query = request.query
        watching = request.method == "GET" and target.name is None and query_bool(query, "watch")
        self._authorize(request, target, watching)
        if request.method in _WRITES:
            return await self._write(request, target)
        if target.name is not None:
            return self._get_one(target)
        selector = Selector(
            parse_field_selector(query.get("fieldSelector", ""), res),
            parse_label_selector(query.get("labelSelector", "")),
        )
        if watching:
            return await self._watch(request, target, selector)
        return self._list(request, target, selector)

    def _authorize(self, request: web.Request, target: _Target, watching: bool) -> None:
        refused = self._forbidden.get(_token(request))
        if refused is None:
            return
        verb: Verb
        if request.method == "GET":
            verb = "watch" if watching else "get" if target.name is not None else "list"
        else:
            verb = _VERBS[request.method]
        user, verbs = refused
        if verbs is None or verb in verbs:
            raise forbidden(target.resource, verb, user, target.namespace, target.name)

    def _get_one(self, target: _Target) -> web.Response:
        res = target.resource
        assert target.name is not None
        obj = self._store[res.kind].get((target.namespace or "", target.name))
        if obj is None:
            raise not_found(res, target.name)
        return _json_response(obj)

    async def _body(self, request: web.Request, target: _Target) -> JsonObj:
        try:
            body = json.loads(await request.read())
        except ValueError as err:
            raise BadRequest(f"invalid JSON body: {err}") from err
        if not isinstance(body, dict):
            raise BadRequest(
                f"the object provided is unrecognized (must be of type {target.resource.kind})"
            )
        body["kind"] = target.resource.kind
        meta = body.setdefault("metadata", {})
        if target.namespace is not None:
            if meta.get("namespace", target.namespace) != target.namespace:
                raise BadRequest(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = target.namespace
        return body

    async def _write(self, request: web.Request, target: _Target) -> web.Response:
        """POST creates (409 if the name is taken, 422 for a missing or malformed name); PUT
        replaces (404 when missing, but a Lease is created; 409 when its resourceVersion is not
        the stored one; 422 without one for Leases and custom resources); DELETE removes (404
        when missing), answering a Status or the object as the kind's registry does."""
        res = target.resource
        if (request.method == "POST") != (target.name is None):
            raise method_not_allowed()
        status = 200
        if request.method == "DELETE":
            assert target.name is not None
            name = target.name
            current = self.get(res.kind, target.namespace, name)
            if current is None:
                raise not_found(res, name)
            stored = self._deleted(request, res, current)
            answer = (
                deleted(res, name, stored["metadata"]["uid"])
                if res.delete_answers_status
                else stored
            )
        else:
            body = await self._body(request, target)
            meta = body["metadata"]
            if request.method == "POST":
                if not meta.get("name") and meta.get("generateName"):
                    meta["name"] = str(meta["generateName"]) + _suffix()
                name = str(meta.get("name") or "")
                if (refused := invalid_name(res, name)) is not None:
                    raise refused
                if self.get(res.kind, target.namespace, name) is not None:
                    raise conflict(res, name, "AlreadyExists")
                stored, status = self.create(body), 201
            else:
                assert target.name is not None
                name = target.name
                if meta.get("name") != name:
                    raise BadRequest(
                        f"the name of the object ({meta.get('name') or ''}) does not match the "
                        f"name on the URL ({name})"
                    )
                current = self.get(res.kind, target.namespace, name)
                sent = meta.get("resourceVersion")
                if current is None and res.create_on_update and not sent:
                    stored, status = self.create(body), 201
                elif current is None:
                    raise not_found(res, name)
                elif not sent and not res.unconditional_updates:
                    raise unversioned_update(res, name)
                elif sent and sent != current["metadata"]["resourceVersion"]:
                    raise conflict(res, name, "Conflict")
                else:
                    stored = self._updated(body, current)
            answer = stored
        self.writes.append(
            Write(_token(request), request.method, res.kind, target.namespace, name, stored)
        )
        return _json_response(answer, status)

    def _updated(self, body: JsonObj, current: JsonObj) -> JsonObj:
        """An update; one that changes nothing is no write (no new version, no event)."""
        unchanged = copy.deepcopy(body)
        for kept in ("uid", "creationTimestamp", "resourceVersion"):
            unchanged["metadata"][kept] = current["metadata"].get(kept)
        return current if unchanged == current else self.update(body)

    def _deleted(self, request: web.Request, res: Resource, current: JsonObj) -> JsonObj:
        """A delete; a pod's is graceful: its deletionTimestamp is set (MODIFIED), and it is
        removed (DELETED) only when the grace period is 0, as it is for an unscheduled pod or
        with gracePeriodSeconds=0 (bound pods stay terminating: no kubelet here either)."""
        meta = current["metadata"]
        if not res.graceful_delete:
            return self.delete(res.kind, meta.get("namespace"), meta["name"])
        spec = current.get("spec") or {}
        default = int(spec.get("terminationGracePeriodSeconds", 30)) if spec.get("nodeName") else 0
        grace = (
            query_int(request.query, "gracePeriodSeconds")
            if "gracePeriodSeconds" in request.query
            else default
        )
        when = datetime.now(UTC) + timedelta(seconds=grace)
        meta.setdefault("deletionTimestamp", when.strftime("%Y-%m-%dT%H:%M:%SZ"))
        meta["deletionGracePeriodSeconds"] = grace
        terminating = self.update(current)
        if grace > 0:
            return terminating
        return self.delete(res.kind, meta.get("namespace"), meta["name"])

    def _list(self, request: web.Request, target: _Target, selector: Selector) -> web.Response:
        """One page, as kube-apiserver pages: every page of a list is the objects at the first
        page's resourceVersion (a continue token names it and the key to resume after, and
        holds whatever selectors come with it); ``remainingItemCount`` only without selectors;
        a custom resource list says ``"continue": ""`` on its last page."""
        query = request.query
        if "resourceVersionMatch" in query:
            raise BadRequest("KubeApiDouble does not model resourceVersionMatch")
        res = target.resource
        limit = query_int(query, "limit")
        rv, start, store = self._rv, "", self._store[res.kind]
        if token := query.get("continue", ""):
            rv, start = decode_continue(token)
            if rv == -1:  # the token a 410 offers: the rest at the latest revision
                rv = self._rv
            else:
                held = self._snapshots.get((res.kind, rv))
                if held is not None and self._held(res.kind, rv):
                    store = held
                elif rv < self._compacted:
                    raise expired_continue(start)
                else:
                    raise BadRequest("invalid continue token: not one this KubeApiDouble gave")
        items = self._select(target, selector, store, start)
        meta: JsonObj = {"resourceVersion": str(rv)}
        if 0 < limit < len(items):
            if store is self._store[res.kind]:
                self._snapshots[(res.kind, rv)] = dict(store)
            meta["continue"] = encode_continue(rv, items[limit - 1][0] + "\x00")
            if selector.empty:
                meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        elif res.custom:
            meta["continue"] = ""
        return _json_response(
            {
                "apiVersion": res.api_version,
                "kind": res.list_kind,
                "metadata": meta,
                "items": [obj for _, obj in items],
            }
        )

    async def _watch(
        self, request: web.Request, target: _Target, selector: Selector
    ) -> web.StreamResponse:
        """Replay what the client missed, then stream live events; bookmarks and
        timeoutSeconds as the apiserver's watch cache does them."""
        query = request.query
        self.watches[request.path] += 1
        self.watch_requests.append(WatchRequest(request.path, dict(query)))
        res = target.resource
        bookmarks = query_bool(query, "allowWatchBookmarks")
        timeout = query_int(query, "timeoutSeconds")
        rv_text = query.get("resourceVersion", "")

        watcher = _Watcher(res, target.namespace, selector, request)
        backlog: list[tuple[str, JsonObj]] = []
        expired: JsonObj | None = None
        store = self._store[res.kind]
        if self._unversioned_watch_error and (rv_text == "" or (rv_text == "0" and bookmarks)):
            expired = status_body(500, "InternalError", _NO_WATCH_PROGRESS)
        elif rv_text in ("", "0"):
            # Like the apiserver: no RV (or "0") means "start with the current state".
            backlog = [("ADDED", o) for _, o in self._select(target, selector, store)]
        else:
            since = watch_version(rv_text)
            floor = self._floor[res.kind]
            if since < floor:
                expired = too_old_resource_version(since, floor)
            else:
                backlog = [
                    seen
                    for ev in self._history[res.kind]
                    if ev.rv > since and (seen := watcher.view(ev)) is not None
                ]
        # The watch cache's rule for bookmarks: one carries its kind's version, and only once
        # that is past what the watch started from (its replay included, matching or not).
        replayed = max(int(rv_text or 0), self._cache_rv[res.kind])
        if expired is None:
            self._watchers.add(watcher)  # same tick as the backlog: nothing falls between

        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        next_bookmark = loop.time() + self.bookmark_interval if bookmarks else None
        # Like the apiserver's watch cache: a bookmark 2 s before the deadline, if not past.
        last_bookmark = deadline - 2 if bookmarks and deadline and timeout > 2 else None

        async def bookmark() -> None:
            if watcher.queue.empty() and self._cache_rv[res.kind] > replayed:
                await _write_event(response, "BOOKMARK", self._bookmark(res))

        try:
            await response.prepare(request)
            if expired is not None:
                await _write_event(response, "ERROR", expired)
                await response.write_eof()
                return response
            await self._watch_events.wait()
            for kind, obj in backlog:
                await _write_event(response, kind, obj)
            while True:
                await self._watch_events.wait()
                times = (deadline, next_bookmark, last_bookmark)
                wake = min((t for t in times if t is not None), default=None)
                try:
                    if wake is None:
                        item = await watcher.queue.get()
                    else:
                        item = await asyncio.wait_for(
                            watcher.queue.get(), max(0.0, wake - loop.time())
                        )
                except TimeoutError:
                    now = loop.time()
                    if deadline is not None and now >= deadline:
                        break
                    if next_bookmark is not None and now >= next_bookmark:
                        await bookmark()
                        next_bookmark = now + self.bookmark_interval
                    if last_bookmark is not None and now >= last_bookmark:
                        await bookmark()
                        last_bookmark = None
                    continue
                if item == "drop":
                    return response  # transport already aborted: no final chunk
                if item == "end":
                    break
                assert isinstance(item, _Event)
                if (seen := watcher.view(item)) is not None:
                    await _write_event(response, *seen)
            await response.write_eof()
        except ConnectionError:
            pass  # the client went away, or drop_watches() aborted the transport
        finally:
            self._watchers.discard(watcher)
        return response

    def _bookmark(self, res: Resource) -> JsonObj:
        return {
            "apiVersion": res.api_version,
            "kind": res.kind,
            "metadata": {"resourceVersion": str(self._cache_rv[res.kind])},
        }

    def _group_list(self) -> JsonObj:
        groups: dict[str, list[str]] = {}
        for r in self._resources.values():
            if r.group and r.group not in self._uninstalled:
                groups.setdefault(r.group, [])
                if r.version not in groups[r.group]:
                    groups[r.group].append(r.version)
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [_api_group(g, vs) for g, vs in sorted(groups.items())],
        }

    def _group_discovery(self, group: str) -> web.Response:
        versions = sorted({r.version for r in self._resources.values() if r.group == group})
        if not versions:
            raise _NotServed
        return _json_response(_api_group(group, versions) | {"apiVersion": "v1"})

    def _version_discovery(self, group: str, version: str) -> web.Response:
        served = [r for r in self._resources.values() if (r.group, r.version) == (group, version)]
        if not served:
            raise _NotServed
        return _json_response(
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": [
                    {
                        "name": r.plural,
                        "singularName": r.kind.lower(),
                        "namespaced": r.namespaced,
                        "kind": r.kind,
                        "verbs": list(_SERVED_VERBS),
                    }
                    for r in served
                ],
            }
        )


_WRITES: Final = ("POST", "PUT", "DELETE")
_SERVED_VERBS: Final = ("create", "delete", "get", "list", "update", "watch")
_VERBS: Final[Mapping[str, Verb]] = {"POST": "create", "PUT": "update", "DELETE": "delete"}


def _token(request: web.Request) -> str:
    return request.headers.get("Authorization", "").removeprefix("Bearer ")


def _suffix() -> str:
    """The five characters kube-apiserver appends to a generateName."""
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=5))


def _api_group(group: str, versions: list[str]) -> JsonObj:
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "name": group,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def _json_response(
    body: Mapping[str, Any], status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.Response(
        status=status, text=json.dumps(body), content_type="application/json", headers=headers
    )


_READYZ_FAILING: Final = (
    "[+]ping ok\n[+]log ok\n[-]informer-sync failed: reason withheld\n"
    "[+]poststarthook/start-apiextensions-informers ok\nreadyz check failed\n"
)
_NO_WATCH_PROGRESS: Final = (
    "a watch stream was requested by the client but the required storage feature "
    "RequestWatchProgress is disabled"
)


async def _write_event(response: web.StreamResponse, kind: str, obj: Mapping[str, Any]) -> None:
    """One watch event per line: kubernetes-asyncio reads the stream with readline()."""
    await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")


INSTALLING_PATHS: Final = (
    "the request has been made before all known HTTP paths have been installed, please try again"
)
INSTALLING_RETRY_AFTER: Final = 5
"""kube-apiserver's fixed Retry-After for a path not installed yet (``install_paths_late``)."""

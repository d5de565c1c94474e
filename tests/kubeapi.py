"""A Kubernetes API server test double that speaks the real list/watch protocol.

Why: the informer-style code in gpu-guard must be tested against the *real*
kubernetes-asyncio client (its watch loop, its 410 handling, its reconnects), so
a mock of the client would prove nothing. This double is an aiohttp server on
127.0.0.1 that answers list, get and watch requests the way kube-apiserver
does, holds objects the test puts into it, and can be made to misbehave
(compaction, dropped streams, outages, latency, CRD groups that vanish), and can go
through what a restarting kube-apiserver v1.36 answers in its first seconds
(tests/fixtures/apiserver-restart): connections refused (``stop()``, then ``start()``
on the same port), custom resources answered 429 with Retry-After, /readyz 500, watches
without a resourceVersion answered with an ERROR event.

It runs on the test's own event loop, so every control method is a plain call.

    async with KubeApiDouble() as api:
        api.create(node_obj)
        api.kubeconfig(tmp_path / "kubeconfig")
        ...  # point kubernetes-asyncio at the file
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import re
import socket
import time
import uuid
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal

import yaml
from aiohttp import web

JsonObj = dict[str, Any]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
DownMode = Literal["close", "503"]

_METADATA_FIELDS: Final = frozenset({"metadata.name", "metadata.namespace"})


@dataclass(frozen=True)
class Resource:
    """One served resource type; the URL shape and list kind follow from it."""

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool
    fields: frozenset[str] = frozenset()  # field selectors beyond metadata.name/namespace

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def field_labels(self) -> frozenset[str]:
        return _METADATA_FIELDS | self.fields


RESOURCES: Final[tuple[Resource, ...]] = (
    Resource("Node", "", "v1", "nodes", False, frozenset({"spec.unschedulable"})),
    Resource(
        "Pod",
        "",
        "v1",
        "pods",
        True,
        frozenset(
            {
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            }
        ),
    ),
    Resource("VirtualMachine", "kubevirt.io", "v1", "virtualmachines", True),
    Resource("VirtualMachineInstance", "kubevirt.io", "v1", "virtualmachineinstances", True),
    Resource("KubeVirt", "kubevirt.io", "v1", "kubevirts", True),
    Resource("ClusterPolicy", "nvidia.com", "v1", "clusterpolicies", False),
    Resource("NodeFeature", "nfd.k8s-sigs.io", "v1alpha1", "nodefeatures", True),
)
#: Dynamic Resource Allocation, served too (bench/ generates only RESOURCES so far).
DRA_RESOURCES: Final[tuple[Resource, ...]] = (
    Resource("DeviceClass", "resource.k8s.io", "v1", "deviceclasses", False),
    Resource(
        "ResourceSlice",
        "resource.k8s.io",
        "v1",
        "resourceslices",
        False,
        frozenset({"spec.nodeName", "spec.driver"}),
    ),
    Resource("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims", True),
    Resource("ResourceClaimTemplate", "resource.k8s.io", "v1", "resourceclaimtemplates", True),
)
SERVED: Final[tuple[Resource, ...]] = RESOURCES + DRA_RESOURCES
#: What the server writes: the leader-election Lease and the PolicyReports the leader publishes.
#: Not served unless asked for (``resources=SERVED + WRITTEN``), so other tests see no new groups.
LEASE: Final = Resource("Lease", "coordination.k8s.io", "v1", "leases", True)
WRITTEN: Final[tuple[Resource, ...]] = (
    LEASE,
    Resource("ClusterPolicyReport", "wgpolicyk8s.io", "v1alpha2", "clusterpolicyreports", False),
    Resource("PolicyReport", "wgpolicyk8s.io", "v1alpha2", "policyreports", True),
)


@dataclass(frozen=True)
class WatchRequest:
    """A watch as the server saw it, so tests can assert where a client resumed."""

    path: str
    params: Mapping[str, str]

    @property
    def resource_version(self) -> str | None:
        return self.params.get("resourceVersion")


# --- selectors ---------------------------------------------------------------

_Op = Literal["=", "!=", "in", "notin", "exists", "!exists"]


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: _Op
    values: frozenset[str]

    def matches(self, value: str | None) -> bool:
        if self.op == "exists":
            return value is not None
        if self.op == "!exists":
            return value is None
        if self.op in ("=", "in"):
            return value is not None and value in self.values
        return value is None or value not in self.values  # "!=" and "notin"


@dataclass(frozen=True)
class _Selector:
    """fieldSelector + labelSelector; the apiserver ANDs every term."""

    fields: tuple[_Requirement, ...] = ()
    labels: tuple[_Requirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(r.matches(_field_value(obj, r.key)) for r in self.fields) and all(
            r.matches(labels.get(r.key)) for r in self.labels
        )


class _BadRequest(ValueError):
    """A query the real apiserver would refuse with 400."""


# The apiserver formats these Go bools even when unset, so "=false" matches a missing field.
_FIELD_DEFAULTS: Final = {"spec.unschedulable": "false", "spec.hostNetwork": "false"}


def _field_value(obj: Mapping[str, Any], dotted: str) -> str:
    """Field selectors compare strings; a missing field reads as "" (or Go's zero)."""
    cur: Any = obj
    for part in dotted.split("."):
        cur = cur.get(part) if isinstance(cur, Mapping) else None
    if cur is None:
        return _FIELD_DEFAULTS.get(dotted, "")
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def _parse_field_selector(text: str, resource: Resource) -> tuple[_Requirement, ...]:
    reqs: list[_Requirement] = []
    for term in (t.strip() for t in text.split(",")):
        if not term:
            continue
        op: _Op = "!=" if "!=" in term else "="
        token = "!=" if op == "!=" else "==" if "==" in term else "="
        if token not in term:
            raise _BadRequest(f'invalid field selector: "{term}"')
        key, value = (part.strip() for part in term.split(token, 1))
        if key not in resource.field_labels:
            raise _BadRequest(
                f'field label not supported: "{key}" for {resource.plural}'
                f" (supported: {', '.join(sorted(resource.field_labels))})"
            )
        reqs.append(_Requirement(key, op, frozenset({value})))
    return tuple(reqs)


_LABEL_KEY = r"[A-Za-z0-9_./-]+"
_SET_TERM = re.compile(rf"^({_LABEL_KEY})\s+(in|notin)\s+\(([^)]*)\)$")
_EQ_TERM = re.compile(rf"^({_LABEL_KEY})\s*(==|=|!=)\s*([A-Za-z0-9_.-]*)$")
_NOT_TERM = re.compile(rf"^!\s*({_LABEL_KEY})$")
_HAS_TERM = re.compile(rf"^({_LABEL_KEY})$")


def _split_outside_parens(text: str) -> list[str]:
    terms: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur))
    return [t.strip() for t in terms if t.strip()]


def _parse_label_selector(text: str) -> tuple[_Requirement, ...]:
    reqs: list[_Requirement] = []
    for term in _split_outside_parens(text):
        if m := _SET_TERM.match(term):
            values = frozenset(v.strip() for v in m[3].split(",") if v.strip())
            reqs.append(_Requirement(m[1], "in" if m[2] == "in" else "notin", values))
        elif m := _EQ_TERM.match(term):
            op: _Op = "!=" if m[2] == "!=" else "="
            reqs.append(_Requirement(m[1], op, frozenset({m[3]})))
        elif m := _NOT_TERM.match(term):
            reqs.append(_Requirement(m[1], "!exists", frozenset()))
        elif m := _HAS_TERM.match(term):
            reqs.append(_Requirement(m[1], "exists", frozenset()))
        else:
            raise _BadRequest(f'unable to parse requirement: "{term}"')
    return tuple(reqs)


def _parse_bool(text: str) -> bool:
    """Go's strconv.ParseBool, which is what the apiserver uses for ?watch=."""
    if text in ("1", "t", "T", "true", "True", "TRUE"):
        return True
    if text in ("0", "f", "F", "false", "False", "FALSE", ""):
        return False
    raise _BadRequest(f'invalid boolean value "{text}"')


def _parse_number(text: str, name: str) -> float:
    """An optional numeric query parameter; "" means unset (0)."""
    try:
        return float(text) if text else 0.0
    except ValueError as err:
        raise _BadRequest(f"invalid {name}: {text!r}") from err


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what `kubectl patch --type merge` sends)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: JsonObj = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def status_body(code: int, reason: str, message: str, **details: Any) -> JsonObj:
    """A metav1.Status as the apiserver returns it for failures."""
    body: JsonObj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


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
    selector: _Selector
    request: web.Request
    queue: asyncio.Queue[_Event | _Signal] = field(default_factory=asyncio.Queue)

    def view(self, event: _Event) -> tuple[str, JsonObj] | None:
        """What this watcher sees of an event; like the watch cache, a MODIFIED that
        moves an object into (out of) the selector is sent as ADDED (DELETED)."""
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
            return ("DELETED", event.obj)
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


class KubeApiDouble:
    """In-process kube-apiserver double: list/get/watch over HTTP, mutations and
    fault injection as Python calls from the test."""

    def __init__(
        self,
        *,
        resources: Iterable[Resource] = SERVED,
        bookmark_interval: float = 1.0,
        history_limit: int = 1000,
        host: str = "127.0.0.1",
    ) -> None:
        self.bookmark_interval = bookmark_interval
        self.host = host
        self._resources = {r.kind: r for r in resources}
        self._by_path = {(r.group, r.version, r.plural): r for r in self._resources.values()}
        self._store: dict[str, dict[tuple[str, str], JsonObj]] = {k: {} for k in self._resources}
        self._history: dict[str, deque[_Event]] = {
            k: deque(maxlen=history_limit) for k in self._resources
        }
        self._floor: dict[str, int] = dict.fromkeys(self._resources, 0)
        self._rv = 0
        self._uninstalled: set[str] = set()
        self._watchers: set[_Watcher] = set()
        self._down: DownMode | None = None
        self._latency = 0.0
        self._throttled_until = 0.0
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
        """Listen on an ephemeral port (the same one again after stop(), so a client
        keeps its kubeconfig across a simulated apiserver restart); returns the URL."""
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
        """Cut open watches (else shutdown waits for them) and close the listener;
        stored objects and history survive, as etcd would."""
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
        when a test tells clients apart: ``writes`` and ``stall`` go by it)."""
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
        """What the server holds, sorted by (namespace, name), as deep copies."""
        store = self._store[self.resource(kind).kind]
        return [copy.deepcopy(store[key]) for key in sorted(store)]

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
        """Remove an object (DELETED, carrying the deletion's resourceVersion)."""
        res = self.resource(kind)
        key = self._key(res, namespace, name)
        old = self._store[res.kind].get(key)
        if old is None:
            raise KeyError(f"{res.kind} {key} not found")
        return self._commit(res, key, "DELETED", copy.deepcopy(old), old)

    def compact(self, kind: str | None = None) -> None:
        """Forget event history (all kinds, or one): watches from any RV older than
        now then get the 410 Expired ERROR event, as after an etcd compaction."""
        kinds = [self.resource(kind).kind] if kind else list(self._resources)
        for k in kinds:
            self._history[k].clear()
            self._floor[k] = self._rv

    # -- fault injection -----------------------------------------------------

    def uninstall(self, group: str) -> None:
        """Make an API group 404 (CRDs not installed). Stored objects are kept
        hidden and reappear on install(); open watches on the group end cleanly."""
        self._uninstalled.add(group)
        for w in list(self._watchers):
            if w.resource.group == group:
                w.queue.put_nowait("end")

    def install(self, group: str) -> None:
        self._uninstalled.discard(group)

    def installed(self, group: str) -> bool:
        return group not in self._uninstalled

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

    # -- a restarting apiserver (tests/fixtures/apiserver-restart) -------

    def throttle_custom_resources(self, seconds: float, retry_after: int = 1) -> None:
        """For the next `seconds`, answer lists and watches of custom resources (groups
        outside *.k8s.io and core) 429 "storage is (re)initializing", with Retry-After
        and details.retryAfterSeconds, as a restarted apiserver does while its CRD
        handlers warm up. 0 ends it."""
        self._throttled_until = time.monotonic() + seconds
        self._retry_after = retry_after

    def fail_readyz(self, seconds: float) -> None:
        """/readyz answers 500 (informer-sync failed) for the next `seconds`, else 200."""
        self._readyz_failing_until = time.monotonic() + seconds

    def fail_unversioned_watches(self, failing: bool = True) -> None:
        """A watch without a resourceVersion is answered 200 with one ERROR event (a
        Status, reason InternalError) and ends, as on an apiserver whose etcd lacks
        RequestWatchProgress."""
        self._unversioned_watch_error = failing

    async def start_restarted(self, throttled: float, retry_after: int = 1) -> float:
        """Listen again (after stop()) as a restarted kube-apiserver answers: custom resources
        429 for `throttled` seconds, /readyz 500 for a second, watches without a
        resourceVersion an ERROR event. Returns the monotonic time it listened again."""
        self.throttle_custom_resources(throttled, retry_after)
        self.fail_readyz(1.0)
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
        watcher can register between the change and its event."""
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        if kind == "DELETED":
            del self._store[res.kind][key]
        else:
            self._store[res.kind][key] = new
        history = self._history[res.kind]
        if history.maxlen is not None and len(history) == history.maxlen:
            self._floor[res.kind] = history[0].rv
        event = _Event(self._rv, kind, copy.deepcopy(new), copy.deepcopy(old) if old else None)
        history.append(event)
        for w in self._watchers:
            if w.resource is res:
                w.queue.put_nowait(event)
        return copy.deepcopy(new)

    def _select(self, target: _Target, selector: _Selector) -> list[JsonObj]:
        store = self._store[target.resource.kind]
        return [
            copy.deepcopy(store[key])
            for key in sorted(store)
            if (target.namespace is None or key[0] == target.namespace)
            and selector.matches(store[key])
        ]

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
        if request.method not in ("GET", *_WRITES):
            return _json_response(
                status_body(405, "MethodNotAllowed", f"{request.method} is not served"), 405
            )
        try:
            return await self._route(request)
        except _BadRequest as err:
            return _json_response(status_body(400, "BadRequest", str(err)), 400)

    def _restarting(self, request: web.Request) -> web.Response | None:
        """The answers of a restarting apiserver's first seconds, when one applies."""
        now = time.monotonic()
        if request.path == "/readyz":
            if now < self._readyz_failing_until:
                return web.Response(status=500, text=_READYZ_FAILING)
            return web.Response(text="ok")
        parts = [p for p in request.path.split("/") if p]
        custom = len(parts) >= 4 and parts[0] == "apis" and not _built_in(parts[1])
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
                return _not_installed()
            if len(parts) == 2:
                return self._group_discovery(group)
            version, rest = parts[2], parts[3:]
        else:
            return _not_installed()
        if group in self._uninstalled:
            return _not_installed()
        if not rest:
            return self._version_discovery(group, version)
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        res = self._by_path.get((group, version, rest[0]))
        if res is None or len(rest) > 2 or (namespace is not None and not res.namespaced):
            return _not_installed()
        target = _Target(res, namespace, rest[1] if len(rest) == 2 else None)
        if request.method in _WRITES:
            return await self._write(request, target)
        if target.name is not None:
            return self._get_one(target)
        query = request.query
        selector = _Selector(
            _parse_field_selector(query.get("fieldSelector", ""), res),
            _parse_label_selector(query.get("labelSelector", "")),
        )
        if _parse_bool(query.get("watch", "")):
            return await self._watch(request, target, selector)
        return self._list(request, target, selector)

    def _get_one(self, target: _Target) -> web.Response:
        res = target.resource
        assert target.name is not None
        obj = self._store[res.kind].get(
            ((target.namespace or "") if res.namespaced else "", target.name)
        )
        if obj is None or (res.namespaced and target.namespace is None):
            return _missing(res, target.name)
        return _json_response(obj)

    async def _write(self, request: web.Request, target: _Target) -> web.Response:
        """POST to a collection creates (409 if the name is taken); PUT replaces (404 when
        missing, 409 when its resourceVersion is not the stored one; none means unconditional,
        as for Leases); DELETE removes (404 when missing)."""
        res = target.resource
        body: JsonObj = {}
        if request.method != "DELETE":
            try:
                body = json.loads(await request.read())
            except ValueError as err:
                raise _BadRequest(f"invalid JSON body: {err}") from err
            if not isinstance(body, dict):
                raise _BadRequest("the body is not an object")
            body["kind"] = res.kind
            meta = body.setdefault("metadata", {})
            if target.namespace is not None:
                meta["namespace"] = target.namespace
        if request.method == "POST":
            if target.name is not None:
                return _json_response(status_body(405, "MethodNotAllowed", "POST to a name"), 405)
            name = str(body["metadata"].get("name") or "")
            if self.get(res.kind, target.namespace, name) is not None:
                return _conflict(res, name, "AlreadyExists")
            stored = self.create(body)
        else:
            if target.name is None:
                return _json_response(status_body(405, "MethodNotAllowed", "no name"), 405)
            name = target.name
            current = self.get(res.kind, target.namespace, name)
            if current is None:
                return _missing(res, name)
            if request.method == "DELETE":
                stored = self.delete(res.kind, target.namespace, name)
            else:
                sent = body["metadata"].get("resourceVersion")
                if sent and sent != current["metadata"]["resourceVersion"]:
                    return _conflict(res, name, "Conflict")
                body["metadata"]["name"] = name
                stored = self.update(body)
        self.writes.append(
            Write(_token(request), request.method, res.kind, target.namespace, name, stored)
        )
        return _json_response(stored, 201 if request.method == "POST" else 200)

    def _list(self, request: web.Request, target: _Target, selector: _Selector) -> web.Response:
        items = self._select(target, selector)
        meta: JsonObj = {"resourceVersion": str(self._rv)}
        start = 0
        if token := request.query.get("continue"):
            try:
                start = int(json.loads(base64.b64decode(token))["start"])
            except (ValueError, KeyError, TypeError) as err:
                raise _BadRequest(f"invalid continue token: {err}") from err
        limit = int(_parse_number(request.query.get("limit", ""), "limit"))
        if limit > 0 and start + limit < len(items):
            meta["continue"] = base64.b64encode(
                json.dumps({"start": start + limit}).encode()
            ).decode()
            meta["remainingItemCount"] = len(items) - start - limit
            items = items[start : start + limit]
        else:
            items = items[start:]
        res = target.resource
        return _json_response(
            {"apiVersion": res.api_version, "kind": res.list_kind, "metadata": meta, "items": items}
        )

    async def _watch(
        self, request: web.Request, target: _Target, selector: _Selector
    ) -> web.StreamResponse:
        """Replay what the client missed, then stream live events; bookmarks and
        timeoutSeconds as the apiserver does them."""
        query = request.query
        self.watches[request.path] += 1
        self.watch_requests.append(WatchRequest(request.path, dict(query)))
        res = target.resource
        bookmarks = _parse_bool(query.get("allowWatchBookmarks", ""))
        timeout = _parse_number(query.get("timeoutSeconds", ""), "timeoutSeconds")
        rv_text = query.get("resourceVersion", "")

        watcher = _Watcher(res, target.namespace, selector, request)
        backlog: list[tuple[str, JsonObj]] = []
        expired: JsonObj | None = None
        unversioned_error = self._unversioned_watch_error and rv_text == ""
        if unversioned_error:
            expired = status_body(500, "InternalError", _NO_WATCH_PROGRESS)
        elif rv_text in ("", "0"):
            # Like the apiserver: no RV (or "0") means "start with the current state".
            backlog = [("ADDED", o) for o in self._select(target, selector)]
        else:
            try:
                since = int(rv_text)
            except ValueError as err:
                raise _BadRequest(f"invalid resource version: {rv_text!r}") from err
            floor = self._floor[res.kind]
            if since < floor:
                expired = status_body(
                    410, "Expired", f"too old resource version: {since} ({floor})"
                )
            else:
                backlog = [
                    seen
                    for ev in self._history[res.kind]
                    if ev.rv > since and (seen := watcher.view(ev)) is not None
                ]
        if expired is None:
            self._watchers.add(watcher)  # same tick as the backlog: nothing falls between

        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        next_bookmark = loop.time() + self.bookmark_interval if bookmarks else None
        # Like the apiserver's watch cache: a bookmark 2 s before the deadline, if not past.
        last_bookmark = deadline - 2 if bookmarks and deadline and timeout > 2 else None
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
                        if watcher.queue.empty():  # else the RV would run ahead of events
                            await _write_event(response, "BOOKMARK", self._bookmark(res))
                        next_bookmark = now + self.bookmark_interval
                    due = last_bookmark is not None and now >= last_bookmark
                    if due and watcher.queue.empty():
                        await _write_event(response, "BOOKMARK", self._bookmark(res))
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
            "metadata": {"resourceVersion": str(self._rv)},
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
            return _not_installed()
        return _json_response(_api_group(group, versions) | {"apiVersion": "v1"})

    def _version_discovery(self, group: str, version: str) -> web.Response:
        served = [r for r in self._resources.values() if (r.group, r.version) == (group, version)]
        if not served:
            return _not_installed()
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
                        "verbs": ["get", "list", "watch"],
                    }
                    for r in served
                ],
            }
        )


_WRITES: Final = ("POST", "PUT", "DELETE")


def _token(request: web.Request) -> str:
    return request.headers.get("Authorization", "").removeprefix("Bearer ")


def _missing(res: Resource, name: str) -> web.Response:
    return _json_response(
        status_body(
            404,
            "NotFound",
            f'{res.plural}{"." + res.group if res.group else ""} "{name}" not found',
            name=name,
            group=res.group,
            kind=res.plural,
        ),
        404,
    )


def _conflict(
    res: Resource, name: str, reason: Literal["AlreadyExists", "Conflict"]
) -> web.Response:
    """409, as the apiserver words it for a taken name or a stale resourceVersion."""
    what = f'{res.plural}{"." + res.group if res.group else ""} "{name}"'
    message = (
        f"{what} already exists"
        if reason == "AlreadyExists"
        else f"Operation cannot be fulfilled on {what}: the object has been modified"
    )
    return _json_response(
        status_body(409, reason, message, name=name, group=res.group, kind=res.plural), 409
    )


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


def _built_in(group: str) -> bool:
    """Groups kube-apiserver serves itself (a CRD may not take *.k8s.io unapproved)."""
    return group == "k8s.io" or group.endswith(".k8s.io")


_READYZ_FAILING: Final = (
    "[+]ping ok\n[+]log ok\n[-]informer-sync failed: reason withheld\n"
    "[+]poststarthook/start-apiextensions-informers ok\nreadyz check failed\n"
)
_NO_WATCH_PROGRESS: Final = (
    "a watch stream was requested by the client but the required storage feature "
    "RequestWatchProgress is disabled"
)


def _not_installed() -> web.Response:
    """What the apiserver says for a group/resource it does not serve."""
    return _json_response(
        status_body(404, "NotFound", "the server could not find the requested resource"), 404
    )


async def _write_event(response: web.StreamResponse, kind: str, obj: Mapping[str, Any]) -> None:
    """One watch event per line: kubernetes-asyncio reads the stream with readline()."""
    await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

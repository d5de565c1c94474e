"""The second feeder of ClusterState: list then watch every kind the policies read.

kubernetes-asyncio provides configuration (kubeconfig, context, in-cluster service account),
authentication, TLS and the connection pool. Responses are read raw and parsed with orjson into
the same projections the state files use: deserialising 150,000 pods into client model objects
would cost more time and memory than the whole guard is allowed.

Per kind: list (paged), then watch from the list's resourceVersion with bookmarks; after a dropped
stream resume from the last version seen; on 410 Gone (a status or an ERROR event) relist; on
another ERROR event end the watch and list again. Errors are retried after the server's
Retry-After (429, 503), else with a short jittered backoff that every kind cuts short as soon as
the API server answers again (``webhook.state.reconnect``). A kind whose API group is not
installed (404) counts as empty and is looked for again periodically.

Each kind records when it was last in sync with the API server, so decisions can say how stale
they are. A watch resumed after a break is not in sync on connecting: the server replays what
was missed first, so the kind is back in sync only at a bookmark (asked for within seconds by a
short timeoutSeconds) or, when none came, after a relist.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient

from policies.cluster.kinds import POD, WATCHED, ApiResource
from policies.state.cluster import ClusterState
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.requests import GroupKind, JSONObject
from policies.vocabulary.text import heading_time
from webhook.state.client import (
    TRANSIENT,
    Expired,
    NotInstalled,
    RetryLater,
    WatchError,
    refusal,
)
from webhook.state.client import connect as connect  # the benches import it here, in every tree
from webhook.state.defaults import DEFAULT_STALE_AFTER
from webhook.state.feeding import new_state
from webhook.state.reads import ApiReads
from webhook.state.reconnect import Backoff as Backoff  # where tests and callers import it
from webhook.state.reconnect import Reachability, Retry, RetryCause
from webhook.state.unread import UnreadNotes
from webhook.wire.decode import decode_watch_event

log = logging.getLogger("gpu-guard.live")

MIN_REPORT_OUT_OF_SYNC = 10.0
"""Seconds: even with a small --stale-after, a kind is named only past this out of sync."""


#: The kinds a LiveState lists and watches: every kind the policies read (cluster/kinds.py).
RESOURCES: tuple[ApiResource, ...] = WATCHED
RESOURCE_OF = {r.kind: r for r in RESOURCES}


@dataclass
class KindStatus:
    resource: ApiResource
    synced: bool = False
    installed: bool = True
    absence_said: bool = False  # "not installed" is logged once per process (a restart's 404s too)
    last_heard: float | None = None
    broken_since: float | None = None
    last_error: str = ""
    resource_version: str = ""
    reported_slow: bool = False  # its long time out of sync logged (once, until in sync)


#: Takes one list page of a kind: ``LiveState.read_once`` puts it in the state, or elsewhere.
PageSink = Callable[[KindStatus, list[dict[str, Any]]], None]


class LiveState(ApiReads):
    """Keeps a ClusterState equal to the API server's objects, and knows how fresh it is."""

    def __init__(
        self,
        api: ApiClient,
        state: ClusterState | None = None,
        *,
        stale_after: float = DEFAULT_STALE_AFTER,
        report_out_of_sync_after: float | None = None,
        absent_recheck: float = 30.0,
        watch_timeout: int = 290,
        catch_up_timeout: int = 3,
        request_timeout: float = 10.0,
        backoff: Callable[[], Backoff] = Backoff,
        clock: Callable[[], float] = time.monotonic,
        resources: Iterable[ApiResource] = RESOURCES,
    ) -> None:
        self.api = api
        self._unread = UnreadNotes()  # an object refused: said once, not at every event
        self.state = state if state is not None else new_state(notes=self._unread)
        self.stale_after = stale_after
        if report_out_of_sync_after is None:
            report_out_of_sync_after = max(2 * stale_after, MIN_REPORT_OUT_OF_SYNC)
        self.report_out_of_sync_after = report_out_of_sync_after
        """A kind out of sync this long while the API server answers is logged (once)."""
        self.absent_recheck = absent_recheck
        self.watch_timeout = watch_timeout
        self.catch_up_timeout = catch_up_timeout
        """timeoutSeconds of a watch resumed after a break: kube-apiserver sends a bookmark 2 s
        before a watch's deadline, so the kind knows within seconds it has caught up."""
        self.request_timeout = request_timeout
        self._backoff = backoff
        self._clock = clock
        self.statuses = {r.kind: KindStatus(r) for r in resources}
        self._tasks: list[asyncio.Task[None]] = []
        self._frozen = False
        self.reachability = Reachability(clock)
        self.retries: deque[Retry] = deque(maxlen=1024)
        """The last waits the kinds' loops chose, for tests and for what a debugger asks."""
        self._watching = False

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        self._watching = True
        self._tasks = [
            asyncio.create_task(self._run(status), name=f"watch {status.resource.plural}")
            for status in self.statuses.values()
        ]

    async def stop(self) -> None:
        self._watching = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def wait_synced(self, timeout: float) -> None:
        """Until every kind has synced once; TimeoutError names what it still waits for."""
        deadline = self._clock() + timeout
        while (reason := self.not_ready_reason()) is not None:
            if self._clock() > deadline:
                raise TimeoutError(reason)
            await asyncio.sleep(0.05)

    # --- what decisions and probes ask -----------------------------------------------------------

    def not_ready_reason(self) -> str | None:
        waiting = [str(s.resource.kind) for s in self.statuses.values() if not s.synced]
        if not waiting:
            return None
        detail = ", ".join(waiting)
        errors = [s.last_error for s in self.statuses.values() if not s.synced and s.last_error]
        return f"waiting for the first sync of {detail}" + (f" ({errors[0]})" if errors else "")

    def stale_reasons(self, kinds: Iterable[GroupKind]) -> list[str]:
        """Why the view of these kinds cannot be trusted for a deny; empty when it can."""
        now = self._clock()
        reasons = []
        for kind in kinds:
            status = self.statuses.get(kind)
            if status is None or not status.synced or status.broken_since is None:
                continue  # never synced: not stale but unseen (``unseen``: no silent allow)
            broken = now - status.broken_since
            if broken > self.stale_after:
                since = heading_time(datetime.now(UTC) - timedelta(seconds=broken))
                reasons.append(
                    f"the {kind} watch has been broken for {int(broken)} s, since {since}"
                )
        return reasons

    def unseen(self, reads: Iterable[GroupKind]) -> list[GroupKind]:
        """Of ``reads``, the kinds not synced since start (a 404 is synced: seen, none)."""
        return [k for k in reads if k in self.statuses and not self.statuses[k].synced]

    def sync_status(self) -> dict[str, tuple[bool, float | None]]:
        """Per kind: synced at least once, and seconds since it last heard from the API server."""
        now = self._clock()
        return {
            str(kind): (s.synced, None if s.last_heard is None else now - s.last_heard)
            for kind, s in self.statuses.items()
        }

    async def _list_into_state(self, status: KindStatus) -> str:
        """Lists a kind page by page straight into the state, so no more than one page of raw
        objects is alive at a time (150,000 raw pods would be gigabytes); returns the version."""
        status.resource = await self.served(status.resource)  # the watch follows its version
        stale = self.state.keys(kind := status.resource.kind)
        version = ""
        async for page, page_version in self._pages(status.resource, pruned=True):
            version = page_version  # the collector stays paused while a page is taken (_pages)
            for obj in page:
                self._upsert(status, obj)
                obj_meta = obj.get("metadata") or {}
                stale.discard((obj_meta.get("namespace", "") or "", obj_meta.get("name", "")))
            del page
        for namespace, name in stale:
            self.state.delete(kind, namespace, name)
        return version

    async def read_once(self, keep: PageSink | None = None) -> None:
        """Lists every kind once, no watch and no retry: a command's one read of the cluster
        (check, audit, snapshot). The first error raises, so an unreachable API server fails at
        once and once; a group not installed counts as empty. ``keep`` takes each page
        (default: into the state, as the watch would)."""
        pruned = keep is None  # the state reads only its fields; a snapshot writes them all
        keep = keep or self._into_state
        for status in self.statuses.values():
            try:
                async for page, version in self._pages(status.resource, pruned=pruned):
                    keep(status, page)
                    status.resource_version = version
                    del page
            except NotInstalled:
                status.installed = False
            status.synced = True
            self._heard(status)

    def _into_state(self, status: KindStatus, page: list[dict[str, Any]]) -> None:
        for obj in page:  # taken inside _pages, with the collector paused
            self._upsert(status, obj)

    # --- the per-kind loop -----------------------------------------------------------------------

    def _freeze_when_synced(self) -> None:
        """Once everything has synced, move what exists to the collector's permanent generation:
        later collections skip the state, and a forked audit copies fewer pages (gc.freeze)."""
        if not self._frozen and all(s.synced for s in self.statuses.values()):
            gc.freeze()
            self._frozen = True

    def _heard(self, status: KindStatus) -> None:
        """The kind is in sync with the API server now: listed, at a bookmark, or at an event
        of a watch that never broke."""
        now = self._clock()
        status.last_heard = now
        if status.broken_since is not None:
            if status.reported_slow:
                since = now - status.broken_since
                log.info("%s in sync again after %.0f s", status.resource.plural, since)
            status.broken_since = None
            status.last_error = ""
            status.reported_slow = False
        if self.reachability.in_outage and all(
            s.synced and s.broken_since is None for s in self.statuses.values()
        ):
            self.reachability.in_sync()

    def _broken(self, status: KindStatus, exc: BaseException) -> None:
        """The kind is out of sync. Logged at DEBUG: an unavailable API server is said once, by
        ``reachability``; a kind is named only when it stays out of sync unusually long
        (``report_out_of_sync_after``: twice --stale-after, at least 10 s) while the API server
        answers."""
        now = self._clock()
        if status.broken_since is None:
            status.broken_since = now
        status.last_error = f"{type(exc).__name__}: {exc}"[:300]
        log.debug("%s: %s", status.resource.plural, status.last_error)
        if not self.reachability.reachable or status.reported_slow:
            return
        out_of_sync = now - max(status.broken_since, self.reachability.answering_since)
        if out_of_sync > self.report_out_of_sync_after:
            status.reported_slow = True
            log.warning(
                "%s not in sync for %.0f s while the API server answers: %s",
                status.resource.plural,
                out_of_sync,
                status.last_error,
            )

    def _replace_kind(self, status: KindStatus, items: list[JSONObject]) -> None:
        kind = status.resource.kind
        stale = self.state.keys(kind)
        for obj in items:
            self._upsert(status, obj)
            meta = obj.get("metadata") or {}
            stale.discard((meta.get("namespace", "") or "", meta.get("name", "")))
        for namespace, name in stale:
            self.state.delete(kind, namespace, name)

    def _upsert(self, status: KindStatus, obj: JSONObject) -> None:
        try:
            self.state.upsert(obj)
        except ObjectError as exc:
            # One malformed object (open CRD schema) must not stop the watch of its kind.
            self._unread.refused(status.resource.kind, obj, exc)

    async def _run(self, status: KindStatus) -> None:
        """List, then watch for as long as the history lasts. Relist on 410 Gone, after an
        ERROR event, and when a watch resumed after a break ended without a bookmark."""
        backoff = self.reachability.share(self._backoff())
        listed = False
        while True:
            try:
                if not listed:
                    status.resource_version = await self._list_into_state(status)
                    status.installed = status.synced = True
                    self._heard(status)
                    self._freeze_when_synced()
                    backoff.reset()
                    listed = True
                await self._watch_once(status)
                if status.broken_since is None:
                    backoff.reset()
                else:  # whether the resumed watch caught up is unknown: a list will tell
                    log.debug("%s: no bookmark after resuming; listing", status.resource.plural)
                    listed = False
            except asyncio.CancelledError:
                raise
            except NotInstalled:
                if not status.absence_said:
                    log.info("%s: API group not installed; counted as empty", status.resource.path)
                    status.absence_said = True
                status.installed = False
                self._replace_kind(status, [])
                status.synced = True
                self._heard(status)
                listed = False
                await asyncio.sleep(self.absent_recheck)
            except Expired:
                listed = False  # relist at once: the history moved on, nothing is wrong
            except WatchError as exc:
                self._broken(status, exc)
                listed = False
                await self._pause(status, backoff.next(), "watch-error")
            except TRANSIENT as exc:
                self._broken(status, exc)
                await self._retry(status, backoff, exc)

    async def _retry(self, status: KindStatus, backoff: Backoff, exc: BaseException) -> None:
        """Waits before the next attempt: the server's Retry-After when it gave one; else the
        backoff, cut short by the API server answering again if it is away now."""
        if isinstance(exc, RetryLater) and exc.after:
            await self._pause(status, exc.after, "retry-after")
        elif self.reachability.reachable:
            await self._pause(status, backoff.next(), "error")
        else:
            await self._pause(status, backoff.next(), "unreachable")

    async def _pause(self, status: KindStatus, seconds: float, cause: RetryCause) -> None:
        self.retries.append(Retry(str(status.resource.kind), seconds, cause, self._clock()))
        if cause == "unreachable":
            await self.reachability.wait_for_answer(seconds)
        else:
            await asyncio.sleep(seconds)

    async def _watch_once(self, status: KindStatus) -> None:
        """One watch, its events applied as they come. A watch resumed after a break leaves the
        kind out of sync until a bookmark says the replay of what it missed is over; its short
        timeoutSeconds makes kube-apiserver send one within seconds."""
        catching_up = status.broken_since is not None
        seconds = self.catch_up_timeout if catching_up else self.watch_timeout
        params = {
            "watch": "true",
            "resourceVersion": status.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(seconds),
        }
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.request_timeout, sock_read=seconds + 30
        )
        response = await self._get(status.resource.path, params, timeout)
        async with response:
            if response.status != 200:
                body = await response.read()
                raise refusal(response, body, f"watch {status.resource.path}")
            if not catching_up:
                self._heard(status)
            # Split lines ourselves: aiohttp's readline refuses lines over its buffer size, and
            # one event carries a whole object, which may be large.
            pending = b""
            async for chunk in response.content.iter_any():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        self._apply_event(status, decode_watch_event(status.resource.kind, line))

    def _apply_event(self, status: KindStatus, event: JSONObject) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":  # its object is a Status, never one of the kind's objects
            if obj.get("code") == 410:
                raise Expired(str(obj.get("message", "")))
            raise WatchError(
                f"ERROR event in the watch: {obj.get('code')} {obj.get('reason', '')}: "
                f"{obj.get('message', obj)}"
            )
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED"):
            obj.setdefault("apiVersion", status.resource.api_version)
            obj.setdefault("kind", status.resource.kind.kind)
            self._upsert(status, obj)
        elif kind == "DELETED":
            meta = obj.get("metadata") or {}
            self.state.delete(
                status.resource.kind, meta.get("namespace", "") or "", meta.get("name", "")
            )
        if version:
            status.resource_version = str(version)
        if kind == "BOOKMARK" or status.broken_since is None:
            self._heard(status)

    # --- confirming a deny -----------------------------------------------------------------------

    async def refresh_pods_on(self, node: str, budget: float) -> bool:
        """Re-reads one node's pods from the API server into the state, within ``budget`` s.
        False when the API server did not answer in time: the cache stands, and the caller says so
        (logged at DEBUG during an outage: its one WARNING said it, the answer says it too)."""
        resource = RESOURCE_OF[POD]
        try:
            async with asyncio.timeout(budget):
                items, version = await self.list_objects(
                    resource, {"fieldSelector": f"spec.nodeName={node}"}, pruned=True
                )
        except (TimeoutError, *TRANSIENT, NotInstalled, Expired) as exc:
            level = logging.WARNING if self.reachability.reachable else logging.DEBUG  # outage
            log.log(level, "could not confirm the pods on %s within %.2f s: %s", node, budget, exc)
            return False
        if _older(version, self.statuses[POD].resource_version):
            # The watch has already applied later events than this list saw: applying it would
            # take them back. The cache is the fresher of the two.
            return True
        present = set()
        for obj in items:
            self._upsert(self.statuses[POD], obj)
            meta = obj.get("metadata") or {}
            present.add((meta.get("namespace", ""), meta.get("name", "")))
        for pod in self.state.pods_on(node):
            if (pod.namespace, pod.name) not in present:
                self.state.delete(POD, pod.namespace, pod.name)
        return True


def _older(version: str, than: str) -> bool:
    """Whether resourceVersion ``version`` is earlier than ``than``. resourceVersions are opaque
    to clients, but every API server backed by etcd issues increasing integers; anything else
    counts as not older (apply the answer, as without the comparison)."""
    try:
        return int(version) < int(than)
    except ValueError:
        return False

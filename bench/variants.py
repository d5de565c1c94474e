"""Prototypes of changes to webhook/state/live.py, measured by ``bench_sync --variants``.

Not used by gpu-guard itself: these classes exist so a suggested change can be measured first.

``as-is``     webhook.state.live.LiveState unchanged.
``stream``    each list page is projected into the state as it arrives and dropped, instead of the
              whole kind being collected first (``list_objects``) and then kept alive by the
              ``items`` local of ``LiveState._run`` for as long as the watch that follows runs.
``stream-gc`` ``stream``, and the cyclic garbage collector paused while one page is parsed and
              projected (no ``await`` in between, so no other task runs meanwhile): parsing
              creates only acyclic dicts and lists, which the collector would otherwise traverse
              again and again as the heap grows.
``stream-gc-skip``  ``stream-gc``, and a pod that ClusterState would count but not keep (no
              extended resource in any container's requests or limits, not a GPU Operator
              operand) is counted from its raw metadata without running ``project_pod``; anything
              unexpected in the raw pod takes the full path, so malformed pods still raise.

The code below is what the suggested change to ``LiveState._run`` / ``list_objects`` looks like;
the semantics are the same (resourceVersion of the list, vanished objects deleted at the end).
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson

from policies.model import JSONObject
from policies.objects import POD
from policies.resources import is_extended_resource
from policies.workload import OPERAND_APPS
from webhook.state.live import (
    LIST_PAGE,
    TRANSIENT,
    ApiError,
    Expired,
    KindStatus,
    LiveState,
    NotInstalled,
)

log = logging.getLogger("gpu-guard.bench")

VARIANTS = ("as-is", "stream", "stream-gc", "stream-gc-skip")


@contextmanager
def _collector_paused(pause: bool) -> Iterator[None]:
    was = gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if pause and was:
            gc.enable()


class StreamingLiveState(LiveState):
    """LiveState whose list never holds more than one page of raw objects."""

    pause_gc = False

    async def _read_page(self, response: Any) -> bytes:
        async with response:
            body: bytes = await response.read()
            if response.status == 404:
                raise NotInstalled(f"{response.url.path}: 404")
            if response.status == 410:
                raise Expired(body.decode(errors="replace")[:200])
            if response.status != 200:
                raise ApiError(f"HTTP {response.status} for {response.url.path}")
            return body

    async def _list_into_state(self, status: KindStatus) -> str:
        """Lists a kind page by page straight into the state; returns the list's version."""
        resource = status.resource
        kind = resource.kind
        stale = self.state.keys(kind)
        query = {"limit": str(LIST_PAGE)}
        while True:
            body = await self._read_page(
                await self._get(resource.path, query, self.request_timeout * 3)
            )
            with _collector_paused(self.pause_gc):
                page = orjson.loads(body)
                del body
                for item in page.get("items") or []:
                    item["apiVersion"] = resource.api_version
                    item["kind"] = kind.kind
                    self._upsert(status, item)
                    meta = item.get("metadata") or {}
                    stale.discard((meta.get("namespace", "") or "", meta.get("name", "")))
                meta = page.get("metadata") or {}
                del page
            token = meta.get("continue")
            if not token:
                break
            query = {**query, "continue": token}
        for namespace, name in stale:
            self.state.delete(kind, namespace, name)
        return str(meta.get("resourceVersion", ""))

    async def _run(self, status: KindStatus) -> None:
        backoff = self._backoff()
        while True:
            try:
                version = await self._list_into_state(status)
                status.resource_version = version
                status.installed = status.synced = True
                self._heard(status)
                backoff.reset()
                await self._watch(status)
            except asyncio.CancelledError:
                raise
            except NotInstalled:
                if status.installed or not status.synced:
                    log.info("%s: API group not installed; counted as empty", status.resource.path)
                status.installed = False
                self._replace_kind(status, [])
                status.synced = True
                self._heard(status)
                await asyncio.sleep(self.absent_recheck)
            except Expired:
                continue
            except TRANSIENT as exc:
                self._broken(status, exc)
                await asyncio.sleep(backoff.next())


class StreamingGcLiveState(StreamingLiveState):
    pause_gc = True


def _may_be_kept(pod: JSONObject) -> bool:
    """False only when the pod certainly holds no extended resource and is no operand; True
    for anything else, malformed shapes included (the full projection then judges them)."""
    meta = pod.get("metadata")
    spec = pod.get("spec")
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        return True
    if not isinstance(meta.get("name"), str) or not isinstance(meta.get("namespace", ""), str):
        return True
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict) or labels.get("app") in OPERAND_APPS:
        return True
    for field in ("containers", "initContainers"):
        containers = spec.get(field) or []
        if not isinstance(containers, list):
            return True
        for container in containers:
            if not isinstance(container, dict):
                return True
            resources = container.get("resources") or {}
            if not isinstance(resources, dict):
                return True
            for key in ("requests", "limits"):
                amounts = resources.get(key) or {}
                if not isinstance(amounts, dict):
                    return True
                if any(is_extended_resource(str(name)) for name in amounts):
                    return True
    return False


class SkippingLiveState(StreamingGcLiveState):
    def _upsert(self, status: KindStatus, obj: JSONObject) -> None:
        if status.resource.kind == POD and not _may_be_kept(obj):
            meta = obj["metadata"]
            key = (meta.get("namespace", "") or "", meta["name"])
            # What ClusterState._set_pod does with a pod it does not keep; the real change
            # belongs in ClusterState.upsert (a method, not these private attributes).
            self.state._unset_pod(key)
            self.state._unkept_pods.add(key)
            return
        super()._upsert(status, obj)


def live_state_class(variant: str) -> type[LiveState]:
    if variant == "as-is":
        return LiveState
    if variant == "stream":
        return StreamingLiveState
    if variant == "stream-gc":
        return StreamingGcLiveState
    if variant == "stream-gc-skip":
        return SkippingLiveState
    raise ValueError(f"unknown variant {variant!r}; one of {', '.join(VARIANTS)}")

"""A lean Kubernetes list/watch server for benchmarks: the synthetic cluster, pre-serialised.

Why not tests/kubeapi.py's KubeApiDouble: it deep-copies every stored object of a kind for each
list page (and json.dumps them with the stdlib), which is right for a test double and far too slow
to serve 150,000 pods; a benchmark of the client must not measure the server. This one serialises
each object once (orjson), keeps the bytes sorted by (namespace, name) like etcd's keys, and
answers:

* ``GET <collection>?limit=N[&continue=T]``: a ``<Kind>List`` with ``metadata.resourceVersion``,
  ``metadata.continue`` and ``remainingItemCount`` while more remain; a token from another
  resourceVersion gets 410 Expired, a bad one 400. Core kinds' items carry no apiVersion/kind,
  as kube-apiserver sends typed lists; custom resources' items do.
* ``GET <collection>?watch=true&resourceVersion=RV&allowWatchBookmarks=true&timeoutSeconds=S``:
  newline-delimited events; from RV "" or "0" an ADDED per object first (the apiserver's "current
  state"), then BOOKMARKs every ``--bookmark-interval`` seconds until ``timeoutSeconds``. The data
  never changes, so any RV up to the current one is valid and has no events after it.
* field and label selectors are refused with 400 (not served here), other paths 404.

Run in its own process so its CPU is not the client's:

    python -m bench.apiserver --scale 1.0 [--seed 7] [--double]

prints one JSON line ({"url": ..., "prepare_seconds": ..., "objects": {...}, "bytes": {...}}) when
it listens on 127.0.0.1, and exits when its standard input closes. ``--double`` serves the same
objects from tests/kubeapi.py's KubeApiDouble instead, to measure that double at scale.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import os
import socket
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from bench.synthetic import DEFAULT_SEED, GENERATORS, Layout
from tests.kubeapi import SERVED, KubeApiDouble, Resource, status_body

CORE_KINDS = frozenset({"Node", "Pod"})
#: The served kinds the synthetic cluster generates, in watch order.
RESOURCES = tuple(resource for resource in SERVED if resource.plural in GENERATORS)


@dataclass
class Collection:
    """One resource's objects, serialised once, in key order."""

    resource: Resource
    items: list[bytes]

    @property
    def path(self) -> str:
        r = self.resource
        prefix = f"/apis/{r.group}" if r.group else "/api"
        return f"{prefix}/{r.version}/{r.plural}"

    @property
    def size(self) -> int:
        return sum(len(item) for item in self.items)


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace", ""), meta["name"])


def prepare(layout: Layout) -> tuple[dict[str, Collection], int]:
    """Every collection of the synthetic cluster, with one global resourceVersion sequence."""
    rv = 0
    collections: dict[str, Collection] = {}
    for resource in RESOURCES:
        keyed = []
        for obj in GENERATORS[resource.plural](layout):  # serialised as made: one dict at a time
            rv += 1
            obj["metadata"]["resourceVersion"] = str(rv)
            if resource.kind in CORE_KINDS:
                obj.pop("apiVersion", None)
                obj.pop("kind", None)
            keyed.append((_key(obj), orjson.dumps(obj)))
        keyed.sort(key=lambda pair: pair[0])
        collection = Collection(resource, [item for _, item in keyed])
        collections[collection.path] = collection
    return collections, rv


def _status(code: int, reason: str, message: str) -> web.Response:
    body = orjson.dumps(status_body(code, reason, message))
    return web.Response(status=code, body=body, content_type="application/json")


class LeanApiServer:
    """Serves pre-serialised collections; counts requests so a run can say what it cost."""

    def __init__(
        self, collections: dict[str, Collection], rv: int, *, bookmark_interval: float = 5.0
    ) -> None:
        self.collections = collections
        self.rv = rv
        self.bookmark_interval = bookmark_interval
        self.lists = 0
        self.watches = 0
        self._runner: web.AppRunner | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        await web.SockSite(runner, sock).start()
        self._runner = runner
        return f"http://{host}:{sock.getsockname()[1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        collection = self.collections.get(request.path)
        if collection is None:
            return _status(404, "NotFound", "the server could not find the requested resource")
        query = request.query
        if query.get("fieldSelector") or query.get("labelSelector"):
            return _status(400, "BadRequest", "selectors are not served by the lean server")
        if query.get("watch", "") in ("1", "t", "T", "true", "True", "TRUE"):
            return await self._watch(request, collection)
        return self._list(request, collection)

    def _list(self, request: web.Request, collection: Collection) -> web.Response:
        self.lists += 1
        query = request.query
        start = 0
        if token := query.get("continue"):
            try:
                state = orjson.loads(base64.urlsafe_b64decode(token))
                start, token_rv = int(state["start"]), int(state["rv"])
            except (ValueError, KeyError, TypeError, binascii.Error):
                return _status(400, "BadRequest", f"invalid continue token {token!r}")
            if token_rv != self.rv:
                return _status(410, "Expired", "the continue token has expired")
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            return _status(400, "BadRequest", "invalid limit")
        items = collection.items
        end = len(items) if limit <= 0 else min(len(items), start + limit)
        meta: dict[str, Any] = {"resourceVersion": str(self.rv)}
        if end < len(items):
            state = orjson.dumps({"rv": self.rv, "start": end})
            meta["continue"] = base64.urlsafe_b64encode(state).decode()
            meta["remainingItemCount"] = len(items) - end
        r = collection.resource
        head = orjson.dumps({"apiVersion": r.api_version, "kind": r.list_kind, "metadata": meta})[
            :-1
        ]
        body = b"".join((head, b',"items":[', b",".join(items[start:end]), b"]}"))
        return web.Response(body=body, content_type="application/json")

    async def _watch(self, request: web.Request, collection: Collection) -> web.StreamResponse:
        self.watches += 1
        query = request.query
        try:
            timeout = float(query.get("timeoutSeconds") or 0)
        except ValueError:
            return _status(400, "BadRequest", "invalid timeoutSeconds")
        bookmarks = query.get("allowWatchBookmarks", "") in ("1", "true", "True")
        rv = query.get("resourceVersion", "")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        r = collection.resource
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout > 0 else None
        try:
            await response.prepare(request)
            if rv in ("", "0"):
                for item in collection.items:
                    await response.write(b'{"type":"ADDED","object":' + item + b"}\n")
            bookmark = orjson.dumps(
                {
                    "type": "BOOKMARK",
                    "object": {
                        "apiVersion": r.api_version,
                        "kind": r.kind,
                        "metadata": {"resourceVersion": str(self.rv)},
                    },
                }
            )
            while True:
                pause = self.bookmark_interval if bookmarks else 3600.0
                if deadline is not None:
                    pause = min(pause, deadline - loop.time())
                if pause <= 0:
                    break
                await asyncio.sleep(pause)
                if deadline is not None and loop.time() >= deadline:
                    break
                if bookmarks:
                    await response.write(bookmark + b"\n")
            await response.write_eof()
        except ConnectionError:
            pass  # the client hung up
        return response


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _exit_when_stdin_closes() -> None:
    """The parent holds our stdin: when it exits (or dies), so do we."""

    def wait() -> None:
        sys.stdin.buffer.read()
        os._exit(0)

    threading.Thread(target=wait, daemon=True).start()


async def _serve_lean(layout: Layout, bookmark_interval: float, port: int) -> None:
    started = time.perf_counter()
    collections, rv = prepare(layout)
    server = LeanApiServer(collections, rv, bookmark_interval=bookmark_interval)
    url = await server.start(port=port)
    _announce(
        url,
        time.perf_counter() - started,
        {c.resource.plural: len(c.items) for c in collections.values()},
        {c.resource.plural: c.size for c in collections.values()},
        "lean",
    )
    await asyncio.Event().wait()


async def _serve_double(layout: Layout, bookmark_interval: float, port: int) -> None:
    started = time.perf_counter()
    double = KubeApiDouble(bookmark_interval=bookmark_interval)
    counts: dict[str, int] = {}
    load: dict[str, float] = {}
    for resource in RESOURCES:
        began = time.perf_counter()
        for obj in GENERATORS[resource.plural](layout):
            double.create(obj)
            counts[resource.plural] = counts.get(resource.plural, 0) + 1
        load[resource.plural] = round(time.perf_counter() - began, 3)
    url = await double.start()
    del port  # the double binds its own ephemeral port
    _announce(url, time.perf_counter() - started, counts, {}, "double", load_seconds=load)
    await asyncio.Event().wait()


def _announce(
    url: str,
    seconds: float,
    objects: dict[str, int],
    sizes: dict[str, int],
    kind: str,
    **extra: Any,
) -> None:
    line = {
        "url": url,
        "server": kind,
        "pid": os.getpid(),
        "prepare_seconds": round(seconds, 2),
        "objects": objects,
        "bytes": sizes,
        "rss_mb": round(_rss_mb(), 1),
        **extra,
    }
    sys.stdout.write(orjson.dumps(line).decode() + "\n")
    sys.stdout.flush()


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.apiserver", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--bookmark-interval", type=float, default=5.0)
    parser.add_argument(
        "--double", action="store_true", help="serve from tests/kubeapi.py's KubeApiDouble"
    )
    args = parser.parse_args(None if argv is None else list(argv))
    _exit_when_stdin_closes()
    layout = Layout.at(args.scale, args.seed)
    serve = _serve_double if args.double else _serve_lean
    asyncio.run(serve(layout, args.bookmark_interval, args.port))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

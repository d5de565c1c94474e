"""A minimal API server for Secrets and webhook configurations, with resourceVersion conflicts.

The list/watch double (tests/kubeapi.py) serves reads; certificate management also writes, and
this is the smallest thing that answers writes the way kube-apiserver does (409 on a stale write).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web

VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/gpu-guard"
SECRET = "/api/v1/namespaces/gpu-guard/secrets/gpu-guard-tls"


class FakeApi:
    """Objects by path with resourceVersion checks, lists and deletes, as the API server does."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.writes: list[str] = []
        self.race_next_write = False
        self.unserved: set[str] = set()
        """Path prefixes answered as kube-apiserver answers a kind it does not serve (no CRD):
        404 with a plain-text body, not a Status."""

    def put(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj = orjson.loads(orjson.dumps(obj))
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.objects[path] = obj
        return obj

    def listing(self, path: str, selector: str) -> list[dict[str, Any]]:
        """Objects under a collection path: cluster-wide reads also span namespaces, as
        /apis/g/v/plural does for namespaced kinds; ``k=v`` label selectors are honoured."""
        group, _, plural = path.rpartition("/")
        items = []
        for key, obj in sorted(self.objects.items()):
            parent = key.rsplit("/", 1)[0]
            spans = parent == path or (
                parent.startswith(group + "/namespaces/") and parent.endswith("/" + plural)
            )
            labels = obj.get("metadata", {}).get("labels") or {}
            wanted = dict(p.split("=", 1) for p in selector.split(",") if "=" in p)
            if spans and all(labels.get(k) == v for k, v in wanted.items()):
                items.append(obj)
        return items

    async def handle(self, request: web.Request) -> web.Response:
        path = request.path
        if any(path.startswith(prefix) for prefix in self.unserved):
            return web.Response(status=404, text="404 page not found\n")
        if request.method == "GET":
            obj = self.objects.get(path)
            if obj is not None:
                return web.json_response(obj)
            items = self.listing(path, request.query.get("labelSelector", ""))
            if items or request.query.get("labelSelector") is not None:
                return web.json_response({"items": items, "metadata": {}})
            return web.json_response({}, status=404)
        if request.method == "DELETE":
            if self.objects.pop(path, None) is None:
                return web.json_response({}, status=404)
            self.writes.append(f"DELETE {path}")
            return web.json_response({"status": "Success"})
        body = orjson.loads(await request.read())
        if self.race_next_write:
            self.race_next_write = False
            return web.json_response({}, status=409)
        if request.method == "POST":
            path = f"{path}/{body['metadata']['name']}"
            if path in self.objects:
                return web.json_response({}, status=409)
        elif request.method == "PUT":
            current = self.objects.get(path)
            if current is None:
                return web.json_response({}, status=404)
            sent = body.get("metadata", {}).get("resourceVersion")
            if sent != current["metadata"]["resourceVersion"]:
                return web.json_response({}, status=409)
        self.writes.append(f"{request.method} {path}")
        return web.json_response(self.put(path, body))


@asynccontextmanager
async def serve_fake_api(tmp_path: Path) -> AsyncIterator[tuple[FakeApi, str]]:
    """The fake on 127.0.0.1 with one webhook configuration, and a kubeconfig pointing at it."""
    fake = FakeApi()
    fake.put(
        VALIDATING,
        {
            "metadata": {"name": "gpu-guard"},
            "webhooks": [
                {"name": "nodes.validate.gpu-guard.io", "clientConfig": {}},
                {"name": "vms.validate.gpu-guard.io", "clientConfig": {}},
            ],
        },
    )
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "fake",
                "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
            }
        )
    )
    yield fake, str(kubeconfig)
    await runner.cleanup()

"""The reads LiveState makes of the API server, and nothing else: one GET that tells
``reachability`` whether the server answered at all, a kind's list page by page (decoded, pruned
to what the state reads, with the garbage collector paused while a page is taken), one object.

Apart from ``webhook.state.live``, the list/watch loop and its freshness bookkeeping, which
decides when to read and what a read means for each kind; these only read, and raise what
``webhook.state.client`` makes of a refusal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient

from policies.cluster.kinds import SERVED_VERSIONS, ApiResource
from policies.vocabulary.requests import JSONObject
from webhook.state.client import NotInstalled, refusal
from webhook.state.feeding import collector_paused
from webhook.state.reconnect import Reachability
from webhook.wire.decode import decode_list_page

LIST_PAGE = 2000


class ApiReads:
    """Mixed into LiveState, which sets the client, the timeout and the reachability tracker."""

    api: ApiClient
    request_timeout: float
    reachability: Reachability
    _clock: Callable[[], float]
    _watching: bool

    async def _get(
        self, path: str, params: dict[str, str], timeout: aiohttp.ClientTimeout | float
    ) -> Any:
        """The response, its body unread. While watching, whether the API server answered at
        all is told to ``reachability`` (a 503 counts as no answer)."""
        started = self._clock()
        try:
            response = await self.api.call_api(
                path,
                "GET",
                query_params=list(params.items()),
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            if self._watching:
                self.reachability.unanswered(f"{type(exc).__name__}: {exc}"[:300], started)
            raise
        if self._watching:
            if response.status == 503:
                self.reachability.unanswered(f"HTTP 503 for {path}", started)
            else:
                self.reachability.answered()
        return response

    async def _read_body(self, response: Any) -> bytes:
        async with response:
            body: bytes = await response.read()
            if response.status != 200:
                raise refusal(response, body, str(response.url.path))
            return body

    async def _read_json(self, response: Any) -> Any:
        return orjson.loads(await self._read_body(response))

    def _page_timeout(self) -> aiohttp.ClientTimeout:
        """A page may take a while to arrive whole, but not to connect or to start answering:
        an unreachable API server fails within ``request_timeout``."""
        return aiohttp.ClientTimeout(
            total=self.request_timeout * 3,
            sock_connect=self.request_timeout,
            sock_read=self.request_timeout,
        )

    async def _page(self, resource: ApiResource, query: dict[str, str]) -> bytes:
        """One list page, as sent."""
        return await self._read_body(await self._get(resource.path, query, self._page_timeout()))

    @staticmethod
    def _decoded_page(
        resource: ApiResource, body: bytes, pruned: bool
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """A page's items with apiVersion and kind filled in (as watch sends them), and the
        list's metadata; ``pruned``: only the fields the state reads (webhook.wire)."""
        page = decode_list_page(resource.kind, body) if pruned else orjson.loads(body)
        items = page.get("items") or []
        for item in items:
            item["apiVersion"] = resource.api_version
            item["kind"] = resource.kind.kind
        return items, page.get("metadata") or {}

    async def _pages(
        self, resource: ApiResource, params: dict[str, str] | None = None, pruned: bool = False
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
        """A kind's list page by page, each with the list's resourceVersion (the last one's is
        the version of the whole list).

        The garbage collector is paused from a page's decoding until the caller has taken it and
        it is dropped (the caller's work on a page has no await): thousands of fresh dicts would
        otherwise trigger collections that re-walk the whole state, and re-enabling it in between
        would walk the fresh page once more (~8 ms a page of 2,000 pods)."""
        query = {"limit": str(LIST_PAGE), **(params or {})}
        resource = await self.served(resource)
        while True:
            body = await self._page(resource, query)
            with collector_paused():
                page, meta = self._decoded_page(resource, body, pruned)
                del body
                yield page, str(meta.get("resourceVersion", ""))
                del page  # no more than one page of raw objects alive at a time
            token = meta.get("continue")
            if not token:
                return
            query = {**query, "continue": token}

    async def list_objects(
        self, resource: ApiResource, params: dict[str, str] | None = None, pruned: bool = False
    ) -> tuple[list[JSONObject], str]:
        """Every object of a kind (paged), apiVersion and kind filled in as watch sends them;
        ``pruned``: only the fields the state reads."""
        items: list[JSONObject] = []
        version = ""
        async for page, page_version in self._pages(resource, params, pruned):
            items.extend(page)
            version = page_version
        return items, version

    async def get_object(self, resource: ApiResource, namespace: str, name: str) -> Any:
        """One object, or None when it does not exist."""
        try:
            obj = await self._read_json(
                await self._get(resource.object_path(namespace, name), {}, self.request_timeout)
            )
        except NotInstalled:
            return None
        obj.setdefault("apiVersion", resource.api_version)
        obj.setdefault("kind", resource.kind.kind)
        return obj

    async def served(self, resource: ApiResource) -> ApiResource:
        """``resource`` in the version the API server serves, for a kind served under several
        (``SERVED_VERSIONS``: DeviceTaintRule, v1beta2 in 1.36, v1 expected in 1.37): the first
        whose discovery document lists its plural; the table's own when none does (its list
        then answers 404, and the kind counts as not installed)."""
        for version in SERVED_VERSIONS.get(resource.kind, ()):
            candidate = dataclasses.replace(resource, version=version)
            try:
                path = candidate.discovery_path
                document = await self._read_json(await self._get(path, {}, self.request_timeout))
            except NotInstalled:
                continue
            listed = document.get("resources") if isinstance(document, dict) else None
            if any(isinstance(r, dict) and r.get("name") == resource.plural for r in listed or ()):
                return candidate
        return resource

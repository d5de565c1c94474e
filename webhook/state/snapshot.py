"""Reading state from a live cluster once: for ``check``/``audit`` against it, and ``snapshot``.

A snapshot holds exactly the kinds the policies read, with managedFields stripped, as a
``kind: List`` that ``--state`` reads back: an audit can be reproduced offline, byte for byte.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml
from kubernetes_asyncio.client import ApiClient

from policies.vocabulary.requests import GroupKind, JSONObject
from webhook.state.client import TRANSIENT, CredentialsError, connect
from webhook.state.failures import cannot_read, server_of
from webhook.state.files import listed_record
from webhook.state.live import LiveState, PageSink


class LiveStateError(RuntimeError):
    """The cluster could not be read (unreachable, not read in time, no credentials): one line."""


async def connected(kubeconfig: str | None, context: str | None) -> ApiClient:
    try:
        return await connect(kubeconfig, context)
    except CredentialsError as exc:
        raise LiveStateError(str(exc)) from None


async def synced(kubeconfig: str | None, context: str | None, timeout: float) -> LiveState:
    """A LiveState holding one read of every kind (``read_within``), no watch running; the
    caller closes its client."""
    live = LiveState(await connected(kubeconfig, context))
    try:
        await read_within(live, timeout)
    except LiveStateError:
        await close(live)
        raise
    return live


async def read_within(live: LiveState, timeout: float, keep: PageSink | None = None) -> None:
    """``LiveState.read_once`` within ``timeout`` seconds: the one read behind check, audit and
    snapshot. It fails at the first error, as one LiveStateError: an unreachable API server
    within the connect timeout, not after ``timeout`` of retries and warnings."""
    deadline = asyncio.timeout(timeout)
    try:
        async with deadline:
            await live.read_once(keep)
    except TRANSIENT as exc:  # TimeoutError among them: the deadline's, or one request's
        if deadline.expired():
            reason = live.not_ready_reason()
            raise LiveStateError(
                f"the cluster did not sync within {timeout:g} s: {reason}"
            ) from None
        raise LiveStateError(cannot_read(exc, server_of(live.api))) from None


async def close(live: LiveState) -> None:
    await live.stop()
    await live.api.close()


def _strip(obj: dict[str, Any]) -> JSONObject:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


async def collect(
    api: ApiClient, timeout: float, listed: list[GroupKind] | None = None
) -> list[JSONObject]:
    """Every object of every watched kind, as read (managedFields stripped); an API group that
    is not installed is skipped. Every kind listed, 404 included (seen: none), goes in
    ``listed``."""
    objects: list[JSONObject] = []
    live = LiveState(api)
    await read_within(live, timeout, lambda _, page: objects.extend(_strip(o) for o in page))
    if listed is not None:
        listed.extend(kind for kind, status in live.statuses.items() if status.synced)
    return objects


def write_state_file(
    objects: Sequence[JSONObject], path: str, listed: Sequence[GroupKind] = ()
) -> None:
    """JSON when the name ends in .json (fast to load back), else YAML; '-' is stdout. The kinds
    ``listed`` are recorded on the List (``webhook.state.files.listed_record``)."""
    document: dict[str, Any] = {"apiVersion": "v1", "kind": "List"}
    if listed:
        document["metadata"] = listed_record(listed)
    document["items"] = list(objects)
    if path.endswith(".json"):
        data = orjson.dumps(document)
    else:
        data = yaml.safe_dump(document, sort_keys=False, width=120).encode()
    if path == "-":
        sys.stdout.buffer.write(data)
    else:
        Path(path).write_bytes(data)

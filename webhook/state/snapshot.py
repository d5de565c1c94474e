"""Reading state from a live cluster once: for ``check``/``audit`` against it, and ``snapshot``.

A snapshot holds exactly the kinds the policies read, with managedFields stripped, as a
``kind: List`` that ``--state`` reads back: an audit can be reproduced offline, byte for byte.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml
from kubernetes_asyncio.client import ApiClient

from policies.kinds import WATCHED
from policies.model import JSONObject
from webhook.state.live import LiveState, NotInstalled, connect


class LiveStateError(RuntimeError):
    """The cluster could not be read (unreachable, not synced in time, no credentials)."""


async def synced(kubeconfig: str | None, context: str | None, timeout: float) -> LiveState:
    """A LiveState that has synced every kind once; the caller stops it and closes its client."""
    try:
        api = await connect(kubeconfig, context)
    except Exception as exc:  # kubeconfig errors come in many types; all mean the same here
        raise LiveStateError(f"cannot load cluster credentials: {exc}") from None
    live = LiveState(api)
    await live.start()
    try:
        await live.wait_synced(timeout)
    except TimeoutError as exc:
        await close(live)
        raise LiveStateError(f"the cluster did not sync within {timeout:g} s: {exc}") from None
    return live


async def close(live: LiveState) -> None:
    await live.stop()
    await live.api.close()


def _strip(obj: dict[str, Any]) -> JSONObject:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


async def collect(api: ApiClient) -> list[JSONObject]:
    """Every object of every watched kind; an API group that is not installed is skipped."""
    live = LiveState(api)
    objects: list[JSONObject] = []
    for resource in WATCHED:
        try:
            items, _ = await live.list_objects(resource)
        except NotInstalled:
            continue
        objects.extend(_strip(dict(item)) for item in items)
    return objects


def write_state_file(objects: Sequence[JSONObject], path: str) -> None:
    """JSON when the name ends in .json (fast to load back), else YAML; '-' is stdout."""
    document = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    if path.endswith(".json"):
        data = orjson.dumps(document)
    else:
        data = yaml.safe_dump(document, sort_keys=False, width=120).encode()
    if path == "-":
        sys.stdout.buffer.write(data)
    else:
        Path(path).write_bytes(data)

"""Reaching the live cluster from a command.

The modules that talk to a cluster (``state.live``, ``state.snapshot``) are imported inside
these functions: they bring in kubernetes_asyncio (about 0.5 s and 60 MiB), which
``serve --state``, ``check --state`` and ``audit --state`` never use.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from webhook.commands.common import UsageError

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

    from webhook.state.live import LiveState

T = TypeVar("T")


def live_state(args: argparse.Namespace) -> LiveState:
    """A synced live state, its watches already stopped: one consistent read of the cluster."""
    from webhook.state.snapshot import LiveStateError, close, synced

    async def read() -> LiveState:
        live = await synced(args.kubeconfig, args.context, args.sync_timeout)
        await close(live)
        return live

    try:
        return asyncio.run(read())
    except LiveStateError as exc:
        raise UsageError(str(exc)) from None


async def connect(args: argparse.Namespace) -> ApiClient:
    """The cluster's API client, or a UsageError saying why no credentials would load."""
    from webhook.state.snapshot import LiveStateError, connected

    try:
        return await connected(args.kubeconfig, args.context)
    except LiveStateError as exc:
        raise UsageError(str(exc)) from None


def with_cluster(
    args: argparse.Namespace, work: Callable[[ApiClient], Awaitable[T]], failing: str
) -> T:
    """Runs ``work`` with a connected API client, closed after; a failure of the cluster's
    becomes one line: ``failing``, then what it means and what to do (or the read's own line)."""
    from webhook.state.client import TRANSIENT
    from webhook.state.failures import cannot_read, server_of
    from webhook.state.snapshot import LiveStateError

    server = "(unknown address)"

    async def run() -> T:
        nonlocal server
        api = await connect(args)
        server = server_of(api)
        try:
            return await work(api)
        finally:
            await api.close()

    try:
        return asyncio.run(run())
    except LiveStateError as exc:
        raise UsageError(str(exc)) from None
    except TRANSIENT as exc:
        raise UsageError(f"{failing}: {cannot_read(exc, server)}") from None

"""Talking to the API server: finding the cluster (kubectl's rules), one raw JSON call, and
what its answers mean as exceptions.

Shared by the live state's list/watch loops, the leader elector, the report publisher, the
certificate sync and the live commands; none of them needs the live state to make a call.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException

from webhook.state.kubeconfig import kubeconfig_problem
from webhook.state.reconnect import retry_after


class NotInstalled(Exception):
    """The API group answers 404: its CRD is not installed (yet)."""


class Expired(Exception):
    """410 Gone: the resourceVersion is older than the server's history; relist."""


class ApiError(Exception):
    """Any other answer we cannot use; retried with backoff."""


UNAVAILABLE_RETRY_MAX = 1.0
"""The longest Retry-After of a 503 honoured (seconds). A restarting kube-apiserver answers a
custom resource's path 503 "the request has been made before all known HTTP paths have been
installed" with a fixed Retry-After: 5, for about a second after it listens again
(tests/fixtures/apiserver-restart/probe-resumed.txt): honouring the 5 s put a fresh deny 4 s
after /readyz (bench/RESULTS.md). A 429 (flow control, storage initialising) is honoured in
full, up to RETRY_AFTER_MAX."""


class RetryLater(ApiError):
    """429 or 503: retried after the server's Retry-After (``after``), when it gave one."""

    def __init__(self, message: str, after: float | None) -> None:
        super().__init__(message)
        self.after = after


class Unauthorized(ApiError):
    """401: the credentials were refused (an expired or revoked token, an unknown certificate)."""


class Forbidden(ApiError):
    """403: RBAC refused the request; ``message`` is the server's Status message, which names
    the user, the verb and the resource."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class WatchError(ApiError):
    """An ERROR event other than 410 inside a watch stream: the watch ends; list again."""


class CredentialsError(Exception):
    """No cluster credentials could be loaded; the message says from where they were sought."""


#: What a broken connection or a bad answer looks like, across aiohttp and kubernetes-asyncio.
TRANSIENT = (ApiError, ApiException, aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError)


def refusal(response: Any, body: bytes, what: str) -> Exception:
    """What a non-200 answer to ``what`` (a path, or "watch" and a path) means."""
    if response.status == 404:
        return NotInstalled(f"{what}: 404")
    if response.status == 410:
        return Expired(body.decode(errors="replace")[:200] or what)
    message = f"HTTP {response.status} for {what}"
    if response.status == 401:
        return Unauthorized(message)
    if response.status == 403:
        return Forbidden(_status_message(body) or message)
    if response.status == 429:
        return RetryLater(message, retry_after(response.headers, body))
    if response.status == 503:
        after = retry_after(response.headers, body)
        return RetryLater(message, None if after is None else min(after, UNAVAILABLE_RETRY_MAX))
    return ApiError(message)


def answer_error(status: int, payload: Any, what: str) -> ApiError:
    """A non-2xx answer of ``call_json`` as the exception ``refusal`` makes of one: 401 and 403
    keep their meaning (and a 403 its Status message, which names user, verb and resource)."""
    message = f"HTTP {status} for {what}"
    if status == 401:
        return Unauthorized(message)
    if status == 403:
        told = payload.get("message") if isinstance(payload, dict) else None
        return Forbidden(str(told) if told else message)
    return ApiError(message)


def _status_message(body: bytes) -> str | None:
    """The ``message`` of a Status body, if the body is one."""
    try:
        status = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    message = status.get("message") if isinstance(status, dict) else None
    return str(message) if message else None


async def call_json(
    api: ApiClient,
    method: str,
    path: str,
    body: Any = None,
    params: Sequence[tuple[str, str]] = (),
) -> tuple[int, Any]:
    """One JSON request to the API server (10 s at most): its status and decoded body (None
    when empty), whatever the status; the caller decides what a 404 or a 409 means. A body
    that is not JSON comes back as text: the API server answers a path it does not serve (a
    custom resource whose CRD is not installed) with a plain ``404 page not found``."""
    response = await api.call_api(
        path,
        method,
        body=body,
        query_params=list(params),
        header_params={"Accept": "application/json", "Content-Type": "application/json"},
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=10,
    )
    async with response:
        payload = await response.read()
        status: int = response.status
        if not payload:
            return status, None
        try:
            return status, orjson.loads(payload)
        except orjson.JSONDecodeError:
            return status, payload.decode("utf-8", "replace").strip()


async def connect(kubeconfig: str | None = None, context: str | None = None) -> ApiClient:
    """An ApiClient the way kubectl finds a cluster: --kubeconfig, else $KUBECONFIG, else
    ~/.kube/config, else the in-cluster service account."""
    from kubernetes_asyncio import config  # imported here: only live commands pay for it

    home = os.path.expanduser("~/.kube/config")
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
    if path is not None and not os.path.isfile(path):
        source = "--kubeconfig" if kubeconfig else "$KUBECONFIG"
        raise CredentialsError(f"cannot load cluster credentials: {path} ({source}): no such file")
    if path is None and os.path.isfile(home):
        path = home
    if path is not None:
        try:
            client: ApiClient = await config.new_client_from_config(
                config_file=path, context=context
            )
        except Exception as exc:  # kubeconfig errors come in many types; all mean the same here
            raise CredentialsError(kubeconfig_problem(path, context, exc)) from None
        return client
    if not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise CredentialsError(
            "no cluster credentials: tried --kubeconfig (not given), $KUBECONFIG (not set), "
            f"{home} (none), the in-cluster service account (not in a pod: "
            "$KUBERNETES_SERVICE_HOST not set); give --kubeconfig PATH, or --state FILE to "
            "read saved objects (kubectl get ... -o yaml, or gpu-guard snapshot)"
        )
    configuration = Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise CredentialsError(
            f"cannot load cluster credentials (in-cluster service account): {exc}"
        ) from None
    return ApiClient(configuration)

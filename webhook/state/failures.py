"""What a failure to reach or read the cluster means, in one line a person can act on.

A command that reads a cluster fails in one line on stderr, exit 2: the line names the server,
the file or the verb, and says what to do, never a library's class name or a parser's trace
(issue 40). The live server's own retries keep their technical log lines; these are for a
person at a terminal.
"""

from __future__ import annotations

import asyncio
import errno
import re
import socket
import ssl
from typing import Any

import aiohttp

from webhook.state.client import Forbidden, Unauthorized
from webhook.state.kubeconfig import first_line

_CAN_I = re.compile(r'cannot (\w+) resource "([^"]+)"(?: in API group "([^"]*)")?')


def cannot_read(exc: BaseException, server: str) -> str:
    """One line for a request to the API server at ``server`` that failed with ``exc``."""
    if isinstance(exc, Unauthorized):
        return (
            f"the API server at {server} refused the credentials (401 Unauthorized): the token "
            "or client certificate has expired or was revoked; log in again to refresh the "
            "kubeconfig's user, then retry"
        )
    if isinstance(exc, Forbidden):
        return f"the API server at {server} said 403 Forbidden: {exc.message}; {_grant(exc)}"
    status = getattr(exc, "status", None)  # kubernetes_asyncio's ApiException
    if status in (401, 403):
        return cannot_read(
            (Unauthorized if status == 401 else Forbidden)(str(getattr(exc, "reason", ""))),
            server,
        )
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | ssl.SSLError) or isinstance(
        getattr(exc, "os_error", None), ssl.SSLError
    ):
        return (
            f"the API server at {server} presented a certificate the kubeconfig does not trust; "
            "check the cluster's certificate-authority-data (or the server address) in the "
            "kubeconfig"
        )
    if isinstance(exc, aiohttp.ClientConnectorError):
        return _unreachable(server, exc.os_error)
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return (
            f"the API server at {server} did not answer in time; is the address reachable from "
            "here (VPN, proxy, firewall)? kubectl cluster-info tries the same"
        )
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return (
            f"the API server at {server} closed the connection mid-answer; retry, and if it "
            "persists, kubectl get --raw /readyz says whether it is healthy"
        )
    if isinstance(exc, OSError):
        return _unreachable(server, exc)
    return f"the API server at {server} answered what gpu-guard cannot use: {first_line(exc)}"


def server_of(api: Any) -> str:
    """The API server's address as the kubeconfig names it."""
    host = getattr(getattr(api, "configuration", None), "host", None)
    return str(host) if host else "(unknown address)"


def _unreachable(server: str, error: OSError) -> str:
    if isinstance(error, socket.gaierror):
        reason = "its host name does not resolve"
    elif error.errno == errno.ECONNREFUSED:
        reason = "connection refused"
    elif error.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        reason = "no route to it"
    else:
        reason = error.strerror or "connection failed"
    return (
        f"cannot reach the API server at {server} ({reason}); is the cluster running, and is "
        "this the right context? kubectl config current-context names it, --context picks another"
    )


def _grant(exc: Forbidden) -> str:
    found = _CAN_I.search(exc.message)
    if found is None:
        return "use a kubeconfig whose user may; kubectl auth can-i --list shows what it may do"
    verb, resource, group = found.groups()
    target = f"{resource}.{group}" if group else resource
    return (
        f"grant the user {verb} on {target} (a ClusterRole and its binding), or use a kubeconfig "
        f"whose user has it; kubectl auth can-i {verb} {target} checks"
    )

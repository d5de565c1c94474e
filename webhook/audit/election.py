"""The leader election's settings: durations as client-go's, who we are, where the Lease is.

Apart from the elector (webhook/audit/leader.py) so the command line reads its defaults without
importing the cluster client; ``NotLeader`` is here for the same reason: the background audit
and the report publisher both raise or catch it, and neither imports the other for it.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass

DEFAULT_LEASE_NAME = "gpu-guard-audit"
DEFAULT_LEASE_DURATION = 15.0
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0
JITTER_FACTOR = 1.2
"""client-go's: the renew deadline must leave room for more than one retry period."""

SERVICE_ACCOUNT_NAMESPACE: str | None = None
"""Where a pod's service account names its namespace (None: beside the client's token file)."""


@dataclass(frozen=True)
class ElectionConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = DEFAULT_LEASE_DURATION
    renew_deadline: float = DEFAULT_RENEW_DEADLINE
    retry_period: float = DEFAULT_RETRY_PERIOD

    def problem(self) -> str | None:
        """What makes these durations unsafe, as client-go refuses them; None when sound."""
        if self.lease_duration <= self.renew_deadline:
            return (
                f"the lease duration ({self.lease_duration:g} s) must be longer than the renew "
                f"deadline ({self.renew_deadline:g} s)"
            )
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            return (
                f"the renew deadline ({self.renew_deadline:g} s) must be longer than "
                f"{JITTER_FACTOR:g} x the retry period ({self.retry_period:g} s)"
            )
        return None


def default_identity() -> str:
    """The pod's name (downward API ``POD_NAME``); outside a pod the host name with a random
    suffix, so two processes on one host never both believe they hold the Lease."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def own_namespace(fallback: str) -> str:
    """``POD_NAMESPACE``, else the service account's namespace file, else ``fallback``."""
    if namespace := os.environ.get("POD_NAMESPACE"):
        return namespace
    path = SERVICE_ACCOUNT_NAMESPACE
    if path is None:  # the cluster client, imported only here: live mode loads it anyway
        from kubernetes_asyncio.config.incluster_config import SERVICE_TOKEN_FILENAME

        path = os.path.join(os.path.dirname(SERVICE_TOKEN_FILENAME), "namespace")
    try:
        with open(path, encoding="utf-8") as file:
            return file.read().strip() or fallback
    except OSError:
        return fallback


class NotLeader(Exception):
    """A report write refused before it was sent: this replica no longer holds the lease."""

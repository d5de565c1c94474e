"""One audit writer among replicas: leader election on a coordination.k8s.io/v1 Lease.

The semantics are client-go's (tools/leaderelection): a candidate takes the Lease when it is
missing, released (no holder) or not renewed for ``lease_duration`` as measured by the
candidate's own clock since the record changed (dated by the read before the one that saw the
change, within a safe bound: ``_changed_at``); the leader renews it every
``retry_period`` and gives up when it could not renew within ``renew_deadline``; on a graceful
stop it releases the Lease (ReleaseOnCancel) so a successor takes over at once.

Written on the Lease API directly rather than on kubernetes_asyncio.leaderelection, which reads
the wall clock, has no deadline on a renew call that hangs (its leader stays leader for as long
as the call hangs), runs for one term only, never releases, writes local time as UTC and never
counts leaseTransitions.

Fencing: ``holds()`` is true only while the last successful renew *started* less than
``renew_deadline`` ago by this process's monotonic clock. A rival waits ``lease_duration`` (more)
after it saw that renew, so a leader whose loop or API calls hung stops trusting its lease
``lease_duration - renew_deadline`` before anyone else may take it. Every report write checks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio.client import ApiClient

from policies.cluster.kinds import LEASE, RESOURCE_OF
from webhook.audit.election import ElectionConfig
from webhook.metrics import Metrics
from webhook.state.client import TRANSIENT, call_json

log = logging.getLogger("gpu-guard.leader")

_LEASES = RESOURCE_OF[LEASE]


def _micro_time(moment: datetime) -> str:
    """metav1.MicroTime as the API server writes it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for the Lease for as long as it runs; while it leads, runs ``lead`` as a task
    and cancels that task the moment the lease is lost."""

    def __init__(
        self,
        api: ApiClient,
        config: ElectionConfig,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.api, self.config, self.metrics = api, config, metrics
        self.clock, self.wall = clock, wall
        self.path = _LEASES.object_path(config.namespace, config.name)
        self._observed: dict[str, Any] | None = None  # the Lease's spec as last seen
        self._observed_at = 0.0  # when it last changed, by our clock (see _changed_at)
        self._read_at: float | None = None  # when our last read of it started
        self._version: str | None = None  # its resourceVersion
        self._renewed_at: float | None = None  # start of our last successful write, if leading
        self._lead_task: asyncio.Task[None] | None = None
        self.metrics.leader.set_function(lambda: 1.0 if self.holds() else 0.0)  # as the fence

    def holds(self) -> bool:
        """True while this replica leads and last renewed within the renew deadline."""
        return (
            self._renewed_at is not None
            and self.clock() - self._renewed_at < self.config.renew_deadline
        )

    @property
    def leading(self) -> bool:
        """True while the leader's work runs (it is cancelled the moment the lease is lost)."""
        return self._lead_task is not None

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Acquire, lead until the lease is lost, campaign again; forever (cancel to stop,
        then ``release``)."""
        while True:
            await self._acquire()
            log.info("leading: %s holds %s/%s", self.config.identity, *self._where())
            self.metrics.leader_transitions.inc()
            self._lead_task = asyncio.create_task(self._lead(lead))
            try:
                await self._renew_until_lost()
            finally:
                self._stop_leading()
            log.warning("lost the lease %s/%s: stopped auditing", *self._where())

    async def release(self) -> None:
        """Stops leading and, if the Lease is still ours, gives it up so a successor takes over
        at once (client-go's ReleaseOnCancel): no holder, duration 1 s, transitions kept."""
        self._stop_leading()
        if self._observed is None or self.observed_holder != self.config.identity:
            return  # not ours to give (a stale resourceVersion would be refused anyway)
        now = _micro_time(self.wall())
        spec = {
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": self._observed.get("leaseTransitions") or 0,
        }
        try:
            async with asyncio.timeout(self.config.retry_period):
                status, _ = await call_json(self.api, "PUT", self.path, self._lease(spec))
        except (*TRANSIENT, TimeoutError) as exc:
            log.warning("could not release the lease %s/%s: %s", *self._where(), exc)
            return
        if status < 300:
            log.info("released the lease %s/%s", *self._where())
        else:
            log.warning("could not release the lease %s/%s: HTTP %s", *self._where(), status)

    def _where(self) -> tuple[str, str]:
        return self.config.namespace, self.config.name

    async def _lead(self, lead: Callable[[], Awaitable[None]]) -> None:
        try:
            await lead()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the leader's work failed")

    def _stop_leading(self) -> None:
        """At once, without awaiting anything: no more writes pass the fence, the work is
        cancelled (a cancelled audit child dies on its closed pipe)."""
        self._renewed_at = None
        self.metrics.forget_audit()
        if self._lead_task is not None:
            self._lead_task.cancel()
            self._lead_task = None

    async def _acquire(self) -> None:
        while not await self._attempt(self.config.renew_deadline):
            await asyncio.sleep(self._next_try())

    def _next_try(self) -> float:
        """The retry period, or less when the holder's lease expires sooner by our clock: a
        dead leader is replaced a lease duration after its last renew was seen, not up to a
        retry period later."""
        expires_in = self._observed_at + self.config.lease_duration - self.clock()
        if self.observed_holder and 0 < expires_in < self.config.retry_period:
            return expires_in + 0.001  # past the expiry, not at it
        return self.config.retry_period

    async def _renew_until_lost(self) -> None:
        """Renews every retry period; returns when no renew succeeded within the renew
        deadline, or the Lease names another holder."""
        while True:
            await asyncio.sleep(self.config.retry_period)
            while True:
                if self._renewed_at is None:
                    return
                remaining = self._renewed_at + self.config.renew_deadline - self.clock()
                if remaining <= 0 or self.observed_holder not in ("", self.config.identity):
                    return
                if await self._attempt(remaining):
                    break
                await asyncio.sleep(min(self.config.retry_period, max(remaining, 0.0)))

    async def _attempt(self, within: float) -> bool:
        """One tryAcquireOrRenew, abandoned after ``within`` seconds (a hung call is a failed
        one); transient errors are a failed attempt."""
        try:
            async with asyncio.timeout(within):
                return await self._try_acquire_or_renew()
        except (*TRANSIENT, TimeoutError) as exc:
            log.debug("lease %s/%s: attempt failed: %r", *self._where(), exc)
            return False

    @property
    def observed_holder(self) -> str:
        """Who held the Lease when this replica last read or wrote it ("" for nobody)."""
        return str((self._observed or {}).get("holderIdentity") or "")

    async def _try_acquire_or_renew(self) -> bool:
        started = self.clock()
        now = _micro_time(self.wall())
        status, lease = await call_json(self.api, "GET", self.path)
        if status == 404:
            self._version = None  # a create carries no resourceVersion
            spec = self._spec(now, now, transitions=0)
            status, created = await call_json(
                self.api, "POST", _LEASES.collection_path(self.config.namespace), self._lease(spec)
            )
            return self._written(status, created, started)
        if status >= 300 or not isinstance(lease, dict):
            log.warning("cannot read the lease %s/%s: HTTP %s", *self._where(), status)
            return False
        current = lease.get("spec") or {}
        self._version = (lease.get("metadata") or {}).get("resourceVersion")
        if current != self._observed:
            self._observed, self._observed_at = current, self._changed_at()
        self._read_at = started
        holder = self.observed_holder
        ours = holder == self.config.identity
        if holder and not ours and self._observed_at + self.config.lease_duration > started:
            return False  # held by another, and not yet expired by our clock
        transitions = int(current.get("leaseTransitions") or 0)
        if ours:
            spec = self._spec(str(current.get("acquireTime") or now), now, transitions)
        else:
            spec = self._spec(now, now, transitions + 1)
        status, replaced = await call_json(self.api, "PUT", self.path, self._lease(spec))
        return self._written(status, replaced, started)

    def _changed_at(self) -> float:
        """When the record we just read changed, for its expiry: client-go takes the moment it
        saw the change, up to a retry period late, so a dead leader was replaced up to a lease
        duration plus a retry period after its last renew. The change came after our previous
        read started; taking that moment keeps replacement within the lease duration. It is
        never earlier than ``lease_duration - renew_deadline`` before now: the holder's renew
        started before now and it trusts its lease for ``renew_deadline`` after that start
        (``holds``), so a takeover at ``_observed_at + lease_duration`` never overlaps it."""
        now = self.clock()
        earliest = now - (self.config.lease_duration - self.config.renew_deadline)
        return now if self._read_at is None else max(self._read_at, earliest)

    def _written(self, status: int, lease: Any, started: float) -> bool:
        if status >= 300 or not isinstance(lease, dict):
            if status != 409:  # 409: a rival wrote first; the next attempt reads its record
                log.warning("cannot write the lease %s/%s: HTTP %s", *self._where(), status)
            return False
        self._observed, self._observed_at = lease.get("spec") or {}, self.clock()
        self._version = (lease.get("metadata") or {}).get("resourceVersion")
        self._renewed_at = started
        return True

    def _spec(self, acquired: str, renewed: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": max(1, round(self.config.lease_duration)),
            "acquireTime": acquired,
            "renewTime": renewed,
            "leaseTransitions": transitions,
        }

    def _lease(self, spec: dict[str, Any]) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.config.name, "namespace": self.config.namespace}
        if self._version is not None:
            metadata["resourceVersion"] = self._version
        return {
            "apiVersion": _LEASES.api_version,
            "kind": LEASE.kind,
            "metadata": metadata,
            "spec": spec,
        }


async def stop(elector: LeaderElector, campaign: asyncio.Task[None]) -> None:
    """Graceful shutdown: end the campaign, then release the Lease if still held."""
    campaign.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await campaign
    await elector.release()

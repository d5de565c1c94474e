"""The audit leader's writer of the record the API server's own policy reads
(``policies.cluster.record``; docs/security.md, "When gpu-guard is down").

Every ``interval`` seconds, once the state is synced, the leader recomputes the record from its
watched state and writes it only when its content changed (its time aside): one small object,
rewritten when a node's GPU users or the ClusterPolicy facts change, never on a timer, so no
etcd churn. Only through the fence (``holds``): a replica that lost the Lease writes nothing. The
ConfigMap is declared by the chart and the overlays (so uninstall removes it); the guard only
updates it, by name, the one right its Role grants on ConfigMaps.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from kubernetes_asyncio.client import ApiClient

from policies.cluster.kinds import CONFIG_MAP, RESOURCE_OF
from policies.cluster.record import (
    CARRIED,
    EVERY_POLICY,
    RECORD_NAME,
    configured,
    content_changed,
    exemption_keys,
    record_data,
    selector_lines,
    stamped,
)
from policies.cluster.view import ClusterView
from policies.vocabulary.verdicts import Action
from webhook.audit.background import in_snapshot
from webhook.config import Exemptions
from webhook.defaults import DEFAULT_RECORD_INTERVAL
from webhook.engine import Engine
from webhook.state.client import TRANSIENT, call_json

log = logging.getLogger("gpu-guard.record")


def _scope(exemptions: Exemptions) -> tuple[frozenset[str], frozenset[str], str]:
    """What of an exemption can match a Node request: users, groups, the object's labels
    (a Node has no namespace)."""
    selector = exemptions.selector
    labels = selector_lines(
        (r.key, r.operator, r.values) for r in (selector.requirements if selector else ())
    )
    return exemptions.users, exemptions.groups, labels


def settings(engine: Engine, now: datetime) -> dict[str, str]:
    """The configuration in force as the record carries it: the carried policies' actions
    (deny; anything but off) and the exemptions a Node request can meet, expired ones left out,
    so a reload reaches the API server's policy with the next write."""
    config, policies = engine.config, engine.policies
    actions = {p.id: config.action_for(p) for p in policies}
    scopes = {EVERY_POLICY: _scope(config.exemptions)}
    for policy_id in CARRIED:
        own = config.policy_exemptions.get(policy_id)
        if own is not None and own.active(now):
            scopes[policy_id] = _scope(own)
    return {
        **configured(
            (p for p, a in actions.items() if a == Action.DENY),
            (p for p, a in actions.items() if a != Action.OFF),
            actions,
        ),
        **exemption_keys(scopes),
    }


class RecordKeeper:
    """Keeps ``gpu-guard-record`` in the guard's namespace equal to what the state says."""

    def __init__(
        self,
        api: ApiClient,
        engine: Engine,
        view: ClusterView,
        namespace: str,
        *,
        holds: Callable[[], bool] = lambda: True,
        ready: Callable[[], bool] = lambda: True,
        interval: float = DEFAULT_RECORD_INTERVAL,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.api, self.engine, self.view = api, engine, view
        self.holds, self.ready = holds, ready
        self.interval, self.clock = interval, clock
        self.path = RESOURCE_OF[CONFIG_MAP].object_path(namespace, RECORD_NAME)
        self.written: Mapping[str, str] | None = None
        self.writes = 0
        self.unreachable = False
        self.absence_said = False
        """A round failed to reach the API server: said once, until one reaches it again (an
        outage is the live state's to report; a line every round would flood the log)."""

    async def content(self) -> dict[str, str]:
        """Computed in a forked snapshot, as the audit is: 0.26 s at 5,000 nodes of 8 GPU
        pods (bench/bench_record.py) would otherwise stall admission every round."""
        view, configuration = self.view, settings(self.engine, self.clock())
        return await in_snapshot(lambda: record_data(view, configuration))

    async def sync_once(self) -> bool:
        """Recompute; write when the content changed. True when it wrote."""
        data = await self.content()
        if not content_changed(self.written, data) or not self.holds():
            return False
        status, current = await call_json(self.api, "GET", self.path)
        if status == 404:
            if not self.absence_said:
                log.warning(
                    "the record %s is not installed: the API server's policy allows (said once "
                    "until it is)",
                    self.path,
                )
            self.absence_said = True
            return False
        self.absence_said = False
        if status >= 300 or not isinstance(current, dict):
            log.warning("cannot read the record %s: HTTP %s", self.path, status)
            return False
        if not content_changed(current.get("data") or {}, data):
            self.written = current.get("data") or {}
            return False  # another leader wrote the same content: keep its time
        current["data"] = stamped(data, self.clock())
        if not self.holds():
            return False
        status, replaced = await call_json(self.api, "PUT", self.path, current)
        if status >= 300 or not isinstance(replaced, dict):
            log.warning("cannot write the record %s: HTTP %s", self.path, status)
            return False  # 409: a newer version; the next round reads it
        self.written = replaced.get("data") or {}
        self.writes += 1
        return True

    async def run(self) -> None:
        while True:
            if self.ready():
                try:
                    await self.sync_once()
                except asyncio.CancelledError:
                    raise
                except TRANSIENT as exc:
                    if not self.unreachable:
                        log.warning("record not written (said once until it is): %s", exc)
                    self.unreachable = True
                except Exception:
                    log.exception("record not written")
                else:
                    if self.unreachable:
                        log.info("the record's API server is reachable again")
                    self.unreachable = False
            await asyncio.sleep(self.interval)

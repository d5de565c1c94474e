"""Publishes audit reports as wgpolicyk8s.io PolicyReports, in place, never growing.

Each background audit writes one ClusterPolicyReport and one PolicyReport per namespace with
findings, under fixed names: an existing report is replaced (PUT with its resourceVersion), a
new one created, and a report of ours whose namespace has no findings any more is deleted. The
number of report objects tracks the findings, not the number of audits (kyverno#8974).

A cluster without the PolicyReport CRDs answers their paths with a plain-text 404 (not a
Status): the kind is not served, its reports are skipped, and the log says so once (again when
it is served once more), instead of a failed write per report every audit. The audit itself,
its metrics and ``gpu-guard audit`` do not depend on the CRDs.

Among replicas only the leader writes: ``may_write`` (the elector's ``holds``) is asked before
every write, so a replica that lost its lease, or hung past its renew deadline, writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from kubernetes_asyncio.client import ApiClient

from policies.kinds import CLUSTER_POLICY_REPORT, POLICY_REPORT, RESOURCE_OF
from webhook.audit.background import NotLeader
from webhook.render.policyreport import MANAGED_BY_LABEL, MANAGER
from webhook.state.client import call_json

log = logging.getLogger("gpu-guard.reports")

#: The report kinds by name, the cluster-scoped one first.
_REPORTS = {
    RESOURCE_OF[k].kind.kind: RESOURCE_OF[k] for k in (CLUSTER_POLICY_REPORT, POLICY_REPORT)
}


def _collection(kind: str, namespace: str) -> str:
    return _REPORTS[kind].collection_path(namespace)


def _not_served(status: int, body: Any) -> bool:
    """A 404 that is no Status object: the API server does not serve the path at all."""
    return status == 404 and not isinstance(body, dict)


class ReportPublisher:
    def __init__(self, api: ApiClient, may_write: Callable[[], bool] = lambda: True) -> None:
        self.api = api
        self.may_write = may_write
        self.unserved: set[str] = set()
        """The report kinds the cluster did not serve at the last publish (no CRD)."""

    def _served(self, kind: str, served: bool) -> bool:
        """Records whether ``kind`` is served; logs each change once."""
        if not served and kind not in self.unserved:
            self.unserved.add(kind)
            resource = _REPORTS[kind]
            log.warning(
                "%ss not published: the cluster serves no %s/%s %s (install the wgpolicyk8s.io "
                "PolicyReport CRDs); the audit goes on, its findings in /metrics and "
                "`gpu-guard audit`",
                kind,
                resource.kind.group,
                resource.version,
                resource.plural,
            )
        elif served and kind in self.unserved:
            self.unserved.discard(kind)
            log.info("%ss are served again: publishing", kind)
        return served

    async def _write(self, method: str, path: str, body: Any = None) -> int:
        if not self.may_write():
            raise NotLeader(f"not the leader: {method} {path} not sent")
        status, _ = await call_json(self.api, method, path, body)
        return status

    async def publish(self, reports: Sequence[dict[str, Any]]) -> dict[str, int]:
        """Creates or replaces each report; deletes our reports not in ``reports``."""
        counts = {"created": 0, "updated": 0, "deleted": 0, "failed": 0}
        wanted: set[tuple[str, str, str]] = set()
        unserved: set[str] = set()
        for report in reports:
            meta = report.setdefault("metadata", {})
            meta.setdefault("labels", {})[MANAGED_BY_LABEL] = MANAGER
            kind, namespace, name = report["kind"], meta.get("namespace", ""), meta["name"]
            wanted.add((kind, namespace, name))
            if kind in unserved:
                continue
            base = _collection(kind, namespace)
            status, current = await call_json(self.api, "GET", f"{base}/{name}")
            if not self._served(kind, not _not_served(status, current)):
                unserved.add(kind)
                continue
            if status == 404:
                status = await self._write("POST", base, report)
                counts["created" if status < 300 else "failed"] += 1
            elif status < 300:
                meta["resourceVersion"] = current["metadata"]["resourceVersion"]
                status = await self._write("PUT", f"{base}/{name}", report)
                counts["updated" if status < 300 else "failed"] += 1
            else:
                counts["failed"] += 1
            if status >= 300:
                log.warning("could not write %s %s/%s: HTTP %s", kind, namespace, name, status)
        for kind in _REPORTS:
            if kind in unserved:
                continue
            status, listing = await call_json(
                self.api,
                "GET",
                _collection(kind, ""),
                params=[("labelSelector", f"{MANAGED_BY_LABEL}={MANAGER}")],
            )
            served = self._served(kind, not _not_served(status, listing))
            if not served or status >= 300 or not isinstance(listing, dict):
                continue
            for item in listing.get("items") or []:
                meta = item.get("metadata") or {}
                key = (kind, meta.get("namespace", ""), meta.get("name", ""))
                if key not in wanted:
                    path = f"{_collection(kind, key[1])}/{key[2]}"
                    status = await self._write("DELETE", path)
                    counts["deleted" if status < 300 or status == 404 else "failed"] += 1
        return counts

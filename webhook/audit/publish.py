"""Publishes audit reports as OpenReports or wgpolicyk8s.io PolicyReports, in place, never growing.

The format is ``--report-format``: ``openreports`` (openreports.io/v1alpha1 Reports and
ClusterReports), ``wgpolicyk8s`` (the Policy WG's PolicyReports), or ``auto``, which asks the
API server at each publish whether it serves openreports.io's Report and takes OpenReports if
so, the PolicyReports if not: installing the OpenReports CRDs moves the reports over at the
next audit. Our reports in the other format are deleted as stale, so one format holds them.

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

from webhook.audit.election import NotLeader
from webhook.audit.policyreport import FORMATS, MANAGED_BY_LABEL, MANAGER
from webhook.defaults import AUTO_REPORT_FORMAT as AUTO
from webhook.defaults import OPENREPORTS, WGPOLICYK8S
from webhook.state.client import call_json

log = logging.getLogger("gpu-guard.reports")

#: Every report kind of every format by name, each format's cluster-scoped one first.
_REPORTS = {r.kind.kind: r for pair in FORMATS.values() for r in pair}
_FORMAT_OF = {r.kind.kind: name for name, pair in FORMATS.items() for r in pair}


def _collection(kind: str, namespace: str) -> str:
    return _REPORTS[kind].collection_path(namespace)


def _not_served(status: int, body: Any) -> bool:
    """A 404 that is no Status object: the API server does not serve the path at all."""
    return status == 404 and not isinstance(body, dict)


def in_format(report: dict[str, Any], report_format: str) -> dict[str, Any]:
    """A report (either format) as ``report_format``'s kind: the same body, another group."""
    cluster, namespaced = FORMATS[report_format]
    resource = namespaced if report.get("metadata", {}).get("namespace") else cluster
    return {**report, "apiVersion": resource.api_version, "kind": resource.kind.kind}


class ReportPublisher:
    def __init__(
        self,
        api: ApiClient,
        may_write: Callable[[], bool] = lambda: True,
        report_format: str = AUTO,
    ) -> None:
        self.api = api
        self.may_write = may_write
        self.report_format = report_format
        self.chosen: str | None = None
        """The format of the last publish (``auto`` decides at each)."""
        self.unserved: set[str] = set()
        """The report kinds the cluster did not serve at the last publish (no CRD)."""

    async def choose(self) -> str:
        """The format to publish in now; with ``auto``, OpenReports when the API server serves
        its Report (discovery of openreports.io/v1alpha1), else the PolicyReports."""
        chosen = self.report_format
        if chosen == AUTO:
            report = FORMATS[OPENREPORTS][1]
            status, body = await call_json(self.api, "GET", report.discovery_path)
            listed = body.get("resources") if status == 200 and isinstance(body, dict) else None
            served = any(r.get("name") == report.plural for r in listed or [])
            chosen = OPENREPORTS if served else WGPOLICYK8S
        if chosen != self.chosen:
            cluster, namespaced = FORMATS[chosen]
            log.info(
                "publishing the audit as %s/%s %s and %s (--report-format %s)",
                namespaced.kind.group,
                namespaced.version,
                namespaced.plural,
                cluster.plural,
                self.report_format,
            )
            self.chosen = chosen
        return chosen

    def _served(self, kind: str, served: bool) -> bool:
        """Records whether ``kind`` is served; logs each change once."""
        if not served and kind not in self.unserved:
            self.unserved.add(kind)
            resource = _REPORTS[kind]
            log.warning(
                "%ss not published: the cluster serves no %s/%s %s (install the %s CRDs%s); the "
                "audit goes on, its findings in /metrics and `gpu-guard audit`",
                kind,
                resource.kind.group,
                resource.version,
                resource.plural,
                resource.kind.group,
                ", or OpenReports' (openreports.io)" if self.report_format == AUTO else "",
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
        """Creates or replaces each report, in the format ``choose`` picks; deletes our
        reports not in ``reports``, and all of ours in the other format."""
        chosen = await self.choose()
        counts = {"created": 0, "updated": 0, "deleted": 0, "failed": 0}
        wanted: set[tuple[str, str, str]] = set()
        unserved: set[str] = set()
        for report in (in_format(r, chosen) for r in reports):
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
            if _FORMAT_OF[kind] == chosen:
                served = self._served(kind, not _not_served(status, listing))
            else:  # the other format: stale reports to remove, if it is served at all
                served = not _not_served(status, listing)
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

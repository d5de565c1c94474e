"""The background audit: every interval, the whole audit over one consistent snapshot.

The audit is CPU work (about half a second at 5,000 nodes). Run on the event loop it would stall
admission; run in a thread it would read indexes the watches are changing. So it runs in a
forked child: fork gives it a copy-on-write image of the state as it was at that instant, the
parent goes on answering reviews, and the child sends the report back through a pipe. Where fork
is unavailable the audit runs in the loop, between requests.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

from policies.cluster.view import ClusterView
from policies.vocabulary.text import plural
from webhook.audit.election import NotLeader
from webhook.audit.policyreport import policy_reports
from webhook.audit.report import AuditReport, run_audit
from webhook.defaults import DEFAULT_AUDIT_INTERVAL
from webhook.engine import Engine
from webhook.metrics import Metrics

if TYPE_CHECKING:  # only live mode publishes; its caller imports the cluster client
    from webhook.audit.publish import ReportPublisher

log = logging.getLogger("gpu-guard.audit")
T = TypeVar("T")


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


async def in_snapshot(compute: Callable[[], T]) -> T:
    """``compute()`` on a copy-on-write snapshot in a child process (in-loop without fork):
    CPU work over the whole state never stalls admission, and never reads an index a watch is
    changing. Its result must pickle."""
    if not hasattr(os, "fork"):  # pragma: no cover - POSIX has fork
        return compute()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no event loop, no sockets used; report and leave at once
        status = 0
        try:
            os.close(read_end)
            payload = pickle.dumps(compute())
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
        except BaseException:
            status = 1
        finally:
            sys.stdout.flush()
            for handler in logging.getLogger().handlers:
                handler.flush()  # a batching handler's lines would die with os._exit
            os._exit(status)
    os.close(write_end)
    try:
        payload = await asyncio.to_thread(_read_all, read_end)
    finally:
        os.close(read_end)
        _, status = await asyncio.to_thread(os.waitpid, pid, 0)
    if status != 0 or not payload:
        raise RuntimeError(f"the snapshot child failed (wait status {status})")
    result: T = pickle.loads(payload)
    return result


async def audit_snapshot(engine: Engine, view: ClusterView, now: datetime) -> AuditReport:
    """``run_audit`` on a copy-on-write snapshot in a child process (in-loop without fork)."""
    return await in_snapshot(lambda: run_audit(engine, view, now))


class BackgroundAudit:
    """Runs the audit every ``interval`` seconds once the state is ready; publishes reports."""

    def __init__(
        self,
        engine: Engine,
        view: ClusterView,
        metrics: Metrics,
        *,
        publisher: ReportPublisher | None = None,
        interval: float = DEFAULT_AUDIT_INTERVAL,
        ready: Callable[[], bool] = lambda: True,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.engine, self.view, self.metrics = engine, view, metrics
        self.publisher = publisher
        self.interval = interval
        self.ready = ready
        self.clock = clock
        self.last: AuditReport | None = None
        metrics.audit_interval.set(interval)

    async def run_once(self) -> AuditReport:
        """One audit and its publishing; a failure counts in ``gpu_guard_audit_failures``
        (a lease lost on the way is no failure: the new leader audits)."""
        try:
            return await self._audit_and_publish()
        except NotLeader:
            raise
        except Exception:
            self.metrics.audit_failures.inc()
            raise

    async def _audit_and_publish(self) -> AuditReport:
        started = time.perf_counter()
        report = await audit_snapshot(self.engine, self.view, self.clock())
        self.metrics.record_audit_report(
            report.findings, report.gpu_nodes, time.perf_counter() - started, report.now
        )
        if self.publisher is not None:
            counts = await self.publisher.publish(policy_reports(report, include_clean=False))
            log.info("audit: %s; reports %s", plural(len(report.findings), "finding"), counts)
        self.last = report
        self.metrics.audit_succeeded(self.clock())
        return report

    async def run(self) -> None:
        while True:
            if self.ready():
                try:
                    await self.run_once()
                except asyncio.CancelledError:
                    raise
                except NotLeader as exc:
                    log.warning("audit stopped, reports not written: %s", exc)
                    return
                except Exception:
                    log.exception("background audit failed; next try in %.0f s", self.interval)
            await asyncio.sleep(self.interval)

"""Prometheus metrics: what the guard decided, how fast, how fresh its state is, what audit found.

One registry per server (tests run several side by side). Labels are bounded sets: policy ids,
actions, kinds, operations, and node names (as many as the cluster has nodes); never the names
of pods or VMs, which would grow without limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from policies.cluster.kinds import EVICTION, JUDGED_KINDS, NODE
from policies.diagnoses.facts import GpuNodeStatus
from policies.diagnoses.sole_provider import SOLE_PROVIDER
from policies.vocabulary.audit import AuditFinding
from policies.vocabulary.requests import OPERATIONS
from policies.vocabulary.verdicts import Verdict

_KINDS = frozenset(k.kind for k in (*JUDGED_KINDS, EVICTION))


def bounded(kind: str, operation: str) -> tuple[str, str]:
    """Label values from a closed set, whatever a client sends: no unbounded series."""
    return (kind if kind in _KINDS else "other", operation if operation in OPERATIONS else "other")


CHILD_CACHE_LIMIT = 4096
"""Raw (kind, operation) pairs come from clients: past this many, look up without caching."""

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CUT_REASONS = ("headers", "body", "idle")
"""Why a slow client's connection was cut: its request's headers or body took too long to
arrive, or it sent nothing for the idle timeout."""


_ReviewChildren = tuple[Histogram, Counter, str, str]
"""Latency and review-count series of one label set, with its bounded kind and operation."""


class _StateCollector(Collector):
    """Sync status and age per kind, read at scrape time from the live state (if any)."""

    def __init__(self, source: Callable[[], Mapping[str, tuple[bool, float | None]]]) -> None:
        self.source = source

    def collect(self) -> Iterable[GaugeMetricFamily]:
        synced = GaugeMetricFamily(
            "gpu_guard_state_synced", "1 when the kind has synced at least once", labels=["kind"]
        )
        age = GaugeMetricFamily(
            "gpu_guard_state_age_seconds",
            "Seconds since the kind last heard from the API server",
            labels=["kind"],
        )
        for kind, (is_synced, seconds) in sorted(self.source().items()):
            synced.add_metric([kind], 1.0 if is_synced else 0.0)
            if seconds is not None:
                age.add_metric([kind], seconds)
        yield synced
        yield age


class ApiServerFigures(Protocol):
    """What the API-server series read at scrape time (``webhook.state.reconnect``)."""

    @property
    def outages(self) -> int: ...
    @property
    def reachable(self) -> bool: ...
    @property
    def last_recovery(self) -> float | None: ...
    @property
    def last_outage(self) -> float | None: ...


class _ApiCollector(Collector):
    """Outages of the API server the live state watches, and how long the last took to mend."""

    def __init__(self, figures: ApiServerFigures) -> None:
        self.figures = figures

    def collect(self) -> Iterable[CounterMetricFamily | GaugeMetricFamily]:
        f = self.figures
        yield CounterMetricFamily(
            "gpu_guard_api_outages",
            "Times the API server became unavailable (refused, cut, timed out or 503)",
            value=f.outages,
        )
        yield GaugeMetricFamily(
            "gpu_guard_api_reachable",
            "1 while the API server answers, 0 from an outage's start until it answers again",
            value=1.0 if f.reachable else 0.0,
        )
        for name, text, seconds in (
            (
                "gpu_guard_api_last_recovery_seconds",
                "Last outage: seconds from the API server answering again to every kind in sync",
                f.last_recovery,
            ),
            (
                "gpu_guard_api_last_outage_seconds",
                "Last outage: seconds from its start to every kind in sync again",
                f.last_outage,
            ),
        ):
            family = GaugeMetricFamily(name, text)
            if seconds is not None:
                family.add_metric([], seconds)
            yield family


class _ExemptionCollector(Collector):
    """Exemptions that apply and that expired, counted at scrape time: an expiry passes
    between two configuration reloads, so the figure is taken against the clock then."""

    def __init__(self, counts: Callable[[datetime], tuple[int, int]]) -> None:
        self.counts = counts

    def collect(self) -> Iterable[GaugeMetricFamily]:
        active, expired = self.counts(datetime.now(UTC))
        yield GaugeMetricFamily(
            "gpu_guard_exemptions_active",
            "Exemptions that apply now: the global block and each policy's own not expired",
            value=active,
        )
        yield GaugeMetricFamily(
            "gpu_guard_exemptions_expired",
            "Policies' exemptions past their expiry, which no longer apply (remove or renew)",
            value=expired,
        )


class Metrics:
    def config_in_force(self, sha256: str) -> None:
        """The one series of ``gpu_guard_config_info``: the configuration now in force."""
        self.config_info.clear()
        self.config_info.labels(sha256).set(1)

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.reviews = Counter(
            "gpu_guard_admission_reviews",
            "AdmissionReviews answered",
            ["endpoint", "kind", "operation", "allowed"],
            registry=r,
        )
        self.verdicts = Counter(
            "gpu_guard_admission_verdicts",
            "Verdicts given, by policy and action",
            ["policy", "action", "kind", "operation"],
            registry=r,
        )
        self.rejected = Counter(
            "gpu_guard_admission_rejected",
            "Requests refused before evaluation (400, 401, 413, 415)",
            ["status"],
            registry=r,
        )
        self.latency = Histogram(
            "gpu_guard_admission_duration_seconds",
            "Time to answer an AdmissionReview",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.overrides = Counter(
            "gpu_guard_overrides_used",
            "Denials turned into warnings by an override annotation",
            ["policy"],
            registry=r,
        )
        self.mutations = Counter(
            "gpu_guard_mutations_applied", "Mutations applied", ["mutation"], registry=r
        )
        self.config_info = Gauge(
            "gpu_guard_config_info",
            "1 for the sha256 of the configuration in force (webhook/config_digest.py)",
            ["sha256"],
            registry=r,
        )
        self.audit_findings = Gauge(
            "gpu_guard_audit_findings",
            "Findings of the last background audit",
            ["policy", "action"],
            registry=r,
        )
        self.sole_provider_workloads = Gauge(
            "gpu_guard_sole_provider_workloads",
            "Workloads (VMs, running VMIs, GPU pods) that would stop or could not start anywhere "
            "else if this node failed, from the last background audit's sole-provider findings; "
            "no series for a node that strands nothing. One series per such node: bounded by "
            "the cluster's node count",
            ["node"],
            registry=r,
        )
        self.audit_duration = Gauge(
            "gpu_guard_audit_duration_seconds",
            "Duration of the last background audit",
            registry=r,
        )
        self.audit_runs = Counter("gpu_guard_audit_runs", "Background audits run", registry=r)
        self.overloaded = Counter(
            "gpu_guard_admission_overloaded",
            "Reviews answered by failure mode because the guard was over capacity",
            registry=r,
        )
        self.connections_refused = Counter(
            "gpu_guard_connections_refused",
            "Connections closed at once because --max-connections were open and busy",
            registry=r,
        )
        self.connections_evicted = Counter(
            "gpu_guard_connections_evicted",
            "Stalled handshakes and idle connections closed to make room at --max-connections",
            registry=r,
        )
        self.connections_open = Gauge(
            "gpu_guard_connections_open", "Client connections open", registry=r
        )
        self.connections_cut = Counter(
            "gpu_guard_connections_cut",
            "Connections closed for a client too slow: headers or body not received in time, "
            "or idle past --idle-timeout",
            ["reason"],
            registry=r,
        )
        for reason in CUT_REASONS:  # every reason shown from the start, at 0
            self.connections_cut.labels(reason)
        self.leader = Gauge(
            "gpu_guard_leader",
            "1 while this replica is the one that runs the background audit and writes the "
            "PolicyReports (it holds the leader-election Lease, or runs without election), else 0",
            registry=r,
        )
        self.leader_transitions = Counter(
            "gpu_guard_leader_transitions",
            "Times this replica became the leader",
            registry=r,
        )
        self._add_operations_metrics()

        self._review_children: dict[tuple[str, str, str, bool], _ReviewChildren] = {}
        """The series a review's labels select, looked up once (``labels()`` costs a lock and a
        tuple build per call, on every review)."""

    def _add_operations_metrics(self) -> None:
        """What the alerts of manifests/overlays/monitoring need beyond the series above.

        Audit-derived series exist on the replica that audits (the leader) only; one that loses
        the Lease drops them (``forget_audit``), one that hangs keeps its last values: the alerts
        take the latest auditor's."""
        r = self.registry
        self.ready = Gauge(
            "gpu_guard_ready",
            "1 when /readyz answers 200 (state synced, not shutting down)",
            registry=r,
        )
        self.certificate_expiry = Gauge(
            "gpu_guard_certificate_expiry_timestamp_seconds",
            "notAfter of the serving certificate the server serves (updated on every reload)",
            registry=r,
        )
        self.audit_interval = Gauge(
            "gpu_guard_audit_interval_seconds",
            "Period of the background audit (on every replica that may run it)",
            registry=r,
        )
        self.audit_last_success = Gauge(
            "gpu_guard_audit_last_success_timestamp_seconds",
            "When the last background audit (and its report publishing) succeeded",
            registry=r,
        )
        self.audit_failures = Counter(
            "gpu_guard_audit_failures", "Background audits that raised", registry=r
        )
        self.audit_findings_by_severity = Gauge(
            "gpu_guard_audit_findings_by_severity",
            "Findings of the last background audit, by policy and severity",
            ["policy", "severity"],
            registry=r,
        )
        self.audit_node_findings = Gauge(
            "gpu_guard_audit_node_findings",
            "Findings of the last background audit about a Node, by policy, action and node "
            "(recovery trap, NotReady, operands, sole provider, ...)",
            ["policy", "action", "node"],
            registry=r,
        )
        self.gpu_nodes = Gauge(
            "gpu_guard_gpu_nodes", "GPU nodes in the last background audit", registry=r
        )
        self.gpu_node_not_ready_since = Gauge(
            "gpu_guard_gpu_node_not_ready_since_timestamp_seconds",
            "Since when a GPU node is NotReady (its Ready condition's lastTransitionTime; without "
            "one, the first audit that saw it NotReady); no series for a Ready node",
            ["node"],
            registry=r,
        )
        self.gpu_operand_pods_unhealthy = Gauge(
            "gpu_guard_gpu_operand_pods_unhealthy",
            "GPU Operator operand pods in Error, CrashLoopBackOff, Terminating, ... per GPU node "
            "(NotReady nodes included); no series for a node whose operands are all fine",
            ["node"],
            registry=r,
        )
        self._not_ready_seen: dict[str, float] = {}
        """First audit time each NotReady GPU node without a Ready condition was seen."""
        self._exemptions_watched = False

    def watch_state(self, source: Callable[[], Mapping[str, tuple[bool, float | None]]]) -> None:
        self.registry.register(_StateCollector(source))

    def watch_api(self, figures: ApiServerFigures) -> None:
        self.registry.register(_ApiCollector(figures))

    def watch_exemptions(self, counts: Callable[[datetime], tuple[int, int]]) -> None:
        if not self._exemptions_watched:  # a server started again on the same metrics
            self.registry.register(_ExemptionCollector(counts))
            self._exemptions_watched = True

    def record_review(
        self,
        endpoint: str,
        kind: str,
        operation: str,
        allowed: bool,
        seconds: float,
        verdicts: Iterable[Verdict] = (),
    ) -> None:
        key = (endpoint, kind, operation, allowed)
        children = self._review_children.get(key)
        if children is None:
            kind, operation = bounded(kind, operation)
            children = (
                self.latency.labels(endpoint),
                self.reviews.labels(endpoint, kind, operation, str(allowed).lower()),
                kind,
                operation,
            )
            if len(self._review_children) < CHILD_CACHE_LIMIT:
                self._review_children[key] = children
        latency, reviews, kind, operation = children
        latency.observe(seconds)
        reviews.inc()
        for verdict in verdicts:
            self.verdicts.labels(verdict.policy, verdict.action.label, kind, operation).inc()

    def record_audit(self, verdicts: Iterable[Verdict], seconds: float) -> None:
        counts: dict[tuple[str, str], int] = {}
        stranding: dict[str, int] = {}
        for verdict in verdicts:
            key = (verdict.policy, verdict.action.label)
            counts[key] = counts.get(key, 0) + 1
            if verdict.policy == SOLE_PROVIDER and verdict.resource.kind == NODE.kind:
                stranding[verdict.resource.name] = len(verdict.workloads)
        self.audit_findings.clear()
        for (policy, action), count in counts.items():
            self.audit_findings.labels(policy, action).set(count)
        self.sole_provider_workloads.clear()  # a node no longer a sole provider loses its series
        for node, workloads in stranding.items():
            self.sole_provider_workloads.labels(node).set(workloads)
        self.audit_duration.set(seconds)
        self.audit_runs.inc()

    def record_audit_report(
        self,
        findings: Sequence[AuditFinding],
        gpu_nodes: Sequence[GpuNodeStatus],
        seconds: float,
        now: datetime,
    ) -> None:
        """``record_audit`` plus what only the whole report says: severities, the findings
        about each node, and the GPU nodes' health from the audit's overview."""
        self.record_audit([f.verdict for f in findings], seconds)
        severities: dict[tuple[str, str], int] = {}
        on_nodes: dict[tuple[str, str, str], int] = {}
        for finding in findings:
            verdict = finding.verdict
            key = (verdict.policy, finding.severity.label)
            severities[key] = severities.get(key, 0) + 1
            if verdict.resource.kind == NODE.kind:
                node_key = (verdict.policy, verdict.action.label, verdict.resource.name)
                on_nodes[node_key] = on_nodes.get(node_key, 0) + 1
        _replace(self.audit_findings_by_severity, severities.items())
        _replace(self.audit_node_findings, on_nodes.items())
        self.gpu_nodes.set(len(gpu_nodes))
        since: dict[tuple[str], float] = {}
        first_seen: dict[str, float] = {}
        for node in gpu_nodes:
            if not node.not_ready:
                continue
            if node.since is not None:
                since[(node.name,)] = node.since.timestamp()
            else:  # no Ready condition ever: NotReady at least since the first audit that saw it
                first_seen[node.name] = self._not_ready_seen.get(node.name, now.timestamp())
                since[(node.name,)] = first_seen[node.name]
        self._not_ready_seen = first_seen
        _replace(self.gpu_node_not_ready_since, since.items())
        _replace(
            self.gpu_operand_pods_unhealthy,
            [
                ((node.name,), sum(count for _, count in node.operand_problems))
                for node in gpu_nodes
                if node.operand_problems
            ],
        )

    def audit_succeeded(self, when: datetime) -> None:
        self.audit_last_success.set(when.timestamp())

    def forget_audit(self) -> None:
        """A replica that stops leading stops auditing: its last findings would go stale, so
        they are dropped (the new leader's are the ones to read)."""
        for gauge in (
            self.audit_findings,
            self.sole_provider_workloads,
            self.audit_findings_by_severity,
            self.audit_node_findings,
            self.gpu_node_not_ready_since,
            self.gpu_operand_pods_unhealthy,
        ):
            gauge.clear()
        self._not_ready_seen = {}

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def _replace(gauge: Gauge, values: Iterable[tuple[tuple[str, ...], float]]) -> None:
    """The gauge's series become exactly these (label values, value): a label set no longer
    found loses its series."""
    gauge.clear()
    for labels, value in values:
        gauge.labels(*labels).set(value)

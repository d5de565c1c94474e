"""``gpu-guard audit``: the engine over everything that exists, plus the diagnosis, as one report.

Durations are measured from the objects' own timestamps to ``now`` (``--now``, else the clock),
so an audit of a saved dump reads the same tomorrow as today.

``run_audit`` merges two sources: the admission policies' audit verdicts (``Engine.audit``) and
the audit-only diagnoses of ``policies.diagnosis`` (recovery trap, NotReady GPU nodes, stuck VMs,
case-mismatched names, unhealthy operands). A diagnosis that explains a policy's verdict on the
same VM and device enriches that verdict (chain, remediation, since) instead of adding a second
finding. ``AuditReport.to_json`` is the JSON contract (``-o json``/``yaml``); every other form
is rendered by ``webhook.render``, which the in-cluster server never imports.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from policies.diagnosis import (
    CLUSTER,
    ClusterDiagnosis,
    Diagnosis,
    GpuNodeStatus,
    Link,
    Severity,
    Track,
    diagnose,
    severity_of,
    untracked,
)
from policies.model import Action, ObjectRef, Verdict
from policies.text import format_duration, rfc3339
from policies.view import ClusterView
from webhook.config import GuardConfig
from webhook.engine import Engine

__all__ = [
    "AuditFinding",
    "AuditReport",
    "Track",
    "exit_code",
    "parse_now",
    "run_audit",
    "untracked",
]

log = logging.getLogger("gpu-guard.audit")
#: The id under which a diagnosis that raised is reported (the policies' audits still count).
DIAGNOSIS_FAILED = "audit-diagnosis"


@dataclass(frozen=True)
class AuditFinding:
    """A verdict as the audit reports it: with a severity and its causal chain as a tree."""

    verdict: Verdict
    severity: Severity
    chain: Link
    """Root: the resource itself; below it what explains it (``verdict.chain``, flattened)."""

    def to_json(self, now: datetime) -> dict[str, Any]:
        entry = self.verdict.to_json()
        entry["severity"] = self.severity.label
        if self.verdict.since is not None:
            entry["durationSeconds"] = max(0, int((now - self.verdict.since).total_seconds()))
            entry["duration"] = format_duration(now - self.verdict.since)
        return entry


@dataclass(frozen=True)
class AuditReport:
    now: datetime
    findings: tuple[AuditFinding, ...]
    gpu_nodes: tuple[GpuNodeStatus, ...] = ()
    namespaces: tuple[str, ...] = ()
    """Namespaces whose objects were audited (VMs, VMIs, KubeVirt CRs, findings): one
    PolicyReport each, an empty one when clean, so a background audit updates them in place."""

    @property
    def verdicts(self) -> tuple[Verdict, ...]:
        return tuple(f.verdict for f in self.findings)

    @property
    def worst(self) -> Action:
        return max((f.verdict.action for f in self.findings), default=Action.OFF)

    def counts(self) -> dict[str, int]:
        return {
            a.label: sum(1 for f in self.findings if f.verdict.action == a)
            for a in (Action.DENY, Action.WARN, Action.AUDIT)
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "now": rfc3339(self.now),
            "summary": self.counts(),
            "findings": [f.to_json(self.now) for f in self.findings],
            "gpuNodes": [_gpu_node_json(n, self.now) for n in self.gpu_nodes],
        }


def _gpu_node_json(node: GpuNodeStatus, now: datetime) -> dict[str, Any]:
    out: dict[str, Any] = {"name": node.name, "mode": node.mode, "health": node.health}
    if node.since is not None:
        out["since"] = rfc3339(node.since)
        out["duration"] = format_duration(now - node.since)
    out["gpus"] = list(node.gpus)
    out["resources"] = dict(node.resources)
    out["operands"] = {"ok": node.operands_ok, **dict(node.operand_problems)}
    out["gpuPods"] = node.gpu_pods
    out["vmsWaiting"] = node.vms_waiting
    out["recoveryTrap"] = node.trapped
    return out


def parse_now(text: str | None) -> datetime:
    """``--now``: an RFC 3339 time with a zone; None means the clock."""
    if text is None:
        return datetime.now(UTC)
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--now: not an RFC 3339 time: {text!r}") from None
    if value.tzinfo is None:
        raise ValueError(f"--now: give a zone, e.g. {text}Z")
    return value


# --- the audit ------------------------------------------------------------------------------------


def _device_of(verdict: Verdict) -> str:
    """The deviceName a passthrough-without-ready-provider message starts with."""
    return verdict.message.split(" ", 1)[0]


def merge(
    verdicts: Iterable[Verdict], diagnoses: Iterable[Diagnosis], config: GuardConfig
) -> list[AuditFinding]:
    """Policy verdicts and diagnoses as one list of findings, each problem reported once.

    A diagnosis with ``enriches`` set explains the verdict of that policy on the same resource
    and device: the verdict keeps its id, action and message and takes the diagnosis' chain,
    remediation and (when it had none) since. A diagnosis nothing matched stands on its own,
    with the configured action for its id if any, and is skipped in exempt namespaces.
    """
    diagnoses = list(diagnoses)
    explaining = {(d.enriches, d.resource, d.device): d for d in diagnoses if d.enriches}
    used: set[tuple[str, ObjectRef, str]] = set()
    out: list[AuditFinding] = []
    for verdict in verdicts:
        key = (verdict.policy, verdict.resource, _device_of(verdict))
        found = explaining.get(key)
        if found is not None:
            used.add(key)
            verdict = replace(
                verdict,
                chain=found.chain.flatten(),
                remediation=found.remediation,
                since=verdict.since if verdict.since is not None else found.since,
            )
            chain = found.chain
        else:
            root = f"{verdict.resource.kind} {verdict.resource}"
            chain = Link.linear(root, verdict.chain)
        out.append(AuditFinding(verdict, severity_of(verdict.policy, verdict.action), chain))
    for diagnosis in diagnoses:
        if (
            diagnosis.enriches
            and (diagnosis.enriches, diagnosis.resource, diagnosis.device) in used
        ):
            continue
        if diagnosis.resource.namespace in config.exempt_namespaces:
            continue
        action = config.actions.get(diagnosis.policy, diagnosis.action)
        if action == Action.OFF:
            continue
        out.append(AuditFinding(diagnosis.verdict(action), diagnosis.severity, diagnosis.chain))
    return out


def _sort_key(f: AuditFinding) -> tuple[int, int, str, str, str, str]:
    v = f.verdict
    return (-v.action, -f.severity, v.policy, v.resource.kind, str(v.resource), v.message)


def _audited_namespaces(
    view: ClusterView, findings: Sequence[AuditFinding], config: GuardConfig
) -> tuple[str, ...]:
    names = {vm.namespace for vm in view.vms()}
    names.update(vmi.namespace for vmi in view.vmis())
    names.update(kv.namespace for kv in view.kubevirts())
    names.update(f.verdict.resource.namespace for f in findings)
    names.discard("")
    return tuple(sorted(names - config.exempt_namespaces))


def run_audit(
    engine: Engine, view: ClusterView, now: datetime, track: Track = untracked
) -> AuditReport:
    """Every policy's audit and every diagnosis over one snapshot; ``track`` shows progress."""
    verdicts: list[Verdict] = []
    for _ in track(["policies"], "policies"):
        verdicts.extend(engine.audit(view))
    try:
        diagnosis: ClusterDiagnosis = diagnose(view, now, track)
    except Exception:
        # Like a policy that raises: say so, and keep what the policies found.
        log.exception("the diagnosis raised during the audit")
        diagnosis = ClusterDiagnosis((), ())
        verdicts.append(
            Verdict(
                policy=DIAGNOSIS_FAILED,
                action=Action.WARN,
                resource=CLUSTER,
                message="gpu-guard could not evaluate this policy: the diagnosis raised, see "
                "the log; the policies' findings are complete",
            )
        )
    findings = sorted(merge(verdicts, diagnosis.findings, engine.config), key=_sort_key)
    return AuditReport(
        now,
        tuple(findings),
        diagnosis.gpu_nodes,
        _audited_namespaces(view, findings, engine.config),
    )


def exit_code(verdicts: Sequence[Verdict]) -> int:
    return 1 if any(v.action == Action.DENY for v in verdicts) else 0

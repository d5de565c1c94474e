"""``gpu-guard audit``: the engine over everything that exists, as one report.

Durations are measured from the objects' own timestamps to ``now`` (``--now``, else the clock),
so an audit of a saved dump reads the same tomorrow as today.

``Engine.audit`` evaluates: the admission policies' audits and the diagnoses of
``policies.diagnoses`` (recovery trap, NotReady GPU nodes, stuck VMs, DRA claims on NotReady
nodes, GPUs managed twice, case-mismatched names, unhealthy operands), with the configuration
applied once. ``run_audit`` only orders what it found and adds the GPU nodes' overview (DRA GPU
nodes too, with ``draDevices``) and the audited namespaces. ``AuditReport.to_json`` is the
JSON contract (``-o json``/``yaml``); every other form is rendered by ``webhook.render``, which
the in-cluster server never imports.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from policies.cluster.conditions import Condition
from policies.cluster.coverage import kind_names
from policies.cluster.view import AuditView, ClusterView
from policies.diagnoses.facts import GpuNodeStatus, gpu_node_statuses
from policies.vocabulary.audit import AuditFinding, Link, Track, untracked
from policies.vocabulary.requests import CLUSTER, GroupKind
from policies.vocabulary.text import format_duration, rfc3339
from policies.vocabulary.verdicts import Action, Severity, Verdict
from webhook.config import EXEMPTION_EXPIRED, Exemptions, GuardConfig, expired_message
from webhook.coverage import Freshness, export_command, export_hint
from webhook.engine import Engine

__all__ = [
    "AuditFinding",
    "AuditReport",
    "Track",
    "check_now_after_state",
    "exit_code",
    "parse_now",
    "run_audit",
    "untracked",
]

log = logging.getLogger("gpu-guard.audit")


@dataclass(frozen=True)
class AuditReport:
    now: datetime
    findings: tuple[AuditFinding, ...]
    gpu_nodes: tuple[GpuNodeStatus, ...] = ()
    namespaces: tuple[str, ...] = ()
    """Namespaces whose objects were audited (VMs, VMIs, KubeVirt CRs, findings): one
    PolicyReport each, an empty one when clean, so a background audit updates them in place."""
    unseen: tuple[tuple[GroupKind, tuple[str, ...]], ...] = ()
    """Each kind the state never saw, with the policies and diagnoses left out for need of it:
    every output lists these first."""

    def not_judged(self) -> list[str]:
        """One line per unseen kind: what was left out, and the export that fills the gap."""
        return [
            f"not judged: the state has no {kind_names([kind])} ({export_hint([kind])}); "
            f"left out: {', '.join(ids)}"
            for kind, ids in self.unseen
        ]

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
        unseen = {"notJudged": [_unseen_json(k, ids) for k, ids in self.unseen]}
        return {
            **(unseen if self.unseen else {}),
            "now": rfc3339(self.now),
            "summary": self.counts(),
            "findings": [f.to_json(self.now) for f in self.findings],
            "gpuNodes": [_gpu_node_json(n, self.now) for n in self.gpu_nodes],
        }


def _unseen_json(kind: GroupKind, ids: tuple[str, ...]) -> dict[str, Any]:
    return {"kind": str(kind), "export": export_command([kind]), "leftOut": list(ids)}


def _gpu_node_json(node: GpuNodeStatus, now: datetime) -> dict[str, Any]:
    out: dict[str, Any] = {"name": node.name, "mode": node.mode, "health": node.health}
    if node.since is not None:
        out["since"] = rfc3339(node.since)
        out["duration"] = format_duration(now - node.since)
    out["gpus"] = list(node.gpus)
    out["resources"] = dict(node.resources)
    if node.dra_devices:  # only DRA nodes: the device-plugin overview reads as it always did
        out["draDevices"] = list(node.dra_devices)
    out["operands"] = {"ok": node.operands_ok, **dict(node.operand_problems)}
    out["gpuPods"] = node.gpu_pods
    out["vmsWaiting"] = node.vms_waiting
    out["recoveryTrap"] = node.trapped
    return out


def parse_now(text: str | None) -> datetime:
    """``--now``: an RFC 3339 date-time (``T`` or ``t`` or a space between date and time, any
    number of fractional digits, ``Z``/``z`` or an offset); None means the clock. A text that is
    not one is told what it lacks."""
    if text is None:
        return datetime.now(UTC)
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(f"--now: {_what_is_wrong(text)}")
    year, month, day, hour, minute, second = (int(match[i]) for i in range(1, 7))
    fraction = int((match[7] or "0")[:6].ljust(6, "0"))
    if second == 60:  # a leap second: the last instant of its minute, as datetime has no :60
        second, fraction = 59, 999_999
    try:
        return datetime(year, month, day, hour, minute, second, fraction, _zone(match[8]))
    except ValueError as exc:
        raise ValueError(f"--now: not a valid time: {text!r} ({exc})") from None


_DATE = r"(\d{4})-(\d{2})-(\d{2})"
_TIME = r"(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
_ZONE = r"([Zz]|[+-]\d{2}:\d{2})"
_RFC3339 = re.compile(f"{_DATE}[Tt ]{_TIME}{_ZONE}")


def _zone(text: str) -> timezone:
    if text in ("Z", "z"):
        return UTC
    hours, minutes = int(text[1:3]), int(text[4:6])
    if hours > 23 or minutes > 59:
        raise ValueError(f"offset {text} out of range")
    offset = timedelta(hours=hours, minutes=minutes)
    return timezone(-offset if text[0] == "-" else offset)


def _what_is_wrong(text: str) -> str:
    """What an almost-RFC 3339 text lacks, with the nearest text that would do."""
    if re.fullmatch(f"{_DATE}{_ZONE}?", text):
        return f"{text!r} is a date alone: give a time and a zone too, e.g. {text[:10]}T00:00:00Z"
    if re.fullmatch(f"{_DATE}[Tt ]{_TIME}", text):
        return f"give a zone, e.g. {text}Z (UTC) or {text}+02:00"
    if re.fullmatch(f"{_DATE}[Tt ](\\d{{2}}):(\\d{{2}}){_ZONE}?", text):
        return f"give the seconds too, e.g. {text[:16]}:00Z"
    return f"not an RFC 3339 time: {text!r} (e.g. 2026-10-30T12:00:00Z or ...T14:00:00+02:00)"


def check_now_after_state(now: datetime, view: ClusterView) -> None:
    """A given ``--now`` before what the state itself records would measure every duration as
    zero ("for 0 minutes"): refused, naming the newest time the state holds."""
    newest = newest_timestamp(view)
    if newest is not None and now < newest[0]:
        when, where = newest
        raise ValueError(
            f"--now {rfc3339(now)} is earlier than the state's newest timestamp, "
            f"{rfc3339(when)} ({where}): give a later --now, or none for the clock"
        )


def newest_timestamp(view: ClusterView) -> tuple[datetime, str] | None:
    """The latest condition time of any node, VM or VMI (what durations are measured from), and
    whose it is."""
    subjects: list[tuple[str, tuple[Condition, ...]]] = [
        (f"Node {n.name}", n.conditions) for n in view.nodes()
    ]
    subjects += [(f"VirtualMachine {vm.key}", vm.conditions) for vm in view.vms()]
    subjects += [(f"VirtualMachineInstance {vmi.key}", vmi.conditions) for vmi in view.vmis()]
    times = [
        (when, f"{who} {c.type} lastTransitionTime")
        for who, conditions in subjects
        for c in conditions
        if (when := c.last_transition) is not None
    ]
    return max(times, key=lambda t: t[0], default=None)


# --- the audit ------------------------------------------------------------------------------------


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
    engine: Engine,
    view: ClusterView,
    now: datetime,
    track: Track = untracked,
    coverage: Freshness | None = None,
) -> AuditReport:
    """Every policy's audit and every diagnosis over one snapshot; ``track`` shows progress;
    what needs a kind ``coverage`` never saw is left out and listed."""
    audit = engine.audit(view, now, track, coverage)
    expired = [_expired(policy_id, e) for policy_id, e in engine.config.expired_exemptions(now)]
    findings = tuple(sorted([*audit.findings, *expired], key=_sort_key))
    return AuditReport(
        now,
        findings,
        _gpu_nodes(audit.view),
        _audited_namespaces(view, findings, engine.config),
        tuple(audit.unseen.items()),
    )


def _expired(policy_id: str, exemptions: Exemptions) -> AuditFinding:
    """A policy's exemption past its expiry: judged again from then on, said once per audit."""
    verdict = Verdict(
        EXEMPTION_EXPIRED,
        Action.WARN,
        CLUSTER,
        expired_message(policy_id, exemptions),
        since=exemptions.expires,
    )
    return AuditFinding(verdict, Severity.of_action(Action.WARN), Link.linear("configuration", ()))


def _gpu_nodes(view: AuditView) -> tuple[GpuNodeStatus, ...]:
    """The overview, from the facts the diagnoses used; none if they cannot be had (the
    audit-diagnosis finding already says the diagnoses raised)."""
    try:
        return gpu_node_statuses(view)
    except Exception:
        log.exception("the GPU nodes' overview raised during the audit")
        return ()


def exit_code(verdicts: Sequence[Verdict]) -> int:
    return 1 if any(v.action == Action.DENY for v in verdicts) else 0

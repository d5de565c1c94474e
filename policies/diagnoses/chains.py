"""Chains of causes in words: durations and stamps, a node's health as links, the scheduler's
refusal. Every diagnosis tells time and node state the same way through these."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from policies.cluster.conditions import Condition
from policies.cluster.dra import NVIDIA_DRIVER
from policies.cluster.health import UNHEALTHY_TAINTS
from policies.cluster.pciids import NFD_LABEL_PREFIX, NVIDIA_VENDOR
from policies.cluster.pods import PodInfo
from policies.cluster.workload import GPU_PRESENT_LABEL
from policies.diagnoses.facts import NodeFacts, describe_device, kubelet_cause
from policies.vocabulary.audit import Link
from policies.vocabulary.text import few, plural, split_duration

SCHEDULER_MESSAGE_LIMIT = 300


# --- time -----------------------------------------------------------------------------------------


def age(delta: timedelta) -> str:
    """ "112 days 8 hours", "5 hours 3 minutes", "12 minutes": days and hours of a duration."""
    days, hours, minutes = split_duration(delta.total_seconds())
    if days:
        return plural(days, "day") + (f" {plural(hours, 'hour')}" if hours else "")
    if hours:
        return plural(hours, "hour") + (f" {plural(minutes, 'minute')}" if minutes else "")
    return plural(minutes, "minute")


def stamp(when: datetime) -> str:
    """ "2026-07-10 03:12 UTC" """
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def since_text(when: datetime, now: datetime) -> str:
    """ "since 2026-07-10 03:12 UTC (112 days 8 hours)" """
    return f"since {stamp(when)} ({age(now - when)})"


def for_how_long(when: datetime | None, now: datetime) -> str:
    """ " for 112 days 8 hours (since 2026-07-10 03:12 UTC)", or "" when it is not known."""
    return f" for {age(now - when)} (since {stamp(when)})" if when is not None else ""


# --- nodes ----------------------------------------------------------------------------------------


def operand_summary(pods: Sequence[PodInfo]) -> list[str]:
    """ "3 GPU operand pods Terminating: gpu-operator/a, gpu-operator/b and gpu-operator/c"."""
    by_problem: dict[str, list[str]] = {}
    for pod in pods:
        by_problem.setdefault(pod.problem, []).append(pod.key)
    return [
        f"{plural(len(keys), 'GPU operand pod')} {problem}: {few(keys)}"
        for problem, keys in sorted(by_problem.items())
    ]


def condition_text(ready: Condition | None) -> str:
    """ "Ready=Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)" """
    if ready is None:
        return "no Ready condition"
    detail = ": ".join(p for p in (ready.reason, ready.message) if p)
    return f"Ready={ready.status or '?'}" + (f" ({detail})" if detail else "")


def ready_text(f: NodeFacts, now: datetime) -> str:
    """ "NotReady since 2026-07-10 03:12 UTC (112 days 8 hours): Ready=Unknown (...)" """
    ready = f.ready_condition
    head = "NotReady"
    if ready is not None and ready.last_transition is not None:
        head += f" {since_text(ready.last_transition, now)}"
    return f"{head}: {condition_text(ready)}"


def _taint_text(f: NodeFacts) -> str:
    effects: dict[str, list[str]] = {}
    for taint in f.node.taints:
        if taint.key in UNHEALTHY_TAINTS:
            effects.setdefault(taint.key, []).append(taint.effect)
    parts = [f"{key} ({', '.join(sorted(e))})" for key, e in sorted(effects.items())]
    return f"tainted {'; '.join(parts)}: nothing new schedules there" if parts else ""


def _swap_links(f: NodeFacts, prefix: str, silent: bool) -> list[Link]:
    swap = f.node.swap_capacity
    if swap is None:
        return []
    if swap > 0:
        return [Link(f"{prefix}swap is on: kubelet reports {swap / 2**30:.1f} GiB of swap")]
    if silent:
        return [
            Link(
                f"{prefix}swap not ruled out: a kubelet that cannot start never reports swap "
                "(the 0 it last reported predates the outage)"
            )
        ]
    return [Link(f"{prefix}swap capacity 0 (reported by kubelet)")]


def _gpu_label_links(f: NodeFacts, prefix: str, stale: str) -> list[Link]:
    out: list[Link] = []
    if f.nfd_gpu_labels:
        out.append(Link(f"{prefix}NFD GPU labels still there{stale}: {few(f.nfd_gpu_labels, 2)}"))
    else:
        out.append(
            Link(f"{prefix}NFD GPU labels gone (no {NFD_LABEL_PREFIX}*{NVIDIA_VENDOR}* label)")
        )
    present = f.node.labels.get(GPU_PRESENT_LABEL)
    if present is None:
        out.append(
            Link(f"{prefix}{GPU_PRESENT_LABEL} missing: the GPU Operator withdrew its operands")
        )
    elif present != "true":
        out.append(Link(f"{prefix}{GPU_PRESENT_LABEL}={present}"))
    return out


def node_links(f: NodeFacts, now: datetime, prefix: str = "") -> Link:
    """The node's health as a link: NotReady (or cordoned, tainted) with why and what followed."""
    if not f.not_ready:
        return Link(f"{prefix}{f.health.describe()}")
    cause = kubelet_cause(f.node)
    silent = cause.kind in ("silent", "missing")
    stale = " (stale: kubelet's last report)" if silent else ""
    children: list[Link] = [Link(prefix + cause.text), *_swap_links(f, prefix, silent)]
    taints = _taint_text(f)
    if taints:
        children.append(Link(prefix + taints))
    if f.node.unschedulable:
        children.append(Link(f"{prefix}cordoned (spec.unschedulable)"))
    if f.has_nvidia_gpu or f.is_gpu_node:
        children += _gpu_label_links(f, prefix, stale)
    for line in operand_summary(f.operand_problems):
        children.append(Link(prefix + line))
    if f.nvidia_allocatable:
        listed = ", ".join(f"{r}: {n}" for r, n in f.nvidia_allocatable)
        children.append(Link(f"{prefix}allocatable still lists {listed}{stale}"))
    if f.dra_devices:
        devices = few([describe_device(d) for d in f.dra_devices], 2)
        children.append(
            Link(
                f"{prefix}ResourceSlices of {NVIDIA_DRIVER} still publish {devices}: no "
                "provider while the node is NotReady"
            )
        )
    if f.gpu_pods:
        keys = [p.label for p in f.gpu_pods]
        children.append(Link(f"{prefix}{plural(len(keys), 'GPU pod')} still bound: {few(keys)}"))
    return Link(prefix + ready_text(f, now), tuple(children))


# --- the scheduler --------------------------------------------------------------------------------


def scheduler_link(condition: Condition | None) -> list[Link]:
    """What the scheduler said when it refused the VM's pod, without the preemption part."""
    if condition is None or not condition.message:
        return []
    message = condition.message.split(" preemption:", 1)[0].rstrip(". ")
    if len(message) > SCHEDULER_MESSAGE_LIMIT:
        message = message[: SCHEDULER_MESSAGE_LIMIT - 3] + "..."
    return [Link(f"scheduler: {message}")]

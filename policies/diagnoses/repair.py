"""A node's repair in a safe order, with its name in the commands: relabel before kubelet returns
(the recovery trap), fix and restart kubelet, uncordon, and only then give the GPUs back."""

from __future__ import annotations

from collections.abc import Sequence

from policies.cluster.health import UNHEALTHY_TAINTS
from policies.cluster.workload import WORKLOAD_LABEL, relabel_before_return
from policies.diagnoses.facts import NodeFacts, kubelet_cause
from policies.vocabulary.text import few


def _fix_step(f: NodeFacts) -> str:
    n = f.name
    cause = kubelet_cause(f.node)
    if cause.kind == "swap":
        return f"on {n}: swapoff -a, then comment swap out of /etc/fstab so it stays off"
    if cause.kind == "network":
        return (
            f"on {n}: bring the container network up (the CNI pod on {n}, /etc/cni/net.d); "
            "journalctl -u kubelet -b says what kubelet waits for"
        )
    if cause.kind == "runtime":
        return f"on {n}: systemctl status containerd; journalctl -u kubelet -b; fix what they say"
    return (
        f"on {n}: find why kubelet is down: systemctl status kubelet; journalctl -u kubelet -b "
        "(if it says swap is not supported: swapoff -a and comment swap out of /etc/fstab)"
    )


def _relabel_step(f: NodeFacts) -> str:
    return relabel_before_return(f.name, f.mode)


def _hand_back_step(f: NodeFacts, waiting: Sequence[str]) -> str:
    n = f.name
    return (
        f"when nothing on {n} uses its GPUs (nvidia-smi there lists no processes), give them "
        f"back to {few(list(waiting))}: kubectl label node {n} {WORKLOAD_LABEL}={f.mode} "
        f"--overwrite (and kubectl label node {n} {f.rebind_pin}- if you pinned it)"
    )


def repair_steps(f: NodeFacts, waiting: Sequence[str] = ()) -> tuple[str, ...]:
    """The node's repair, in a safe order; ``waiting`` VMs get the GPU back at the end."""
    n = f.name
    steps: list[str] = []
    if f.trapped:
        steps.append(_relabel_step(f))
    if f.not_ready:
        steps.append(_fix_step(f))
        steps.append(
            f"on {n}: systemctl restart kubelet, then watch kubectl get node {n} -w until Ready"
        )
    if f.node.unschedulable:
        steps.append(f"kubectl uncordon {n}")
    if not f.not_ready:
        for taint in f.node.taints:
            if taint.key in UNHEALTHY_TAINTS:
                steps.append(f"kubectl taint node {n} {taint.key}:{taint.effect}-")
    if f.trapped and waiting:
        steps.append(_hand_back_step(f, waiting))
    return tuple(steps)

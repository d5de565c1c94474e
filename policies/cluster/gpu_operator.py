"""The NVIDIA GPU Operator's ClusterPolicy: sandbox workloads, the default workload mode, and which
of several ClusterPolicies the operator acts on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from policies.vocabulary.fields import get_bool, get_map, get_str, get_time
from policies.vocabulary.requests import JSONObject

VGPU_DM_PATH = "spec.vgpuDeviceManager"

#: ``status.state`` the GPU Operator writes on every ClusterPolicy but the one it uses.
IGNORED_STATE = "ignored"


@dataclass(frozen=True, slots=True)
class ClusterPolicyInfo:
    name: str
    sandbox_enabled: bool
    default_workload: str
    created: datetime | None = None
    state: str = ""
    """``status.state``: ready, notReady, ... or ``ignored`` when the operator uses another."""
    vgpu_default_config: str = "default"
    """``spec.vgpuDeviceManager.config.default``: the vGPU config a node without
    ``nvidia.com/vgpu.config`` gets when the device manager starts (docs/vgpu.md section 1)."""


def project_cluster_policy(obj: JSONObject) -> ClusterPolicyInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    sandbox = get_map(spec, "sandboxWorkloads", "spec")
    return ClusterPolicyInfo(
        name=get_str(meta, "name", "metadata"),
        sandbox_enabled=get_bool(sandbox, "enabled", "spec.sandboxWorkloads"),
        default_workload=get_str(sandbox, "defaultWorkload", "spec.sandboxWorkloads", "container"),
        created=get_time(meta, "creationTimestamp", "metadata"),
        state=get_str(get_map(obj, "status", ""), "state", "status"),
        vgpu_default_config=get_str(
            get_map(get_map(spec, "vgpuDeviceManager", "spec"), "config", VGPU_DM_PATH),
            "default",
            f"{VGPU_DM_PATH}.config",
            "default",
        )
        or "default",
    )


def cluster_policy_in_force(policies: Iterable[ClusterPolicyInfo]) -> ClusterPolicyInfo | None:
    """The ClusterPolicy the GPU Operator acts on when there are several (OLM's
    ``gpu-cluster-policy`` beside a Helm ``cluster-policy`` is common).

    The operator keeps the first one it reconciles as its singleton and marks every other
    ``status.state: ignored`` (NVIDIA/gpu-operator controllers/clusterpolicy_controller.go,
    ``Reconcile``). So: one it has not marked ignored; among those, the oldest
    (``creationTimestamp``), which is the one an operator running since before the others were
    made has taken; the name breaks ties.
    """
    candidates = list(policies)
    used = [p for p in candidates if p.state != IGNORED_STATE] or candidates
    if not used:
        return None
    never = datetime.max.replace(tzinfo=UTC)
    return min(used, key=lambda p: (p.created or never, p.name))

"""The NVIDIA GPU Operator's ClusterPolicy: sandbox workloads, the default workload mode, and which
of several ClusterPolicies the operator acts on; and GPU Operator 26.7's GPUCluster, which runs
the DRA driver instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from policies.vocabulary.fields import get_bool, get_map, get_str, get_time
from policies.vocabulary.requests import JSONObject
from policies.vocabulary.semver import Version, normalize_version

VGPU_DM_PATH = "spec.vgpuDeviceManager"


@dataclass(frozen=True, slots=True)
class ClusterPolicyInfo:
    name: str
    sandbox_enabled: bool
    default_workload: str
    created: datetime | None = None
    state: str = ""
    """``status.state``: ready, notReady, ... or ``ignored`` when the operator uses another.
    Shown, never trusted: whoever may write the status subresource writes it."""
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


#: The first GPU Operator release whose choice among several ClusterPolicies anyone can derive:
#: the oldest by ``creationTimestamp``, the name breaking ties (NVIDIA/gpu-operator v26.7.0
#: controllers/active_config.go ``getSingletonClusterPolicy``, called by
#: clusterpolicy_controller.go ``Reconcile``). Before it (v26.3.x and every earlier release) the
#: controller kept the first ClusterPolicy it reconciled as ``clusterPolicyCtrl.singleton``, in
#: memory, and wrote ``status.state: ignored`` on the others: after a restart that is whichever
#: its informer hands it first, which no one outside the process can know.
OLDEST_RULE_SINCE = Version(26, 7, 0)


def acts_on_the_oldest(operator_version: str) -> bool:
    """Whether a GPU Operator of ``operator_version`` (``v26.7.0``, ``26.3.1``; '' when not
    known) acts on the oldest ClusterPolicy; False when the version is unknown or unreadable."""
    parsed = normalize_version(operator_version.strip()) if operator_version else None
    return parsed is not None and parsed >= OLDEST_RULE_SINCE


def cluster_policies_in_force(
    policies: Iterable[ClusterPolicyInfo], operator_version: str
) -> tuple[ClusterPolicyInfo, ...]:
    """The ClusterPolicies the GPU Operator may be acting on, oldest first: the one place that
    picks. Several are common (OLM's ``gpu-cluster-policy`` beside a Helm ``cluster-policy``).

    From v26.7.0 (``acts_on_the_oldest``) exactly one, the oldest. Where the choice lives only
    in the operator's memory (v26.3.x and earlier, or a version not configured) every one of
    them: a check that would deny under any of them denies. ``status.state`` is never read here:
    anyone who may write the status subresource can mark the real one ``ignored``.
    """
    never = datetime.max.replace(tzinfo=UTC)
    ordered = tuple(sorted(policies, key=lambda p: (p.created or never, p.name)))
    return ordered[:1] if acts_on_the_oldest(operator_version) else ordered


# --- GPUCluster (GPU Operator 26.7) ---------------------------------------------------------------
# nvidia.com/v1alpha1, cluster-scoped, a singleton named gpu-cluster: it runs NVIDIA's DRA driver
# (gpu.nvidia.com) instead of the device plugins, and cannot coexist with a ClusterPolicy
# (docs/vgpu.md section 7).

#: The GPU Operator's own words when both exist (NVIDIA/gpu-operator v26.7.0
#: controllers/gpucluster_controller.go ``validatePrerequisites``).
GPU_CLUSTER_CONFLICT = "a ClusterPolicy CR and GPUCluster CR may not exist at the same time"


@dataclass(frozen=True, slots=True)
class GPUClusterInfo:
    name: str
    state: str
    """``status.state``: ready, notReady or disabled ('' before the operator reconciled it)."""
    dra_feature_gates: tuple[str, ...]
    """``spec.draDriver.featureGates`` set true (PassthroughSupport, DeviceMetadata, ...)."""
    compute_domains: bool
    """``spec.draDriver.computeDomains.enabled`` (the CRD defaults it to true)."""
    created: datetime | None = None


def project_gpu_cluster(obj: JSONObject) -> GPUClusterInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    driver = get_map(spec, "draDriver", "spec")
    gates = get_map(driver, "featureGates", "spec.draDriver")
    enabled = []
    for gate in sorted(gates):
        if get_bool(gates, gate, "spec.draDriver.featureGates"):
            enabled.append(gate)
    domains = get_map(driver, "computeDomains", "spec.draDriver")
    return GPUClusterInfo(
        name=get_str(meta, "name", "metadata"),
        state=get_str(get_map(obj, "status", ""), "state", "status"),
        dra_feature_gates=tuple(enabled),
        compute_domains=get_bool(domains, "enabled", "spec.draDriver.computeDomains", True),
        created=get_time(meta, "creationTimestamp", "metadata"),
    )


def workload_label_ignored(
    policy: ClusterPolicyInfo | None, gpu_clusters: Sequence[GPUClusterInfo]
) -> bool:
    """Whether the GPU Operator ignores ``nvidia.com/gpu.workload.config``: a GPUCluster runs and
    no ClusterPolicy does. The node labeller then gives every GPU node the DRA operands' deploy
    labels whatever its mode, and removes vfio-manager's, the sandbox plugin's and the vGPU
    device manager's (gpu-operator v26.7.0 ``updateGPUStateLabels``,
    ``devicePluginOnlyStateLabelKeys``; docs/vgpu.md section 7): relabelling a node's mode
    rebinds nothing. With both CRs the operator maintains no labels at all until one goes, and
    which one stays is not known: the label is then taken as a ClusterPolicy would read it.
    """
    return policy is None and bool(gpu_clusters)

"""The NVIDIA GPU Operator's ClusterPolicy: sandbox workloads, the default workload mode, and which
of several ClusterPolicies the operator acts on; and GPU Operator 26.7's GPUCluster, which runs
the DRA driver instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from policies.vocabulary.fields import ObjectError, get_bool, get_int, get_map, get_str, get_time
from policies.vocabulary.requests import JSONObject
from policies.vocabulary.semver import Version, normalize_version

VGPU_DM_PATH = "spec.vgpuDeviceManager"

#: ``spec.sandboxWorkloads.mode`` values (gpu-operator api/nvidia/v1 ``SandboxWorkloadsMode``).
KUBEVIRT, KATA = "kubevirt", "kata"


@dataclass(frozen=True, slots=True)
class DriverUpgradePolicy:
    """``spec.driver.upgradePolicy`` (k8s-operator-libs ``DriverUpgradePolicySpec``; the CRD's
    defaults when a field is left out: docs/driver-upgrades.md)."""

    auto: bool = True
    max_parallel: int = 1
    """``maxParallelUpgrades``: 0 is no limit."""
    max_unavailable: str = "25%"
    """``maxUnavailable``: a count or a percentage of the driver nodes, rounded up."""
    drain: bool = False
    """``drain.enable``: a fallback that evicts every pod but DaemonSets' when pod deletion
    cannot remove the GPU pods."""


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
    sandbox_mode: str = KUBEVIRT
    """``spec.sandboxWorkloads.mode``: ``kubevirt`` (KubeVirt's sandbox device plugin on
    vm-passthrough nodes) or ``kata`` (the Kata sandbox device plugin instead)."""
    cc_enabled: bool = False
    """``spec.ccManager.enabled``: the Confidential Computing Manager runs on VM-mode nodes."""
    cc_default_mode: str = ""
    """``spec.ccManager.defaultMode``: the CC mode of nodes without ``nvidia.com/cc.mode``."""
    runtime_class: str = "nvidia"
    """``spec.operator.runtimeClass``: the runtime class that hands GPUs to containers."""
    driver_enabled: bool = True
    """``spec.driver.enabled``: the operator runs the containerized driver (false: the host's)."""
    driver_version: str = ""
    """``spec.driver.version``: a new one starts the upgrade controller."""
    upgrade: DriverUpgradePolicy = DriverUpgradePolicy()
    use_nvidia_driver_crd: bool = False
    """``spec.driver.useNvidiaDriverCRD``: NVIDIADriver CRs run the driver and its upgrades, and
    ``driver.version`` is not read (docs/driver-upgrades.md section 3)."""


def upgrade_policy(parent: JSONObject, where: str) -> DriverUpgradePolicy:
    """``<where>.upgradePolicy``: the ClusterPolicy's ``spec.driver`` or an NVIDIADriver's
    ``spec`` (the same k8s-operator-libs type, the same CRD defaults)."""
    path = f"{where}.upgradePolicy"
    spec = get_map(parent, "upgradePolicy", where)
    unavailable = spec.get("maxUnavailable", "25%")
    if isinstance(unavailable, bool) or not re.fullmatch(r"\d+%?", str(unavailable).strip()):
        raise ObjectError(f"{path}.maxUnavailable", "must be a count or a percentage")
    return DriverUpgradePolicy(
        auto=get_bool(spec, "autoUpgrade", path, True),
        max_parallel=get_int(spec, "maxParallelUpgrades", path, 1),
        max_unavailable=str(unavailable),
        drain=get_bool(get_map(spec, "drain", path), "enable", f"{path}.drain"),
    )


def project_cluster_policy(obj: JSONObject) -> ClusterPolicyInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    sandbox = get_map(spec, "sandboxWorkloads", "spec")
    cc = get_map(spec, "ccManager", "spec")
    driver = get_map(spec, "driver", "spec")
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
        sandbox_mode=get_str(sandbox, "mode", "spec.sandboxWorkloads", KUBEVIRT) or KUBEVIRT,
        cc_enabled=get_bool(cc, "enabled", "spec.ccManager"),
        cc_default_mode=get_str(cc, "defaultMode", "spec.ccManager"),
        runtime_class=get_str(get_map(spec, "operator", "spec"), "runtimeClass", "spec.operator")
        or "nvidia",
        driver_enabled=get_bool(driver, "enabled", "spec.driver", True),
        driver_version=get_str(driver, "version", "spec.driver"),
        upgrade=upgrade_policy(driver, "spec.driver"),
        use_nvidia_driver_crd=get_bool(driver, "useNvidiaDriverCRD", "spec.driver"),
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

"""Every policy, diagnosis and mutation gpu-guard knows, in the order messages and references
list them. Each declares its own defaults (action, severity, reason); the engine, the
configuration and the generated reference read them here."""

from __future__ import annotations

from datetime import datetime

from policies.cluster.view import AuditView, ClusterView
from policies.diagnoses import (
    cc_mode as cc_mode_diagnosis,
)
from policies.diagnoses import (
    claims,
    counters,
    device_health,
    iommufd,
    managed_twice,
    mode_kills,
    names,
    nodes,
    operator,
    sole_provider,
    tainted_devices,
    vgpu,
    vms,
)
from policies.diagnoses import (
    driver_upgrade as driver_upgrade_diagnosis,
)
from policies.mutations import eviction_strategy as eviction_mutation
from policies.rules import (
    admin_access_namespace,
    cc_mode,
    claim_gate,
    claim_without_ready_device,
    clusterpolicy_delete,
    cordon_sole_provider,
    device_not_permitted,
    device_taint_rule_blast_radius,
    deviceclass_without_devices,
    driver_gates_exclusive,
    driver_upgrade,
    eviction_strategy,
    extended_claim_forged,
    external_provider_flip,
    gates_in_both_lists,
    gpu_pod_placement,
    gpu_user_finished,
    hco_managed_kubevirt,
    mig_reconfig,
    node_delete_gpu_users,
    passthrough_provider,
    passthrough_to_container,
    permitted_hardware,
    permitted_in_use,
    sandbox_disable,
    vfio_rebind,
    vgpu_reconfig,
    vm_claim_preflight,
    workload_label_invalid,
    workload_switch,
)
from policies.vocabulary.audit import Diagnosis, DiagnosisFinding, Track, untracked
from policies.vocabulary.mutation import Mutation
from policies.vocabulary.verdicts import Policy

ALL_POLICIES: tuple[Policy[ClusterView], ...] = (
    # the three the project started with
    workload_switch.POLICY,
    passthrough_provider.POLICY,
    permitted_hardware.POLICY,
    # nodes
    vfio_rebind.POLICY,
    passthrough_to_container.POLICY,
    mig_reconfig.POLICY,
    vgpu_reconfig.POLICY,
    cc_mode.POLICY,
    cordon_sole_provider.POLICY,
    workload_label_invalid.POLICY,
    node_delete_gpu_users.POLICY,
    gpu_user_finished.POLICY,
    # VMs and VMIs
    eviction_strategy.POLICY,
    device_not_permitted.POLICY,
    claim_gate.POLICY,
    # the KubeVirt CR
    permitted_in_use.POLICY,
    external_provider_flip.POLICY,
    gates_in_both_lists.POLICY,
    hco_managed_kubevirt.POLICY,
    # the ClusterPolicy
    sandbox_disable.POLICY,
    clusterpolicy_delete.POLICY,
    driver_upgrade.POLICY,
    # pods
    gpu_pod_placement.POLICY,
    # Dynamic Resource Allocation: claims and the classes they name
    claim_without_ready_device.POLICY,
    extended_claim_forged.POLICY,
    vm_claim_preflight.POLICY,
    driver_gates_exclusive.POLICY,
    deviceclass_without_devices.POLICY,
    device_taint_rule_blast_radius.POLICY,
    admin_access_namespace.POLICY,
)
POLICIES_BY_ID = {policy.id: policy for policy in ALL_POLICIES}
assert len(POLICIES_BY_ID) == len(ALL_POLICIES), "policy ids must be unique"

ALL_DIAGNOSES: tuple[Diagnosis[AuditView], ...] = (
    nodes.RECOVERY_TRAP_PASSTHROUGH_DIAGNOSIS,
    nodes.RECOVERY_TRAP_VGPU_DIAGNOSIS,
    mode_kills.GPU_MODE_KILLS_USERS_DIAGNOSIS,
    nodes.GPU_NODE_NOT_READY_DIAGNOSIS,
    vms.VM_UNSCHEDULABLE_DIAGNOSIS,
    claims.CLAIM_ON_NOT_READY_NODE_DIAGNOSIS,
    tainted_devices.WORKLOAD_ON_TAINTED_DEVICE_DIAGNOSIS,
    device_health.WORKLOAD_ON_UNHEALTHY_DEVICE_DIAGNOSIS,
    names.RESOURCE_NAME_CASE_MISMATCH_DIAGNOSIS,
    nodes.GPU_OPERAND_UNHEALTHY_DIAGNOSIS,
    operator.SEVERAL_CLUSTER_POLICIES_DIAGNOSIS,
    operator.GPUCLUSTER_BESIDE_CLUSTERPOLICY_DIAGNOSIS,
    vgpu.VGPU_CONFIG_FAILED_DIAGNOSIS,
    cc_mode_diagnosis.CC_MODE_NOT_APPLIED_DIAGNOSIS,
    driver_upgrade_diagnosis.DRIVER_UPGRADE_STUCK_DIAGNOSIS,
    managed_twice.GPU_MANAGED_TWICE_DIAGNOSIS,
    sole_provider.SOLE_PROVIDER_DIAGNOSIS,
    counters.DRA_COUNTERS_DIAGNOSIS,
    iommufd.IOMMUFD_MISSING_DIAGNOSIS,
)
DIAGNOSES_BY_ID = {diagnosis.id: diagnosis for diagnosis in ALL_DIAGNOSES}
assert len(DIAGNOSES_BY_ID) == len(ALL_DIAGNOSES), "diagnosis ids must be unique"
assert not DIAGNOSES_BY_ID.keys() & POLICIES_BY_ID.keys(), "one configuration names both"

ALL_MUTATIONS: tuple[Mutation[ClusterView], ...] = (eviction_mutation.MUTATION,)
MUTATIONS_BY_ID = {mutation.id: mutation for mutation in ALL_MUTATIONS}


def diagnose_all(
    view: ClusterView, now: datetime, track: Track = untracked
) -> dict[str, list[DiagnosisFinding]]:
    """What every diagnosis finds, raw: before configuration, enrichment and isolation (which
    ``Engine.audit`` applies). For tests and benchmarks that look at the diagnoses alone."""
    audit_view = AuditView(view, track)
    return {d.id: list(d.diagnose(audit_view, now)) for d in ALL_DIAGNOSES}

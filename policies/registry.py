"""Every policy gpu-guard knows, in the order messages and references list them."""

from __future__ import annotations

from policies import (
    cordon_sole_provider,
    device_not_permitted,
    eviction_strategy,
    external_provider_flip,
    gpu_pod_placement,
    mig_reconfig,
    passthrough_provider,
    passthrough_to_container,
    permitted_hardware,
    permitted_in_use,
    sandbox_disable,
    vfio_rebind,
    workload_label_invalid,
    workload_switch,
)
from policies.model import Policy

ALL_POLICIES: tuple[Policy, ...] = (
    # the three the project started with
    workload_switch.POLICY,
    passthrough_provider.POLICY,
    permitted_hardware.POLICY,
    # nodes
    vfio_rebind.POLICY,
    passthrough_to_container.POLICY,
    mig_reconfig.POLICY,
    cordon_sole_provider.POLICY,
    workload_label_invalid.POLICY,
    # VMs and VMIs
    eviction_strategy.POLICY,
    device_not_permitted.POLICY,
    # the KubeVirt CR
    permitted_in_use.POLICY,
    external_provider_flip.POLICY,
    # the ClusterPolicy
    sandbox_disable.POLICY,
    # pods
    gpu_pod_placement.POLICY,
)
POLICIES_BY_ID = {policy.id: policy for policy in ALL_POLICIES}
assert len(POLICIES_BY_ID) == len(ALL_POLICIES), "policy ids must be unique"

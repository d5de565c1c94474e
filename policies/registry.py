"""Every policy gpu-guard knows, in the order messages and references list them."""

from __future__ import annotations

from policies import passthrough_provider, permitted_hardware, workload_switch
from policies.model import Policy

ALL_POLICIES: tuple[Policy, ...] = (
    workload_switch.POLICY,
    passthrough_provider.POLICY,
    permitted_hardware.POLICY,
)
POLICIES_BY_ID = {policy.id: policy for policy in ALL_POLICIES}

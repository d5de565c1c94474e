"""The device-plugin policies never judge a gpus[]/hostDevices[] entry that takes its device from a
DRA claim: it has no deviceName, no device plugin provides it, and KubeVirt checks no
permittedHostDevices for it (its feature gate is claim-without-dra-feature-gate's question)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from policies.cluster.view import ClusterView
from policies.rules import device_not_permitted, passthrough_provider, permitted_in_use
from policies.vocabulary.verdicts import Policy
from tests.builders import Obj, dead_node, judged_by, kubevirt, node, request, state_of, vm
from tests.dra_builders import claim_vm, claim_vmi

RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
#: Nothing healthy provides anything and KubeVirt permits nothing: every deviceName is a finding.
BARE = [kubevirt(feature_gates=()), dead_node("omen2", allocatable={RTX_5090: "1"})]
#: A healthy node advertises the 3090, which KubeVirt does not permit.
UNPERMITTED = [kubevirt([("10de:2b85", RTX_5090)]), node("tower1", allocatable={RTX_3090: "1"})]


def with_device_plugin_gpu(obj: Obj, device_name: str) -> Obj:
    """``obj`` with one more gpus[] entry, by deviceName."""
    spec = obj["spec"]["template"]["spec"] if obj["kind"] == "VirtualMachine" else obj["spec"]
    spec["domain"]["devices"]["gpus"] = [
        *spec["domain"]["devices"].get("gpus", []),
        {"name": "plugin", "deviceName": device_name},
    ]
    return obj


VM_POLICIES = [
    pytest.param(
        passthrough_provider.POLICY, BARE, RTX_5090, id="passthrough-without-ready-provider"
    ),
    pytest.param(device_not_permitted.POLICY, UNPERMITTED, RTX_3090, id="device-not-permitted"),
]
CLAIM_USERS: list[Callable[[], Obj]] = [
    lambda: claim_vm("gpu-fedora-dra", template="rtx5090-vfio"),
    lambda: claim_vmi("rhel9-dra-vmi", claim="tower1-3090", phase=""),
]


@pytest.mark.parametrize(
    "policy", [p.values[0] for p in VM_POLICIES], ids=[p.id for p in VM_POLICIES]
)
@pytest.mark.parametrize("make", CLAIM_USERS, ids=["a VM's gpus[]", "a VMI's hostDevices[]"])
def test_an_entry_that_uses_a_claim_is_never_judged_by_a_device_plugin_policy(
    policy: Policy[ClusterView], make: Callable[[], Obj]
) -> None:
    review = request("CREATE", make())
    assert judged_by(policy, review)
    for objects in (BARE, UNPERMITTED):
        assert list(policy.check(review, state_of(*objects))) == []


@pytest.mark.parametrize(("policy", "objects", "device_name"), VM_POLICIES)
def test_beside_a_claim_the_device_plugin_entry_is_judged_alone(
    policy: Policy[ClusterView], objects: list[Obj], device_name: str
) -> None:
    obj = with_device_plugin_gpu(claim_vm("mixed", template="rtx5090-vfio"), device_name)
    (finding,) = policy.check(request("CREATE", obj), state_of(*objects))
    assert finding.message.startswith(f"{device_name} (gpus[plugin]): ")


@pytest.mark.parametrize(("policy", "objects", "device_name"), VM_POLICIES)
def test_the_audit_skips_claim_entries_too(
    policy: Policy[ClusterView], objects: list[Obj], device_name: str
) -> None:
    assert policy.audit is not None
    state = state_of(*objects, claim_vm("dra", template="t"), claim_vmi("bare", claim="c"))
    assert list(policy.audit(state)) == []
    state.upsert(vm("plugin", gpus=[device_name]))
    assert [str(ref) for ref, _ in policy.audit(state)] == ["vms/plugin"]


def test_removing_an_entry_without_a_resource_name_is_no_loss_to_vms_on_claims() -> None:
    # Claim entries have device_name "": had the state indexed them there, they would count as
    # users of a permittedHostDevices entry whose resourceName is missing.
    before = kubevirt([("10de:2b85", ""), ("10de:2204", RTX_3090)])
    after = kubevirt([("10de:2204", RTX_3090)])
    state = state_of(claim_vm("dra", template="t"), claim_vmi("bare", claim="c", node_name="a"))
    assert permitted_in_use.check(request("UPDATE", after, before), state) == []

"""evictionstrategy-not-migratable: GPU VMs whose effective eviction strategy is LiveMigrate."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from policies.rules.eviction_strategy import POLICY, audit, check
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import (
    Obj,
    instancetype,
    judged_by,
    kubevirt,
    request,
    state_of,
    vm,
    vm_pool,
    vm_replica_set,
    vmi,
    with_spec,
)
from tests.dra_builders import claim_vm
from webhook.engine import Engine

RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
CLUSTER_LIVE_MIGRATE = kubevirt(eviction_strategy="LiveMigrate")
CLUSTER_NONE = kubevirt(eviction_strategy="None")
NO_CLUSTER_DEFAULT = kubevirt()


def gpu_vm(strategy: str | None = None, **kwargs: Any) -> Obj:
    return vm("gpu-fedora", gpus=[RTX_5090], eviction_strategy=strategy, **kwargs)


def gpu_vmi(strategy: str | None = None, name: str = "gpu-fedora", **kwargs: Any) -> Obj:
    obj = vmi(name, gpus=[RTX_5090], **kwargs)
    return with_spec(obj, {"evictionStrategy": strategy})


def findings(review: AdmissionRequest, objects: Sequence[Obj]) -> list[Finding]:
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


@pytest.mark.parametrize(
    ("obj", "objects", "source"),
    [
        pytest.param(gpu_vm("LiveMigrate"), [], "its own", id="a VM with its own LiveMigrate"),
        pytest.param(
            vm("gpu-fedora", host_devices=[RTX_5090], eviction_strategy="LiveMigrate"),
            [],
            "its own",
            id="a VM with a hostDevices GPU and its own LiveMigrate",
        ),
        pytest.param(
            gpu_vm(),
            [CLUSTER_LIVE_MIGRATE],
            "the cluster default of KubeVirt kubevirt/kubevirt",
            id="a VM inheriting the KubeVirt CR's LiveMigrate",
        ),
        pytest.param(
            gpu_vm("LiveMigrate"),
            [CLUSTER_NONE],
            "its own",
            id="a VM's own LiveMigrate beats a None cluster default",
        ),
        pytest.param(
            gpu_vm("LiveMigrate", run_strategy="Halted"),
            [],
            "its own",
            id="a halted VM still blocks drains once started",
        ),
        pytest.param(gpu_vmi("LiveMigrate"), [], "its own", id="a VMI with its own LiveMigrate"),
        pytest.param(
            gpu_vmi(),
            [CLUSTER_LIVE_MIGRATE],
            "the cluster default of KubeVirt kubevirt/kubevirt",
            id="a VMI inheriting the KubeVirt CR's LiveMigrate",
        ),
    ],
)
def test_a_gpu_vm_that_would_live_migrate_is_warned(
    obj: Obj, objects: list[Obj], source: str
) -> None:
    (finding,) = findings(request("CREATE", obj), objects)
    assert f"evictionStrategy LiveMigrate ({source})" in finding.message
    assert POLICY.default_action == Action.WARN


@pytest.mark.parametrize(
    ("obj", "objects"),
    [
        pytest.param(
            gpu_vm("None"), [CLUSTER_LIVE_MIGRATE], id="a VM's own None beats the cluster"
        ),
        pytest.param(
            gpu_vm("LiveMigrateIfPossible"),
            [CLUSTER_LIVE_MIGRATE],
            id="LiveMigrateIfPossible stops the VM instead of hanging",
        ),
        pytest.param(gpu_vm(), [], id="no strategy and no KubeVirt CR"),
        pytest.param(gpu_vm(), [NO_CLUSTER_DEFAULT], id="no strategy and no cluster default"),
        pytest.param(gpu_vm(), [CLUSTER_NONE], id="a None cluster default"),
        pytest.param(
            vm("cpu-only", eviction_strategy="LiveMigrate"), [], id="a VM without devices migrates"
        ),
        pytest.param(vm("cpu-only"), [CLUSTER_LIVE_MIGRATE], id="so does one inheriting it"),
        pytest.param(gpu_vmi("None"), [CLUSTER_LIVE_MIGRATE], id="a VMI's own None"),
    ],
)
def test_everything_else_is_allowed(obj: Obj, objects: list[Obj]) -> None:
    assert findings(request("CREATE", obj), objects) == []


def test_the_message_names_the_devices_the_reason_and_the_field_to_set() -> None:
    (finding,) = findings(request("UPDATE", gpu_vm("LiveMigrate"), gpu_vm()), [])
    assert finding.message == (
        f"evictionStrategy LiveMigrate (its own) but {RTX_5090} cannot live-migrate "
        "(HostDeviceNotLiveMigratable): a drain of its node hangs forever. "
        "Set spec.template.spec.evictionStrategy: None."
    )
    assert len(f"[{POLICY.id}] {finding.message}") <= 256
    (finding,) = findings(request("CREATE", gpu_vmi("LiveMigrate")), [])
    assert finding.message.endswith("Set spec.evictionStrategy: None.")
    assert finding.remediation[0].startswith("set spec.evictionStrategy: None")


def test_a_vm_whose_gpu_comes_from_a_claim_names_the_claim() -> None:
    # VMIs with DRA devices do not live-migrate either; such an entry has no deviceName to name.
    obj = claim_vm("gpu-fedora-dra", template="rtx5090-vfio", eviction_strategy="LiveMigrate")
    (finding,) = findings(request("CREATE", obj), [])
    assert "but claim gpu cannot live-migrate" in finding.message


def test_audit_lists_vms_and_the_vmis_their_vm_does_not_already_account_for() -> None:
    state = state_of(
        CLUSTER_NONE,
        vm("flagged", gpus=[RTX_5090], eviction_strategy="LiveMigrate"),
        vm("fixed", gpus=[RTX_5090], eviction_strategy="None"),
        vm("cpu", eviction_strategy="LiveMigrate"),
        gpu_vmi("LiveMigrate", name="flagged", owner="flagged"),
        gpu_vmi("LiveMigrate", name="fixed", owner="fixed"),
        gpu_vmi("LiveMigrate", name="bare"),
        gpu_vmi("LiveMigrate", name="done", phase="Succeeded"),
        gpu_vmi("None", name="fine"),
    )
    listed = [(ref.kind, str(ref)) for ref, _ in audit(state)]
    assert listed == [
        ("VirtualMachine", "vms/flagged"),
        ("VirtualMachineInstance", "vms/bare"),
        ("VirtualMachineInstance", "vms/fixed"),
    ]


def test_audit_follows_the_cluster_default() -> None:
    objects = [vm("inherits", gpus=[RTX_5090])]
    assert list(audit(state_of(*objects))) == []
    assert [str(ref) for ref, _ in audit(state_of(CLUSTER_LIVE_MIGRATE, *objects))] == [
        "vms/inherits"
    ]


@pytest.mark.parametrize(
    ("review", "applies"),
    [
        pytest.param(request("CREATE", gpu_vm()), True, id="VM CREATE is judged"),
        pytest.param(request("UPDATE", gpu_vm(), gpu_vm()), True, id="VM UPDATE is judged"),
        pytest.param(request("DELETE", None, gpu_vm()), False, id="VM DELETE is not"),
        pytest.param(
            request("UPDATE", gpu_vm(), gpu_vm(), sub_resource="status"),
            True,
            id="the VM status subresource is judged (virtctl start writes a Start there)",
        ),
        pytest.param(request("CREATE", gpu_vmi()), True, id="VMI CREATE is judged"),
        pytest.param(request("UPDATE", gpu_vmi(), gpu_vmi()), False, id="VMI UPDATE is not"),
    ],
)
def test_scope(review: AdmissionRequest, applies: bool) -> None:
    assert judged_by(POLICY, review) is applies


def test_the_engine_warns_by_default() -> None:
    decision = Engine().evaluate(request("CREATE", gpu_vm("LiveMigrate")), state_of())
    assert decision.allowed
    ours = [v for v in decision.verdicts if v.policy == POLICY.id]
    assert [v.action for v in ours] == [Action.WARN]


@pytest.mark.parametrize(
    ("obj", "objects", "source", "field"),
    [
        pytest.param(
            gpu_vm("LiveMigrate"),
            [],
            "its own",
            "spec.template.spec.evictionStrategy",
            id="a VM's own strategy",
        ),
        pytest.param(
            gpu_vmi(),
            [CLUSTER_LIVE_MIGRATE],
            "the cluster default of KubeVirt kubevirt/kubevirt",
            "spec.evictionStrategy",
            id="a VMI inheriting the cluster default",
        ),
    ],
)
def test_the_chain_runs_from_the_strategy_to_the_hung_drain_and_the_steps_say_how_out(
    obj: Obj, objects: list[Obj], source: str, field: str
) -> None:
    (finding,) = findings(request("CREATE", obj), objects)
    assert finding.chain == (
        f"evictionStrategy LiveMigrate ({source})",
        "host devices: LiveMigratable=False (HostDeviceNotLiveMigratable)",
        "eviction refused until a migration that never comes: the drain hangs",
    )
    assert finding.remediation == (
        f"set {field}: None (the drain stops the VM) or LiveMigrateIfPossible",
        "stop the VM yourself before draining its node",
    )


def test_several_devices_are_named_once_each_in_name_order() -> None:
    rtx_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
    obj = vm("two", gpus=[RTX_5090, rtx_3090, RTX_5090], eviction_strategy="LiveMigrate")
    (finding,) = findings(request("CREATE", obj), [])
    assert f"but {rtx_3090} and {RTX_5090} cannot live-migrate" in finding.message


def test_the_audit_says_which_field_to_set_on_a_vm_and_on_a_vmi_and_reads_the_cluster_default() -> (
    None
):
    state = state_of(
        CLUSTER_LIVE_MIGRATE,
        vm("a-flagged", gpus=[RTX_5090]),
        gpu_vmi(name="a-flagged", owner="a-flagged"),
        gpu_vmi(name="b-bare"),
    )
    said = {f"{ref.kind} {ref}": finding.message for ref, finding in audit(state)}
    assert list(said) == ["VirtualMachine vms/a-flagged", "VirtualMachineInstance vms/b-bare"]
    assert said["VirtualMachine vms/a-flagged"].endswith(
        "Set spec.template.spec.evictionStrategy: None."
    )
    bare = said["VirtualMachineInstance vms/b-bare"]
    assert bare.startswith(
        "evictionStrategy LiveMigrate (the cluster default of KubeVirt kubevirt/kubevirt)"
    )
    assert bare.endswith("Set spec.evictionStrategy: None.")


# --- the templates VMs are made from: a replica set of VMIs, a pool of VMs ---------------------

RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (vm_replica_set("farm", gpus=[RTX_3090]), "spec.template.spec"),
        (vm_pool("pool", gpus=[RTX_3090]), "spec.virtualMachineTemplate.spec.template.spec"),
        (
            vm_pool(
                "pool", instancetype={"kind": "VirtualMachineInstancetype", "name": "gpu-3090"}
            ),
            "spec.virtualMachineTemplate.spec.template.spec",
        ),
        (vm_replica_set("farm", gpus=[RTX_3090], replicas=0), None),
        (vm_pool("pool", gpus=[RTX_3090], replicas=0), None),
        (vm_pool("pool"), None),
    ],
    ids=[
        "a replica set of GPU VMIs",
        "a pool of GPU VMs",
        "a pool whose VMs take a GPU from their instancetype",
        "a replica set of 0 replicas",
        "a pool of 0 replicas",
        "a pool of VMs without devices",
    ],
)
def test_a_template_of_gpu_vms_promising_live_migration_is_warned_at_its_own_field(
    obj: Obj, field: str | None
) -> None:
    gpu_3090 = instancetype("gpu-3090", gpus=[RTX_3090], namespace="vms")
    review = request("CREATE", obj)
    assert judged_by(POLICY, review)
    found = check(review, state_of(CLUSTER_LIVE_MIGRATE, gpu_3090))
    fields = [f.remediation[0] for f in found]
    assert fields == (
        []
        if field is None
        else [
            f"set {field}.evictionStrategy: None (the drain stops the VM) or LiveMigrateIfPossible"
        ]
    )


def test_a_vm_whose_instancetype_gives_a_gpu_is_warned_in_check_and_audit() -> None:
    typed = vm("typed", instancetype={"kind": "VirtualMachineInstancetype", "name": "gpu-3090"})
    gpu_3090 = instancetype("gpu-3090", gpus=[RTX_3090], namespace="vms")
    state = state_of(CLUSTER_LIVE_MIGRATE, gpu_3090, typed, vm("plain"))
    found = check(request("CREATE", typed), state)
    assert [RTX_3090 in f.message for f in found] == [True]
    assert [(ref.name, RTX_3090 in f.message) for ref, f in audit(state)] == [("typed", True)]
    assert check(request("CREATE", typed), state_of(CLUSTER_LIVE_MIGRATE)) == ()

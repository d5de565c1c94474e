"""KubeVirt's VM templates judged like the VMs they make: a VirtualMachineInstanceReplicaSet and a
VirtualMachinePool with replicas, an instancetype, and a VM (or a pool's VM template) naming an
instancetype, whose gpus[] and hostDevices[] KubeVirt copies into the VM's when it has none
(kubevirt/kubevirt pkg/instancetype/apply). An instancetype the view does not hold is "cannot
tell", never all clear."""

from __future__ import annotations

from typing import Any

import pytest

from policies.cluster.kinds import VM_CLUSTER_INSTANCETYPE, VM_INSTANCETYPE
from policies.cluster.kubevirt import DeviceRequest, project_vm
from policies.cluster.vm_templates import (
    project_vm_cluster_instancetype,
    project_vm_instancetype,
    project_vm_pool,
    project_vm_replica_set,
)
from policies.cluster.vms_to_run import resolved
from policies.mutations import eviction_strategy as eviction_mutation
from policies.registry import ALL_POLICIES
from policies.rules import claim_gate, device_not_permitted, eviction_strategy, passthrough_provider
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.verdicts import Action
from tests.builders import (
    Obj,
    dead_node,
    instancetype,
    judged_by,
    kubevirt,
    node,
    request,
    state_of,
    vm,
    vm_pool,
    vm_replica_set,
    vmi,
)
from webhook.engine import Engine

RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"  # only the dead omen2 advertises it
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"  # the healthy omen1 does
T4 = "nvidia.com/TU104GL_TESLA_T4"
STATE = (
    dead_node("omen2", allocatable={RTX_5090: "1"}),
    node("omen1", allocatable={RTX_3090: "1", T4: "1"}),
    kubevirt([("10de:2b85", RTX_5090), ("10de:2204", RTX_3090), ("10de:1eb8", T4)]),
    instancetype("gpu-5090", gpus=[RTX_5090]),
    instancetype("gpu-3090", gpus=[RTX_3090], namespace="vms"),
    instancetype("t4-host", host_devices=[T4]),
)
CLUSTER = {"name": "gpu-5090"}
NAMESPACED = {"kind": "VirtualMachineInstancetype", "name": "gpu-3090"}


def verdicts(review: Any) -> list[tuple[str, str]]:
    decision = Engine().evaluate(review, state_of(*STATE))
    return [(v.policy, v.message.split(":")[0]) for v in decision.verdicts]


DEAD = [("passthrough-without-ready-provider", RTX_5090 + " (gpus[gpu1])")]


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (vm_replica_set("farm", gpus=[RTX_5090], replicas=2), DEAD),
        (vm_replica_set("farm", gpus=[RTX_5090], replicas=None), DEAD),
        (vm_replica_set("farm", gpus=[RTX_5090], replicas=0), []),
        (vm_replica_set("farm", gpus=[RTX_3090]), []),
        (vm_pool("pool", gpus=[RTX_5090], replicas=3), DEAD),
        (vm_pool("pool", gpus=[RTX_5090], replicas=None), DEAD),
        (vm_pool("pool", gpus=[RTX_5090], version="v1alpha1"), DEAD),
        (vm_pool("pool", gpus=[RTX_5090], replicas=0), []),
        (vm_pool("pool", gpus=[RTX_5090], run_strategy="Halted"), []),
        (vm_pool("pool", gpus=[RTX_5090], run_strategy="Manual"), []),
        (vm_pool("pool", instancetype=CLUSTER), DEAD),
        (vm_pool("pool", instancetype=NAMESPACED), []),
        (instancetype("new-5090", gpus=[RTX_5090]), DEAD),
        (instancetype("new-5090", gpus=[RTX_5090], namespace="vms"), DEAD),
        (instancetype("new-3090", gpus=[RTX_3090]), []),
        (vm("v", instancetype=CLUSTER), DEAD),
        (vm("v", instancetype={**CLUSTER, "kind": "virtualmachineclusterinstancetypes"}), DEAD),
        (vm("v", instancetype=NAMESPACED), []),
        (vm("v", instancetype=CLUSTER, run_strategy="Halted"), []),
    ],
    ids=[
        "a replica set of 2 VMIs needing a dead node's GPU is warned",
        "a replica set without replicas makes one VMI (KubeVirt's default) and is warned",
        "a replica set of 0 replicas runs nothing and is let through",
        "a replica set whose GPU a ready node has is let through",
        "a pool of running VMs needing a dead node's GPU is warned",
        "a pool without replicas makes one VM (KubeVirt's default) and is warned",
        "a v1alpha1 pool (KubeVirt before 1.8) is warned alike",
        "a pool of 0 replicas runs nothing and is let through",
        "a pool whose VMs are made Halted starts none and is let through",
        "a pool whose VMs are made Manual starts none and is let through",
        "a pool whose VM template names an instancetype gets its GPU",
        "a pool whose template's namespaced instancetype a ready node serves is let through",
        "a new cluster instancetype giving a dead node's GPU is warned",
        "a new namespaced instancetype giving a dead node's GPU is warned",
        "a new instancetype giving a GPU a ready node has is let through",
        "a VM naming a cluster instancetype gets its GPU",
        "a VM naming the kind by its plural, as KubeVirt accepts, gets its GPU",
        "a VM naming a namespaced instancetype a ready node serves is let through",
        "a halted VM naming an instancetype is not judged until started",
    ],
)
def test_templates_are_judged_like_the_vms_they_make(obj: Obj, expected: list[Any]) -> None:
    assert verdicts(request("CREATE", obj)) == expected
    assert verdicts(request("UPDATE", obj, obj)) == expected


UNKNOWN = "passthrough-without-ready-provider"


@pytest.mark.parametrize(
    ("matcher", "label"),
    [
        ({"name": "h100"}, "VirtualMachineClusterInstancetype h100 (spec.instancetype) is"),
        (
            {"kind": "VirtualMachineInstancetype", "name": "gpu-5090"},
            "VirtualMachineInstancetype gpu-5090 (spec.instancetype) is",
        ),
        ({"kind": "Flavor", "name": "big"}, "Flavor big (spec.instancetype) is"),
        ({"inferFromVolume": "root"}, "VirtualMachineClusterInstancetype (unnamed) (spec."),
    ],
    ids=[
        "a cluster instancetype the view does not hold",
        "a namespaced one of that name only exists cluster-wide: not the VM's",
        "a kind KubeVirt does not know",
        "a name still to be inferred from a volume",
    ],
)
def test_an_instancetype_the_view_does_not_hold_is_cannot_tell_never_all_clear(
    matcher: Obj, label: str
) -> None:
    named = vm("v", gpus=[RTX_3090], instancetype=matcher)
    decision = Engine().evaluate(request("CREATE", named), state_of(*STATE))
    assert [v.policy for v in decision.verdicts] == [UNKNOWN]
    message = decision.verdicts[0].message
    assert message.startswith(label)
    assert message.endswith("Check that it exists and that gpu-guard can read it.")
    assert decision.verdicts[0].action == Action.WARN


def test_an_unknown_instancetype_is_said_in_the_audit_too_beside_the_vms_own_devices() -> None:
    state = state_of(*STATE, vm("v", gpus=[RTX_5090], instancetype={"name": "h100"}))
    found = [(ref.name, f.message.split(" ")[0]) for ref, f in passthrough_provider.audit(state)]
    assert found == [("v", "VirtualMachineClusterInstancetype"), ("v", RTX_5090)]


def test_the_audit_judges_a_vm_by_its_instancetypes_devices() -> None:
    state = state_of(*STATE, vm("v", instancetype=CLUSTER), vm("w", instancetype=NAMESPACED))
    found = [(ref.name, f.device) for ref, f in passthrough_provider.audit(state)]
    assert found == [("v", RTX_5090)]


def _names(devices: tuple[DeviceRequest, ...]) -> list[tuple[str, str]]:
    return [(d.field, d.device_name) for d in devices]


@pytest.mark.parametrize(
    ("own_gpus", "own_host_devices", "matcher", "expected"),
    [
        ([], [], CLUSTER, [("gpus", RTX_5090)]),
        ([], [RTX_3090], CLUSTER, [("hostDevices", RTX_3090), ("gpus", RTX_5090)]),
        ([RTX_3090], [], {"name": "t4-host"}, [("gpus", RTX_3090), ("hostDevices", T4)]),
        ([RTX_3090], [], CLUSTER, [("gpus", RTX_3090)]),
        ([RTX_3090], [], None, [("gpus", RTX_3090)]),
    ],
    ids=[
        "the instancetype's gpus fill a VM that has none",
        "its gpus join the VM's own hostDevices",
        "its hostDevices join the VM's own gpus",
        "both with gpus is a conflict KubeVirt refuses: the VM's own stand",
        "a VM naming none keeps its own",
    ],
)
def test_a_vms_devices_are_merged_with_its_instancetypes_as_kubevirt_applies_them(
    own_gpus: list[str], own_host_devices: list[str], matcher: Obj | None, expected: list[Any]
) -> None:
    info = project_vm(vm("v", gpus=own_gpus, host_devices=own_host_devices, instancetype=matcher))
    found = resolved(info, state_of(*STATE))
    assert _names(found.devices) == expected
    assert found.unknown is None


@pytest.mark.parametrize(
    ("project", "obj", "path"),
    [
        (project_vm_replica_set, {"spec": {"replicas": "two"}}, "spec.replicas"),
        (project_vm_replica_set, {"spec": {"paused": "yes"}}, "spec.paused"),
        (
            project_vm_replica_set,
            {"spec": {"template": {"spec": {"domain": {"devices": {"gpus": {}}}}}}},
            "spec.template.spec.domain.devices.gpus",
        ),
        (project_vm_pool, {"spec": {"replicas": True}}, "spec.replicas"),
        (
            project_vm_pool,
            {"spec": {"virtualMachineTemplate": {"spec": {"runStrategy": 1}}}},
            "spec.virtualMachineTemplate.spec.runStrategy",
        ),
        (
            project_vm_pool,
            {"spec": {"virtualMachineTemplate": {"spec": {"instancetype": {"name": 7}}}}},
            "spec.virtualMachineTemplate.spec.instancetype.name",
        ),
        (project_vm_instancetype, {"spec": {"gpus": [{"deviceName": 3}]}}, "spec.gpus[0]"),
        (project_vm_cluster_instancetype, {"spec": {"hostDevices": "x"}}, "spec.hostDevices"),
        (project_vm, {"spec": {"instancetype": "gpu-5090"}}, "spec.instancetype"),
    ],
)
def test_a_malformed_template_field_is_named_by_its_path(project: Any, obj: Obj, path: str) -> None:
    with pytest.raises(ObjectError) as raised:
        project({"metadata": {"name": "x", "namespace": "vms"}, **obj})
    assert str(raised.value).startswith(path)


def test_the_projections_read_replicas_pause_kind_and_the_revision_a_vm_runs_with() -> None:
    assert project_vm_replica_set(vm_replica_set("f", replicas=None)).replicas == 1
    paused = {**vm_replica_set("f", replicas=4), "spec": {"replicas": 4, "paused": True}}
    assert project_vm_replica_set(paused).paused
    pool = project_vm_pool(vm_pool("p", gpus=[T4], instancetype=CLUSTER, replicas=2))
    assert (pool.namespace, pool.replicas, _names(pool.vm.devices)) == ("vms", 2, [("gpus", T4)])
    assert pool.vm.instancetype is not None and pool.vm.instancetype.name == "gpu-5090"
    assert project_vm_instancetype(STATE[4]).kind == VM_INSTANCETYPE
    assert project_vm_cluster_instancetype(STATE[3]).kind == VM_CLUSTER_INSTANCETYPE
    pinned = vm("v", instancetype={**CLUSTER, "revisionName": "v-gpu-5090-1"})
    stored = {
        **vm("v", instancetype=CLUSTER),
        "status": {"instancetypeRef": {"controllerRevisionRef": {"name": "v-gpu-5090-2"}}},
    }
    assert [project_vm(o).instancetype.revision for o in (pinned, stored)] == [  # type: ignore[union-attr]
        "v-gpu-5090-1",
        "v-gpu-5090-2",
    ]


DEVICE_POLICIES = {passthrough_provider.ID, device_not_permitted.ID, claim_gate.ID}


@pytest.mark.parametrize(
    ("obj", "judges"),
    [
        (vm_replica_set("farm"), {*DEVICE_POLICIES, eviction_strategy.ID}),
        (vm_pool("pool"), {*DEVICE_POLICIES, eviction_strategy.ID}),
        (instancetype("it", namespace="vms"), DEVICE_POLICIES),
        (instancetype("it"), DEVICE_POLICIES),
    ],
    ids=lambda o: o["kind"] if isinstance(o, dict) else "",
)
def test_the_device_policies_judge_each_template_created_or_updated_never_deleted(
    obj: Obj, judges: set[str]
) -> None:
    assert {p.id for p in ALL_POLICIES if judged_by(p, request("CREATE", obj))} == judges
    assert {p.id for p in ALL_POLICIES if judged_by(p, request("UPDATE", obj, obj))} == judges
    assert not [p for p in ALL_POLICIES if judged_by(p, request("DELETE", None, obj))]


def test_a_template_asking_for_a_device_kubevirt_does_not_permit_is_warned() -> None:
    state = state_of(node("omen1", allocatable={RTX_5090: "1"}), kubevirt([]))
    for obj in (vm_pool("pool", gpus=[RTX_5090]), instancetype("it", gpus=[RTX_5090])):
        decision = Engine().evaluate(request("CREATE", obj), state)
        assert [(v.policy, v.action) for v in decision.verdicts] == [
            (device_not_permitted.ID, Action.WARN)
        ]


@pytest.mark.parametrize(
    ("run_strategy", "action"),
    [("Always", Action.DENY), ("Halted", Action.WARN)],
    ids=["a VM that should run: denied", "a stopped one: warned"],
)
def test_removing_the_permission_a_vm_has_through_its_instancetype_names_that_vm(
    run_strategy: str, action: Action
) -> None:
    before = kubevirt([("10de:2b85", RTX_5090), ("10de:2204", RTX_3090)])
    after = kubevirt([("10de:2204", RTX_3090)])
    state = state_of(
        *STATE[:2],
        before,
        STATE[3],
        vm("typed", instancetype=CLUSTER, run_strategy=run_strategy),
        vm("plain", gpus=[RTX_3090]),
    )
    decision = Engine().evaluate(request("UPDATE", after, before), state)
    assert [(v.policy, v.action) for v in decision.verdicts] == [
        ("permitted-device-in-use-removed", action)
    ]
    assert "vms/typed" in decision.verdicts[0].message
    assert "vms/plain" not in decision.verdicts[0].message


def test_a_vm_whose_instancetype_gives_a_gpu_is_held_to_a_migratable_eviction_strategy() -> None:
    live_migrate = kubevirt([("10de:2204", RTX_3090)], eviction_strategy="LiveMigrate")
    typed = vm("typed", instancetype=NAMESPACED)
    state = state_of(STATE[1], live_migrate, STATE[4], typed, vm("plain"))
    decision = Engine().evaluate(request("CREATE", typed), state)
    assert [v.policy for v in decision.verdicts] == [eviction_strategy.ID]
    changes = eviction_mutation.mutate(request("CREATE", typed), state)
    assert [op["value"] for change in changes for op in change.patch] == ["None"]


def _copied(uid: str, generation: int) -> Obj:
    """The cluster instancetype gpu-5090 with its uid and generation."""
    it = instancetype("gpu-5090", gpus=[RTX_5090])
    it["metadata"].update(uid=uid, generation=generation)
    return it


@pytest.mark.parametrize(
    ("revision", "where", "expected"),
    [
        ("v-gpu-5090-v1beta1-u1-2", "status", "RTX"),
        ("v-gpu-5090-v1beta1-u1-2", "spec", "RTX"),
        ("v-gpu-5090-v1beta1-u1-1", "status", "changed"),
        ("v-gpu-5090-v1beta1-u0-2", "spec", "changed"),
        ("", "status", "RTX"),
    ],
    ids=[
        "the VM's copy is of the instancetype as it is now: its devices are judged",
        "a pinned revisionName of the current copy alike",
        "a copy of an earlier generation (edited since): cannot tell",
        "a copy of an earlier object of that name (re-created since): cannot tell",
        "no copy yet (KubeVirt has not synced the VM): the instancetype as it is now",
    ],
)
def test_a_vm_is_judged_by_its_instancetype_only_when_it_runs_with_that_copy(
    revision: str, where: str, expected: str
) -> None:
    named = vm("v", instancetype=dict(CLUSTER))
    if revision and where == "spec":
        named["spec"]["instancetype"]["revisionName"] = revision
    elif revision:
        named["status"] = {"instancetypeRef": {"controllerRevisionRef": {"name": revision}}}
    state = state_of(*STATE[:3], _copied("u1", 2))
    verdicts = Engine().evaluate(request("UPDATE", named, named), state).verdicts
    assert [v.policy for v in verdicts] == [UNKNOWN]
    message = verdicts[0].message
    if expected == "RTX":
        assert message.startswith(RTX_5090)
    else:
        assert message.startswith(
            f"VirtualMachineClusterInstancetype gpu-5090 changed after KubeVirt copied it for "
            f"this VM (ControllerRevision {revision})"
        )
        assert verdicts[0].remediation == (f"kubectl get controllerrevision {revision} -o yaml",)


def test_a_running_vm_whose_instancetype_cannot_be_told_is_audited_by_its_vmis_devices() -> None:
    named = vm("v", instancetype={"name": "h100"})
    running = vmi("v", node_name="omen1", gpus=[RTX_5090], owner="v")
    found = [
        (ref.name, f.device)
        for ref, f in passthrough_provider.audit(state_of(*STATE, named, running))
    ]
    assert found == [("v", RTX_5090)]
    stopped = [
        f.message.split(" ")[0] for _, f in passthrough_provider.audit(state_of(*STATE, named))
    ]
    assert stopped == ["VirtualMachineClusterInstancetype"]

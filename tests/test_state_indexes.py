"""ClusterState indexes: every lookup policies make stays right through add, modify and delete."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.cluster.dra import DeviceId, ResourceSliceInfo
from policies.cluster.dra_claims import ResourceClaimInfo, ResourceClaimTemplateInfo
from policies.cluster.feature_gates import (
    GPUS_WITH_DRA_GATE,
    HOST_DEVICES_GATE,
    HOST_DEVICES_WITH_DRA_GATE,
)
from policies.cluster.gpu_operator import ClusterPolicyInfo
from policies.cluster.hardware import SOURCE_ALLOCATABLE, SOURCE_NFD_LABEL, SOURCE_NODE_FEATURE
from policies.cluster.kinds import (
    CLUSTER_POLICY,
    KUBEVIRT,
    NODE,
    NODE_FEATURE,
    POD,
    VIRTUAL_MACHINE,
    VIRTUAL_MACHINE_INSTANCE,
    WATCHED_KINDS,
    group_kind_of,
)
from policies.cluster.kubevirt import KubeVirtInfo, VMIInfo, VMInfo
from policies.cluster.nodes import NodeInfo
from policies.cluster.pciids import PciId
from policies.cluster.pods import PodInfo
from policies.cluster.view import HOSTNAME_LABEL, ClusterView
from policies.cluster.workload import (
    GPU_PRESENT_LABEL,
    MIG_CONFIG_LABEL,
    OPERANDS_DEPLOY_LABEL,
    VFIO_MANAGER_DEPLOY_LABEL,
    VGPU_CONFIG_LABEL,
    WORKLOAD_LABEL,
)
from policies.registry import ALL_POLICIES, POLICIES_BY_ID
from policies.rules import passthrough_provider, permitted_hardware, workload_switch
from policies.rules.cordon_sole_provider import POLICY as CORDON_SOLE_PROVIDER
from policies.rules.extended_claim_forged import ANNOTATION as EXTENDED_CLAIM_ANNOTATION
from policies.state.cluster import ClusterState
from policies.vocabulary.requests import AdmissionRequest
from tests.builders import (
    Obj,
    cluster_policy,
    controller,
    cordoned,
    dead_node,
    gpu_pod,
    instancetype,
    judged_by,
    kubevirt,
    new_pod,
    node,
    node_feature,
    nvidia_driver,
    pod,
    request,
    state_of,
    vm,
    vm_pool,
    vm_replica_set,
    vmi,
    with_labels,
    with_spec,
)
from tests.dra_builders import (
    GPU_CLASS,
    VFIO_CLASS,
    claim_pod,
    claim_template,
    claim_vm,
    claim_vmi,
    device_class,
    gpu,
    resource_claim,
    resource_slice,
)
from tests.samples import DISALLOWED, Sample, all_samples
from webhook.state.files import read_objects

RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
RTX_5090_RAW = "nvidia.com/2b85"
RTX_5090_LOWER = "nvidia.com/gb202_geforce_rtx_5090"
T4 = "nvidia.com/TU104GL_TESLA_T4"
NVIDIA_5090 = PciId("10de", "2b85")
NVIDIA_3090 = PciId("10de", "2204")
NFD_5090 = "feature.node.kubernetes.io/pci-0300_10de_2b85.present"


def switch_to_passthrough(name: str = "gpu1") -> AdmissionRequest:
    base = node(name)
    return request(
        "UPDATE",
        with_labels(base, {WORKLOAD_LABEL: "vm-passthrough"}),
        with_labels(base, {WORKLOAD_LABEL: "container"}),
    )


def node_update(
    name: str, changes: dict[str, str], labels: dict[str, str] | None = None
) -> AdmissionRequest:
    """A node UPDATE that sets ``changes`` on top of ``labels``."""
    base = node(name, labels=labels)
    return request("UPDATE", with_labels(base, dict(changes)), base)


def switch_blocked(state: ClusterView, name: str = "gpu1") -> bool:
    return bool(workload_switch.check(switch_to_passthrough(name), state))


def vm_findings(state: ClusterView, device: str = RTX_5090) -> list[str]:
    review = request("CREATE", vm("gpu-fedora", gpus=[device]))
    return [f.message for f in passthrough_provider.check(review, state)]


def hardware(state: ClusterState, pci: PciId) -> dict[str, set[str]]:
    return {name: set(sources) for name, sources in state.nodes_with_hardware(pci).items()}


# --- pods -----------------------------------------------------------------------------------------


def test_a_deleted_gpu_pod_no_longer_blocks_the_switch() -> None:
    state = state_of(gpu_pod("train", "gpu1"), gpu_pod("infer", "gpu1"))
    assert switch_blocked(state)
    state.delete(POD, "ml", "train")
    assert [p.key for p in state.gpu_pods_on("gpu1")] == ["ml/infer"]
    assert switch_blocked(state)
    state.delete_object(gpu_pod("infer", "gpu1"))
    assert state.gpu_pods_on("gpu1") == []
    assert state.pods_on("gpu1") == []
    assert not switch_blocked(state)


def test_a_gpu_pod_that_finishes_no_longer_blocks_but_stays_on_its_node() -> None:
    state = state_of(gpu_pod("train", "gpu1"))
    state.upsert(gpu_pod("train", "gpu1", phase="Succeeded"))
    assert not switch_blocked(state)
    assert [p.key for p in state.pods_on("gpu1")] == ["ml/train"]


def test_a_gpu_pod_bound_after_it_was_seen_starts_blocking() -> None:
    state = state_of(gpu_pod("train", ""))
    assert not switch_blocked(state)
    state.upsert(gpu_pod("train", "gpu1", phase="Pending", initialized=False))
    assert switch_blocked(state)


def test_an_initializing_pod_stops_blocking_when_its_init_gpu_is_released() -> None:
    state = state_of(
        pod("warm", "gpu1", init_limits={"nvidia.com/gpu": "1"}, phase="Pending", initialized=False)
    )
    assert switch_blocked(state)
    state.upsert(
        pod("warm", "gpu1", init_limits={"nvidia.com/gpu": "1"}, phase="Running", initialized=True)
    )
    assert not switch_blocked(state)


def test_pods_no_policy_reads_are_counted_not_kept() -> None:
    state = state_of(pod("web", "gpu1"), pod("web2", "gpu1"), gpu_pod("train", "gpu1"))
    assert [p.key for p in state.pods_on("gpu1")] == ["ml/train"]
    assert state.counts()["Pod"] == 3
    assert state.keys(POD) == {("ml", "web"), ("ml", "web2"), ("ml", "train")}
    state.delete(POD, "ml", "web")
    assert state.counts()["Pod"] == 2


def test_operand_pods_without_gpus_are_kept_on_their_node() -> None:
    state = state_of(
        pod("nvidia-vfio-manager-x", "gpu1", namespace="gpu-operator", app="nvidia-vfio-manager")
    )
    assert [p.key for p in state.pods_on("gpu1")] == ["gpu-operator/nvidia-vfio-manager-x"]
    assert state.gpu_pods_on("gpu1") == []


# --- nodes: providers and health ------------------------------------------------------------------


def test_a_node_turning_not_ready_drops_out_of_healthy_provider_count() -> None:
    state = state_of(node("omen2", allocatable={RTX_5090: "1"}))
    assert state.healthy_provider_count(RTX_5090) == 1
    assert vm_findings(state) == []
    state.upsert(dead_node("omen2", allocatable={RTX_5090: "1"}))
    assert state.healthy_provider_count(RTX_5090) == 0
    assert state.providers_of(RTX_5090) == ["omen2"]
    (message,) = vm_findings(state)
    assert "omen2 advertises it but is NotReady" in message
    state.upsert(node("omen2", allocatable={RTX_5090: "1"}))
    assert state.healthy_provider_count(RTX_5090) == 1
    assert vm_findings(state) == []


@pytest.mark.parametrize(
    "unhealthy",
    [
        pytest.param(node("omen2", unschedulable=True, allocatable={RTX_5090: "1"}), id="cordoned"),
        pytest.param(
            node(
                "omen2",
                allocatable={RTX_5090: "1"},
                taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}],
            ),
            id="tainted not-ready",
        ),
        pytest.param(
            node("omen2", ready="False", reason="KubeletNotReady", allocatable={RTX_5090: "1"}),
            id="Ready False",
        ),
    ],
)
def test_a_node_that_becomes_unhealthy_and_recovers_moves_in_and_out_of_the_healthy_index(
    unhealthy: Obj,
) -> None:
    state = state_of(
        node("omen2", allocatable={RTX_5090: "1"}), node("omen3", allocatable={RTX_5090: "1"})
    )
    assert state.healthy_provider_count(RTX_5090) == 2
    state.upsert(unhealthy)
    assert state.healthy_provider_count(RTX_5090) == 1
    assert state.providers_of(RTX_5090) == ["omen2", "omen3"]
    state.upsert(node("omen2", allocatable={RTX_5090: "1"}))
    assert state.healthy_provider_count(RTX_5090) == 2


def test_a_deleted_node_removes_its_hardware_and_providers() -> None:
    state = state_of(node("omen2", labels={NFD_5090: "true"}, allocatable={RTX_5090: "1"}))
    assert hardware(state, NVIDIA_5090) == {"omen2": {SOURCE_NFD_LABEL, SOURCE_ALLOCATABLE}}
    state.delete(NODE, "", "omen2")
    assert state.node("omen2") is None
    assert state.nodes() == []
    assert state.providers_of(RTX_5090) == []
    assert state.healthy_provider_count(RTX_5090) == 0
    assert state.advertised_like(RTX_5090) == []
    assert state.advertised_for_pci(NVIDIA_5090) == []
    assert hardware(state, NVIDIA_5090) == {}
    assert state.known_hardware("10de") == []
    assert vm_findings(state) == [f"{RTX_5090} (gpus[gpu1]): no node advertises it"]


def test_a_deleted_node_leaves_the_other_providers_of_its_resources() -> None:
    state = state_of(
        node("omen2", allocatable={RTX_5090: "1"}),
        node("omen3", labels={NFD_5090: "true"}, allocatable={RTX_5090: "1"}),
    )
    state.delete(NODE, "", "omen2")
    assert state.providers_of(RTX_5090) == ["omen3"]
    assert state.healthy_provider_count(RTX_5090) == 1
    assert state.advertised_like(RTX_5090_LOWER) == [RTX_5090]
    assert state.advertised_for_pci(NVIDIA_5090) == [RTX_5090]
    assert hardware(state, NVIDIA_5090) == {"omen3": {SOURCE_NFD_LABEL, SOURCE_ALLOCATABLE}}


def test_a_node_update_that_drops_a_resource_stops_advertising_it() -> None:
    state = state_of(node("omen2", allocatable={RTX_5090: "1", T4: "1"}))
    state.upsert(node("omen2", allocatable={T4: "1", RTX_5090: "0"}))
    assert state.providers_of(RTX_5090) == []
    assert state.advertised_like(RTX_5090) == []
    assert state.advertised_for_pci(NVIDIA_5090) == []
    assert hardware(state, NVIDIA_5090) == {}
    assert state.providers_of(T4) == ["omen2"]


def test_advertised_names_stay_until_the_last_provider_goes() -> None:
    state = state_of(
        node("a", allocatable={RTX_5090: "1"}), node("b", allocatable={RTX_5090_LOWER: "1"})
    )
    assert state.advertised_like(RTX_5090) == [RTX_5090, RTX_5090_LOWER]
    state.upsert(node("b"))
    assert state.advertised_like(RTX_5090) == [RTX_5090]
    state.upsert(node("b", allocatable={RTX_5090: "1"}))
    state.delete(NODE, "", "a")
    assert state.advertised_like(RTX_5090_LOWER) == [RTX_5090]


def test_a_raw_id_provider_is_indexed_under_its_pci_id_until_it_goes() -> None:
    state = state_of(node("omen2", allocatable={RTX_5090_RAW: "1"}))
    assert state.advertised_for_pci(NVIDIA_5090) == [RTX_5090_RAW]
    state.upsert(node("omen2", allocatable={RTX_5090: "1"}))
    assert state.advertised_for_pci(NVIDIA_5090) == [RTX_5090]


# --- hardware from labels and NodeFeatures --------------------------------------------------------


def test_a_node_losing_its_nfd_label_loses_that_hardware() -> None:
    state = state_of(node("omen2", labels={NFD_5090: "true"}))
    assert hardware(state, NVIDIA_5090) == {"omen2": {SOURCE_NFD_LABEL}}
    state.upsert(node("omen2"))
    assert hardware(state, NVIDIA_5090) == {}
    assert state.known_hardware("10de") == []


def test_a_deleted_node_feature_removes_its_hardware() -> None:
    state = state_of(node("omen2"), node_feature("omen2", [("0300", "10de", "2b85")]))
    assert hardware(state, NVIDIA_5090) == {"omen2": {SOURCE_NODE_FEATURE}}
    state.delete(NODE_FEATURE, "node-feature-discovery", "omen2")
    assert hardware(state, NVIDIA_5090) == {}
    assert state.known_hardware("10de") == []


def test_a_deleted_node_feature_leaves_the_nodes_own_hardware() -> None:
    state = state_of(
        node("omen2", labels={NFD_5090: "true"}), node_feature("omen2", [("0300", "10de", "2b85")])
    )
    assert hardware(state, NVIDIA_5090) == {"omen2": {SOURCE_NFD_LABEL, SOURCE_NODE_FEATURE}}
    state.delete_object(node_feature("omen2", []))
    assert hardware(state, NVIDIA_5090) == {"omen2": {SOURCE_NFD_LABEL}}


def test_a_node_update_keeps_the_hardware_of_its_node_feature() -> None:
    state = state_of(node_feature("omen2", [("0300", "10de", "2b85")]), node("omen2"))
    state.upsert(dead_node("omen2"))
    assert hardware(state, NVIDIA_5090) == {"omen2": {SOURCE_NODE_FEATURE}}


def test_a_node_feature_update_replaces_its_devices() -> None:
    state = state_of(node_feature("omen2", [("0300", "10de", "2b85")]))
    state.upsert(node_feature("omen2", [("0300", "10de", "2204")]))
    assert hardware(state, NVIDIA_5090) == {}
    assert hardware(state, NVIDIA_3090) == {"omen2": {SOURCE_NODE_FEATURE}}
    assert state.known_hardware("10de") == [NVIDIA_3090]


def test_the_permitted_device_policy_follows_hardware_changes() -> None:
    cr = request("CREATE", kubevirt([("10de:2b85", RTX_5090)]))
    state = state_of(node("omen2", allocatable={RTX_5090: "1"}))
    assert permitted_hardware.check(cr, state) == []
    state.delete(NODE, "", "omen2")
    (finding,) = permitted_hardware.check(cr, state)
    assert "no node has this device" in finding.message
    state.upsert(node_feature("omen2", [("0300", "10de", "2b85")]))
    (finding,) = permitted_hardware.check(cr, state)
    assert "no node has this device" not in finding.message


# --- VMs, VMIs, KubeVirt and ClusterPolicy --------------------------------------------------------


def test_vms_using_follows_updates_and_deletes() -> None:
    state = state_of(vm("a", gpus=[RTX_5090]), vm("b", host_devices=[RTX_5090]))
    assert [v.key for v in state.vms_using(RTX_5090)] == ["vms/a", "vms/b"]
    state.upsert(vm("a", gpus=[T4]))
    assert [v.key for v in state.vms_using(RTX_5090)] == ["vms/b"]
    assert [v.key for v in state.vms_using(T4)] == ["vms/a"]
    state.delete(VIRTUAL_MACHINE, "vms", "b")
    assert state.vms_using(RTX_5090) == []


def test_entries_that_use_a_claim_are_no_users_of_a_device_plugin_resource() -> None:
    # KubeVirt's DRA entries have no deviceName: indexed under "", every such VM would look like
    # a user of whatever resourceName is "" (an entry of permittedHostDevices without one).
    state = state_of(
        claim_vm("a", template="rtx5090-vfio"),
        claim_vmi("b", claim="tower1-3090"),
        vm("c", gpus=[RTX_5090]),
    )
    assert state.vms_using("") == []
    assert state.vmis_using("") == []
    assert [v.key for v in state.vms_using(RTX_5090)] == ["vms/c"]
    state.upsert(vm("a", gpus=[RTX_5090]))
    assert [v.key for v in state.vms_using(RTX_5090)] == ["vms/a", "vms/c"]
    state.upsert(claim_vm("a", template="rtx5090-vfio"))
    assert [v.key for v in state.vms_using(RTX_5090)] == ["vms/c"]


def test_the_gates_an_entry_needs_follow_updates_and_deletes() -> None:
    state = state_of(claim_vm("a", template="t"), claim_vmi("b", claim="c"))
    assert [v.key for v in state.vms_needing_gate(GPUS_WITH_DRA_GATE)] == ["vms/a"]
    assert state.vms_needing_gate(HOST_DEVICES_GATE) == []
    # hostDevices[] from a claim need their DRA gate and, like any hostDevices[], HostDevices
    assert [v.key for v in state.vmis_needing_gate(HOST_DEVICES_WITH_DRA_GATE)] == ["vms/b"]
    assert [v.key for v in state.vmis_needing_gate(HOST_DEVICES_GATE)] == ["vms/b"]
    assert state.vmis_needing_gate(GPUS_WITH_DRA_GATE) == []
    state.upsert(vm("a", gpus=[RTX_5090]))
    assert state.vms_needing_gate(GPUS_WITH_DRA_GATE) == []
    state.delete(VIRTUAL_MACHINE_INSTANCE, "vms", "b")
    assert state.vmis_needing_gate(HOST_DEVICES_WITH_DRA_GATE) == []
    assert state.vmis_needing_gate(HOST_DEVICES_GATE) == []


def test_vmis_on_follows_updates_and_deletes() -> None:
    state = state_of(vmi("a", node_name="omen2"), vmi("b", node_name="omen2"))
    assert [v.key for v in state.vmis_on("omen2")] == ["vms/a", "vms/b"]
    state.upsert(vmi("a", node_name="omen3"))
    assert [v.key for v in state.vmis_on("omen2")] == ["vms/b"]
    assert [v.key for v in state.vmis_on("omen3")] == ["vms/a"]
    state.delete(VIRTUAL_MACHINE_INSTANCE, "vms", "b")
    assert state.vmis_on("omen2") == []


def test_a_deleted_kubevirt_cr_takes_its_permissions_with_it() -> None:
    state = state_of(kubevirt([("10de:2204", "nvidia.com/GA102_GEFORCE_RTX_3090")]))
    (message,) = vm_findings(state)
    assert "not in permittedHostDevices" in message
    state.delete(KUBEVIRT, "kubevirt", "kubevirt")
    assert state.kubevirt() is None
    (message,) = vm_findings(state)
    assert "not in permittedHostDevices" not in message


def test_a_deleted_cluster_policy_leaves_labels_at_face_value() -> None:
    base = node("gpu1")
    review = request(
        "UPDATE",
        with_labels(base, {WORKLOAD_LABEL: None}),
        with_labels(base, {WORKLOAD_LABEL: "container"}),
    )
    state = state_of(cluster_policy(True, "vm-passthrough"), gpu_pod("train", "gpu1"))
    assert workload_switch.check(review, state)
    state.upsert(cluster_policy(False, "vm-passthrough"))
    assert not workload_switch.check(review, state)
    state.upsert(cluster_policy(True, "vm-passthrough"))
    state.delete(CLUSTER_POLICY, "", "cluster-policy")
    assert state.cluster_policy() is None
    assert not workload_switch.check(review, state)


def test_vmis_using_follows_updates_and_deletes() -> None:
    state = state_of(vmi("a", gpus=[RTX_5090]), vmi("b", host_devices=[RTX_5090, T4]))
    assert [v.key for v in state.vmis_using(RTX_5090)] == ["vms/a", "vms/b"]
    state.upsert(vmi("a", gpus=[T4]))
    assert [v.key for v in state.vmis_using(RTX_5090)] == ["vms/b"]
    assert [v.key for v in state.vmis_using(T4)] == ["vms/a", "vms/b"]
    state.delete(VIRTUAL_MACHINE_INSTANCE, "vms", "b")
    assert state.vmis_using(RTX_5090) == []
    assert [v.key for v in state.vmis_using(T4)] == ["vms/a"]


def test_the_host_device_users_follow_updates_and_deletes() -> None:
    state = state_of(
        vm("a", host_devices=[RTX_5090]),
        vm("b", gpus=[RTX_5090]),
        vmi("a", host_devices=[RTX_5090]),
        vmi("b", gpus=[RTX_5090]),
    )
    assert [v.key for v in state.vms_needing_gate(HOST_DEVICES_GATE)] == ["vms/a"]
    assert [v.key for v in state.vmis_needing_gate(HOST_DEVICES_GATE)] == ["vms/a"]
    state.upsert(vm("a", gpus=[RTX_5090]))
    state.upsert(vmi("b", gpus=[T4], host_devices=[RTX_5090]))
    assert state.vms_needing_gate(HOST_DEVICES_GATE) == []
    assert [v.key for v in state.vmis_needing_gate(HOST_DEVICES_GATE)] == ["vms/a", "vms/b"]
    state.delete(VIRTUAL_MACHINE_INSTANCE, "vms", "a")
    assert [v.key for v in state.vmis_needing_gate(HOST_DEVICES_GATE)] == ["vms/b"]


def test_nodes_labelled_follows_label_changes_and_deletes() -> None:
    state = state_of(
        node("a", labels={WORKLOAD_LABEL: "vm-passthrough"}),
        node("b", labels={WORKLOAD_LABEL: "vm-passthrough", HOSTNAME_LABEL: "b.lab"}),
    )
    assert state.nodes_labelled(WORKLOAD_LABEL, "vm-passthrough") == ["a", "b"]
    assert state.nodes_labelled(HOSTNAME_LABEL, "a") == ["a"]
    assert state.nodes_labelled(HOSTNAME_LABEL, "b") == []
    assert state.nodes_labelled(HOSTNAME_LABEL, "b.lab") == ["b"]
    state.upsert(node("a", labels={WORKLOAD_LABEL: "container"}))
    assert state.nodes_labelled(WORKLOAD_LABEL, "vm-passthrough") == ["b"]
    assert state.nodes_labelled(WORKLOAD_LABEL, "container") == ["a"]
    state.delete(NODE, "", "b")
    assert state.nodes_labelled(WORKLOAD_LABEL, "vm-passthrough") == []
    assert state.nodes_labelled(HOSTNAME_LABEL, "b.lab") == []


def test_nodes_labelled_refuses_a_label_it_does_not_index() -> None:
    with pytest.raises(ValueError, match="not indexed"):
        state_of().nodes_labelled("topology.kubernetes.io/zone", "a")


@pytest.mark.parametrize(
    ("labels", "allocatable", "listed"),
    [
        pytest.param({GPU_PRESENT_LABEL: "true"}, {}, True, id="gpu.present true"),
        pytest.param({GPU_PRESENT_LABEL: "false"}, {}, False, id="gpu.present false"),
        pytest.param(
            {"feature.node.kubernetes.io/pci-0300_10de.present": "true"},
            {},
            True,
            id="the NFD label gpu.present follows",
        ),
        pytest.param({}, {"nvidia.com/gpu": "1"}, True, id="an NVIDIA resource in allocatable"),
        pytest.param({}, {"nvidia.com/gpu": "0"}, False, id="an NVIDIA resource at 0"),
        pytest.param({}, {"intel.com/qat": "1"}, False, id="another vendor's resource"),
        pytest.param({}, {}, False, id="a node without GPUs"),
        pytest.param(
            {GPU_PRESENT_LABEL: "true", WORKLOAD_LABEL: "container"},
            {},
            False,
            id="a GPU node with a valid workload label",
        ),
        pytest.param(
            {GPU_PRESENT_LABEL: "true", WORKLOAD_LABEL: "vm-passthru"},
            {},
            True,
            id="a GPU node with an invalid workload label follows the default",
        ),
    ],
)
def test_gpu_nodes_without_workload_label(
    labels: dict[str, str], allocatable: dict[str, str], listed: bool
) -> None:
    state = state_of(node("g", labels=labels, allocatable=allocatable))
    assert state.gpu_nodes_without_workload_label() == (["g"] if listed else [])
    state.upsert(node("g", labels={**labels, WORKLOAD_LABEL: "vm-vgpu"}, allocatable=allocatable))
    assert state.gpu_nodes_without_workload_label() == []
    state.upsert(node("g", labels=labels, allocatable=allocatable))
    state.delete(NODE, "", "g")
    assert state.gpu_nodes_without_workload_label() == []


def test_the_cordon_policy_follows_a_second_provider_coming_and_going() -> None:
    tower1 = node("tower1", allocatable={RTX_5090: "1"})
    review = request("UPDATE", cordoned(tower1), tower1)
    state = state_of(tower1, vmi("v", node_name="tower1", gpus=[RTX_5090]))
    assert CORDON_SOLE_PROVIDER.check(review, state)
    state.upsert(node("tower2", allocatable={RTX_5090: "1"}))
    assert not CORDON_SOLE_PROVIDER.check(review, state)
    state.upsert(dead_node("tower2", allocatable={RTX_5090: "1"}))
    assert CORDON_SOLE_PROVIDER.check(review, state)


# --- policies never scan the cluster --------------------------------------------------------------


class ScanFreeState(ClusterState):
    """A ClusterState whose whole-cluster listings fail: admission checks must use the indexes."""

    def nodes(self) -> Sequence[NodeInfo]:
        raise AssertionError("nodes() scanned during admission")

    def pods(self) -> Sequence[PodInfo]:
        raise AssertionError("pods() scanned during admission")

    def vms(self) -> Sequence[VMInfo]:
        raise AssertionError("vms() scanned during admission")

    def vmis(self) -> Sequence[VMIInfo]:
        raise AssertionError("vmis() scanned during admission")

    def kubevirts(self) -> Sequence[KubeVirtInfo]:
        raise AssertionError("kubevirts() scanned during admission")

    def cluster_policies(self) -> Sequence[ClusterPolicyInfo]:
        raise AssertionError("cluster_policies() scanned during admission")

    def resource_slices(self) -> Sequence[ResourceSliceInfo]:
        raise AssertionError("resource_slices() scanned during admission")

    def claims(self) -> Sequence[ResourceClaimInfo]:
        raise AssertionError("claims() scanned during admission")

    def claim_templates(self) -> Sequence[ResourceClaimTemplateInfo]:
        raise AssertionError("claim_templates() scanned during admission")


def with_annotation(obj: Obj, key: str, value: str) -> Obj:
    obj["metadata"]["annotations"] = {key: value}
    return obj


def scan_free_state(*objects: Obj) -> ScanFreeState:
    state = ScanFreeState()
    for obj in objects:
        state.upsert(obj)
    return state


INCIDENT = [
    cluster_policy(True, "container"),
    node(
        "tower1",
        labels={WORKLOAD_LABEL: "vm-passthrough", GPU_PRESENT_LABEL: "true"},
        allocatable={"nvidia.com/GA102_GEFORCE_RTX_3090": "1"},
    ),
    node("omen1", labels={GPU_PRESENT_LABEL: "true"}, allocatable={"nvidia.com/gpu": "4"}),
    gpu_pod("jupyter", "omen1"),
    vm("win11-gaming", gpus=["nvidia.com/GA102_GEFORCE_RTX_3090"], eviction_strategy="LiveMigrate"),
    vmi(
        "win11-gaming",
        node_name="tower1",
        gpus=["nvidia.com/GA102_GEFORCE_RTX_3090"],
        owner="win11-gaming",
    ),
    vm("old-ci-runner", host_devices=["nvidia.com/GA102_GEFORCE_RTX_3090"]),
    dead_node("omen2", labels={NFD_5090: "true"}, allocatable={RTX_5090: "1"}),
    *(dead_node(f"gpu{i}", allocatable={RTX_5090: "1"}) for i in range(3, 8)),
    node("gpu1", allocatable={"nvidia.com/gpu": "2", RTX_5090_RAW: "1"}),
    gpu_pod("train", "gpu1"),
    kubevirt(
        [("10de:2b85", RTX_5090), ("10de:2330", "nvidia.com/GH100_H100_SXM5_80GB")],
        feature_gates=("IOMMUFD",),  # no node advertises devices.kubevirt.io/iommufd
    ),
    node_feature("gpu1", [("0300", "10de", "2204")]),
    vm("gpu-fedora", gpus=[RTX_5090]),
    vmi("gpu-fedora", node_name="omen2", gpus=[RTX_5090], owner="gpu-fedora"),
    claim_vm("gpu-fedora-dra", template="rtx5090-vfio"),
]


ADMIN = {"resource.kubernetes.io/admin-access": "true"}
SCAN_FREE_REVIEWS = [
    pytest.param(switch_to_passthrough("gpu1"), id="a workload switch"),
    pytest.param(
        request("CREATE", vm("v", gpus=[RTX_5090], host_devices=[RTX_5090_RAW])),
        id="a VM with a dead provider and a raw id",
    ),
    pytest.param(
        request("CREATE", vm("v", gpus=["nvidia.com/gb202_geforce_rtx_5090"])),
        id="a VM with a case-mismatched name",
    ),
    pytest.param(request("CREATE", vmi("v", gpus=[RTX_5090])), id="a VMI with a dead provider"),
    pytest.param(
        request("CREATE", vm("v", gpus=["nvidia.com/A10-12Q"])),
        id="a VM with a vGPU profile no node offers",
    ),
    pytest.param(
        request(
            "UPDATE",
            kubevirt([("10de:2330", "nvidia.com/h100"), ("bad", RTX_5090)]),
            kubevirt(),
        ),
        id="a KubeVirt CR with dead entries",
    ),
    pytest.param(
        node_update("gpu1", {VFIO_MANAGER_DEPLOY_LABEL: "true"}),
        id="vfio-manager deployed under a GPU pod",
    ),
    pytest.param(
        node_update("gpu1", {MIG_CONFIG_LABEL: "all-1g.10gb"}),
        id="a MIG layout change under a GPU pod",
    ),
    pytest.param(
        node_update(
            "tower1",
            {VGPU_CONFIG_LABEL: "A10-4Q"},
            {WORKLOAD_LABEL: "vm-vgpu", VGPU_CONFIG_LABEL: "A10-12Q"},
        ),
        id="a vGPU profile change under a VM on the node",
    ),
    pytest.param(
        node_update(
            "tower1",
            {WORKLOAD_LABEL: "container"},
            {WORKLOAD_LABEL: "vm-passthrough", GPU_PRESENT_LABEL: "true"},
        ),
        id="a node leaving vm-passthrough under a GPU VM",
    ),
    pytest.param(
        node_update(
            "tower1",
            {OPERANDS_DEPLOY_LABEL: "false"},
            {WORKLOAD_LABEL: "vm-passthrough", GPU_PRESENT_LABEL: "true"},
        ),
        id="a node losing its operands under a GPU VM",
    ),
    pytest.param(
        request(
            "UPDATE",
            cordoned(node("tower1", allocatable={"nvidia.com/GA102_GEFORCE_RTX_3090": "1"})),
            node("tower1", allocatable={"nvidia.com/GA102_GEFORCE_RTX_3090": "1"}),
        ),
        id="a cordon of the only healthy provider",
    ),
    pytest.param(
        node_update("omen1", {WORKLOAD_LABEL: "vm_passthrough"}, {GPU_PRESENT_LABEL: "true"}),
        id="a workload label that names no mode",
    ),
    pytest.param(
        request(
            "DELETE", None, node("tower1", allocatable={"nvidia.com/GA102_GEFORCE_RTX_3090": "1"})
        ),
        id="a delete of the only healthy provider",
    ),
    pytest.param(
        request("CREATE", vm("v", gpus=[RTX_5090], eviction_strategy="LiveMigrate")),
        id="a GPU VM with LiveMigrate",
    ),
    pytest.param(
        request("CREATE", vm("v", host_devices=["nvidia.com/GA102_GEFORCE_RTX_3090"])),
        id="a VM whose device is advertised but not permitted",
    ),
    pytest.param(
        request(
            "UPDATE",
            kubevirt([("10de:2b85", RTX_5090)], feature_gates=()),
            kubevirt([("10de:2b85", RTX_5090), ("10de:2204", "nvidia.com/GA102_GEFORCE_RTX_3090")]),
        ),
        id="a KubeVirt CR losing an entry and the gate VMs use",
    ),
    pytest.param(
        request("UPDATE", kubevirt(), kubevirt(feature_gates=("HostDevices", "GPUsWithDRA"))),
        id="a KubeVirt CR losing the DRA gate a VM uses",
    ),
    pytest.param(
        request("CREATE", claim_vm("v", template="rtx5090-vfio")),
        id="a VM taking its GPU from a claim without the DRA gate",
    ),
    pytest.param(
        request(
            "UPDATE",
            kubevirt(feature_gates=("HostDevices", "GPUsWithDRA"), disabled_gates=("GPUsWithDRA",)),
            kubevirt(disabled_gates=("GPUsWithDRA",)),
        ),
        id="a KubeVirt CR update that puts a gate in both lists",
    ),
    pytest.param(
        request(
            "UPDATE",
            kubevirt([("10de:2204", "nvidia.com/GA102_GEFORCE_RTX_3090")], external=False),
            kubevirt([("10de:2204", "nvidia.com/GA102_GEFORCE_RTX_3090")]),
        ),
        id="an externalResourceProvider flip",
    ),
    pytest.param(
        request("UPDATE", cluster_policy(False, "container"), cluster_policy(True, "container")),
        id="sandbox workloads off under a GPU VM",
    ),
    pytest.param(
        request(
            "UPDATE", cluster_policy(True, "vm-passthrough"), cluster_policy(True, "container")
        ),
        id="a default moving unlabelled GPU nodes under GPU pods",
    ),
    pytest.param(
        request(
            "UPDATE",
            with_spec(cluster_policy(True, "container"), {"ccManager": {"enabled": True}}),
            cluster_policy(True, "container"),
        ),
        id="the CC manager enabled over a GPU VM's node",
    ),
    pytest.param(
        request(
            "UPDATE",
            with_spec(cluster_policy(False, "container"), {"driver": {"version": "580.95.05"}}),
            with_spec(cluster_policy(False, "container"), {"driver": {"version": "570.172.08"}}),
        ),
        id="a new driver version over GPU pods",
    ),
    pytest.param(
        request(
            "CREATE",
            new_pod("p", limits={"nvidia.com/gpu": "1"}, node_selector={HOSTNAME_LABEL: "tower1"}),
        ),
        id="a GPU pod pinned by hostname to a vm-passthrough node",
    ),
    pytest.param(
        request(
            "CREATE",
            new_pod(
                "p",
                limits={"nvidia.com/gpu": "1"},
                node_selector={WORKLOAD_LABEL: "vm-passthrough"},
            ),
        ),
        id="a GPU pod pinned by the workload label",
    ),
    pytest.param(
        request(
            "CREATE",
            controller(
                "Deployment",
                new_pod(
                    "p", limits={"nvidia.com/gpu": "1"}, node_selector={HOSTNAME_LABEL: "tower1"}
                ),
            ),
        ),
        id="a Deployment whose pods are pinned by hostname to a vm-passthrough node",
    ),
    pytest.param(
        request("CREATE", resource_claim("c", device_class="gpu.nvidia.io")),
        id="a DRA claim naming a DeviceClass that does not exist",
    ),
    pytest.param(
        request("CREATE", device_class("vfio.gpu.nvidia.com", VFIO_CLASS)),
        id="a DeviceClass no published device matches",
    ),
    pytest.param(
        request(
            "CREATE",
            {
                "apiVersion": "resource.k8s.io/v1beta2",
                "kind": "DeviceTaintRule",
                "metadata": {"name": "drain"},
                "spec": {
                    "deviceSelector": {},
                    "taint": {"key": "example.com/drain", "effect": "NoExecute"},
                },
            },
        ),
        id="a NoExecute DeviceTaintRule over every device",
    ),
    pytest.param(
        request(
            "UPDATE",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "m", "labels": ADMIN}},
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mon"}},
        ),
        id="a namespace labelled for DRA admin access",
    ),
    pytest.param(
        request(
            "CREATE",
            {
                "apiVersion": "hco.kubevirt.io/v1",
                "kind": "HyperConverged",
                "metadata": {
                    "name": "kubevirt-hyperconverged",
                    "namespace": "openshift-cnv",
                    "annotations": {"kubevirt.kubevirt.io/jsonpatch": "[{}]"},
                },
                "spec": {
                    "virtualization": {
                        "permittedHostDevices": {
                            "pciHostDevices": [
                                {"pciDeviceSelector": "10DE:2330", "resourceName": "nvidia.com/X"}
                            ]
                        }
                    }
                },
            },
        ),
        id="a HyperConverged permitting a device no node has, with a patch that does not apply",
    ),
    pytest.param(
        request("CREATE", with_annotation(resource_claim("c"), EXTENDED_CLAIM_ANNOTATION, "p")),
        id="a claim carrying the scheduler's extended-resource annotation",
    ),
    pytest.param(
        request(
            "CREATE",
            {
                "apiVersion": "nvidia.com/v1alpha1",
                "kind": "GPUCluster",
                "metadata": {"name": "gpu-cluster"},
                "spec": {"draDriver": {"featureGates": {"DynamicMIG": True, "MPSSupport": True}}},
            },
        ),
        id="a GPUCluster turning on DRA driver gates that exclude each other",
    ),
    pytest.param(
        request("DELETE", None, node("omen1", labels={GPU_PRESENT_LABEL: "true"})),
        id="a node deleted under a GPU pod",
    ),
    pytest.param(
        request("DELETE", None, cluster_policy(True, "container")),
        id="the ClusterPolicy deleted under GPU users",
    ),
]


@pytest.mark.parametrize("review", SCAN_FREE_REVIEWS)
def test_admission_checks_use_indexes_not_whole_cluster_listings(review: AdmissionRequest) -> None:
    state = scan_free_state(*INCIDENT)
    findings = [
        f
        for policy in ALL_POLICIES
        if judged_by(policy, review)
        for f in policy.check(review, state)
    ]
    assert findings, "the request should exercise the lookups of a policy that finds something"


@pytest.mark.parametrize("sample", all_samples(DISALLOWED), ids=lambda s: s.name)
def test_every_disallowed_sample_is_judged_without_a_whole_cluster_listing(
    sample: Sample,
) -> None:
    """Every policy, from its own samples: a policy added with its samples is held to the
    indexes with no row to add here (the table above adds cases on the incident cluster)."""
    objects = [dict(item.obj) for path in sample.state_args for item in read_objects(path)]
    state = scan_free_state(*objects)
    policy = POLICIES_BY_ID[sample.policy_id]
    findings = [
        finding
        for review in sample.requests()
        if judged_by(policy, review)
        for finding in policy.check(review, state)
    ]
    assert findings, f"{sample.name}: its policy should find something on its own state"


# --- incremental indexes equal a rebuild ----------------------------------------------------------


def _variants() -> list[Obj]:
    objects: list[Obj] = []
    for name in ("a", "b", "c"):
        objects += [
            node(name, allocatable={RTX_5090: "1"}),
            dead_node(name, allocatable={RTX_5090: "1", T4: "1"}),
            node(name, unschedulable=True, allocatable={RTX_5090_RAW: "2"}),
            node(name, labels={NFD_5090: "true"}, allocatable={RTX_5090_LOWER: "1"}),
            node(
                name,
                labels={"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3090"},
                allocatable={"nvidia.com/gpu": "2"},
            ),
            node(name, allocatable={RTX_5090: "0", T4: "1"}),
            node(name),
            node(name, labels={WORKLOAD_LABEL: "vm-passthrough", GPU_PRESENT_LABEL: "true"}),
            node(
                name,
                labels={
                    WORKLOAD_LABEL: "bogus",
                    "feature.node.kubernetes.io/pci-10de.present": "true",
                },
            ),
            node(
                name,
                labels={HOSTNAME_LABEL: f"{name}.lab", WORKLOAD_LABEL: "container"},
                allocatable={"nvidia.com/gpu": "1"},
            ),
        ]
    for name in ("p1", "p2", "p3"):
        objects += [
            gpu_pod(name, "a"),
            gpu_pod(name, "b", phase="Succeeded"),
            gpu_pod(name, "a", "nvidia.com/mig-1g.10gb", terminating=True),
            gpu_pod(name, "b", RTX_5090),
            pod(name, "a", init_limits={"nvidia.com/gpu": "1"}, phase="Pending", initialized=False),
            pod(name, "b", app="nvidia-vfio-manager"),
            pod(name, "a"),
            gpu_pod(name, ""),
        ]
    for name in ("a", "b"):
        objects += [
            node_feature(name, [("0300", "10de", "2b85")]),
            node_feature(name, [("0300", "10de", "2204"), ("0302", "10de", "1eb8")]),
            node_feature(name, []),
        ]
    extra = node_feature("a", [("0300", "10de", "2684")])
    extra["metadata"]["name"] = "a-extra"
    objects.append(extra)
    for name in ("v1", "v2"):
        objects += [
            vm(name, gpus=[RTX_5090]),
            vm(name, gpus=[RTX_5090_RAW], host_devices=[RTX_5090, T4]),
            vm(name, run_strategy="Halted"),
        ]
    for name in ("i1", "i2"):
        objects += [
            vmi(name, node_name="a", gpus=[RTX_5090]),
            vmi(name, node_name="b", host_devices=[T4], owner="v1"),
            vmi(name),
            vmi(name, node_name="a", gpus=[T4], host_devices=[RTX_5090], phase="Succeeded"),
        ]
    objects += [
        kubevirt([("10de:2b85", RTX_5090)]),
        kubevirt([("10de:1eb8", T4)], feature_gates=()),
        cluster_policy(True, "vm-passthrough"),
        cluster_policy(False, "container"),
        *(
            {
                "apiVersion": "nvidia.com/v1alpha1",
                "kind": "GPUCluster",
                "metadata": {"name": "gpu-cluster"},
                "spec": {"draDriver": {"featureGates": gates}},
            }
            for gates in ({}, {"PassthroughSupport": True})
        ),
        nvidia_driver("default", default=True),
        nvidia_driver("default", "580.95.05", default=True, maxParallelUpgrades=0),
        nvidia_driver("h100", node_selector={"nvidia.com/gpu.product": "H100"}),
    ]
    for version, devices in (("v1", [("10DE:2B85", RTX_5090)]), ("v1beta1", [])):
        objects.append(hyperconverged(version, devices))
    for name in ("t1", "t2"):
        objects += [
            instancetype(name, gpus=[RTX_5090]),
            instancetype(name, host_devices=[T4]),
            instancetype(name, gpus=[T4], namespace="vms"),
            instancetype(name, namespace="vms"),
            vm_replica_set(name, gpus=[RTX_5090]),
            vm_replica_set(name, replicas=0),
            vm_pool(name, gpus=[T4]),
            vm_pool(name, instancetype={"name": "t1"}, version="v1alpha1"),
            vm(f"v{name}", instancetype={"name": name}),
            vm(
                f"v{name}",
                gpus=[T4],
                instancetype={"kind": "VirtualMachineInstancetype", "name": "t1"},
            ),
        ]
    return objects + _dra_variants()


def hyperconverged(version: str, devices: list[tuple[str, str]]) -> Obj:
    """OpenShift Virtualization's HyperConverged, in either version's layout."""
    permitted = {
        "pciHostDevices": [{"pciDeviceSelector": s, "resourceName": r} for s, r in devices]
    }
    spec: Obj = (
        {"virtualization": {"permittedHostDevices": permitted}}
        if version == "v1"
        else {"permittedHostDevices": permitted}
    )
    return {
        "apiVersion": f"hco.kubevirt.io/{version}",
        "kind": "HyperConverged",
        "metadata": {"name": "kubevirt-hyperconverged", "namespace": "openshift-cnv"},
        "spec": spec,
    }


DRA_CLASSES = ("gpu.nvidia.com", "vfio.gpu.nvidia.com", "profiles")
VFIO_3090_IDS = {"vendorID": {"string": "0x10de"}, "deviceID": {"string": "0x2204"}}
DRA_CLAIMS = ("c1", "c2", "t1")


def _dra_variants() -> list[Obj]:
    """DRA objects sharing names, pools and nodes, so that updates and deletes cross paths."""
    profile = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
    objects = [
        device_class("gpu.nvidia.com", GPU_CLASS, extended="nvidia.com/gpu"),
        device_class("gpu.nvidia.com", GPU_CLASS),
        device_class("vfio.gpu.nvidia.com", VFIO_CLASS),
        device_class("vfio.gpu.nvidia.com", VFIO_CLASS, extended="nvidia.com/gpu"),
        device_class("profiles", profile),
    ]
    for node_name in ("a", "b"):
        objects += [
            resource_slice(f"{node_name}-1", node_name, [gpu("gpu-0"), gpu("gpu-1")]),
            resource_slice(
                f"{node_name}-1", node_name, [gpu("gpu-vfio-0", type_="vfio")], generation=2
            ),
            resource_slice(f"{node_name}-2", node_name, [gpu("gpu-2")], generation=2),
            resource_slice(f"{node_name}-2", "c", [gpu("gpu-2")], pool=node_name),
            # the same bus as gpu-0, with exact ids: they name that GPU, not its product name
            resource_slice(
                f"{node_name}-3",
                node_name,
                [gpu("gpu-vfio-1", type_="vfio", extra=VFIO_3090_IDS)],
                pool=f"{node_name}-vfio",
            ),
        ]
    objects.append(resource_slice("fabric", "", [gpu("nic-0", type_="vfio")], all_nodes=True))
    lost = {**gpu("gpu-2"), "taints": [{"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"}]}
    objects.append(resource_slice("a-2", "a", [lost], generation=2))
    for rule, selector, effect in (
        ("r1", {"pool": "b"}, "NoExecute"),
        ("r1", {"device": "gpu-2"}, "None"),
        ("r2", {}, "NoSchedule"),
    ):
        objects.append(
            {
                "apiVersion": "resource.k8s.io/v1beta2",
                "kind": "DeviceTaintRule",
                "metadata": {"name": rule},
                "spec": {"deviceSelector": selector, "taint": {"key": "k", "effect": effect}},
            }
        )
    for name in ("c1", "c2"):
        objects += [
            resource_claim(name),
            resource_claim(name, allocated=("a", "a", "gpu-0"), reserved_for=["p1"]),
            resource_claim(name, allocated=("b", "b", "gpu-vfio-0"), reserved_for=["p1", "p2"]),
        ]
    for name in ("p1", "p2"):
        objects += [
            claim_pod(name, "a", claim="c1"),
            claim_pod(name, "b", template="t1", claim="c2"),
        ]
    objects += [
        claim_template("t1", "ml"),
        claim_template("t1", "ml", device_class="gpu.nvidia.com"),
        claim_vm("v1", template="t1", namespace="ml"),
        claim_vm("v2", claim="c1", namespace="ml"),
        claim_vmi("i1", claim="c2", node_name="a", namespace="ml"),
        claim_vmi("i2", template="t1", namespace="ml"),
    ]
    return objects


VARIANTS = _variants() + [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml", **labels}}
    for labels in ({}, {"labels": ADMIN})
]
NODE_NAMES = ("a", "b", "c", "missing")
RESOURCES = (RTX_5090, RTX_5090_RAW, RTX_5090_LOWER, T4, "nvidia.com/gpu", "nvidia.com/unknown", "")
GATES = (HOST_DEVICES_GATE, GPUS_WITH_DRA_GATE, HOST_DEVICES_WITH_DRA_GATE)
PCI_IDS = (
    NVIDIA_5090,
    NVIDIA_3090,
    PciId("10de", "1eb8"),
    PciId("10de", "2684"),
    PciId("10de", "2330"),
)


def key_of(obj: Obj) -> tuple[Any, str, str]:
    meta = obj["metadata"]
    return (group_kind_of(obj), meta.get("namespace", ""), meta["name"])


def lookups(state: ClusterState) -> dict[str, Any]:
    """Every answer the view gives, for the probes the variants can touch."""
    out: dict[str, Any] = {
        "nodes": state.nodes(),
        "vms": state.vms(),
        "vmis": state.vmis(),
        "pods": state.pods(),
        "kubevirt": state.kubevirt(),
        "kubevirts": state.kubevirts(),
        "cluster_policy": state.cluster_policy(),
        "gpu_clusters": state.gpu_clusters(),
        "nvidia_drivers": state.nvidia_drivers(),
        "nodes_labelled gpu.present": state.nodes_labelled(GPU_PRESENT_LABEL, "true"),
        "hyperconvergeds": state.hyperconvergeds(),
        "hyperconverged": state.hyperconverged("openshift-cnv"),
        "kubevirts_in": state.kubevirts_in("kubevirt"),
        "known_hardware": state.known_hardware("10de"),
        "gpu_nodes_without_workload_label": state.gpu_nodes_without_workload_label(),
        **{f"vms_needing_gate {gate}": state.vms_needing_gate(gate) for gate in GATES},
        **{f"vmis_needing_gate {gate}": state.vmis_needing_gate(gate) for gate in GATES},
        "counts": state.counts(),
        "keys": {str(kind): state.keys(kind) for kind in WATCHED_KINDS},
        **{f"instancetype {n}": state.instancetype("vms", n) for n in ("t1", "t2", "t3")},
        **{f"cluster_instancetype {n}": state.cluster_instancetype(n) for n in ("t1", "t3")},
    }
    for name in NODE_NAMES:
        out[f"node {name}"] = state.node(name)
        out[f"gpu_pods_on {name}"] = state.gpu_pods_on(name)
        out[f"pods_on {name}"] = state.pods_on(name)
        out[f"vmis_on {name}"] = state.vmis_on(name)
        for host in (name, f"{name}.lab"):
            out[f"nodes_labelled hostname {host}"] = state.nodes_labelled(HOSTNAME_LABEL, host)
    for value in ("container", "vm-passthrough", "vm-vgpu", "bogus"):
        out[f"nodes_labelled workload {value}"] = state.nodes_labelled(WORKLOAD_LABEL, value)
    for resource in RESOURCES:
        out[f"vms_using {resource}"] = state.vms_using(resource)
        out[f"vmis_using {resource}"] = state.vmis_using(resource)
        out[f"providers_of {resource}"] = state.providers_of(resource)
        out[f"healthy_provider_count {resource}"] = state.healthy_provider_count(resource)
        out[f"advertised_like {resource}"] = state.advertised_like(resource)
    for pci in PCI_IDS:
        out[f"advertised_for_pci {pci}"] = state.advertised_for_pci(pci)
        out[f"nodes_with_hardware {pci}"] = dict(state.nodes_with_hardware(pci))
    out.update(dra_lookups(state))
    return out


def dra_lookups(state: ClusterState) -> dict[str, Any]:
    state.follow_device_taint_rules(lambda: True)
    out: dict[str, Any] = {
        "device_taint_rules": state.device_taint_rules(),
        "admin_access_namespaces": state.admin_access_namespaces(),
        "namespace ml": state.namespace("ml"),
        "device_taints": {d.id: state.device_taints(d) for d in state.published_devices()},
        "device_classes": state.device_classes(),
        "resource_slices": state.resource_slices(),
        "claims": state.claims(),
        "claim_templates": state.claim_templates(),
        "nodes_with_devices": state.nodes_with_devices("gpu.nvidia.com"),
        "extended providers": state.extended_resource_providers("nvidia.com/gpu"),
        "healthy extended": state.healthy_extended_resource_provider_count("nvidia.com/gpu"),
    }
    for name in (*NODE_NAMES, ""):
        out[f"devices_on {name}"] = state.devices_on(name)
        out[f"devices_on {name} nvidia"] = state.devices_on(name, "gpu.nvidia.com")
        out[f"dra_drivers_on {name}"] = state.dra_drivers_on(name)
        out[f"claims_allocated_on {name}"] = state.claims_allocated_on(name)
        out[f"may_keep_off {name}"] = state.may_keep_off(name)
        for device in ("gpu-0", "gpu-2", "gpu-vfio-0"):
            found = state.published_device(DeviceId("gpu.nvidia.com", name, device))
            out[f"published_device {name} {device}"] = found
        for class_name in DRA_CLASSES:
            out[f"class_devices_on {class_name} {name}"] = state.class_devices_on(class_name, name)
    for class_name in DRA_CLASSES:
        out[f"device_class {class_name}"] = state.device_class(class_name)
        out[f"class_device_counts {class_name}"] = state.class_device_counts(class_name)
        out[f"class_undecided {class_name}"] = state.class_undecided(class_name)
    for name in DRA_CLAIMS:
        out[f"claim {name}"] = state.claim("ml", name)
        out[f"claim_template {name}"] = state.claim_template("ml", name)
        for template in (False, True):
            out[f"claim_referrers {name} {template}"] = state.claim_referrers("ml", name, template)
    for name in ("p1", "p2"):
        out[f"pod {name}"] = state.pod("ml", name)
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(VARIANTS)), max_size=40))
def test_any_sequence_of_upserts_and_deletes_leaves_the_indexes_of_a_fresh_load(
    operations: list[tuple[bool, Obj]],
) -> None:
    state = ClusterState()
    alive: dict[tuple[Any, str, str], Obj] = {}
    for delete, obj in operations:
        if delete:
            state.delete_object(obj)
            alive.pop(key_of(obj), None)
        else:
            state.upsert(copy.deepcopy(obj))
            alive[key_of(obj)] = obj
    assert lookups(state) == lookups(state_of(*alive.values()))


def test_the_variants_cover_every_watched_kind() -> None:
    # Guards the property test above against a universe that silently lost a kind.
    assert {group_kind_of(obj) for obj in VARIANTS} == set(WATCHED_KINDS)

"""Shared counters and shared devices where they are said: admission of a claim, the audit's
dra-counters diagnosis, and the core switch naming every pod on a shared GPU."""

from __future__ import annotations

from datetime import UTC, datetime

from policies.cluster.gpu_users import gpu_users_on
from policies.cluster.workload import WORKLOAD_LABEL
from policies.diagnoses.counters import DRA_COUNTERS
from policies.diagnoses.sole_provider import SOLE_PROVIDER
from policies.prediction.inventory import inventory
from policies.prediction.what_if import parse_event
from policies.registry import diagnose_all
from policies.rules import claim_without_ready_device, workload_switch
from tests.builders import Obj, node, request, state_of, with_labels
from tests.counter_builders import allocated_claim, dynamic_mig_node, partition, shared_gpu
from tests.dra_builders import claim_pod, resource_claim, resource_slice
from tests.test_claim_fit import CLASSES, exactly
from webhook.commands.what_if import what_if
from webhook.config import GuardConfig
from webhook.engine import Engine

MIG_NAME = "mig.nvidia.com"

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
DGX = [node("dgx-1"), *dynamic_mig_node("dgx-1")]


def test_a_whole_gpu_claim_while_a_partition_is_allocated_is_warned_with_the_holder() -> None:
    held = allocated_claim("small", "dgx-1", ["gpu-0-mig-1g10gb-3"])
    view = state_of(*CLASSES, *DGX, held)
    (finding,) = claim_without_ready_device.check(request("CREATE", resource_claim("whole")), view)
    assert finding.message.startswith(
        "fits dgx-1 only once gpu-0-mig-1g10gb-3 (claim ml/small) release the shared counters"
    )
    assert finding.remediation[0].startswith("wait until the claims named release")


def test_a_whole_gpu_claim_on_a_free_dynamic_mig_node_passes() -> None:
    view = state_of(*CLASSES, *DGX)
    assert not claim_without_ready_device.check(request("CREATE", resource_claim("whole")), view)


def counters_found(*objects: Obj) -> list[str]:
    return [f.message for f in diagnose_all(state_of(*CLASSES, *objects), NOW)[DRA_COUNTERS]]


def test_the_audit_reports_devices_of_a_counter_set_no_slice_declares() -> None:
    orphan = resource_slice("dgx-2-gpus", "dgx-2", [partition(0, 0), partition(0, 1)])
    (message,) = counters_found(node("dgx-2"), orphan)
    assert message.startswith(
        "pool dgx-2 of gpu.nvidia.com: 2 devices (gpu-0-mig-1g10gb-0 and gpu-0-mig-1g10gb-1) "
        "consume counter set gpu-0-counter-set, which no slice of the pool declares"
    )


def test_the_audit_reports_a_pool_whose_allocations_draw_more_than_its_counters() -> None:
    both = allocated_claim("both", "dgx-1", ["gpu-0", "gpu-0-mig-1g10gb-0"])
    (message,) = counters_found(*DGX, both)
    assert message.startswith("pool dgx-1 of gpu.nvidia.com is over-committed")
    assert "gpu-0-counter-set/memory: " in message


def test_the_audit_reports_a_shared_gpu_whose_shares_exceed_its_capacity() -> None:
    shared = resource_slice("dgx-1-shared", "dgx-1", [shared_gpu()])
    claims = [allocated_claim(n, "dgx-1", ["gpu-0"], consumed="50Gi") for n in ("a", "b")]
    (message,) = counters_found(node("dgx-1"), shared, *claims)
    assert "gpu-0 gpu.nvidia.com/memory: " in message


def test_a_healthy_dynamic_mig_pool_is_not_reported() -> None:
    parts = allocated_claim("parts", "dgx-1", [f"gpu-0-mig-1g10gb-{i}" for i in range(7)])
    assert counters_found(*DGX, parts) == []


def shared_world() -> list[Obj]:
    """Two claims sharing gpu-0 (allowMultipleAllocations), each with its pod."""
    return [
        with_labels(node("dgx-1"), {WORKLOAD_LABEL: "container"}),
        resource_slice("dgx-1-shared", "dgx-1", [shared_gpu()]),
        allocated_claim("a", "dgx-1", ["gpu-0"], consumed="40Gi", pods=["train-a"]),
        allocated_claim("b", "dgx-1", ["gpu-0"], consumed="40Gi", pods=["train-b"]),
        claim_pod("train-a", "dgx-1", claim="a"),
        claim_pod("train-b", "dgx-1", claim="b"),
    ]


def test_every_claim_on_a_shared_gpu_is_its_user() -> None:
    users = gpu_users_on("dgx-1", state_of(*CLASSES, *shared_world()))
    assert [u.label for u in users] == [
        "ml/train-a (claim ml/a: gpu-0)",
        "ml/train-b (claim ml/b: gpu-0)",
    ]


def test_the_core_switch_names_each_pod_sharing_a_gpu() -> None:
    objects = shared_world()
    old = objects[0]
    new = with_labels(old, {WORKLOAD_LABEL: "vm-passthrough"})
    (finding,) = workload_switch.check(request("UPDATE", new, old), state_of(*CLASSES, *objects))
    assert "ml/train-a" in finding.message and "ml/train-b" in finding.message


def whole_and_part_claim() -> Obj:
    """ml/mixed: a whole GPU and a partition, allocated on dgx-1 (two GPUs), held by a pod."""
    claim = allocated_claim("mixed", "dgx-1", ["gpu-0", "gpu-1-mig-1g10gb-0"], pods=["mixed-0"])
    claim["spec"]["devices"]["requests"] = [exactly("whole"), exactly("part", MIG_NAME)]
    return claim


def test_a_node_that_alone_has_the_counters_for_a_claim_is_its_sole_provider() -> None:
    objects = [
        node("dgx-1"),
        *dynamic_mig_node("dgx-1", gpus=2),
        node("dgx-2"),
        *dynamic_mig_node("dgx-2", gpus=1),
        whole_and_part_claim(),
        claim_pod("mixed-0", "dgx-1", claim="mixed"),
    ]
    found = diagnose_all(state_of(*CLASSES, *objects), NOW)[SOLE_PROVIDER]
    assert [f.resource.name for f in found] == ["dgx-1"]


def test_a_node_going_down_leaves_a_waiting_claim_to_partitions_held_elsewhere() -> None:
    held = allocated_claim("small", "dgx-2", ["gpu-0-mig-1g10gb-3"])
    objects = [
        *CLASSES,
        *DGX,
        node("dgx-2"),
        *dynamic_mig_node("dgx-2"),
        held,
        resource_claim("whole"),
        claim_pod("waiting", "", claim="whole", phase="Pending"),
    ]
    answer = what_if(Engine(GuardConfig()), objects, [parse_event("node-down=dgx-1")], NOW)
    appeared = [f.verdict.message for f in answer.appears]
    assert any(
        "fits dgx-2 only once gpu-0-mig-1g10gb-3 (claim ml/small) release" in m for m in appeared
    ), appeared


def test_the_inventory_says_how_much_of_each_gpus_counters_allocated_claims_draw() -> None:
    held = allocated_claim("small", "dgx-1", ["gpu-0-mig-1g10gb-3"])
    two = [node("dgx-1"), *dynamic_mig_node("dgx-1", gpus=2), held]
    (row,) = inventory(state_of(*CLASSES, *two), NOW).nodes
    assert row.counters == (
        "gpu-0-counter-set: 12% of memory drawn by gpu-0-mig-1g10gb-3 (claim ml/small)",
        "gpu-1-counter-set: free",
    )

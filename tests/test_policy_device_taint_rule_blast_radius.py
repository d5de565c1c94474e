"""device-taint-rule-blast-radius: a NoExecute DeviceTaintRule, warned with the workloads it
evicts, denied when it selects every device or devices on more nodes than a rack."""

from __future__ import annotations

from typing import Any

import pytest

from policies.rules.device_taint_rule_blast_radius import MAX_NODES, POLICY, audit, check
from policies.vocabulary.verdicts import Action, Finding
from tests import FIXTURES
from tests.builders import Obj, judged_by, node, request, state_of, vmi
from tests.dra_builders import (
    claim_pod,
    extended_resource_pod,
    gpu,
    resource_claim,
    resource_slice,
    unpinned,
)
from tests.test_device_taints import rule
from tests.test_state_indexes import scan_free_state
from webhook.engine import Engine
from webhook.state.files import load_state


def gpu_node(name: str) -> list[Obj]:
    return [node(name), resource_slice(f"{name}-slice", name, [gpu("gpu-0"), gpu("gpu-1")])]


def training_on(name: str, pod: str = "train-0", namespace: str = "ml") -> list[Obj]:
    claim = resource_claim(
        f"{pod}-gpu", namespace, allocated=(name, name, "gpu-0"), reserved_for=[pod]
    )
    return [claim, claim_pod(pod, name, claim=f"{pod}-gpu", namespace=namespace)]


CLUSTER = [
    *gpu_node("dgx-1"),
    *gpu_node("dgx-2"),
    *training_on("dgx-1"),
    *training_on("dgx-2", "infer-0", "serving"),
]
LABELLED = {**rule("drain"), "metadata": {"name": "drain", "labels": {"team": "ops"}}}
RACK = [o for i in range(MAX_NODES + 1) for o in gpu_node(f"n{i:02d}")]


def findings(review: Any, objects: list[Obj]) -> list[Finding]:
    return list(check(review, state_of(*objects)))


@pytest.mark.parametrize(
    ("review", "judged"),
    [
        (request("CREATE", rule("r")), True),
        (request("UPDATE", rule("r"), rule("r", effect="None")), True),
        (request("DELETE", None, rule("r")), False),
    ],
    ids=["create", "update", "delete"],
)
def test_the_scope_is_rule_creates_and_updates(review: Any, judged: bool) -> None:
    assert judged_by(POLICY, review) is judged


@pytest.mark.parametrize(
    ("new", "objects", "says"),
    [
        pytest.param(
            rule("drain", pool="dgx-1"),
            CLUSTER,
            "DeviceTaintRule drain taints 2 devices on dgx-1 NoExecute (pool=dgx-1): it evicts "
            "ml: pod train-0 (claim ml/train-0-gpu).",
            id="one node's pool: the pod on it",
        ),
        pytest.param(
            rule("drain", driver="gpu.nvidia.com"),
            CLUSTER,
            "DeviceTaintRule drain taints 4 devices on dgx-1 and dgx-2 NoExecute "
            "(driver=gpu.nvidia.com): it evicts ml: pod train-0 (claim ml/train-0-gpu); serving: "
            "pod infer-0 (claim serving/infer-0-gpu).",
            id="a driver on two nodes: the workloads by namespace",
        ),
        pytest.param(
            rule("drain", pool="dgx-1"),
            [
                *gpu_node("dgx-1"),
                *training_on("dgx-1", "virt-launcher-win11-x7k2p", "vms"),
                vmi("win11", node_name="dgx-1", owner="win11"),
                *training_on("dgx-1", "virt-launcher-kiosk-b2c4d", "vms"),
                vmi("kiosk", node_name="dgx-1"),
            ],
            "DeviceTaintRule drain taints 2 devices on dgx-1 NoExecute (pool=dgx-1): it evicts "
            "vms: VirtualMachine win11 (claim vms/virt-launcher-win11-x7k2p-gpu) and "
            "VirtualMachineInstance kiosk (claim vms/virt-launcher-kiosk-b2c4d-gpu).",
            id="a VM's launcher pod: its VM, else its VMI",
        ),
    ],
)
def test_a_noexecute_rule_is_warned_with_its_blast_radius(
    new: Obj, objects: list[Obj], says: str
) -> None:
    (finding,) = findings(request("CREATE", new), objects)
    assert finding.max_action is Action.WARN
    assert finding.message.startswith(says)


@pytest.mark.parametrize(
    ("new", "objects", "says"),
    [
        pytest.param(
            rule("drain"),
            CLUSTER,
            "taints every device in the cluster (its deviceSelector is empty) NoExecute",
            id="an empty selector",
        ),
        pytest.param(
            rule("drain", driver="gpu.nvidia.com"),
            RACK,
            f"taints devices on more than {MAX_NODES} nodes (n00, n01, n02, ...) NoExecute",
            id="a driver on more nodes than the bound",
        ),
        pytest.param(
            rule("drain", device="gpu-0"),
            RACK,
            f"taints devices on more than {MAX_NODES} nodes (n00, n01, n02, ...) NoExecute",
            id="a device name every node has",
        ),
    ],
)
def test_a_noexecute_rule_over_everything_or_beyond_a_rack_is_denied_with_the_preview_advice(
    new: Obj, objects: list[Obj], says: str
) -> None:
    (finding,) = findings(request("CREATE", new), objects)
    assert finding.max_action is None
    assert says in finding.message
    assert finding.message.endswith(
        "Preview with effect None first, then narrow the deviceSelector."
    )
    verdicts = Engine().evaluate(request("CREATE", new), state_of(*objects)).verdicts
    assert [(v.policy, v.action) for v in verdicts] == [(POLICY.id, Action.DENY)]


@pytest.mark.parametrize(
    "review",
    [
        pytest.param(request("CREATE", rule("preview", effect="None")), id="effect None"),
        pytest.param(request("CREATE", rule("cordon", effect="NoSchedule")), id="NoSchedule"),
        pytest.param(
            request("CREATE", rule("drain", device="gpu-1")), id="over devices nothing uses now"
        ),
        pytest.param(
            request(
                "UPDATE",
                {**rule("drain"), "metadata": {"name": "drain", "labels": {"a": "b"}}},
                rule("drain"),
            ),
            id="an update that leaves the spec as it was",
        ),
    ],
)
def test_what_evicts_nothing_new_is_let_through(review: Any) -> None:
    assert findings(review, CLUSTER) == []


def test_changing_a_preview_to_noexecute_is_judged() -> None:
    review = request("UPDATE", rule("drain"), rule("drain", effect="None"))
    (finding,) = findings(review, CLUSTER)
    assert finding.max_action is None


def test_the_audit_judges_existing_rules_as_if_created_now() -> None:
    view = state_of(
        *CLUSTER, rule("drain-all"), rule("drain", pool="dgx-1"), rule("p", effect="None")
    )
    found = {ref.name: f.max_action for ref, f in audit(view)}
    assert found == {"drain": Action.WARN, "drain-all": None}


@pytest.mark.parametrize(
    "new",
    [
        rule("drain", pool="dgx-1"),
        rule("drain", driver="gpu.nvidia.com"),
        rule("d", device="gpu-0"),
    ],
    ids=["one pool", "a driver", "a device name"],
)
def test_the_blast_radius_is_worked_out_without_listing_the_cluster(new: Obj) -> None:
    (finding,) = check(request("CREATE", new), scan_free_state(*CLUSTER))
    assert "it evicts ml: pod train-0" in finding.message


FABRIC = [
    resource_slice("fabric", "", [gpu("link-0"), gpu("link-1")], pool="fabric", all_nodes=True),
    unpinned(resource_claim("nccl", allocated=("", "fabric", "link-0"), reserved_for=["nccl-0"])),
    claim_pod("nccl-0", "dgx-2", claim="nccl"),
]
EXTENDED = [
    resource_claim("ext-0-gpu", allocated=("dgx-1", "dgx-1", "gpu-1"), reserved_for=["ext-0"]),
    extended_resource_pod("ext-0", "dgx-1", "ext-0-gpu"),
]


@pytest.mark.parametrize(
    ("new", "objects", "says"),
    [
        pytest.param(
            rule("drain", pool="fabric"),
            [*CLUSTER, *FABRIC],
            "DeviceTaintRule drain taints 2 devices (2 of them node-independent) NoExecute "
            "(pool=fabric): it evicts ml: pod nccl-0 (claim ml/nccl).",
            id="an allNodes pool: the pods using its devices, wherever they run",
        ),
        pytest.param(
            rule("drain", device="link-0"),
            [*CLUSTER, *FABRIC],
            "DeviceTaintRule drain taints 1 device (1 of them node-independent) NoExecute "
            "(device=link-0): it evicts ml: pod nccl-0 (claim ml/nccl).",
            id="a node-independent device by name",
        ),
        pytest.param(
            rule("drain", pool="dgx-1"),
            [*CLUSTER, *EXTENDED],
            "DeviceTaintRule drain taints 2 devices on dgx-1 NoExecute (pool=dgx-1): it evicts "
            "ml: pod train-0 (claim ml/train-0-gpu); it matches but does not evict ml: pod ext-0 "
            "(claim ml/ext-0-gpu): they got their GPUs through status.extendedResourceClaimStatus, "
            "which the device-taint eviction controller does not read "
            "(kubernetes/kubernetes#141290), and keep running on the tainted devices.",
            id="a pod given its GPU for an extended resource: matched, not evicted",
        ),
    ],
)
def test_the_blast_radius_names_every_pod_on_the_devices_and_which_are_evicted(
    new: Obj, objects: list[Obj], says: str
) -> None:
    (finding,) = findings(request("CREATE", new), objects)
    assert finding.max_action is Action.WARN
    assert finding.message.startswith(says)


def test_node_independent_devices_count_the_nodes_their_users_run_on_against_the_bound() -> None:
    users = [f"p{i:02d}" for i in range(MAX_NODES + 1)]
    shared = unpinned(
        resource_claim("shared", allocated=("", "fabric", "link-0"), reserved_for=users)
    )
    objects = [*FABRIC[:1], shared, *(claim_pod(p, f"n{p}", claim="shared") for p in users)]
    (finding,) = findings(request("CREATE", rule("drain", pool="fabric")), objects)
    assert finding.max_action is None
    assert f"devices used on {MAX_NODES + 1} nodes (more than {MAX_NODES})" in finding.message


def test_the_recorded_extended_resource_pod_is_matched_and_not_evicted() -> None:
    """The pod and the claim the scheduler made for it as kube-apiserver v1.36.2 stored them
    (tests/fixtures/dra-capacity)."""
    view = load_state([str(FIXTURES / "dra-capacity" / "objects.yaml")])
    (finding,) = check(request("CREATE", rule("drain", pool="dgx-2", device="gpu-0")), view)
    _, kept = finding.message.split("it matches but does not evict ")
    assert kept.startswith("ml: pod train-extended (claim ml/train-extended-extended-resources-")

"""Device taints (KEP-5055) in the provider questions: a device tainted NoSchedule or NoExecute,
by its slice or by an acting DeviceTaintRule, serves only a request that tolerates the taint;
effect None changes nothing (policies.cluster.device_taints, policies.cluster.claim_fit)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from policies.cluster.claim_fit import claim_fit
from policies.cluster.claim_shortfall import Why
from policies.cluster.device_taints import project_device_taint_rule, project_tolerations
from policies.cluster.kinds import DEVICE_TAINT_RULE
from policies.diagnoses.tainted_devices import WORKLOAD_ON_TAINTED_DEVICE
from policies.prediction.inventory import DEVICE_CLASS_PREFIX, inventory
from policies.registry import diagnose_all
from policies.state.cluster import ClusterState
from policies.vocabulary.audit import DiagnosisFinding
from policies.vocabulary.fields import ObjectError
from tests import FIXTURES
from tests.builders import Obj, node, state_of
from tests.dra_builders import (
    claim_pod,
    claim_template,
    claim_vm,
    extended_resource_pod,
    gpu,
    resource_claim,
    resource_slice,
    unpinned,
)
from tests.test_claim_fit import CLASSES, exactly, requests_of
from webhook.engine import Engine

SINCE = "2026-12-01T10:00:00Z"
LOST = {"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule", "timeAdded": SINCE}
XID_FATAL = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}
XID_SOFT = {"key": "gpu.nvidia.com/xid", "value": "13", "effect": "None"}
MAINTENANCE = {"key": "example.com/maintenance", "effect": "NoExecute"}
TOLERATES_MAINTENANCE = {"key": "example.com/maintenance", "operator": "Exists"}


def tainted_gpus(node_name: str, *taints: list[Obj]) -> Obj:
    """A node's slice, one GPU per entry of ``taints`` (gpu-0 carries the first list)."""
    devices = []
    for i, device_taints in enumerate(taints):
        device = gpu(f"gpu-{i}")
        if device_taints:
            device["taints"] = device_taints
        devices.append(device)
    return resource_slice(f"{node_name}-gpu.nvidia.com", node_name, devices)


def rule(name: str, effect: str = "NoExecute", **selector: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": selector,
            "taint": {"key": "example.com/drain", "effect": effect},
        },
    }


def asking(count: int = 1, tolerations: list[Obj] | None = None) -> Obj:
    request: dict[str, Any] = exactly(count=count)  # class gpu.nvidia.com
    if tolerations is not None:
        request["exactly"]["tolerations"] = tolerations
    return request


def state(*objects: Obj, rules_act: bool = True) -> ClusterState:
    out = state_of(*CLASSES, *objects)
    out.follow_device_taint_rules(lambda: rules_act)
    return out


@pytest.mark.parametrize(
    ("taints", "request_", "fits"),
    [
        pytest.param([[LOST]], asking(), False, id="gpu-lost keeps an intolerant request off"),
        pytest.param([[XID_FATAL]], asking(), False, id="a fatal xid keeps it off"),
        pytest.param([[XID_SOFT]], asking(), True, id="effect None changes nothing"),
        pytest.param([[MAINTENANCE]], asking(), False, id="NoExecute keeps it off too"),
        pytest.param(
            [[LOST]],
            asking(tolerations=[{"key": "gpu.nvidia.com/gpu-lost", "operator": "Exists"}]),
            True,
            id="a toleration of the key lets it on",
        ),
        pytest.param(
            [[XID_FATAL]],
            asking(tolerations=[{"key": "gpu.nvidia.com/xid", "value": "79"}]),
            True,
            id="Equal, the default operator, with the taint's value",
        ),
        pytest.param(
            [[XID_FATAL]],
            asking(tolerations=[{"key": "gpu.nvidia.com/xid", "value": "48"}]),
            False,
            id="Equal with another value does not tolerate",
        ),
        pytest.param(
            [[MAINTENANCE]],
            asking(tolerations=[{"operator": "Exists", "effect": "NoSchedule"}]),
            False,
            id="a toleration of NoSchedule does not tolerate NoExecute",
        ),
        pytest.param(
            [[MAINTENANCE, LOST]],
            asking(tolerations=[{"operator": "Exists"}]),
            True,
            id="an empty key with Exists tolerates every taint",
        ),
        pytest.param([[LOST], []], asking(), True, id="an untainted GPU beside it serves"),
        pytest.param([[LOST], []], asking(2), False, id="but not two of them"),
    ],
)
def test_a_tainted_device_serves_only_requests_that_tolerate_it(
    taints: list[list[Obj]], request_: Obj, fits: bool
) -> None:
    view = state(node("dgx-1"), tainted_gpus("dgx-1", *taints))
    assert claim_fit(requests_of(request_), view).fits is fits


def test_the_shortfall_names_the_device_its_node_taint_and_since_and_the_repair_tolerates() -> None:
    view = state(node("dgx-1"), tainted_gpus("dgx-1", [LOST]))
    (unmet,) = claim_fit(requests_of(asking()), view).unmet
    (shortfall,) = unmet.shortfalls
    assert shortfall.why is Why.TAINTED
    assert unmet.describe() == (
        "1 matching device on Ready nodes carry a taint it does not tolerate: gpu-0 on dgx-1 "
        "tainted gpu.nvidia.com/gpu-lost:NoSchedule since 2026-12-01T10:00:00Z"
    )


def test_a_taint_removed_from_the_slice_frees_the_device_again() -> None:
    view = state(node("dgx-1"), tainted_gpus("dgx-1", [LOST]))
    view.upsert(tainted_gpus("dgx-1", []))
    assert claim_fit(requests_of(asking()), view).fits
    assert not view.may_keep_off("dgx-1")


@pytest.mark.parametrize(
    ("selector", "rules_act", "fits"),
    [
        pytest.param({"pool": "dgx-1"}, True, False, id="a rule over the node's pool"),
        pytest.param({"device": "gpu-0"}, True, False, id="a rule over the device by name"),
        pytest.param({}, True, False, id="a rule over every device"),
        pytest.param({"pool": "dgx-2"}, True, True, id="a rule over another pool"),
        pytest.param({"driver": "other.example.com"}, True, True, id="over another driver"),
        pytest.param({"pool": "dgx-1"}, False, True, id="a rule while the gate is off"),
    ],
)
def test_a_device_taint_rule_taints_the_devices_it_selects_only_while_rules_act(
    selector: dict[str, str], rules_act: bool, fits: bool
) -> None:
    view = state(
        node("dgx-1"), tainted_gpus("dgx-1", []), rule("drain", **selector), rules_act=rules_act
    )
    assert claim_fit(requests_of(asking()), view).fits is fits


def test_a_rule_with_effect_none_changes_nothing_and_a_deleted_rule_nothing_either() -> None:
    view = state(node("dgx-1"), tainted_gpus("dgx-1", []), rule("preview", effect="None"))
    assert claim_fit(requests_of(asking()), view).fits
    view.upsert(rule("drain", pool="dgx-1"))
    (unmet,) = claim_fit(requests_of(asking()), view).unmet
    assert "(by DeviceTaintRule drain)" in unmet.describe()
    view.delete(DEVICE_TAINT_RULE, "", "drain")
    assert claim_fit(requests_of(asking()), view).fits


def test_a_rule_reads_its_selector_and_taint() -> None:
    info = project_device_taint_rule(rule("r", pool="dgx-1"))
    assert (info.pool, info.taint.key, info.taint.effect, info.taint.rule) == (
        "dgx-1",
        "example.com/drain",
        "NoExecute",
        "r",
    )
    assert not info.selects_everything
    assert project_device_taint_rule(rule("all")).selects_everything


def test_an_unknown_toleration_operator_is_refused_with_its_path() -> None:
    with pytest.raises(ObjectError, match=r"tolerations\[0\].operator"):
        project_tolerations({"tolerations": [{"operator": "Lt"}]}, "spec")


# --- the audit: workloads on tainted devices ------------------------------------------------------

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def held(*device_taints: Obj, tolerations: list[Obj] | None = None, **more: Obj) -> list[Obj]:
    """Pod ml/train-0 running on dgx-1 with claim ml/train-gpu allocated gpu-0 there."""
    claim = resource_claim(
        "train-gpu", allocated=("dgx-1", "dgx-1", "gpu-0"), reserved_for=["train-0"]
    )
    if tolerations is not None:
        claim["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = tolerations
    return [
        node("dgx-1"),
        tainted_gpus("dgx-1", list(device_taints)),
        claim,
        claim_pod("train-0", "dgx-1", claim="train-gpu"),
        *more.values(),
    ]


def tainted_findings(*objects: Obj, rules_act: bool = True) -> list[DiagnosisFinding]:
    return diagnose_all(state(*objects, rules_act=rules_act), NOW)[WORKLOAD_ON_TAINTED_DEVICE]


@pytest.mark.parametrize(
    ("objects", "says"),
    [
        pytest.param(
            held(LOST),
            "Pod ml/train-0 runs on a GPU the NVIDIA DRA driver reports failed: its claim "
            "ml/train-gpu holds gpu-0 on dgx-1 tainted gpu.nvidia.com/gpu-lost:NoSchedule "
            f"since {SINCE}",
            id="the driver's gpu-lost taint",
        ),
        pytest.param(
            held(XID_FATAL),
            "Pod ml/train-0 runs on a GPU the NVIDIA DRA driver reports failed: its claim "
            "ml/train-gpu holds gpu-0 on dgx-1 tainted gpu.nvidia.com/xid=79:NoSchedule",
            id="a fatal xid",
        ),
        pytest.param(
            held(MAINTENANCE),
            "Pod ml/train-0 is evicted (NoExecute, not tolerated by its claim's request): its "
            "claim ml/train-gpu holds gpu-0 on dgx-1 tainted example.com/maintenance:NoExecute",
            id="a NoExecute slice taint",
        ),
        pytest.param(
            held(MAINTENANCE, tolerations=[{**TOLERATES_MAINTENANCE, "tolerationSeconds": 300}]),
            "Pod ml/train-0 is evicted (NoExecute, not tolerated by its claim's request): its "
            "claim ml/train-gpu holds gpu-0 on dgx-1 tainted example.com/maintenance:NoExecute",
            id="a NoExecute taint tolerated for 300 s only: evicted after them",
        ),
        pytest.param(
            held(rule=rule("drain", pool="dgx-1")),
            "Pod ml/train-0 is evicted (NoExecute, not tolerated by its claim's request): its "
            "claim ml/train-gpu holds gpu-0 on dgx-1 tainted example.com/drain:NoExecute "
            "(by DeviceTaintRule drain)",
            id="a NoExecute DeviceTaintRule",
        ),
        pytest.param(
            [
                *held()[:3],  # without its pod: one given its GPU for an extended resource
                extended_resource_pod("train-0", "dgx-1", "train-gpu"),
                rule("drain", pool="dgx-1"),
            ],
            "Pod ml/train-0 is not evicted from a device tainted NoExecute: it got its GPU "
            "through status.extendedResourceClaimStatus, which the device-taint eviction "
            "controller does not read (kubernetes/kubernetes#141290): its claim ml/train-gpu "
            "holds gpu-0 on dgx-1 tainted example.com/drain:NoExecute (by DeviceTaintRule drain)",
            id="a pod given its GPU for an extended resource: matched, never evicted",
        ),
        pytest.param(
            [
                node("dgx-1"),
                resource_slice("fabric", "", [gpu("link-0")], pool="fabric", all_nodes=True),
                unpinned(
                    resource_claim("nccl", allocated=("", "fabric", "link-0"), reserved_for=["n"])
                ),
                claim_pod("n", "dgx-1", claim="nccl"),
                rule("drain", pool="fabric"),
            ],
            "Pod ml/n is evicted (NoExecute, not tolerated by its claim's request): its claim "
            "ml/nccl holds link-0 tainted example.com/drain:NoExecute (by DeviceTaintRule drain)",
            id="a node-independent device (an allNodes pool)",
        ),
    ],
)
def test_a_workload_on_a_failed_or_evicting_device_is_reported_with_the_taint(
    objects: list[Obj], says: str
) -> None:
    (finding,) = tainted_findings(*objects)
    assert finding.message == says
    assert finding.remediation


@pytest.mark.parametrize(
    ("objects", "rules_act"),
    [
        pytest.param(held(), True, id="an untainted device"),
        pytest.param(held(XID_SOFT), True, id="a non-fatal xid (effect None)"),
        pytest.param(
            held(MAINTENANCE, tolerations=[TOLERATES_MAINTENANCE]),
            True,
            id="a NoExecute taint its request tolerates",
        ),
        pytest.param(
            held(rule=rule("drain", pool="dgx-1")), False, id="a rule while rules do not act"
        ),
        pytest.param(held(rule=rule("preview", effect="None")), True, id="a rule with effect None"),
    ],
)
def test_nothing_is_reported_where_no_taint_harms_the_workload(
    objects: list[Obj], rules_act: bool
) -> None:
    assert tainted_findings(*objects, rules_act=rules_act) == []


# --- the recording (tests/fixtures/device-taints) -------------------------------------------------


def test_the_recorded_taints_rules_and_tolerations_are_read_as_the_api_server_stored_them() -> None:
    objects = yaml.safe_load((FIXTURES / "device-taints" / "objects.yaml").read_text())["items"]
    view = state(*objects)
    rules = {r.name: r for r in view.device_taint_rules()}
    assert rules["preview"].selects_everything and rules["preview"].taint.effect == "None"
    assert rules["drain-dgx-1"].taint.time_added is not None
    found = {(f.resource.namespace, f.resource.name): f.message for f in tainted_findings(*objects)}
    assert sorted(found) == [("ml", "train-0"), ("serving", "infer-0")]
    assert all(
        " is evicted (NoExecute, not tolerated by its claim's request)" in m for m in found.values()
    )
    assert tainted_findings(*objects, rules_act=False)[0].resource.name == "infer-0"


@pytest.mark.parametrize(
    ("dgx2_taint", "sole"),
    [
        pytest.param(LOST, ("dgx-1",), id="dgx-2's only GPU lost: dgx-1 is the sole provider"),
        pytest.param(XID_SOFT, (), id="an effect None taint: both provide"),
    ],
)
def test_inventory_counts_a_node_whose_class_devices_are_all_tainted_as_no_provider(
    dgx2_taint: Obj, sole: tuple[str, ...]
) -> None:
    view = state(
        node("dgx-1"),
        tainted_gpus("dgx-1", []),
        node("dgx-2"),
        tainted_gpus("dgx-2", [dgx2_taint]),
    )
    rows = {row.node: row for row in inventory(view, NOW).nodes}
    alone = f"{DEVICE_CLASS_PREFIX}gpu.nvidia.com"
    assert tuple(n for n in ("dgx-1", "dgx-2") if alone in rows[n].sole_provider) == sole


def test_a_vm_whose_claim_only_tainted_gpus_could_serve_is_reported_with_taint_and_repair() -> None:
    objects = [
        node("dgx-1"),
        tainted_gpus("dgx-1", [LOST], [LOST]),
        claim_template("one-gpu", device_class="gpu.nvidia.com"),
        claim_vm("x", template="one-gpu", namespace="vms", running=True),
    ]
    verdicts = [f.verdict for f in Engine().audit(state(*objects), NOW).findings]
    (verdict,) = [v for v in verdicts if v.policy == "claim-without-ready-device"]
    assert verdict.resource.name == "x"
    assert (
        "2 matching devices on Ready nodes carry a taint it does not tolerate: gpu-0 on dgx-1 "
        f"tainted gpu.nvidia.com/gpu-lost:NoSchedule since {SINCE}" in verdict.message
    )
    assert any("gpu-lost" in step for step in verdict.remediation)


@pytest.mark.parametrize(
    ("dgx2_taint", "sole"),
    [
        pytest.param(LOST, ["dgx-1"], id="dgx-2's GPU lost: dgx-1 is the only place the VM fits"),
        pytest.param(XID_SOFT, [], id="effect None: both are"),
    ],
)
def test_sole_provider_counts_only_nodes_whose_devices_the_claim_tolerates(
    dgx2_taint: Obj, sole: list[str]
) -> None:
    objects = [
        node("dgx-1"),
        tainted_gpus("dgx-1", []),
        node("dgx-2"),
        tainted_gpus("dgx-2", [dgx2_taint]),
        claim_template("one-gpu", device_class="gpu.nvidia.com"),
        claim_vm("x", template="one-gpu", namespace="vms", running=True),
    ]
    found = diagnose_all(state(*objects), NOW)["sole-provider"]
    assert [f.resource.name for f in found] == sole

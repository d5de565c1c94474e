"""deviceclass-without-devices: a DeviceClass whose selectors accept no published device."""

from __future__ import annotations

from typing import Any

import pytest

from policies.cluster.kinds import DEVICE_CLASS, object_ref
from policies.rules.deviceclass_without_devices import POLICY, audit, check
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import Obj, judged_by, node, request, state_of
from tests.dra_builders import (
    GPU_CLASS,
    MIG_CLASS,
    VFIO_DEVICE_CLASS,
    device_class,
    gpu,
    resource_slice,
)
from tests.test_state_indexes import scan_free_state
from webhook.engine import Engine

OMEN2 = resource_slice("omen2", "omen2", [gpu("gpu-0")])
DGX = resource_slice("dgx-1", "dgx-1", [gpu("gpu-0", product="NVIDIA H100 NVL", memory="94Gi")])
PUBLISHED = (node("omen2"), OMEN2, node("dgx-1"), DGX)
GPU = device_class("gpu.nvidia.com", GPU_CLASS)
VFIO = VFIO_DEVICE_CLASS


def findings(review: Any, *objects: Obj) -> list[Finding]:
    return list(check(review, state_of(*objects)))


@pytest.mark.parametrize(
    ("review", "judged"),
    [
        (request("CREATE", VFIO), True),
        (request("UPDATE", VFIO, GPU), True),
        (request("DELETE", None, VFIO), False),
        (request("CREATE", OMEN2), False),
    ],
    ids=["create", "update", "delete", "a resource slice"],
)
def test_the_scope_is_device_class_creates_and_updates(review: Any, judged: bool) -> None:
    assert judged_by(POLICY, review) is judged


@pytest.mark.parametrize(
    ("cls", "objects", "message"),
    [
        pytest.param(
            VFIO,
            PUBLISHED,
            "class vfio.gpu.nvidia.com matches no published device (none of 2 devices of "
            "gpu.nvidia.com); claims for it cannot be allocated",
            id="a type the driver does not publish",
        ),
        pytest.param(
            device_class(
                "h100", "device.attributes['gpu.nvidia.com'].productName == 'nvidia h100 nvl'"
            ),
            PUBLISHED,
            "class h100 matches no published device (none of 2 devices of gpu.nvidia.com) "
            "(did you mean productName == 'NVIDIA H100 NVL'?); claims for it cannot be allocated",
            id="a near-miss product name",
        ),
        pytest.param(
            device_class("typo", "device.driver == 'gpu.nvidia.co'"),
            PUBLISHED,
            "class typo matches no published device (none of 2 devices of gpu.nvidia.com); "
            "claims for it cannot be allocated",
            id="a driver typo",
        ),
        pytest.param(
            VFIO,
            (),
            "class vfio.gpu.nvidia.com matches no published device: no DRA driver publishes any "
            "device yet; claims for it cannot be allocated until one does",
            id="before any driver publishes",
        ),
        pytest.param(
            device_class("arch", "device.attributes['gpu.nvidia.com'].arch == 'Blackwell'"),
            PUBLISHED,
            "class arch cannot be judged: fails on this device: no such member in mapping: "
            "'arch' (gpu.nvidia.com/dgx-1/gpu-0)",
            id="a selector that fails on the devices",
        ),
        pytest.param(
            device_class("broken", "device.driver =="),
            PUBLISHED,
            "class broken cannot be judged: selector 1 does not compile: syntax error at column 15",
            id="a selector that does not compile",
        ),
    ],
)
def test_a_class_that_accepts_no_published_device_is_warned(
    cls: Obj, objects: tuple[Obj, ...], message: str
) -> None:
    (finding,) = findings(request("CREATE", cls), *objects)
    assert finding.message == message
    assert finding.remediation
    assert len(f"[{POLICY.id}] {finding.message}") <= 256


COMPARE = "compare the selectors with the devices (kubectl get resourceslices -o yaml)"


@pytest.mark.parametrize(
    ("cls", "objects", "steps"),
    [
        pytest.param(VFIO, PUBLISHED, (COMPARE,), id="no near value: compare"),
        pytest.param(
            device_class(
                "h100", "device.attributes['gpu.nvidia.com'].productName == 'nvidia h100 nvl'"
            ),
            PUBLISHED,
            ("change the selector to productName == 'NVIDIA H100 NVL'", COMPARE),
            id="a near value: the selector it meant, then compare",
        ),
        pytest.param(
            VFIO,
            (),
            ("check that the DRA driver's kubelet plugins run (kubectl get resourceslices)",),
            id="nothing published: the driver's plugins",
        ),
        pytest.param(
            device_class("arch", "device.attributes['gpu.nvidia.com'].arch == 'Blackwell'"),
            PUBLISHED,
            (COMPARE,),
            id="undecided: compare",
        ),
        pytest.param(
            device_class("broken", "device.driver =="), PUBLISHED, (COMPARE,), id="broken: compare"
        ),
    ],
)
def test_the_repair_steps_follow_the_reason(
    cls: Obj, objects: tuple[Obj, ...], steps: tuple[str, ...]
) -> None:
    (finding,) = findings(request("CREATE", cls), *objects)
    assert finding.remediation == steps


def test_of_several_undecided_devices_the_first_by_id_is_named() -> None:
    cls = device_class("arch", "device.attributes['gpu.nvidia.com'].arch == 'Blackwell'")
    (finding,) = findings(request("CREATE", cls), *reversed(PUBLISHED))
    assert finding.message.endswith("'arch' (gpu.nvidia.com/dgx-1/gpu-0)")


@pytest.mark.parametrize(
    "cls",
    [
        GPU,
        device_class(
            "large", "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40Gi'))"
        ),
        device_class(
            "rtx",
            "device.attributes['gpu.nvidia.com'].productName.lowerAscii()"
            ".matches('^.*rtx 5090.*$')",
        ),
        device_class("any"),
    ],
    ids=[
        "the chart's GPU class",
        "by capacity",
        "by product, the driver's demo way",
        "no selector",
    ],
)
def test_a_class_that_accepts_a_published_device_passes(cls: Obj) -> None:
    assert findings(request("CREATE", cls), *PUBLISHED) == []


def test_a_device_the_selectors_cannot_decide_does_not_hide_one_they_accept() -> None:
    cls = device_class("nvl", "device.attributes['gpu.nvidia.com'].tier == 'gold'")
    tiered = resource_slice("n", "n", [gpu(extra={"tier": {"string": "gold"}})])
    assert findings(request("CREATE", cls), *PUBLISHED, tiered) == []


def test_an_update_is_judged_only_when_the_selectors_change() -> None:
    labelled = {**VFIO, "metadata": {"name": VFIO["metadata"]["name"], "labels": {"a": "b"}}}
    assert findings(request("UPDATE", labelled, VFIO), *PUBLISHED, VFIO) == []
    (finding,) = findings(request("UPDATE", VFIO, GPU), *PUBLISHED, GPU)
    assert "matches no published device" in finding.message


def test_judging_a_new_class_lists_no_nodes_or_slices() -> None:
    state = scan_free_state(*PUBLISHED)
    assert check(request("CREATE", VFIO), state)
    assert not check(request("CREATE", GPU), state)


def test_the_audit_reports_the_existing_classes_that_accept_nothing() -> None:
    mig = device_class("mig.nvidia.com", MIG_CLASS)
    undecided = device_class("arch", "device.attributes['gpu.nvidia.com'].arch == 'x'")
    found = [(ref, f.message) for ref, f in audit(state_of(*PUBLISHED, GPU, mig, undecided))]
    assert [ref for ref, _ in found] == [
        object_ref(DEVICE_CLASS, "", "arch"),
        object_ref(DEVICE_CLASS, "", "mig.nvidia.com"),
    ]
    assert found[0][1].startswith("class arch cannot be judged: fails on this device")
    assert found[1][1].startswith("class mig.nvidia.com matches no published device")


def test_the_default_action_is_warn() -> None:
    decision = Engine().evaluate(request("CREATE", VFIO), state_of(*PUBLISHED))
    assert decision.allowed
    assert [(v.policy, v.action) for v in decision.verdicts] == [(POLICY.id, Action.WARN)]


def test_the_drivers_of_the_published_devices_are_named_two_then_counted() -> None:
    drivers = [
        resource_slice(f"s-{d}", "omen2", [gpu(f"dev-{d}")], driver=f"{d}.example.com")
        for d in ("a", "b", "c")
    ]
    (finding,) = findings(request("CREATE", VFIO), node("omen2"), *drivers)
    assert finding.message.startswith(
        "class vfio.gpu.nvidia.com matches no published device (none of 3 devices of "
        "a.example.com, b.example.com and 1 more); "
    )

"""external-provider-flip: an INFERRED hazard (docs/field-guide.md section 3 marks it so).

Hypothesis under test: flipping externalResourceProvider true -> false for a PCI id that the GPU
Operator's sandbox device plugin already advertises on vm-passthrough nodes makes virt-handler
advertise the same GPUs as well. It was reasoned from code, never observed; the policy only warns
and says "inferred", and these tests pin that down as much as the behaviour itself.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import pytest

from policies.cluster.workload import WORKLOAD_LABEL
from policies.rules.external_provider_flip import POLICY, check
from policies.vocabulary.requests import AdmissionRequest
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import (
    Obj,
    cluster_policy,
    dead_node,
    judged_by,
    kubevirt,
    node,
    request,
    state_of,
)
from webhook.engine import Engine

RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
SANDBOX = cluster_policy(True, "container")
TOWER1 = node("tower1", labels={WORKLOAD_LABEL: "vm-passthrough"}, allocatable={RTX_3090: "1"})
OMEN1 = node("omen1", labels={WORKLOAD_LABEL: "container"}, allocatable={RTX_3090: "1"})
ENTRIES = [("10de:2b85", RTX_5090), ("10de:2204", RTX_3090)]


def permitted(
    entries: Sequence[tuple[str, str]] = ENTRIES, external: Sequence[bool] | None = None
) -> Obj:
    """A KubeVirt CR permitting ``entries``, each with its own externalResourceProvider."""
    obj = copy.deepcopy(kubevirt(entries))
    devices = obj["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"]
    flags = [True] * len(devices) if external is None else external
    for device, flag in zip(devices, flags, strict=True):
        device["externalResourceProvider"] = flag
    return obj


BEFORE = permitted()
FLIPPED = permitted(external=(True, False))


def findings(review: AdmissionRequest, objects: Sequence[Obj]) -> list[Finding]:
    assert judged_by(POLICY, review)
    return list(check(review, state_of(*objects)))


@pytest.mark.parametrize(
    ("old", "new", "objects"),
    [
        pytest.param(
            BEFORE,
            FLIPPED,
            [SANDBOX, TOWER1],
            id="its resourceName is served on a passthrough node",
        ),
        pytest.param(
            BEFORE,
            permitted([ENTRIES[0], ("10de:2204", "nvidia.com/rtx3090")], (True, False)),
            [SANDBOX, TOWER1],
            id="the sandbox plugin serves the same PCI id under its pci.ids name",
        ),
        pytest.param(
            permitted([ENTRIES[0], ("10DE:2204", RTX_3090)]),
            FLIPPED,
            [SANDBOX, TOWER1],
            id="selectors are compared case-insensitively",
        ),
        pytest.param(
            BEFORE,
            FLIPPED,
            [
                SANDBOX,
                node(
                    "t2",
                    labels={WORKLOAD_LABEL: "vm-passthrough"},
                    allocatable={"nvidia.com/2204": "1"},
                ),
            ],
            id="the plugin's raw-id fallback name counts",
        ),
        pytest.param(
            BEFORE,
            FLIPPED,
            [
                SANDBOX,
                dead_node(
                    "t3", labels={WORKLOAD_LABEL: "vm-passthrough"}, allocatable={RTX_3090: "1"}
                ),
            ],
            id="a dead provider serves it again when it returns",
        ),
        pytest.param(
            BEFORE, FLIPPED, [TOWER1], id="without a ClusterPolicy labels are taken as they are"
        ),
    ],
)
def test_inferred_hazard_flipping_to_kubevirt_advertising_is_warned(
    old: Obj, new: Obj, objects: list[Obj]
) -> None:
    (finding,) = findings(request("UPDATE", new, old), objects)
    assert "(inferred)" in finding.message
    assert POLICY.default_action == Action.WARN


@pytest.mark.parametrize(
    ("old", "new", "objects"),
    [
        pytest.param(BEFORE, BEFORE, [SANDBOX, TOWER1], id="no flip"),
        pytest.param(FLIPPED, FLIPPED, [SANDBOX, TOWER1], id="already false"),
        pytest.param(FLIPPED, BEFORE, [SANDBOX, TOWER1], id="false to true hands it to the plugin"),
        pytest.param(
            permitted(ENTRIES[:1]),
            FLIPPED,
            [SANDBOX, TOWER1],
            id="a new entry that starts false is not a flip",
        ),
        pytest.param(BEFORE, FLIPPED, [SANDBOX, OMEN1], id="only a container node advertises it"),
        pytest.param(BEFORE, FLIPPED, [SANDBOX], id="no node advertises it"),
        pytest.param(
            BEFORE,
            FLIPPED,
            [cluster_policy(False, "vm-passthrough"), TOWER1],
            id="sandbox workloads off: no sandbox plugin anywhere",
        ),
        pytest.param(
            BEFORE,
            permitted(external=(False, True)),
            [SANDBOX, TOWER1],
            id="another id flips, one nobody serves",
        ),
    ],
)
def test_everything_else_is_allowed(old: Obj, new: Obj, objects: list[Obj]) -> None:
    assert findings(request("UPDATE", new, old), objects) == []


def test_the_message_names_the_entry_the_resource_the_nodes_and_says_it_is_inferred() -> None:
    (finding,) = findings(request("UPDATE", FLIPPED, BEFORE), [SANDBOX, TOWER1])
    assert finding.message == (
        "pciHostDevices[1] 10de:2204: externalResourceProvider true -> false while the sandbox "
        f"plugin serves {RTX_3090} on tower1 (vm-passthrough): the GPU would be advertised twice "
        "(inferred). Keep it true."
    )
    assert len(f"[{POLICY.id}] {finding.message}") <= 256
    assert finding.remediation == (
        "keep externalResourceProvider: true on pciHostDevices[1] while the GPU Operator's "
        "sandbox device plugin manages these GPUs",
    )


def test_the_default_reason_says_the_hazard_is_inferred() -> None:
    assert POLICY.default_reason.startswith("Inferred, not observed")


@pytest.mark.parametrize(
    ("review", "applies"),
    [
        pytest.param(request("UPDATE", FLIPPED, BEFORE), True, id="a KubeVirt update is judged"),
        pytest.param(request("CREATE", FLIPPED), False, id="a KubeVirt create is not"),
        pytest.param(
            request("UPDATE", FLIPPED, BEFORE, sub_resource="status"),
            False,
            id="the status subresource is not",
        ),
    ],
)
def test_scope(review: AdmissionRequest, applies: bool) -> None:
    assert judged_by(POLICY, review) is applies


def test_the_engine_warns_by_default() -> None:
    decision = Engine().evaluate(request("UPDATE", FLIPPED, BEFORE), state_of(SANDBOX, TOWER1))
    assert decision.allowed
    ours = [v for v in decision.verdicts if v.policy == POLICY.id]
    assert [v.action for v in ours] == [Action.WARN]


PASSTHROUGH = {WORKLOAD_LABEL: "vm-passthrough"}


def dra_served(name: str) -> list[Obj]:
    """A vm-passthrough node whose RTX 3090 DRA serves (a DeviceClass's extendedResourceName):
    no device plugin advertises it there."""
    from tests.dra_builders import VFIO_CLASS, device_class, gpu, resource_slice

    return [
        node(name, labels=PASSTHROUGH),
        device_class("vfio.gpu.nvidia.com", VFIO_CLASS, extended=RTX_3090),
        resource_slice(name, name, [gpu("gpu-0", type_="vfio")]),
    ]


def test_a_gpu_dra_serves_on_a_passthrough_node_is_not_advertised_twice() -> None:
    assert findings(request("UPDATE", FLIPPED, BEFORE), [SANDBOX, *dra_served("a-dra")]) == []


def test_a_node_dra_serves_does_not_hide_a_later_one_the_sandbox_plugin_serves() -> None:
    objects = [SANDBOX, *dra_served("a-dra"), TOWER1]
    (finding,) = findings(request("UPDATE", FLIPPED, BEFORE), objects)
    assert f"serves {RTX_3090} on tower1 (vm-passthrough)" in finding.message


def test_an_entrys_own_resource_name_is_looked_up_even_when_pci_ids_names_it_otherwise() -> None:
    custom = "example.com/rtx3090-passthrough"
    entries = [ENTRIES[0], ("10de:2204", custom)]
    served = node("t9", labels=PASSTHROUGH, allocatable={custom: "1"})
    (finding,) = findings(
        request("UPDATE", permitted(entries, (True, False)), permitted(entries)),
        [SANDBOX, served],
    )
    assert f"serves {custom} on t9 (vm-passthrough)" in finding.message


@pytest.mark.parametrize(
    "first_external",
    [
        pytest.param(False, id="after a flip nobody serves"),
        pytest.param(True, id="after an entry that stays external"),
    ],
)
def test_a_served_flip_is_found_whatever_entry_comes_before_it(first_external: bool) -> None:
    entries = [("10de:2204", RTX_3090), ("10de:2b85", RTX_5090)]
    omen = node("omen3", labels=PASSTHROUGH, allocatable={RTX_5090: "1"})
    found = findings(
        request("UPDATE", permitted(entries, (first_external, False)), permitted(entries)),
        [SANDBOX, omen],
    )
    assert [f.message.split(": ")[0] for f in found] == ["pciHostDevices[1] 10de:2b85"]


def test_an_update_without_its_old_object_is_not_judged() -> None:
    assert check(request("UPDATE", FLIPPED, None), state_of(SANDBOX, TOWER1)) == ()

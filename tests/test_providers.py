"""Providers of a resource: device plugins (allocatable) and DRA devices of a DeviceClass with that
extendedResourceName, counted once per node, healthy or not, in every policy that counts them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.cluster.health import node_health
from policies.cluster.workload import WORKLOAD_LABEL
from policies.diagnoses.vms import VM_UNSCHEDULABLE
from policies.registry import diagnose_all
from policies.rules import cordon_sole_provider, external_provider_flip, passthrough_provider
from policies.state.cluster import ClusterState
from tests.builders import (
    Obj,
    cluster_policy,
    cordoned,
    dead_node,
    kubevirt,
    node,
    owned_vmi,
    request,
    state_of,
    vm,
    vmi,
)
from tests.dra_builders import (
    GPU_CLASS,
    VFIO_CLASS,
    VFIO_DEVICE_CLASS,
    device_class,
    gpu,
    resource_slice,
)
from webhook.engine import Engine

GPU = "nvidia.com/gpu"
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
SERVING = device_class("gpu.nvidia.com", GPU_CLASS, extended=GPU)
NOT_SERVING = device_class("gpu.nvidia.com", GPU_CLASS)
VFIO = VFIO_DEVICE_CLASS
#: Every class also serves its implicit name (KEP-5004): counted wherever the explicit one is.
IMPLICIT = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
IMPLICIT_VFIO = "deviceclass.resource.kubernetes.io/vfio.gpu.nvidia.com"


def gpus_on(name: str, *devices: str, type_: str = "gpu") -> Obj:
    return resource_slice(f"{name}-gpu.nvidia.com", name, [gpu(d, type_=type_) for d in devices])


@pytest.mark.parametrize(
    ("objects", "providers", "healthy", "units"),
    [
        pytest.param(
            [node("omen2"), SERVING, gpus_on("omen2", "gpu-0", "gpu-1")],
            ["omen2"], 1, {"omen2": {GPU: 2, IMPLICIT: 2}},
            id="a node whose GPUs only DRA publishes provides nvidia.com/gpu",
        ),
        pytest.param(
            [node("omen2", allocatable={GPU: "4"}), SERVING, gpus_on("omen2", "gpu-0")],
            ["omen2"], 1, {"omen2": {GPU: 4, IMPLICIT: 1}},
            id="a node with both sources counts once, with its device plugin's units",
        ),
        pytest.param(
            [node("omen1", allocatable={GPU: "1"}), node("omen2"), SERVING, gpus_on("omen2", "g")],
            ["omen1", "omen2"], 2, {"omen1": {GPU: 1}, "omen2": {GPU: 1, IMPLICIT: 1}},
            id="a device plugin node and a DRA node are two providers",
        ),
        pytest.param(
            [dead_node("omen2"), SERVING, gpus_on("omen2", "gpu-0")],
            ["omen2"], 0, {"omen2": {GPU: 1, IMPLICIT: 1}},
            id="a NotReady node's stale slice provides but not healthily",
        ),
        pytest.param(
            [node("omen2"), NOT_SERVING, gpus_on("omen2", "gpu-0")],
            [], 0, {"omen2": {IMPLICIT: 1}},
            id="a class without extendedResourceName serves only its implicit name",
        ),
        pytest.param(
            [node("omen2"), SERVING, VFIO, gpus_on("omen2", "gpu-vfio-0", type_="vfio")],
            [], 0, {"omen2": {IMPLICIT_VFIO: 1}},
            id="devices the serving class does not select provide only their own class's name",
        ),
    ],
)  # fmt: skip
def test_who_provides_a_resource(
    objects: Sequence[Obj], providers: list[str], healthy: int, units: dict[str, dict[str, int]]
) -> None:
    state = state_of(*objects)
    assert state.providers_of(GPU) == providers
    assert state.has_provider(GPU) == bool(providers)
    assert state.healthy_provider_count(GPU) == healthy
    assert {name: dict(state.resources_provided_on(name)) for name in units} == units


# --- the index stays right through any order of changes -------------------------------------------

POOL: dict[str, list[Obj]] = {
    "node a": [node("a"), dead_node("a"), node("a", allocatable={GPU: "2"}),
               cordoned(node("a", allocatable={GPU: "1"}))],
    "node b": [node("b"), dead_node("b", allocatable={GPU: "1"})],
    "slice a": [gpus_on("a", "gpu-0"), gpus_on("a", "gpu-vfio-0", type_="vfio"),
                gpus_on("a", "gpu-0", "gpu-1")],
    "slice b": [gpus_on("b", "gpu-0")],
    "class": [SERVING, NOT_SERVING],
}  # fmt: skip
Change = tuple[str, int | None]  # (which object, its variant or None to delete it)
changes = st.lists(
    st.sampled_from(list(POOL)).flatmap(
        lambda key: st.tuples(st.just(key), st.none() | st.integers(0, len(POOL[key]) - 1))
    ),
    max_size=25,
)


def answers(state: ClusterState) -> tuple[object, ...]:
    return tuple(
        (
            state.providers_of(resource),
            state.has_provider(resource),
            state.healthy_provider_count(resource),
            {name: state.resources_provided_on(name).get(resource, 0) for name in ("a", "b")},
        )
        for resource in (GPU, IMPLICIT)
    )


def by_definition(objects: Sequence[Obj]) -> tuple[object, ...]:
    """The same answers from the definition, over a fresh load of the objects: nodes whose
    allocatable has it, or for which a class serving it (by its explicit or its implicit
    name) selects published devices."""
    state = state_of(*objects)
    out = []
    for resource in (GPU, IMPLICIT):
        advertised = {n.name: n.allocatable.get(resource, 0) for n in state.nodes()}
        served = {
            name: len(state.class_devices_on(c.name, name))
            for c in state.device_classes()
            if resource in c.served_resources
            for name in ("a", "b")
        }
        providers = sorted(n for n in ("a", "b") if advertised.get(n, 0) or served.get(n, 0))
        healthy = [n for n in providers if (info := state.node(n)) and node_health(info).healthy]
        units = {
            name: advertised.get(name, 0) or served[name] if name in providers else 0
            for name in ("a", "b")
        }
        out.append((providers, bool(providers), len(healthy), units))
    return tuple(out)


@settings(max_examples=150, deadline=None)
@given(changes)
def test_provider_counts_after_any_changes_equal_a_fresh_load(steps: list[Change]) -> None:
    state = ClusterState()
    current: dict[str, Obj] = {}
    for key, variant in steps:
        if variant is None:
            if key in current:
                state.delete_object(current.pop(key))
        else:
            current[key] = POOL[key][variant]
            state.upsert(current[key])
    assert answers(state) == by_definition(list(current.values()))


# --- the policies that count providers ------------------------------------------------------------


def vm_on_gpu(node_name: str = "omen2") -> Obj:
    return owned_vmi("gpu-vm", node_name, gpus=[GPU])


@pytest.mark.parametrize(
    ("others", "warned"),
    [
        pytest.param([], True, id="the only DRA provider"),
        pytest.param([node("omen1", allocatable={GPU: "1"})], False,
                     id="another node's device plugin provides it"),
        pytest.param([node("omen1"), gpus_on("omen1", "gpu-0")], False,
                     id="another node's DRA devices provide it"),
        pytest.param([dead_node("omen1"), gpus_on("omen1", "gpu-0")], True,
                     id="the other DRA provider is NotReady"),
    ],
)  # fmt: skip
def test_cordoning_a_node_whose_gpus_dra_serves_counts_every_other_provider(
    others: list[Obj], warned: bool
) -> None:
    omen2 = node("omen2")
    state = state_of(omen2, SERVING, gpus_on("omen2", "gpu-0"), vm_on_gpu(), *others)
    found = cordon_sole_provider.check(request("UPDATE", cordoned(omen2), omen2), state)
    messages = [f.message for f in found]
    assert bool(messages) == warned, messages
    if warned:
        assert f"cordoning omen2, the only healthy provider of {GPU}" in messages[0]


def test_a_vm_whose_device_only_dra_serves_has_a_ready_provider() -> None:
    state = state_of(node("omen2"), SERVING, gpus_on("omen2", "gpu-0"), kubevirt([]))
    created = vmi("gpu-vm", gpus=[GPU])
    decision = Engine(policies=(passthrough_provider.POLICY,)).evaluate(
        request("CREATE", created), state
    )
    assert decision.verdicts == []


def test_a_stuck_vm_counts_the_units_dra_serves() -> None:
    stuck = vm("picky", gpus=[GPU], unschedulable_since="2026-10-30T11:00:00Z")
    state = state_of(node("omen2"), SERVING, gpus_on("omen2", "gpu-0", "gpu-1"), stuck)
    found = diagnose_all(state, datetime(2026, 10, 30, 12, tzinfo=UTC))
    (finding,) = found[VM_UNSCHEDULABLE]
    assert f"{GPU} has 2 free on 1 healthy provider" in finding.message


@pytest.mark.parametrize(
    ("allocatable", "flagged"),
    [
        pytest.param({}, False, id="DRA alone serves it: no device plugin to advertise it twice"),
        pytest.param({RTX_3090: "1"}, True, id="the sandbox device plugin advertises it too"),
    ],
)
def test_the_external_provider_flip_counts_device_plugins_only(
    allocatable: dict[str, str], flagged: bool
) -> None:
    tower1 = node("tower1", labels={WORKLOAD_LABEL: "vm-passthrough"}, allocatable=allocatable)
    passthrough = device_class("vfio.gpu.nvidia.com", VFIO_CLASS, extended=RTX_3090)
    vfio = gpus_on("tower1", "gpu-vfio-0", type_="vfio")
    before = kubevirt([("10de:2204", RTX_3090)])
    after = kubevirt([("10de:2204", RTX_3090)], external=False)
    state = state_of(cluster_policy(), tower1, passthrough, vfio, before)
    assert state.healthy_provider_count(RTX_3090) == 1
    found = external_provider_flip.check(request("UPDATE", after, before), state)
    assert bool(found) == flagged

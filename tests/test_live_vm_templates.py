"""KubeVirt's VM templates read live: VirtualMachinePools in whichever of v1beta1 and v1alpha1
the API server serves (discovery decides, ``webhook.state.reads.served``), a cluster without
KubeVirt's pool and instancetype APIs ready with each absence said once, and a VM naming an
instancetype judged with the devices the live state holds for it (or "cannot tell")."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Iterable

import pytest

from policies.cluster.kinds import (
    RESOURCE_OF,
    VM_CLUSTER_INSTANCETYPE,
    VM_INSTANCETYPE,
    VM_POOL,
    VM_REPLICA_SET,
)
from policies.vocabulary.requests import GroupKind
from tests.builders import instancetype, node, request, vm, vm_pool
from tests.conftest import LiveFactory
from tests.kubeapi import SERVED, KubeApiDouble
from tests.kubeapi_wire import Resource
from tests.waits import until
from webhook.engine import Engine

RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
TEMPLATE_KINDS = (VM_REPLICA_SET, VM_POOL, VM_INSTANCETYPE, VM_CLUSTER_INSTANCETYPE)


def served(
    pool_version: str | None = "v1beta1", without: Iterable[GroupKind] = ()
) -> list[Resource]:
    """The double's resources with pools in ``pool_version`` (None: not served), less
    ``without``."""
    left_out = {k.kind for k in without}
    out = []
    for resource in SERVED:
        if resource.kind in left_out:
            continue
        if resource.kind == VM_POOL.kind:
            if pool_version is None:
                continue
            resource = dataclasses.replace(resource, version=pool_version)
        out.append(resource)
    return out


@pytest.fixture
async def api(request: pytest.FixtureRequest) -> AsyncIterator[KubeApiDouble]:
    """The double serving ``served(...)``'s resources (the test's parameter; all by default)."""
    resources = getattr(request, "param", None) or served()
    async with KubeApiDouble(resources=resources, bookmark_interval=0.1) as double:
        yield double


@pytest.mark.parametrize(
    ("api", "version"),
    [(served("v1beta1"), "v1beta1"), (served("v1alpha1"), "v1alpha1")],
    indirect=["api"],
    ids=["v1beta1", "v1alpha1 (KubeVirt before 1.8)"],
)
async def test_pools_are_read_in_the_version_the_server_serves(
    api: KubeApiDouble, version: str, make_live: LiveFactory
) -> None:
    api.create(vm_pool("farm", gpus=[RTX_5090], replicas=3, version=version))
    live = await make_live()
    assert live.statuses[VM_POOL].resource.version == version
    assert live.state.counts()[str(VM_POOL)] == 1
    api.create(vm_pool("farm-2", version=version))
    await until(lambda: live.state.counts()[str(VM_POOL)] == 2)  # the watch follows it


@pytest.mark.parametrize("api", [served(None, without=TEMPLATE_KINDS)], indirect=True)
async def test_a_cluster_without_kubevirts_template_apis_is_ready_and_says_each_absence_once(
    api: KubeApiDouble, make_live: LiveFactory, caplog: pytest.LogCaptureFixture
) -> None:
    api.create(node("omen1", allocatable={RTX_5090: "1"}))
    paths = [RESOURCE_OF[kind].path for kind in TEMPLATE_KINDS]
    with caplog.at_level(logging.INFO, logger="gpu-guard.live"):
        live = await make_live(absent_recheck=0.01)
        # each absent API asked again and again, and said once
        await until(lambda: all(api.requests[path] >= 3 for path in paths))
    assert live.not_ready_reason() is None
    assert not any(live.statuses[kind].installed for kind in TEMPLATE_KINDS)
    for path in paths:
        said = [r for r in caplog.records if path in r.getMessage()]
        assert len(said) == 1, path
    # A VM naming an instancetype the cluster cannot hold: never all clear.
    named = vm("render", instancetype={"name": "gpu-5090"})
    decision = Engine().evaluate(request("CREATE", named), live.state, live)
    assert [v.policy for v in decision.verdicts] == ["passthrough-without-ready-provider"]
    assert "not in gpu-guard's view" in decision.verdicts[0].message


async def test_a_vm_naming_an_instancetype_is_judged_with_the_devices_the_live_state_holds(
    api: KubeApiDouble, make_live: LiveFactory
) -> None:
    api.create(node("omen1", allocatable={RTX_5090: "1"}))
    live = await make_live()
    named = request("CREATE", vm("render", instancetype={"name": "h100"}))
    unknown = Engine().evaluate(named, live.state, live).verdicts
    assert ["not in gpu-guard's view" in v.message for v in unknown] == [True]
    api.create(instancetype("h100", gpus=["nvidia.com/GH100_H100_PCIE"]))
    await until(lambda: live.state.cluster_instancetype("h100") is not None)
    verdicts = Engine().evaluate(named, live.state, live).verdicts
    assert [v.policy for v in verdicts] == ["passthrough-without-ready-provider"]
    assert "nvidia.com/GH100_H100_PCIE" in verdicts[0].message
    api.update(instancetype("h100", gpus=[RTX_5090]))  # now a device omen1 provides
    await until(lambda: not Engine().evaluate(named, live.state, live).verdicts)

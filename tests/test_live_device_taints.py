"""DeviceTaintRules read live in whichever of v1 and v1beta2 the API server serves (discovery
decides, ``webhook.state.reads.served``), and a server serving neither is ready, counted empty."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest

from policies.cluster.kinds import DEVICE_TAINT_RULE
from tests.conftest import LiveFactory
from tests.kubeapi import SERVED, KubeApiDouble
from tests.kubeapi_wire import Resource
from tests.test_device_taints import rule
from tests.waits import until


def served_as(version: str | None) -> list[Resource]:
    """The double's resources with DeviceTaintRule in ``version``, or not at all (None)."""
    out = []
    for resource in SERVED:
        if resource.kind == DEVICE_TAINT_RULE.kind:
            if version is None:
                continue
            resource = dataclasses.replace(resource, version=version)
        out.append(resource)
    return out


@pytest.fixture(params=["v1", "v1beta2", None], ids=["v1", "v1beta2", "neither"])
def version(request: pytest.FixtureRequest) -> str | None:
    served: str | None = request.param
    return served


@pytest.fixture
async def api(version: str | None) -> AsyncIterator[KubeApiDouble]:
    async with KubeApiDouble(resources=served_as(version), bookmark_interval=0.1) as double:
        yield double


async def test_device_taint_rules_are_read_in_the_version_the_server_serves(
    api: KubeApiDouble, version: str | None, make_live: LiveFactory
) -> None:
    if version is not None:
        api.create({**rule("drain", pool="dgx-1"), "apiVersion": f"resource.k8s.io/{version}"})
    live = await make_live()
    status = live.statuses[DEVICE_TAINT_RULE]
    assert live.not_ready_reason() is None
    if version is None:
        assert not status.installed and live.state.device_taint_rules() == []
        return
    assert status.resource.version == version
    assert [r.name for r in live.state.device_taint_rules()] == ["drain"]
    api.create({**rule("drain-2"), "apiVersion": f"resource.k8s.io/{version}"})
    await until(lambda: len(live.state.device_taint_rules()) == 2)  # the watch follows it

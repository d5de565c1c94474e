"""gpu_guard_sole_provider_workloads: an alert counts per node what its failure would strand."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families

from policies.state.cluster import ClusterState
from tests.builders import Obj, node, owned_vmi, state_of, vm
from webhook.audit.background import BackgroundAudit
from webhook.engine import Engine
from webhook.metrics import Metrics

NOW = datetime(2026, 10, 30, 12, tzinfo=UTC)
RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
RTX_3090 = "nvidia.com/GA102_GEFORCE_RTX_3090"
GAUGE = "gpu_guard_sole_provider_workloads"


def provider(name: str, resource: str = RTX_5090) -> Obj:
    return node(name, allocatable={resource: "1"})


def running_vm(name: str, on: str, resource: str = RTX_5090) -> list[Obj]:
    return [vm(name, gpus=[resource]), owned_vmi(name, on, gpus=[resource])]


def stranded_per_node(metrics: Metrics) -> dict[str, float]:
    return {
        sample.labels["node"]: sample.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for sample in family.samples
        if sample.name == GAUGE
    }


async def audited(state: ClusterState, metrics: Metrics) -> dict[str, float]:
    await BackgroundAudit(Engine(), state, metrics, clock=lambda: NOW).run_once()
    return stranded_per_node(metrics)


CASES = [
    pytest.param(
        [provider("n1"), *running_vm("a", "n1"), *running_vm("b", "n1")],
        {"n1": 2},
        id="two VMs on the one provider: 2 for it",
    ),
    pytest.param(
        [
            provider("n1"),
            provider("n2", RTX_3090),
            *running_vm("a", "n1"),
            vm("b", gpus=[RTX_5090]),
            *running_vm("c", "n2", RTX_3090),
        ],
        {"n1": 2, "n2": 1},
        id="a VM that should run counts too, each node its own series",
    ),
    pytest.param(
        [provider("n1"), provider("n2"), *running_vm("a", "n1"), *running_vm("b", "n2")],
        {},
        id="two providers: no series",
    ),
]


@pytest.mark.parametrize(("objects", "expected"), CASES)
async def test_the_background_audit_sets_per_node_the_workloads_its_failure_would_strand(
    objects: list[Obj], expected: dict[str, float]
) -> None:
    assert await audited(state_of(*objects), Metrics()) == expected


async def test_a_node_loses_its_series_when_a_second_provider_appears() -> None:
    metrics = Metrics()
    state = state_of(
        provider("n1"),
        provider("n2", RTX_3090),
        *running_vm("a", "n1"),
        *running_vm("c", "n2", RTX_3090),
    )
    assert await audited(state, metrics) == {"n1": 1, "n2": 1}
    state.upsert(provider("n3"))
    assert await audited(state, metrics) == {"n2": 1}

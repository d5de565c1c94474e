"""dra-driver-gates-exclusive: a GPUCluster turning on NVIDIA DRA driver gates that exclude each
other."""

from __future__ import annotations

import pytest

from policies.rules.driver_gates_exclusive import audit, check
from tests.builders import request, state_of
from tests.test_gpu_cluster import gpu_cluster


@pytest.mark.parametrize(
    ("gates", "pairs"),
    [
        ({"DynamicMIG": True, "PassthroughSupport": True}, "DynamicMIG with PassthroughSupport"),
        (
            {"MPSSupport": True, "NVMLDeviceHealthCheck": True},
            "MPSSupport with NVMLDeviceHealthCheck",
        ),
        (
            {"DynamicMIG": True, "MPSSupport": True, "NVMLDeviceHealthCheck": True},
            "DynamicMIG with NVMLDeviceHealthCheck; DynamicMIG with MPSSupport; MPSSupport with "
            "NVMLDeviceHealthCheck",
        ),
    ],
)
def test_a_gpucluster_with_driver_gates_that_exclude_each_other_is_warned(
    gates: dict[str, bool], pairs: str
) -> None:
    cluster = gpu_cluster(featureGates=gates)
    (finding,) = check(request("CREATE", cluster), state_of())
    assert f"({pairs})" in finding.message


@pytest.mark.parametrize(
    "gates",
    [
        {"DynamicMIG": True},
        {"PassthroughSupport": True, "DeviceMetadata": True},
        {"DynamicMIG": True, "PassthroughSupport": False},
    ],
)
def test_gates_that_go_together_pass(gates: dict[str, bool]) -> None:
    cluster = gpu_cluster(featureGates=gates)
    assert not check(request("CREATE", cluster), state_of())


def test_the_audit_reports_a_stored_gpucluster_with_exclusive_gates() -> None:
    cluster = gpu_cluster(featureGates={"DynamicMIG": True, "PassthroughSupport": True})
    found = list(audit(state_of(cluster)))
    assert [ref.kind for ref, _ in found] == ["GPUCluster"]

"""Claim fit as the scheduler counts shared counters (KEP-4815) and shared devices (KEP-5075).

A dynamic-MIG node publishes one H100 as a whole GPU and seven 1g.10gb partitions drawing on the
same counters (tests/counter_builders.py): devices enough by number, not together. A shared GPU
hands out 80Gi of memory in 10Gi steps to every claim allocated on it.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from policies.cluster.claim_fit import claim_fit
from policies.cluster.claim_shortfall import Why
from policies.cluster.counters import RequestPolicy, share_of
from tests.builders import Obj, node, state_of
from tests.counter_builders import (
    allocated_claim,
    dynamic_mig_node,
    partition,
    shared_gpu,
)
from tests.dra_builders import resource_slice
from tests.test_claim_fit import CLASSES, exactly, requests_of

GI = 2**30


def fit(objects: list[Obj], *requests: Obj) -> Any:
    return claim_fit(requests_of(*requests), state_of(*CLASSES, *objects))


def mig(name: str = "part", count: int = 1) -> Obj:
    return exactly(name, "mig.nvidia.com", count=count)


def memory(name: str, amount: str, count: int = 1) -> Obj:
    request = exactly(name, count=count)
    request["exactly"]["capacity"] = {"requests": {"memory": amount}}
    return request


ONE_GPU = [node("dgx-1"), *dynamic_mig_node("dgx-1")]
TWO_GPUS = [node("dgx-1"), *dynamic_mig_node("dgx-1", gpus=2)]


@pytest.mark.parametrize(
    ("objects", "requests"),
    [
        pytest.param(ONE_GPU, [exactly()], id="the whole GPU alone"),
        pytest.param(ONE_GPU, [mig(count=7)], id="all seven partitions"),
        pytest.param(TWO_GPUS, [exactly(), mig()], id="a whole GPU and a partition of the other"),
        pytest.param(
            [node("dgx-1"), resource_slice("dgx-1-shared", "dgx-1", [shared_gpu()])],
            [memory("a", "40Gi"), memory("b", "40Gi")],
            id="two requests sharing one GPU's memory exactly",
        ),
        pytest.param(
            [node("dgx-1"), resource_slice("dgx-1-shared", "dgx-1", [shared_gpu()])],
            [exactly(count=8)],
            id="eight default shares of one shared GPU",
        ),
    ],
)
def test_a_claim_within_the_counters_fits(objects: list[Obj], requests: list[Obj]) -> None:
    assert fit(objects, *requests).node == "dgx-1"


@pytest.mark.parametrize(
    ("objects", "requests", "said"),
    [
        pytest.param(
            ONE_GPU,
            [exactly(), mig()],
            "on dgx-1: its devices draw on shared counters (gpu-0-counter-set) that do not cover",
            id="a whole GPU and a partition of it",
        ),
        pytest.param(
            [node("dgx-1"), resource_slice("dgx-1-shared", "dgx-1", [shared_gpu()])],
            [memory("a", "25Gi", count=3)],
            "on dgx-1: the shared devices' capacity does not cover every request's share",
            id="three 25Gi shares rounded up to 30Gi each on an 80Gi GPU",
        ),
        pytest.param(
            [node("dgx-1"), resource_slice("dgx-1-gpus", "dgx-1", [partition(0, 0)])],
            [mig()],
            "on dgx-1: gpu-0-mig-1g10gb-0 consumes counter set gpu-0-counter-set, which its pool"
            " dgx-1 does not declare (the scheduler cannot allocate it)",
            id="a partition of a counter set no slice declares",
        ),
    ],
)
def test_a_claim_beyond_the_counters_is_told_why(
    objects: list[Obj], requests: list[Obj], said: str
) -> None:
    (unmet,) = fit(objects, *requests).unmet
    assert unmet.shortfalls[0].why is Why.COUNTERS_SHORT
    assert unmet.describe().startswith(said)


def test_a_whole_gpu_does_not_fit_while_a_partition_of_it_is_allocated() -> None:
    held = allocated_claim("small", "dgx-1", ["gpu-0-mig-1g10gb-3"])
    (unmet,) = fit([*ONE_GPU, held], exactly()).unmet
    assert unmet.shortfalls[0].why is Why.COUNTERS_HELD
    assert unmet.describe().startswith(
        "fits dgx-1 only once gpu-0-mig-1g10gb-3 (claim ml/small) release the shared counters"
    )


def test_a_whole_gpu_fits_beside_a_partition_of_another_gpu() -> None:
    held = allocated_claim("small", "dgx-1", ["gpu-0-mig-1g10gb-3"])
    assert fit([*TWO_GPUS, held], exactly()).node == "dgx-1"


def test_a_partition_still_fits_beside_allocated_partitions() -> None:
    held = allocated_claim("small", "dgx-1", [f"gpu-0-mig-1g10gb-{i}" for i in range(6)])
    assert fit([*ONE_GPU, held], mig()).node == "dgx-1"


def test_a_share_larger_than_what_allocated_shares_leave_waits_for_them() -> None:
    shared = resource_slice("dgx-1-shared", "dgx-1", [shared_gpu()])
    held = allocated_claim("big", "dgx-1", ["gpu-0"], consumed="60Gi")
    objects = [node("dgx-1"), shared, held]
    assert fit(objects, memory("a", "20Gi")).node == "dgx-1"
    (unmet,) = fit(objects, memory("a", "30Gi")).unmet
    assert "gpu-0 (claim ml/big)" in unmet.describe()


@pytest.mark.parametrize(
    ("asked", "policy", "share"),
    [
        (None, None, 80 * GI),
        (None, RequestPolicy(default=Decimal(10 * GI)), 10 * GI),
        (25 * GI, RequestPolicy(minimum=Decimal(10 * GI), step=Decimal(10 * GI)), 30 * GI),
        (5 * GI, RequestPolicy(minimum=Decimal(10 * GI), step=Decimal(10 * GI)), 10 * GI),
        (
            50 * GI,
            RequestPolicy(minimum=Decimal(10 * GI), maximum=Decimal(40 * GI)),
            None,
        ),
        (15 * GI, RequestPolicy(valid_values=(Decimal(10 * GI), Decimal(20 * GI))), 20 * GI),
        (30 * GI, RequestPolicy(valid_values=(Decimal(10 * GI), Decimal(20 * GI))), None),
        (90 * GI, None, None),
    ],
)
def test_a_share_is_rounded_up_as_the_request_policy_says(
    asked: int | None, policy: RequestPolicy | None, share: int | None
) -> None:
    got = share_of(None if asked is None else Decimal(asked), Decimal(80 * GI), policy)
    assert got == (None if share is None else Decimal(share))


def test_only_the_partitions_of_the_gpu_it_wants_are_named() -> None:
    one = [f"gpu-0-mig-1g10gb-{i}" for i in (3,)]
    other = allocated_claim("elsewhere", "dgx-1", ["gpu-1-mig-1g10gb-0"])
    whole_of_gpu_0 = exactly(selectors=["device.attributes['gpu.nvidia.com'].uuid == 'GPU-gpu-0'"])
    objects = [*TWO_GPUS, allocated_claim("small", "dgx-1", one), other]
    (unmet,) = fit(objects, whole_of_gpu_0).unmet
    assert "gpu-0-mig-1g10gb-3 (claim ml/small)" in unmet.describe()
    assert "elsewhere" not in unmet.describe()

"""The live server's "confirm the pods before a deny" covers pods holding GPUs through DRA claims.

Confirmation re-reads the node's pods from the API server; a pod holding a GPU through a claim is
a pod bound to the node like any other (kept because it names a claim), so the re-read alone
decides whether it still runs there. Claims need no re-read: a claim stays reserved for a pod
while that pod runs, and a pod the re-read drops no longer counts, whatever the claim says.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.builders import dev_mount_pod, env_pod, node, request, with_labels
from tests.conftest import LiveFactory
from tests.dra_builders import (
    GPU_CLASS,
    claim_pod,
    device_class,
    gpu,
    resource_claim,
    resource_slice,
)
from tests.kubeapi import KubeApiDouble
from tests.waits import until
from webhook.admission.pipeline import Admission
from webhook.engine import Engine

NODE = "omen1"
OMEN1 = node(NODE, labels={"nvidia.com/gpu.workload.config": "container"})
SWITCH = request(
    "UPDATE", with_labels(OMEN1, {"nvidia.com/gpu.workload.config": "vm-passthrough"}), OMEN1
)


def claim_for(pod_name: str) -> dict[str, object]:
    return resource_claim("train-gpu", allocated=(NODE, NODE, "gpu-0"), reserved_for=[pod_name])


@pytest.fixture
async def api() -> AsyncIterator[KubeApiDouble]:
    async with KubeApiDouble(bookmark_interval=0.1) as double:
        for obj in (
            OMEN1,
            device_class("gpu.nvidia.com", GPU_CLASS, extended="nvidia.com/gpu"),
            resource_slice("omen1-gpu", NODE, [gpu("gpu-0")]),
        ):
            double.create(obj)
        yield double


async def test_a_claimed_gpu_pod_gone_from_the_server_stops_blocking_the_switch(
    make_live: LiveFactory, api: KubeApiDouble
) -> None:
    api.create(claim_for("ghost"))
    live = await make_live()
    await until(lambda: len(live.state.claims_allocated_on(NODE)) == 1)
    # The cache still believes in a pod the server no longer has (a missed delete):
    live.state.upsert(claim_pod("ghost", NODE, claim="train-gpu"))
    assert not Engine().evaluate(SWITCH, live.state, live).allowed
    shared = Admission(Engine(), live.state, freshness=live, confirm=live.refresh_pods_on)
    decision = await shared.decide(SWITCH)
    assert decision.allowed, decision.deny_message
    assert live.state.pod("ml", "ghost") is None


async def test_a_claimed_gpu_pod_the_server_confirms_keeps_the_switch_denied(
    make_live: LiveFactory, api: KubeApiDouble
) -> None:
    api.create(claim_for("train-dra"))
    api.create(claim_pod("train-dra", NODE, claim="train-gpu"))
    live = await make_live()
    await until(lambda: live.state.pod("ml", "train-dra") is not None)
    await until(lambda: len(live.state.claims_allocated_on(NODE)) == 1)
    shared = Admission(Engine(), live.state, freshness=live, confirm=live.refresh_pods_on)
    decision = await shared.decide(SWITCH)
    assert not decision.allowed
    assert "ml/train-dra (claim ml/train-gpu: gpu-0)" in decision.deny_message
    assert "did not confirm" not in decision.deny_message


@pytest.mark.parametrize(
    ("user", "named"),
    [
        pytest.param(
            "env",
            "ml/notebook (env NVIDIA_VISIBLE_DEVICES=all with runtimeClassName nvidia)",
            id="a pod reaching the GPUs through its environment",
        ),
        pytest.param(
            "mount",
            "ml/notebook (privileged, mounts /dev/nvidia0 from the host)",
            id="a privileged pod mounting a GPU device",
        ),
    ],
)
async def test_a_user_that_asks_for_nothing_is_watched_confirmed_and_named(
    make_live: LiveFactory, api: KubeApiDouble, user: str, named: str
) -> None:
    """The live watch keeps the fields that make such a pod a user (the pod prefilter and the
    wire schema), and the confirmation's re-read of the node's pods keeps it a user."""
    api.create(env_pod("notebook", NODE) if user == "env" else dev_mount_pod("notebook", NODE))
    live = await make_live()
    await until(lambda: live.state.pod("ml", "notebook") is not None)
    shared = Admission(Engine(), live.state, freshness=live, confirm=live.refresh_pods_on)
    decision = await shared.decide(SWITCH)
    assert not decision.allowed
    assert named in decision.deny_message
    assert "did not confirm" not in decision.deny_message

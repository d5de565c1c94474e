"""Who holds a node's NVIDIA GPUs: device-plugin pods and pods with allocated DRA GPUs alike."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from policies.cluster.gpu_users import gpu_users_on
from tests.builders import Obj, gpu_pod, node, pod, state_of
from tests.dra_builders import (
    GPU_CLASS,
    MIG_CLASS,
    VFIO_CLASS,
    claim_pod,
    device_class,
    gpu,
    resource_claim,
    resource_slice,
)

NODE = "omen2"
OTHER = "tower1"
CLASSES = (
    device_class("gpu.nvidia.com", GPU_CLASS, extended="nvidia.com/gpu"),
    device_class("mig.nvidia.com", MIG_CLASS),
    device_class("vfio.gpu.nvidia.com", VFIO_CLASS),
)
SLICE = resource_slice(
    "omen2-gpu.nvidia.com-7x2kq",
    NODE,
    [gpu("gpu-0"), gpu("gpu-1-mig-1g", type_="mig"), gpu("gpu-vfio-2", type_="vfio")],
)
OTHER_SLICE = resource_slice("tower1-gpu.nvidia.com-m4r9t", OTHER, [gpu("gpu-0")])
NICS = resource_slice(
    "omen2-nic", NODE, [{"name": "nic-0", "attributes": {"type": {"string": "gpu"}}}],
    driver="nic.example.com", pool="omen2-nics",
)  # fmt: skip
TRAIN = claim_pod("train-dra", NODE, claim="train-gpu")


def held(device: str = "gpu-0", *, on: str = NODE, pool: str = NODE, by: str = "train-dra") -> Obj:
    """Claim ml/train-gpu allocated ``device`` of pool ``pool`` on ``on``, reserved for ``by``."""
    return resource_claim("train-gpu", allocated=(on, pool, device), reserved_for=[by])


def with_driver(claim: Obj, driver: str) -> Obj:
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    result["driver"] = driver
    return claim


def admin_access(claim: Obj) -> Obj:
    claim["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    return claim


def also_limits(obj: Obj) -> Obj:
    """The pod asks nvidia.com/gpu in its limits too (DRA may serve it: extendedResourceName)."""
    obj["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    return obj


def users(*objects: Obj, on: str = NODE) -> list[str]:
    state = state_of(node(NODE), node(OTHER), *CLASSES, *objects)
    return [u.describe() for u in gpu_users_on(on, state)]


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        pytest.param(
            [gpu_pod("train-0", NODE)],
            ["ml/train-0 (nvidia.com/gpu: 1)"],
            id="a pod with nvidia.com/gpu limits holds the node's GPU",
        ),
        pytest.param(
            [SLICE, TRAIN, held()],
            ["ml/train-dra (claim ml/train-gpu: gpu-0)"],
            id="a pod in reservedFor of a claim allocated a gpu device there holds it",
        ),
        pytest.param(
            [SLICE, TRAIN, held("gpu-1-mig-1g")],
            ["ml/train-dra (claim ml/train-gpu: gpu-1-mig-1g)"],
            id="a mig device counts like a full GPU",
        ),
        pytest.param(
            [TRAIN, held()],
            ["ml/train-dra (claim ml/train-gpu: gpu-0 (no longer published))"],
            id="a device its pool no longer publishes still counts and says so",
        ),
        pytest.param(
            [SLICE, TRAIN, held("gpu-vfio-2")],
            [],
            id="a pod holding only a vfio device of the NVIDIA driver is no GPU user",
        ),
        pytest.param(
            [NICS, TRAIN, with_driver(held("nic-0", pool="omen2-nics"), "nic.example.com")],
            [],
            id="a pod holding only a non NVIDIA DRA device is no GPU user",
        ),
        pytest.param(
            [SLICE, TRAIN, resource_claim("train-gpu")],
            [],
            id="a pod whose claim is not allocated holds nothing yet",
        ),
        pytest.param(
            [SLICE, TRAIN, resource_claim("train-gpu", allocated=(NODE, NODE, "gpu-0"))],
            [],
            id="an allocated claim reserved for no pod makes no pod a user",
        ),
        pytest.param(
            [SLICE, OTHER_SLICE, TRAIN, held(on=OTHER, pool=OTHER)],
            [],
            id="a claim allocated on another node does not count here",
        ),
        pytest.param(
            [SLICE, claim_pod("train-dra", NODE, claim="train-gpu", phase="Succeeded"), held()],
            [],
            id="a finished pod still in reservedFor holds nothing",
        ),
        pytest.param(
            [SLICE, claim_pod("train-dra", OTHER, claim="train-gpu"), held()],
            [],
            id="a reserving pod bound to another node is no user of this one",
        ),
        pytest.param(
            [SLICE, TRAIN, admin_access(held())],
            [],
            id="a claim with admin access (monitoring) holds no GPU of its own",
        ),
        pytest.param(
            [SLICE, also_limits(claim_pod("train-dra", NODE, claim="train-gpu")), held()],
            ["ml/train-dra (nvidia.com/gpu: 1, claim ml/train-gpu: gpu-0)"],
            id="a pod holding both ways is one user that names both",
        ),
        pytest.param(
            [SLICE, claim_pod("train-dra", NODE, claim="train-gpu", terminating=True), held()],
            ["ml/train-dra (claim ml/train-gpu: gpu-0, terminating)"],
            id="a terminating pod still holds its claim's GPU",
        ),
        pytest.param(
            [SLICE, TRAIN, held(), gpu_pod("a-first", NODE), pod("web", NODE)],
            ["ml/a-first (nvidia.com/gpu: 1)", "ml/train-dra (claim ml/train-gpu: gpu-0)"],
            id="users are listed by name and pods without GPUs are left out",
        ),
    ],
)
def test_who_holds_the_nodes_nvidia_gpus(objects: Sequence[Obj], expected: list[str]) -> None:
    assert users(*objects) == expected


def test_a_claim_allocated_on_another_node_counts_there() -> None:
    objects = (SLICE, OTHER_SLICE, claim_pod("train-dra", OTHER, claim="train-gpu"))
    assert users(*objects, held(on=OTHER, pool=OTHER), on=OTHER) == [
        "ml/train-dra (claim ml/train-gpu: gpu-0)"
    ]


def test_a_claim_made_from_a_template_names_the_generated_claim() -> None:
    made = resource_claim(
        "train-dra-gpu-x7k2p", allocated=(NODE, NODE, "gpu-0"), reserved_for=["train-dra"]
    )
    owner = claim_pod("train-dra", NODE, claim="train-dra-gpu-x7k2p", template="one-gpu")
    assert users(SLICE, owner, made) == ["ml/train-dra (claim ml/train-dra-gpu-x7k2p: gpu-0)"]


def test_the_short_label_names_claims_but_not_device_plugin_resources() -> None:
    state = state_of(node(NODE), *CLASSES, SLICE, TRAIN, held(), gpu_pod("infer", NODE))
    assert [u.label for u in gpu_users_on(NODE, state)] == [
        "ml/infer",
        "ml/train-dra (claim ml/train-gpu: gpu-0)",
    ]


def test_the_users_follow_the_claim_through_deallocation_and_the_pod_through_deletion() -> None:
    state = state_of(node(NODE), *CLASSES, SLICE, TRAIN, held())
    assert [u.key for u in gpu_users_on(NODE, state)] == ["ml/train-dra"]
    state.upsert(resource_claim("train-gpu"))  # deallocated
    assert gpu_users_on(NODE, state) == ()
    state.upsert(held())
    state.delete_object(TRAIN)
    assert gpu_users_on(NODE, state) == ()


@pytest.mark.parametrize(
    ("allocated", "expected"),
    [
        pytest.param("gpu/monitor", [], id="the admin access alternative holds no GPU"),
        pytest.param(
            "gpu/whole",
            ["ml/train-dra (claim ml/train-gpu: gpu-0)"],
            id="the ordinary alternative of the same request holds it",
        ),
    ],
)
def test_admin_access_is_read_per_first_available_alternative(
    allocated: str, expected: list[str]
) -> None:
    claim = held()
    claim["spec"]["devices"]["requests"] = [
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "monitor", "deviceClassName": "gpu.nvidia.com", "adminAccess": True},
                {"name": "whole", "deviceClassName": "gpu.nvidia.com"},
            ],
        }
    ]
    claim["status"]["allocation"]["devices"]["results"][0]["request"] = allocated
    assert users(SLICE, TRAIN, claim) == expected

"""policies.cel.hints: did-you-mean for a simple equality whose value nearly names a
published one, and nothing for anything cleverer."""

from __future__ import annotations

import pytest

from policies.cel.hints import conjuncts, near_misses
from policies.cluster.dra import DeviceInfo, project_resource_slice
from tests.dra_builders import gpu, resource_slice


def devices(*products: str, driver: str = "gpu.nvidia.com") -> list[DeviceInfo]:
    published = [gpu(f"gpu-{i}", product=p) for i, p in enumerate(products)]
    return list(project_resource_slice(resource_slice("s", "n", published, driver=driver)).devices)


@pytest.mark.parametrize(
    ("expression", "parts"),
    [
        ("a == 'x'", ["a == 'x'"]),
        ("a == 'x' && b == 'y'", ["a == 'x' ", " b == 'y'"]),
        ("a == 'x && y' && b", ["a == 'x && y' ", " b"]),
        ("f(a && b) && c", ["f(a && b) ", " c"]),
        ("a && b || c", ["a && b || c"]),
        ("a == 'it\\'s && so'", ["a == 'it\\'s && so'"]),
    ],
    ids=["one", "two", "quoted", "bracketed", "an or", "an escaped quote"],
)
def test_an_expression_splits_at_its_top_level_ands_only(expression: str, parts: list[str]) -> None:
    assert conjuncts(expression) == parts


@pytest.mark.parametrize(
    ("expression", "published", "meant"),
    [
        pytest.param(
            "device.attributes['gpu.nvidia.com'].productName == 'nvidia h100 nvl'",
            devices("NVIDIA H100 NVL"),
            ("productName == 'NVIDIA H100 NVL'",),
            id="case",
        ),
        pytest.param(
            'device.attributes["gpu.nvidia.com"]["productName"] == "NVIDIA H100  NVL"',
            devices("NVIDIA H100 NVL"),
            ("productName == 'NVIDIA H100 NVL'",),
            id="spacing, index syntax, double quotes",
        ),
        pytest.param(
            "device.driver == 'gpu.nvidia.com' && "
            "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA-H100-NVL'",
            devices("NVIDIA H100 NVL", "NVIDIA GeForce RTX 5090"),
            ("productName == 'NVIDIA H100 NVL'",),
            id="dashes for spaces, in a conjunction",
        ),
        pytest.param(
            "device.driver == 'GPU.nvidia.com'",
            devices("x"),
            ("device.driver == 'gpu.nvidia.com'",),
            id="the driver",
        ),
        pytest.param(
            "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100'",
            devices("NVIDIA H100 NVL"),
            (),
            id="a value nothing is close to",
        ),
        pytest.param(
            "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 NVL'",
            devices("NVIDIA H100 NVL"),
            (),
            id="a value that is published",
        ),
        pytest.param(
            "device.attributes['gpu.nvidia.com'].productName.lowerAscii() == 'nvidia h100 nvl'",
            devices("NVIDIA H100 NVL"),
            (),
            id="not a plain equality",
        ),
        pytest.param(
            "device.attributes['gpu.nvidia.com'].productName == 'nvidia h100 nvl' || false",
            devices("NVIDIA H100 NVL"),
            (),
            id="an or",
        ),
        pytest.param(
            "device.attributes['example.com'].productName == 'nvidia h100 nvl'",
            devices("NVIDIA H100 NVL"),
            (),
            id="another domain",
        ),
    ],
)
def test_near_misses_suggest_the_published_value_a_plain_equality_nearly_names(
    expression: str, published: list[DeviceInfo], meant: tuple[str, ...]
) -> None:
    assert near_misses([expression], published) == meant

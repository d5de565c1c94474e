"""Extended resources from DRA (KEP-5004): every DeviceClass also serves its implicit name
``deviceclass.resource.kubernetes.io/<class>``, and a claim that carries the scheduler's
annotation without being the scheduler's is warned (kubernetes#135404)."""

from __future__ import annotations

import pytest

from policies.rules import extended_claim_forged
from policies.rules.extended_claim_forged import ANNOTATION, SCHEDULER
from tests.builders import Obj, node, request, state_of
from tests.dra_builders import GPU_DEVICE_CLASS, device_class, gpu, resource_claim, resource_slice

IMPLICIT = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
EXPLICIT = "nvidia.com/gpu"
SLICE = resource_slice("dgx-1-gpus", "dgx-1", [gpu()])


@pytest.mark.parametrize("resource", [IMPLICIT, EXPLICIT])
def test_a_class_serves_its_implicit_name_as_it_serves_its_explicit_one(resource: str) -> None:
    view = state_of(GPU_DEVICE_CLASS, node("dgx-1"), SLICE)
    assert view.providers_of(resource) == ["dgx-1"]
    assert view.healthy_provider_count(resource) == 1


def test_a_class_without_an_explicit_name_still_serves_its_implicit_one() -> None:
    plain = device_class("gpu.nvidia.com", "device.driver == 'gpu.nvidia.com'")
    view = state_of(plain, node("dgx-1"), SLICE)
    assert view.providers_of(IMPLICIT) == ["dgx-1"]
    assert not view.providers_of(EXPLICIT)


def test_the_implicit_name_goes_with_the_class() -> None:
    view = state_of(GPU_DEVICE_CLASS, node("dgx-1"), SLICE)
    view.delete_object(GPU_DEVICE_CLASS)
    assert not view.providers_of(IMPLICIT)


def forged(pod: str = "train-0") -> Obj:
    claim = resource_claim("sneaky")
    claim["metadata"]["annotations"] = {ANNOTATION: pod}
    return claim


def test_a_claim_a_user_writes_with_the_schedulers_annotation_is_warned() -> None:
    (finding,) = extended_claim_forged.check(request("CREATE", forged()), state_of())
    assert finding.message.startswith(
        f"claim ml/sneaky carries {ANNOTATION}: train-0 but is written by kubernetes-admin, "
        "not the scheduler"
    )
    assert "kubernetes#135404" in finding.message


@pytest.mark.parametrize(
    ("review"),
    [
        pytest.param(request("CREATE", forged(), user=SCHEDULER), id="the scheduler's own claim"),
        pytest.param(request("CREATE", resource_claim("plain")), id="a claim without it"),
        pytest.param(request("UPDATE", forged(), forged()), id="an edit of a claim that had it"),
    ],
)
def test_the_schedulers_claims_and_plain_claims_pass(review: object) -> None:
    assert not extended_claim_forged.check(review, state_of())  # type: ignore[arg-type]


def test_adding_the_annotation_to_ones_own_claim_is_warned() -> None:
    review = request("UPDATE", forged(), resource_claim("sneaky"))
    assert extended_claim_forged.check(review, state_of())

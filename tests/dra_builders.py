"""Builders for DRA objects, shaped like what the API server sent in tests/fixtures/dra/."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from policies.state.cluster import ClusterState
from tests import FIXTURES
from tests.builders import Obj, pod, vm, vmi

DRA_FIXTURES = FIXTURES / "dra"
NVIDIA = "gpu.nvidia.com"
GPU_CLASS = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
VFIO_CLASS = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'vfio'"
)
MIG_CLASS = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"

#: For tests that read DRA_FIXTURES: missing, they fail naming it (never a silent skip).
needs_fixtures = pytest.mark.usefixtures("dra_fixtures")


def review(name: str) -> Obj:
    """The AdmissionReview recorded as ``admission-reviews/<name>*.json``."""
    (path,) = sorted((DRA_FIXTURES / "admission-reviews").glob(f"{name}*.json"))
    document: Obj = json.loads(path.read_text())
    return document


def replayed(until: str = "") -> ClusterState:
    """The state the recorded reviews build, applied in order as the API server sent them; with
    ``until`` ("019"), the state the API server had when it sent that review."""
    state = ClusterState()
    for path in sorted((DRA_FIXTURES / "admission-reviews").glob("*.json")):
        if until and path.name >= until:
            break
        sent = review(path.name[:3])["request"]
        if sent["operation"] == "DELETE":
            state.delete_object(sent["oldObject"])
        else:
            state.upsert(sent["object"])
    return state


def recorded_object(name: str, old: bool = False) -> Obj:
    obj: Obj = review(name)["request"]["oldObject" if old else "object"]
    return obj


def device_class(name: str, *expressions: str, extended: str = "") -> Obj:
    spec: Obj = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if extended:
        spec["extendedResourceName"] = extended
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


GPU_DEVICE_CLASS = device_class(NVIDIA, GPU_CLASS, extended="nvidia.com/gpu")
"""The chart's three DeviceClasses; gpu.nvidia.com also serves nvidia.com/gpu requests
(extendedResourceName), as the tests of extended-resource providers need."""
VFIO_DEVICE_CLASS = device_class("vfio.gpu.nvidia.com", VFIO_CLASS)
MIG_DEVICE_CLASS = device_class("mig.nvidia.com", MIG_CLASS)


def gpu(
    name: str = "gpu-0",
    *,
    type_: str = "gpu",
    product: str = "NVIDIA GeForce RTX 5090",
    memory: str = "32607Mi",
    bus: str = "0000:01:00.0",
    driver_version: str = "570.133.20",
    extra: Mapping[str, Obj] | None = None,
) -> Obj:
    """One device as NVIDIA's driver publishes it (type gpu, vfio or mig)."""
    attributes: Obj = {
        "type": {"string": type_},
        "productName": {"string": product},
        "uuid": {"string": f"GPU-{name}"},
        "resource.kubernetes.io/pciBusID": {"string": bus},
        **(extra or {}),
    }
    capacity_name = "addressableMemory" if type_ == "vfio" else "memory"
    if type_ != "vfio":
        attributes["driverVersion"] = {"version": driver_version}
    return {"name": name, "attributes": attributes, "capacity": {capacity_name: {"value": memory}}}


def resource_slice(
    name: str,
    node: str,
    devices: Sequence[Obj],
    *,
    driver: str = NVIDIA,
    pool: str | None = None,
    generation: int = 1,
    slice_count: int = 1,
    all_nodes: bool = False,
) -> Obj:
    spec: Obj = {
        "driver": driver,
        "pool": {
            "name": pool if pool is not None else node or name,
            "generation": generation,
            "resourceSliceCount": slice_count,
        },
        "devices": [dict(d) for d in devices],
    }
    if all_nodes:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": spec,
    }


def _request(name: str, device_class: str, selectors: Sequence[str], count: int) -> Obj:
    exactly: Obj = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": name, "exactly": exactly}


def resource_claim(
    name: str,
    namespace: str = "ml",
    *,
    device_class: str = NVIDIA,
    selectors: Sequence[str] = (),
    count: int = 1,
    allocated: tuple[str, str, str] | None = None,
    reserved_for: Sequence[str] = (),
) -> Obj:
    """A claim for ``count`` devices; ``allocated`` = (node, pool, device) as the scheduler
    writes it, ``reserved_for`` the pods using it."""
    status: Obj = {}
    if allocated is not None:
        node, pool, device = allocated
        status["allocation"] = {
            "devices": {
                "results": [{"request": "gpu", "driver": NVIDIA, "pool": pool, "device": device}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    if reserved_for:
        status["reservedFor"] = [{"resource": "pods", "name": p, "uid": p} for p in reserved_for]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [_request("gpu", device_class, selectors, count)]}},
        "status": status,
    }


def claim_template(
    name: str, namespace: str = "vms", *, device_class: str = "vfio.gpu.nvidia.com"
) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [_request("gpu", device_class, (), 1)]}}},
    }


def _claims(claim: str, template: str) -> list[Obj]:
    entry: Obj = {"name": "gpu"}
    if claim:
        entry["resourceClaimName"] = claim
    if template:
        entry["resourceClaimTemplateName"] = template
    return [entry]


def claim_pod(name: str, node: str, *, claim: str = "", template: str = "", **kwargs: Any) -> Obj:
    """A pod whose container uses one claim (named, or made from a template)."""
    obj = pod(name, node, **kwargs)
    obj["spec"]["resourceClaims"] = _claims(claim, template)
    obj["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    if template and claim:
        obj["spec"]["resourceClaims"][0].pop("resourceClaimName")
        obj["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim}]
    return obj


def unpinned(claim: Obj) -> Obj:
    """As the scheduler writes a claim on node-independent devices: no allocation nodeSelector."""
    del claim["status"]["allocation"]["nodeSelector"]
    return claim


def extended_resource_pod(name: str, node_name: str, claim: str) -> Obj:
    """A pod asking for nvidia.com/gpu, served by DRA: the scheduler's claim is named in
    status.extendedResourceClaimStatus, not in spec.resourceClaims (KEP-5004)."""
    obj = claim_pod(name, node_name)
    obj["spec"].pop("resourceClaims", None)
    obj["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    obj["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": claim,
        "requestMappings": [
            {"containerName": "c", "resourceName": "nvidia.com/gpu", "requestName": "gpu"}
        ],
    }
    return obj


def claim_vm(name: str, *, claim: str = "", template: str = "", **kwargs: Any) -> Obj:
    """A VM whose one GPU comes from a claim (KubeVirt's GPUsWithDRA shape)."""
    obj = vm(name, **kwargs)
    spec = obj["spec"]["template"]["spec"]
    spec["resourceClaims"] = _claims(claim, template)
    spec["domain"]["devices"]["gpus"] = [{"name": "gpu1", "claimName": "gpu", "requestName": "gpu"}]
    return obj


def claim_vmi(name: str, *, claim: str = "", template: str = "", **kwargs: Any) -> Obj:
    obj = vmi(name, **kwargs)
    obj["spec"]["resourceClaims"] = _claims(claim, template)
    obj["spec"]["domain"]["devices"]["hostDevices"] = [
        {"name": "hd1", "claimName": "gpu", "requestName": "gpu"}
    ]
    return obj

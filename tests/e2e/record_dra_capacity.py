"""Records tests/fixtures/dra-capacity/ from a real kube-apiserver v1.36.2 (KUBEBUILDER_ASSETS):
partitionable devices (KEP-4815), a shared device (KEP-5075) and a pod whose extended resource DRA
serves (KEP-5004), with the three gates on. What the README there says the test wrote itself
(allocations, shareID, consumedCapacity, extendedResourceClaimStatus) is written through the
status subresources, as the scheduler would.

    KUBEBUILDER_ASSETS=... python -m tests.e2e.record_dra_capacity tests/fixtures/dra-capacity
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import yaml

from tests.builders import node
from tests.counter_builders import H100, allocated_claim, dynamic_mig_node, shared_gpu, whole_gpu
from tests.dra_builders import (
    GPU_DEVICE_CLASS,
    MIG_DEVICE_CLASS,
    NVIDIA,
    claim_pod,
    resource_claim,
    resource_slice,
)
from tests.e2e.controlplane import ControlPlane

GATES = (
    "--feature-gates=DRAPartitionableDevices=true,DRAConsumableCapacity=true,"
    "DRAExtendedResource=true"
)
IMPLICIT = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
A100 = "NVIDIA A100 80GB PCIe"
PRODUCT = "device.attributes['gpu.nvidia.com'].productName"
Obj = dict[str, Any]


def _with_gates(plane: ControlPlane) -> None:
    """The API server started with GATES (the harness takes no flags of its own here)."""
    real = subprocess.Popen

    def popen(command: Any, *args: Any, **kwargs: Any) -> Any:
        if command and str(command[0]).endswith("kube-apiserver"):
            command = [*command, GATES]
        return real(command, *args, **kwargs)

    with mock.patch.object(subprocess, "Popen", popen):
        plane.start()


def _shares(claim: Obj, amount: str) -> Obj:
    claim["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {
        "requests": {"memory": amount}
    }
    return claim


def _sharing(name: str) -> list[Obj]:
    """Claim ml/<name> holding 30Gi of dgx-2's shared GPU, and its pod <name>-0."""
    claim = allocated_claim(name, "dgx-2", ["gpu-0"], consumed="30Gi", pods=[f"{name}-0"])
    return [_shares(claim, "30Gi"), claim_pod(f"{name}-0", "dgx-2", claim=name)]


def _extended_pod() -> list[Obj]:
    """ml/train-extended asking the class by its implicit name, and the claim the scheduler
    makes for it (its annotation; allocation and the pod's status written here)."""
    pod = claim_pod("train-extended", "dgx-2", claim="unused")
    pod["spec"].pop("resourceClaims")
    container = pod["spec"]["containers"][0]
    container["resources"] = {"limits": {IMPLICIT: "1"}, "requests": {IMPLICIT: "1"}}
    pod["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "train-extended-extended-resources-x7k2p",
        "requestMappings": [
            {
                "containerName": container["name"],
                "resourceName": IMPLICIT,
                "requestName": "container-0-request-0",
            }
        ],
    }
    claim = allocated_claim(
        "train-extended-extended-resources-x7k2p", "dgx-2", ["gpu-0"], consumed="10Gi",
        pods=["train-extended"],
    )  # fmt: skip
    claim["metadata"]["annotations"] = {
        "resource.kubernetes.io/extended-resource-claim": "train-extended"
    }
    claim["spec"]["devices"]["requests"][0]["name"] = "container-0-request-0"
    claim["status"]["allocation"]["devices"]["results"][0]["request"] = "container-0-request-0"
    return [claim, pod]


def objects() -> list[Obj]:
    """dgx-1: one H100 under DynamicMIG (counters in a slice of their own), partition 3 held by
    ml/small; dgx-2: one A100 shared (allowMultipleAllocations, 10Gi steps) by ml/share-a and
    ml/share-b, 30Gi each, and by the extended-resource pod; ml/whole asks a whole H100."""
    shared = resource_slice("dgx-2-gpus", "dgx-2", [shared_gpu(product=A100)])
    return [
        node("dgx-1"),
        node("dgx-2"),
        GPU_DEVICE_CLASS,
        MIG_DEVICE_CLASS,
        *dynamic_mig_node("dgx-1"),
        shared,
        allocated_claim("small", "dgx-1", ["gpu-0-mig-1g10gb-3"], pods=["small-0"]),
        claim_pod("small-0", "dgx-1", claim="small"),
        resource_claim("whole", selectors=[f"{PRODUCT} == '{H100}'"]),
        *_sharing("share-a"),
        *_sharing("share-b"),
        *_extended_pod(),
    ]  # fmt: skip


def _refused_mixed_slice(plane: ControlPlane) -> str:
    """A slice holding both counters and devices, as drivers wrote them before 1.35."""
    mixed = resource_slice("dgx-3-mixed", "dgx-3", [whole_gpu(0)])
    mixed["spec"]["sharedCounters"] = dynamic_mig_node("dgx-3")[0]["spec"]["sharedCounters"]
    done = plane.kubectl("create", "-f", "-", stdin=yaml.safe_dump(mixed), check=False)
    return f"$ kubectl create -f dgx-3-mixed.yaml\n{done.stdout}{done.stderr}"


def record(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        plane = ControlPlane(Path(tmp))
        _with_gates(plane)
        try:
            plane.create_namespace("ml")
            for obj in objects():
                plane.create(obj)
            (out / "kubectl-output").mkdir(exist_ok=True)
            (out / "kubectl-output" / "mixed-slice-refused.txt").write_text(
                _refused_mixed_slice(plane)
            )
            kinds = "nodes,deviceclasses,resourceslices,resourceclaims,pods"
            listed = plane.kubectl("get", kinds, "-A", "-o", "yaml").stdout
            (out / "objects.yaml").write_text(listed)
            version = plane.kubectl("version", "-o", "yaml").stdout
            (out / "kubectl-output" / "version.txt").write_text(
                f"$ kubectl version -o yaml\n{version}"
            )
        finally:
            plane.stop()
    assert NVIDIA  # the driver every object names


if __name__ == "__main__":
    record(Path(sys.argv[1]))

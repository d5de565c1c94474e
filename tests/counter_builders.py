"""Slices and claims as NVIDIA's DRA driver publishes them under its DynamicMIG gate (KEP-4815:
one counter set per GPU in a slice of its own, the whole GPU and each MIG partition consuming
from it) and devices shared under KEP-5075 (allowMultipleAllocations, a requestPolicy).

Names follow the driver (cmd/gpu-kubelet-plugin/partitions.go): counter set
``gpu-<i>-counter-set``, one counter per capacity and one per memory slice.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from tests.builders import Obj
from tests.dra_builders import NVIDIA, gpu, resource_slice

PARTITIONS = 7
"""1g.10gb partitions of an H100 80GB: seven, each taking one of eight memory slices."""
H100 = "NVIDIA H100 80GB HBM3"


def _counters(memory: str, sms: int, slices: Sequence[int]) -> Obj:
    out: Obj = {"memory": {"value": memory}, "multiprocessors": {"value": str(sms)}}
    out.update({f"memory-slice-{i}": {"value": "1"} for i in slices})
    return out


def counter_set(index: int) -> Obj:
    return {"name": f"gpu-{index}-counter-set", "counters": _counters("80Gi", 132, range(8))}


def whole_gpu(index: int) -> Obj:
    device = gpu(f"gpu-{index}", product=H100, memory="80Gi")
    device["consumesCounters"] = [
        {"counterSet": f"gpu-{index}-counter-set", "counters": _counters("80Gi", 132, range(8))}
    ]
    return device


def partition(index: int, slot: int, counter_set_name: str = "") -> Obj:
    """A 1g.10gb MIG partition of GPU ``index`` at memory slice ``slot``."""
    device = gpu(f"gpu-{index}-mig-1g10gb-{slot}", type_="mig", product=H100, memory="10Gi")
    device["attributes"]["profile"] = {"string": "1g.10gb"}
    device["consumesCounters"] = [
        {
            "counterSet": counter_set_name or f"gpu-{index}-counter-set",
            "counters": _counters("10Gi", 16, [slot]),
        }
    ]
    return device


def dynamic_mig_node(node: str, gpus: int = 1) -> list[Obj]:
    """The two slices of one node's pool: the counter sets alone (a v1.36 API server refuses
    counters beside devices), then every whole GPU and every partition of each."""
    counters = resource_slice(f"{node}-counters", node, [], slice_count=2)
    counters["spec"].pop("devices")
    counters["spec"]["sharedCounters"] = [counter_set(i) for i in range(gpus)]
    devices = [whole_gpu(i) for i in range(gpus)]
    devices += [partition(i, slot) for i in range(gpus) for slot in range(PARTITIONS)]
    return [counters, resource_slice(f"{node}-gpus", node, devices, slice_count=2)]


def shared_gpu(
    name: str = "gpu-0", memory: str = "80Gi", step: str = "10Gi", product: str = H100
) -> Obj:
    """A GPU several claims may share (ConsumableShares): its memory is handed out in ``step``
    amounts, 10Gi unless a request asks otherwise."""
    device = gpu(name, product=product, memory=memory)
    device["allowMultipleAllocations"] = True
    device["capacity"]["memory"]["requestPolicy"] = {
        "default": step,
        "validRange": {"min": step, "step": step},
    }
    return device


def allocated_claim(
    name: str,
    node: str,
    devices: Sequence[str],
    *,
    namespace: str = "ml",
    consumed: str = "",
    pods: Sequence[str] = (),
) -> Obj:
    """A claim the scheduler allocated on ``node`` (pool = node), each device with its share
    (``consumed`` memory, and a shareID) when the device is shared."""
    results = []
    for i, device in enumerate(devices):
        result: Obj = {"request": "gpu", "driver": NVIDIA, "pool": node, "device": device}
        if consumed:
            result["consumedCapacity"] = {"memory": consumed}
            result["shareID"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{name}/{i}"))
        results.append(result)
    status: Obj = {
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }
    if pods:
        status["reservedFor"] = [{"resource": "pods", "name": p, "uid": p} for p in pods]
    request = {
        "name": "gpu",
        "exactly": {"deviceClassName": NVIDIA, "allocationMode": "ExactCount"},
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [request]}},
        "status": status,
    }

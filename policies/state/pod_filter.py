"""Which pods ClusterState keeps: those a policy reads (device resources, DRA claims, GPU
operands, GPUs reached without asking), and the prefilter that counts the rest without projecting
them (at 150,000 pods most are never projected).
"""

from __future__ import annotations

from policies.cluster.gpu_users import reaches_gpus_unasked
from policies.cluster.pods import HOST_GPU_DEVICE_PREFIX, VISIBLE_DEVICES_ENV, PodInfo
from policies.cluster.resources import is_device_resource
from policies.cluster.workload import OPERAND_APPS, is_gpu_operand
from policies.vocabulary.requests import JSONObject

__all__ = ["_keep_pod", "_may_be_kept"]


def _keep_pod(pod: PodInfo) -> bool:
    """Pods no policy reads are counted, not stored: at 150,000 pods this is most of them."""
    return (
        any(is_device_resource(name) for name in pod.extended)
        or is_gpu_operand(pod)
        or bool(pod.claims)
        or reaches_gpus_unasked(pod)
    )


def _may_be_gpu_device(volume: object) -> bool:
    """A volume that may be a hostPath under /dev/nvidia (anything malformed may be)."""
    if not isinstance(volume, dict) or volume.get("hostPath") is None:
        return not isinstance(volume, dict)
    host = volume["hostPath"]
    path = host.get("path") if isinstance(host, dict) else None
    return not isinstance(path, str) or path.startswith(HOST_GPU_DEVICE_PREFIX)


def _may_be_kept(pod: JSONObject) -> bool:
    """False only when a raw pod certainly holds no device resource and is no GPU operand, so
    it can be counted without the cost of projecting it. Anything unusual says True, and the
    full projection (which also reports malformed fields) decides."""
    meta, spec = pod.get("metadata"), pod.get("spec")
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        return True
    if not isinstance(meta.get("name"), str) or not isinstance(meta.get("namespace", ""), str):
        return True
    if spec.get("resourceClaims") or spec.get("runtimeClassName"):
        return True  # DRA devices: the claims say which; a runtime class may hand out GPUs
    volumes = spec.get("volumes") or []
    if not isinstance(volumes, list) or any(_may_be_gpu_device(v) for v in volumes):
        return True
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        return True
    app = labels.get("app")
    if app is not None and (not isinstance(app, str) or app in OPERAND_APPS):
        return True
    for field in ("containers", "initContainers"):
        containers = spec.get(field) or []
        if not isinstance(containers, list):
            return True
        for container in containers:
            env = container.get("env") if isinstance(container, dict) else None
            if env and (
                not isinstance(env, list)
                or any(not isinstance(e, dict) or e.get("name") == VISIBLE_DEVICES_ENV for e in env)
            ):
                return True  # NVIDIA_VISIBLE_DEVICES: the projection reads its value
            resources = container.get("resources") if isinstance(container, dict) else None
            if resources is None and isinstance(container, dict):
                continue
            if not isinstance(resources, dict):
                return True
            for key in ("requests", "limits"):
                amounts = resources.get(key) or {}
                if not isinstance(amounts, dict):
                    return True
                if any(is_device_resource(str(name)) for name in amounts):
                    return True
    return False

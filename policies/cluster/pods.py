"""The Pod projection: where it runs, its phase and problem, the extended resources it holds (app
containers, sidecars, the largest init container while initializing), its DRA claims, and the
ways it reaches GPUs without asking for them (its runtime class, ``NVIDIA_VISIBLE_DEVICES``,
``/dev/nvidia*`` mounted from the host by a privileged container): ``gpu_users`` judges them.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from policies.cluster.device_health import DeviceHealth, project_device_health
from policies.cluster.dra_claims import ClaimRef, claim_refs
from policies.cluster.resources import is_container_gpu_resource, is_extended_resource
from policies.vocabulary.fields import (
    as_maps,
    get_bool,
    get_counts,
    get_list,
    get_map,
    get_str,
    get_string_map,
)
from policies.vocabulary.requests import JSONObject

#: KubeVirt names a VMI's pod ``virt-launcher-<vmi>-<5 random characters>`` (generateName).
_LAUNCHER = re.compile(r"^virt-launcher-(?P<vmi>.+)-[a-z0-9]{5}$")


def launched_vmi(pod_name: str) -> str:
    """The name of the VMI whose virt-launcher pod ``pod_name`` is, '' for any other pod."""
    match = _LAUNCHER.match(pod_name)
    return match.group("vmi") if match is not None else ""


FINISHED_POD_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class PodInfo:
    namespace: str
    name: str
    node: str
    phase: str
    terminating: bool
    gpu: Mapping[str, int]
    """NVIDIA GPU resources (nvidia.com/gpu, gpu.shared, mig-*) the pod holds now."""
    extended: Mapping[str, int]
    """Every extended resource it holds (passthrough devices of virt-launcher pods included)."""
    app: str
    problem: str
    """Why the pod is unhealthy as kubectl shows it (Error, CrashLoopBackOff, ...), else ''."""
    claims: tuple[ClaimRef, ...] = ()
    """The DRA claims it uses (spec.resourceClaims[])."""
    runtime_class: str = ""
    """``spec.runtimeClassName``: ``nvidia`` hands containers the GPUs their environment names,
    ``kata-qemu-nvidia-gpu*`` runs the pod in a VM with passthrough GPUs."""
    visible_devices: str = ""
    """A container's ``NVIDIA_VISIBLE_DEVICES`` naming devices (``all``, ``0,1``, a UUID, or
    ``(valueFrom)``); ``void`` when containers set it only to ``void``/``none``/''; '' when none
    sets it (the image's own value then decides under NVIDIA's runtime)."""
    host_devices: tuple[str, ...] = ()
    """``/dev/nvidia*`` host paths mounted by privileged containers."""
    daemonset: bool = False
    """Its controller is a DaemonSet: ``kubectl drain`` leaves it on the node."""
    unhealthy_devices: tuple[DeviceHealth, ...] = ()
    """Allocated devices its kubelet reports Unhealthy or Unknown (``device_health``)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED_POD_PHASES


def _container_resources(container: JSONObject, path: str) -> dict[str, int]:
    """Requests and limits merged: a container holds the larger of the two."""
    res = get_map(container, "resources", path)
    where = f"{path}.resources"
    held: dict[str, int] = {}
    for key in ("requests", "limits"):
        for name, count in get_counts(res, key, where, is_extended_resource).items():
            held[name] = max(held.get(name, 0), count)
    return held


VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
#: Values of ``NVIDIA_VISIBLE_DEVICES`` that give a container no GPU (NVIDIA container toolkit:
#: ``void`` and ``none``; the GPU Operator's own operands set ``void``).
NO_DEVICES = frozenset({"", "void", "none"})
#: What ``PodInfo.visible_devices`` holds for any of them.
NONE_VISIBLE = "void"
HOST_GPU_DEVICE_PREFIX = "/dev/nvidia"


def _visible_devices(container: JSONObject, path: str) -> str:
    for where, env in as_maps(get_list(container, "env", path), f"{path}.env"):
        if env.get("name") != VISIBLE_DEVICES_ENV:
            continue
        if env.get("valueFrom") is not None:
            return "(valueFrom)"
        value = get_str(env, "value", where).strip()
        return NONE_VISIBLE if value.lower() in NO_DEVICES else value
    return ""


def _host_gpu_volumes(spec: JSONObject) -> dict[str, str]:
    """Volume name -> its hostPath under /dev/nvidia (nvidia0, nvidiactl, nvidia-uvm, ...)."""
    out: dict[str, str] = {}
    for where, volume in as_maps(get_list(spec, "volumes", "spec"), "spec.volumes"):
        host = get_map(volume, "hostPath", where)
        target = get_str(host, "path", f"{where}.hostPath").rstrip("/")
        if target.startswith(HOST_GPU_DEVICE_PREFIX):
            out[get_str(volume, "name", where)] = target
    return out


def _privileged_mounts(container: JSONObject, path: str, volumes: Mapping[str, str]) -> list[str]:
    security = get_map(container, "securityContext", path)
    if not volumes or not get_bool(security, "privileged", f"{path}.securityContext"):
        return []
    mounts = as_maps(get_list(container, "volumeMounts", path), f"{path}.volumeMounts")
    return [volumes[m["name"]] for _, m in mounts if m.get("name") in volumes]


def _is_daemonset_pod(meta: JSONObject) -> bool:
    for where, owner in as_maps(
        get_list(meta, "ownerReferences", "metadata"), "metadata.ownerReferences"
    ):
        if get_bool(owner, "controller", where) and get_str(owner, "kind", where) == "DaemonSet":
            return True
    return False


def _is_initializing(status: JSONObject, phase: str) -> bool:
    """Initialized != True, read straight from the list: building every condition here was
    half the cost of projecting a pod."""
    for where, condition in as_maps(get_list(status, "conditions", "status"), "status.conditions"):
        if condition.get("type") == "Initialized":
            return get_str(condition, "status", where) != "True"
    return phase in ("", "Pending")


def _pod_problem(status: JSONObject, terminating: bool) -> str:
    if terminating:
        return "Terminating"
    worst = get_str(status, "reason", "status")
    for where, cs in as_maps(
        get_list(status, "containerStatuses", "status"), "status.containerStatuses"
    ):
        state = get_map(cs, "state", where)
        for phase in ("waiting", "terminated"):
            detail = get_map(state, phase, f"{where}.state")
            reason = get_str(detail, "reason", f"{where}.state.{phase}")
            if reason and reason not in ("Completed", "ContainerCreating", "PodInitializing"):
                return reason
    return worst if worst else ("Failed" if get_str(status, "phase", "status") == "Failed" else "")


def project_pod(obj: JSONObject) -> PodInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    status = get_map(obj, "status", "")
    phase = get_str(status, "phase", "status")
    extended: dict[str, int] = {}
    volumes = _host_gpu_volumes(spec)
    visible = ""
    host_devices: list[str] = []
    for field in ("initContainers", "containers"):
        for where, c in as_maps(get_list(spec, field, "spec"), f"spec.{field}"):
            value = _visible_devices(c, where)
            if value and (not visible or visible == NONE_VISIBLE):
                visible = value  # a container naming devices wins over one that opts out
            host_devices += _privileged_mounts(c, where, volumes)
    for where, c in as_maps(get_list(spec, "containers", "spec"), "spec.containers"):
        for name, count in _container_resources(c, where).items():
            extended[name] = extended.get(name, 0) + count
    initializing = _is_initializing(status, phase)
    init_peak: dict[str, int] = {}
    for where, c in as_maps(get_list(spec, "initContainers", "spec"), "spec.initContainers"):
        held = _container_resources(c, where)
        if get_str(c, "restartPolicy", where) == "Always":
            # A native sidecar runs for the pod's whole life, beside the app containers.
            for name, count in held.items():
                extended[name] = extended.get(name, 0) + count
        elif initializing:
            # Plain init containers run one at a time, before the app: the largest counts.
            for name, count in held.items():
                init_peak[name] = max(init_peak.get(name, 0), count)
    for name, count in init_peak.items():
        extended[name] = max(extended.get(name, 0), count)
    extended = {k: v for k, v in extended.items() if v > 0}
    terminating = meta.get("deletionTimestamp") is not None
    return PodInfo(
        unhealthy_devices=project_device_health(status),
        # tens of thousands of pods share a few dozen namespaces and a few thousand nodes
        namespace=sys.intern(get_str(meta, "namespace", "metadata")),
        name=get_str(meta, "name", "metadata"),
        node=sys.intern(get_str(spec, "nodeName", "spec")),
        phase=sys.intern(phase),
        terminating=terminating,
        gpu={k: v for k, v in extended.items() if is_container_gpu_resource(k)},
        extended=extended,
        app=sys.intern(get_string_map(meta, "labels", "metadata").get("app", "")),
        problem=_pod_problem(status, terminating),
        claims=claim_refs(spec, "spec", status),
        runtime_class=sys.intern(get_str(spec, "runtimeClassName", "spec")),
        visible_devices=visible,
        host_devices=tuple(sorted(set(host_devices))),
        daemonset=_is_daemonset_pod(meta),
    )

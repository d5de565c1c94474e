"""Who holds a node's NVIDIA GPUs: the one answer every "not under running CUDA jobs" check uses.

A pod holds them in one of two ways (docs/field-guide.md section 2; docs/dra.md):
- the NVIDIA device plugin's resources (nvidia.com/gpu, gpu.shared, mig-*) in its requests or
  limits, while it is bound to the node and unfinished;
- a ``gpu`` or ``mig`` device of NVIDIA's DRA driver (``gpu.nvidia.com``), allocated on the node
  to a ResourceClaim whose ``status.reservedFor`` names the pod, bound there and unfinished.
A pod may hold both (a ``nvidia.com/gpu`` limit that DRA serves through a DeviceClass's
extendedResourceName also gets a claim): it is one user, holding both.

A VM holds them through its VMI: a live VMI with an NVIDIA device in gpus[]/hostDevices[]
(``gpu_vmis_on``), which a switch away from passthrough must stop first (``virtctl_stop``).
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.cluster.dra import GPU_TYPES, NVIDIA_DRIVER, UNREADABLE_TYPE, PublishedDevice
from policies.cluster.dra_claims import AllocatedDevice, ResourceClaimInfo
from policies.cluster.kubevirt import VMIInfo
from policies.cluster.pods import PodInfo
from policies.cluster.resources import is_nvidia_resource
from policies.cluster.view import ClusterView

GONE = "no longer published"


def holds_gpu_resources(pod: PodInfo) -> bool:
    """The device-plugin half of the rule: what ``ClusterView.gpu_pods_on`` indexes."""
    return bool(pod.gpu) and not pod.finished


def _admin_access(claim: ResourceClaimInfo, request: str) -> bool:
    """Whether the request (``name`` or ``name/subrequest``) asks for admin access: monitoring
    tools reach devices other claims hold that way; they hold no GPU of their own."""
    name, _, sub = request.partition("/")
    for asked in claim.requests:
        if asked.name == name:
            return any(c.admin_access for c in asked.choices if not sub or c.name == sub)
    return False


def is_gpu_device(result: AllocatedDevice, published: PublishedDevice | None) -> bool:
    """An allocated device CUDA can run on: NVIDIA's driver, type gpu or mig.

    A device its pool no longer publishes still counts. The allocation outlives the slice: the
    kubelet prepared the device for the pod and it keeps it until it ends, while the driver
    republishes on a restart or, as in the recorded switch (``tests/fixtures/dra``, 020), the
    pool changes under the pod. Its type is unknown then; of NVIDIA's types only ``vfio`` is
    not for CUDA. Counting it costs at worst a drain that was not needed; not counting it could
    let a switch kill a job, which is what these checks exist to prevent.
    """
    if result.driver != NVIDIA_DRIVER:
        return False  # a type it cannot read counts too: "cannot tell" is no all-clear
    return published is None or published.device.type in (*GPU_TYPES, UNREADABLE_TYPE)


def device_label(result: AllocatedDevice, published: PublishedDevice | None) -> str:
    """An allocated device by name, "gpu-0 (no longer published)" once its slice lost it,
    "gpu-0 (type unreadable)" when counted for a type this code cannot read."""
    if published is None:
        return f"{result.device} ({GONE})"
    unreadable = published.device.type == UNREADABLE_TYPE
    return f"{result.device} (type unreadable)" if unreadable else result.device


@dataclass(frozen=True, slots=True)
class ClaimedGpus:
    """The NVIDIA GPUs one claim gives a pod on the node."""

    claim: str
    """namespace/name"""
    devices: tuple[str, ...]
    """Device names, "gpu-0", with " (no longer published)" when the slice lost them."""

    def describe(self) -> str:
        return f"claim {self.claim}: {', '.join(self.devices)}"


@dataclass(frozen=True, slots=True)
class GpuUser:
    pod: PodInfo
    claims: tuple[ClaimedGpus, ...] = ()

    @property
    def key(self) -> str:
        return self.pod.key

    @property
    def label(self) -> str:
        """ "ml/train-0", or with claims "ml/train-0 (claim ml/gpu-claim: gpu-0)"."""
        if not self.claims:
            return self.key
        return f"{self.key} ({'; '.join(c.describe() for c in self.claims)})"

    def describe(self) -> str:
        """Everything it holds: "ml/a (nvidia.com/gpu: 1, claim ml/c: gpu-0, terminating)"."""
        held = [f"{name}: {count}" for name, count in sorted(self.pod.gpu.items())]
        held += [c.describe() for c in self.claims]
        if self.pod.terminating:
            held.append("terminating")
        return f"{self.key} ({', '.join(held)})"


def _claimed_on(node: str, view: ClusterView) -> dict[str, tuple[PodInfo, list[ClaimedGpus]]]:
    """Pod key -> the pod and the claims giving it NVIDIA GPUs on ``node``."""
    out: dict[str, tuple[PodInfo, list[ClaimedGpus]]] = {}
    for held in view.claims_allocated_on(node):
        claim = held.claim
        devices = tuple(
            device_label(result, published)
            for result, published in held.devices
            if is_gpu_device(result, published) and not _admin_access(claim, result.request)
        )
        if not devices:
            continue
        for pod in held.pods:
            if pod.node == node and not pod.finished:
                out.setdefault(pod.key, (pod, []))[1].append(ClaimedGpus(claim.key, devices))
    return out


def gpu_users_on(node: str, view: ClusterView) -> tuple[GpuUser, ...]:
    """Every pod holding NVIDIA GPUs on ``node``, by namespace/name, with what it holds."""
    claimed = _claimed_on(node, view)
    pods = {p.key: p for p in view.gpu_pods_on(node)}
    pods.update({key: pod for key, (pod, _) in claimed.items()})
    return tuple(
        GpuUser(pods[key], tuple(claimed[key][1]) if key in claimed else ())
        for key in sorted(pods, key=lambda k: (pods[k].namespace, pods[k].name))
    )


# --- the VMIs that hold NVIDIA devices (passthrough or vGPU) ------------------------------------


def holds_nvidia_device(vmi: VMIInfo) -> bool:
    """A live VMI with an NVIDIA device in gpus[]/hostDevices[]: the GPU Operator serves it."""
    return vmi.live and any(is_nvidia_resource(d.device_name) for d in vmi.devices)


def gpu_vmis_on(node: str, view: ClusterView) -> list[VMIInfo]:
    return [vmi for vmi in view.vmis_on(node) if holds_nvidia_device(vmi)]


def virtctl_stop(vmi: VMIInfo) -> str:
    return f"virtctl stop {vmi.owner_vm or vmi.name} -n {vmi.namespace}"

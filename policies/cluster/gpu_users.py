"""Who holds a node's NVIDIA GPUs: the one answer every "not under running CUDA jobs" check uses.

A pod bound to the node and unfinished holds them, each way said in its description
(docs/gpu-users.md; docs/field-guide.md section 2; docs/dra.md):
- the NVIDIA device plugin's resources (nvidia.com/gpu, gpu.shared, mig-*) in its requests or
  limits;
- a ``gpu`` or ``mig`` device of NVIDIA's DRA driver (``gpu.nvidia.com``), allocated on the node
  to a ResourceClaim whose ``status.reservedFor`` names the pod;
- without asking: ``NVIDIA_VISIBLE_DEVICES`` naming devices, run by NVIDIA's runtime class (or
  with none, where ``nvidia`` is the node's default runtime), or ``/dev/nvidia*`` mounted from
  the host by a privileged container. The GPU Operator's own operand pods are left out of this
  way: the operator moves them itself before it changes a node's mode, CC mode, MIG layout or
  driver (docs/gpu-users.md section 2).
A pod may hold several ways at once (a ``nvidia.com/gpu`` limit that DRA serves through a
DeviceClass's extendedResourceName also gets a claim): it is one user. A DaemonSet's pod is named
as such: ``kubectl drain`` leaves it running.

A VM-like user holds them through a VM (``vm_users_on``): a live VMI with an NVIDIA device in
gpus[]/hostDevices[] (``gpu_vmis_on``, stopped with ``virtctl_stop``), or a Kata pod (Kata /
confidential containers: ``nvidia.com/pgpu``, ``nvidia.com/nvswitch``, or an NVIDIA resource under a
``kata*`` runtime class), which the GPU Operator serves on vm-passthrough nodes the way it serves
VMIs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from policies.cluster.dra import GPU_TYPES, NVIDIA_DRIVER, UNREADABLE_TYPE, PublishedDevice
from policies.cluster.dra_claims import AllocatedDevice, ResourceClaimInfo
from policies.cluster.kinds import POD, VIRTUAL_MACHINE, VIRTUAL_MACHINE_INSTANCE, object_ref
from policies.cluster.kubevirt import VMIInfo
from policies.cluster.pods import NONE_VISIBLE, PodInfo, launched_vmi
from policies.cluster.resources import is_kata_resource, is_nvidia_resource
from policies.cluster.view import ClusterView
from policies.cluster.workload import is_gpu_operand
from policies.vocabulary.fields import request_labels
from policies.vocabulary.requests import UPDATE, AdmissionRequest, ObjectRef

GONE = "no longer published"
#: The runtime classes the GPU Operator creates (NVIDIA/gpu-operator assets/pre-requisites/):
#: ``nvidia`` (or ClusterPolicy spec.operator.runtimeClass), ``nvidia-cdi``, ``nvidia-legacy``.
NVIDIA_RUNTIME_CLASSES = frozenset({"nvidia", "nvidia-cdi", "nvidia-legacy"})
#: Kata's runtime classes start so (``kata-qemu-nvidia-gpu``, ``-snp``, ``-tdx``).
KATA_RUNTIME_PREFIX = "kata"
DRAIN_LEAVES_IT = "DaemonSet: drain leaves it"


def holds_gpu_resources(pod: PodInfo) -> bool:
    """The device-plugin half of the rule: what ``ClusterView.gpu_pods_on`` indexes."""
    return bool(pod.gpu) and not pod.finished


def reaches_gpus_unasked(pod: PodInfo) -> bool:
    """Whether its runtime class, environment or a host mount may give it GPUs (the state keeps
    such pods; ``unasked_access`` decides)."""
    nvidia_runtime = "nvidia" in pod.runtime_class  # any other runtime class: the env decides
    return bool(nvidia_runtime or names_devices(pod) or pod.host_devices)


def names_devices(pod: PodInfo) -> bool:
    return pod.visible_devices not in ("", NONE_VISIBLE)


def is_kata_pod(pod: PodInfo) -> bool:
    """A Kata pod with passthrough GPUs: a VM to the GPU Operator, not a container."""
    if any(is_kata_resource(name) for name in pod.extended):
        return True
    return pod.runtime_class.startswith(KATA_RUNTIME_PREFIX) and any(
        is_nvidia_resource(name) for name in pod.extended
    )


def unasked_access(pod: PodInfo, runtime_class: str = "nvidia") -> tuple[str, ...]:
    """How a pod reaches GPUs without asking for them, in words; nothing for an operand pod (the
    operator moves those itself), a Kata pod (a VM-like user) or a finished pod.
    ``runtime_class`` is the ClusterPolicy's spec.operator.runtimeClass."""
    if pod.finished or is_gpu_operand(pod) or is_kata_pod(pod):
        return ()
    reasons = []
    nvidia_runtime = (
        pod.runtime_class in NVIDIA_RUNTIME_CLASSES or pod.runtime_class == runtime_class
    )
    if names_devices(pod):
        env = f"env NVIDIA_VISIBLE_DEVICES={pod.visible_devices}"
        if nvidia_runtime:
            reasons.append(f"{env} with runtimeClassName {pod.runtime_class}")
        elif not pod.runtime_class:
            reasons.append(f"{env} (no runtimeClassName)")
    elif nvidia_runtime and not pod.visible_devices and not pod.gpu:
        # CUDA images set NVIDIA_VISIBLE_DEVICES=all themselves: NVIDIA's runtime reads it.
        reasons.append(f"runtimeClassName {pod.runtime_class}, its image's NVIDIA_VISIBLE_DEVICES")
    if pod.host_devices:
        reasons.append(f"privileged, mounts {', '.join(pod.host_devices)} from the host")
    return tuple(reasons)


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
    access: tuple[str, ...] = ()
    """How it reaches GPUs without asking (``unasked_access``)."""

    @property
    def key(self) -> str:
        return self.pod.key

    @property
    def label(self) -> str:
        """ "ml/train-0", or with claims "ml/train-0 (claim ml/gpu-claim: gpu-0)", or with the
        way it reaches GPUs unasked, and whether drain leaves it."""
        parts = [c.describe() for c in self.claims] + list(self.access)
        if self.pod.daemonset:
            parts.append(DRAIN_LEAVES_IT)
        return f"{self.key} ({'; '.join(parts)})" if parts else self.key

    def describe(self) -> str:
        """Everything it holds: "ml/a (nvidia.com/gpu: 1, claim ml/c: gpu-0, terminating)"."""
        held = [f"{name}: {count}" for name, count in sorted(self.pod.gpu.items())]
        held += [c.describe() for c in self.claims]
        held += self.access
        if self.pod.daemonset:
            held.append(DRAIN_LEAVES_IT)
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


def _unasked_on(node: str, view: ClusterView) -> dict[str, tuple[PodInfo, tuple[str, ...]]]:
    """Pod key -> the pod and how it reaches ``node``'s GPUs without asking for them."""
    policy = view.cluster_policy()
    runtime_class = policy.runtime_class if policy is not None else "nvidia"
    out = {}
    for pod in view.pods_on(node):
        if pod.node == node and reaches_gpus_unasked(pod):
            access = unasked_access(pod, runtime_class)
            if access:
                out[pod.key] = (pod, access)
    return out


def gpu_users_on(node: str, view: ClusterView) -> tuple[GpuUser, ...]:
    """Every pod holding NVIDIA GPUs on ``node``, by namespace/name, with what it holds."""
    claimed = _claimed_on(node, view)
    unasked = _unasked_on(node, view)
    pods = {p.key: p for p in view.gpu_pods_on(node)}
    pods.update({key: pod for key, (pod, _) in claimed.items()})
    pods.update({key: pod for key, (pod, _) in unasked.items()})
    return tuple(
        GpuUser(
            pods[key],
            tuple(claimed[key][1]) if key in claimed else (),
            unasked[key][1] if key in unasked else (),
        )
        for key in sorted(pods, key=lambda k: (pods[k].namespace, pods[k].name))
    )


@dataclass(frozen=True, slots=True)
class LabelEdit:
    """A node label's value before and after an edit, made while ``users`` hold its GPUs."""

    node: str
    before: str | None
    after: str | None
    users: tuple[GpuUser, ...]


def label_edit_under_gpu_users(
    request: AdmissionRequest,
    view: ClusterView,
    label: str,
    judged: Callable[[str | None, str | None], bool],
) -> LabelEdit | None:
    """The edit of ``label`` on the Node under review, when ``judged(before, after)`` and pods
    hold the node's GPUs; None otherwise. The GPU users are asked only for a judged edit (the
    kinds a policy rests on are those it asked about), and an UPDATE without its old object
    is not judged (the API server always sends it)."""
    if request.obj is None or (request.old is None and request.operation == UPDATE):
        return None
    new = request_labels(request)
    old = request_labels(request, old=True)
    before, after = old.get(label), new.get(label)
    if not judged(before, after):
        return None
    users = gpu_users_on(request.name, view)
    return LabelEdit(request.name, before, after, users) if users else None


def held_by_daemonsets(users: Sequence[GpuUser]) -> list[str]:
    """The users a drain leaves running: their DaemonSet must stop selecting the node first."""
    return [u.key for u in users if u.pod.daemonset]


# --- the VMIs that hold NVIDIA devices (passthrough or vGPU) ------------------------------------


def holds_nvidia_device(vmi: VMIInfo) -> bool:
    """A live VMI with an NVIDIA device in gpus[]/hostDevices[]: the GPU Operator serves it."""
    return vmi.live and any(is_nvidia_resource(d.device_name) for d in vmi.devices)


def gpu_vmis_on(node: str, view: ClusterView) -> list[VMIInfo]:
    return [vmi for vmi in view.vmis_on(node) if holds_nvidia_device(vmi)]


def pod_workload(view: ClusterView, namespace: str, pod: str, node: str) -> ObjectRef:
    """The pod on ``node``, or the VM (else the VMI) whose virt-launcher it is: the workload a
    message names for a device the pod holds."""
    vmi_name = launched_vmi(pod)
    for vmi in view.vmis_on(node) if vmi_name else ():
        if vmi.namespace == namespace and vmi.name == vmi_name:
            if vmi.owner_vm:
                return object_ref(VIRTUAL_MACHINE, namespace, vmi.owner_vm)
            return object_ref(VIRTUAL_MACHINE_INSTANCE, namespace, vmi.name)
    return object_ref(POD, namespace, pod)


def virtctl_stop(vmi: VMIInfo) -> str:
    return f"virtctl stop {vmi.owner_vm or vmi.name} -n {vmi.namespace}"


@dataclass(frozen=True, slots=True)
class VmUser:
    """A VM-like user of a node's GPUs: a live GPU VMI or a Kata pod."""

    key: str
    holds: str
    """What it holds: "nvidia.com/GA102GL_A10", or "Kata pod: nvidia.com/pgpu: 1"."""
    stop: str
    """The command that ends it (``virtctl stop``, or deleting the Kata pod)."""
    kata: bool = False

    def describe(self) -> str:
        return f"{self.key} ({self.holds})"


def vm_users_on(node: str, view: ClusterView) -> tuple[VmUser, ...]:
    """The live GPU VMIs, then the unfinished Kata pods, on ``node``, each by namespace/name."""
    users = [
        VmUser(vmi.key, ", ".join(sorted({d.device_name for d in vmi.devices})), virtctl_stop(vmi))
        for vmi in gpu_vmis_on(node, view)
    ]
    for pod in view.pods_on(node):
        if pod.node == node and not pod.finished and is_kata_pod(pod):
            held = ", ".join(
                f"{name}: {count}"
                for name, count in sorted(pod.extended.items())
                if is_nvidia_resource(name)
            )
            stop = f"kubectl delete pod {pod.name} -n {pod.namespace}"
            users.append(VmUser(pod.key, f"Kata pod: {held}", stop, kata=True))
    return tuple(users)


def vm_users_noun(users: Sequence[VmUser]) -> str:
    """ "live GPU VMs", "Kata pods" or "live GPU VMs and Kata pods", for messages."""
    kinds = [
        n
        for n, hit in (("live GPU VMs", False), ("Kata pods", True))
        if any(u.kata == hit for u in users)
    ]
    return " and ".join(kinds)

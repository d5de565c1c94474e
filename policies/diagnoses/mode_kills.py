"""gpu-mode-kills-users: a node whose GPU mode takes the GPUs from what runs there now.

What admission denies, the audit finds once it exists (issue 32): a change that went through
another door (the status subresource, a re-created Node, the guard down, an override) leaves a
node in one of these states, each killing or having killed its GPU users:

- VM mode (vm-passthrough, vm-vgpu) with unfinished pods holding its NVIDIA GPUs: vfio-manager
  rebinds every GPU to vfio-pci, or the vGPU manager replaces the driver, under the CUDA jobs
  (``workload-switch-with-gpu-pods``; field guide section 2). Each pod is also reported by
  ``gpu-pod-on-passthrough-node`` (it cannot use its GPUs); this names the node, why, and the
  order of repair. A NotReady node is ``recovery-trap-*``'s, and a node whose rebind is pinned off
  (``nvidia.com/gpu.deploy.vfio-manager=false``) kills nothing.
- live VMIs holding passthrough GPUs on a node not in vm-passthrough, or vGPUs on a node not in
  vm-vgpu: the operator removed the sandbox plugin and the operand that served them, whose preStop
  unbinds the devices under the VM (``passthrough-to-container-with-live-vms``).
- a vm-vgpu node whose ``nvidia.com/vgpu.config`` names a vGPU type (the operator's config names,
  docs/vgpu.md section 1) other than every profile its live VMIs hold: the vGPU Device Manager
  deletes the GPU's mdevs to apply it (section 3; ``vgpu-reconfig-with-live-vms``). A config
  with another name (``default``, one of your own) is not judged: its types are in a ConfigMap
  the guard does not read.

Under GPU Operator 26.7's GPUCluster (and no ClusterPolicy) the operator ignores these labels.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime

from policies.cluster.gpu_operator import ClusterPolicyInfo, workload_label_ignored
from policies.cluster.gpu_users import gpu_vmis_on, virtctl_stop
from policies.cluster.kinds import (
    GPU_CLUSTER,
    KUBEVIRT,
    NODE,
    POD,
    VIRTUAL_MACHINE_INSTANCE,
    object_ref,
)
from policies.cluster.kubevirt import VMIInfo
from policies.cluster.resources import is_container_gpu_resource, is_nvidia_resource
from policies.cluster.vgpu import (
    VGPU_TYPE,
    VgpuHolder,
    is_vgpu_resource,
    looks_like_vgpu,
    permitted_mdevs,
    profile_of,
    vgpu_holders_on,
)
from policies.cluster.view import AuditView
from policies.cluster.workload import (
    VGPU_CONFIG_LABEL,
    VGPU_CONFIG_STATE_LABEL,
    VM_MODES,
    VM_PASSTHROUGH,
    VM_VGPU,
    WORKLOAD_LABEL,
)
from policies.diagnoses.facts import NODE_FACTS_READS, NodeFacts, gpu_nodes_of
from policies.vocabulary.audit import Diagnosis, DiagnosisFinding, Link
from policies.vocabulary.requests import ObjectRef
from policies.vocabulary.text import few, plural
from policies.vocabulary.verdicts import Action, Severity

GPU_MODE_KILLS_USERS = "gpu-mode-kills-users"

#: What each VM mode's operand does to the GPUs, in words.
_OPERAND = {
    VM_PASSTHROUGH: ("vfio-manager", "rebinds every NVIDIA GPU there to vfio-pci"),
    VM_VGPU: ("the vGPU manager", "replaces the GPU driver there with the vGPU host driver"),
}


def _label_link(f: NodeFacts, policy: ClusterPolicyInfo | None, below: Link) -> Link:
    """Where the node's mode comes from: its label, or the ClusterPolicy when it has none."""
    value = f.node.labels.get(WORKLOAD_LABEL)
    if value == f.mode:
        return Link(f"{WORKLOAD_LABEL}={value} on {f.name}", (below,))
    label = f"{WORKLOAD_LABEL}={value}" if value is not None else f"no {WORKLOAD_LABEL}"
    if policy is None:
        why = "no ClusterPolicy says otherwise"
    elif not policy.sandbox_enabled:
        why = f"ClusterPolicy {policy.name} has sandbox workloads disabled"
    else:
        why = f"defaultWorkload of ClusterPolicy {policy.name}"
    return Link(f"{label} on {f.name}: mode {f.mode}, {why}", (below,))


def _cordoned_finding(
    f: NodeFacts,
    message: str,
    chain: Link,
    steps: tuple[str, ...],
    workloads: tuple[ObjectRef, ...],
) -> DiagnosisFinding:
    """A finding on node ``f`` whose users the mode hurts: the steps run with the node cordoned."""
    return DiagnosisFinding(
        resource=object_ref(NODE, "", f.name),
        message=message,
        chain=Link(f"Node {f.name}", (chain,)),
        remediation=(f"kubectl cordon {f.name}", *steps, f"kubectl uncordon {f.name}"),
        workloads=workloads,
    )


def _relabel(node: str, mode: str) -> str:
    return f"kubectl label node {node} {WORKLOAD_LABEL}={mode} --overwrite"


# --- VM mode under GPU pods -----------------------------------------------------------------------


def _pods_under_vm_mode(f: NodeFacts, policy: ClusterPolicyInfo | None) -> DiagnosisFinding:
    n = f.name
    operand, effect = _OPERAND[f.mode]
    keys = [u.key for u in f.gpu_pods]
    message = (
        f"{n} is in {f.mode_text} mode while {plural(len(keys), 'pod')} "
        f"{'holds' if len(keys) == 1 else 'hold'} its NVIDIA GPUs ({few(keys)}): the GPU Operator "
        f"runs {operand} there, which {effect}, killing their CUDA processes. Decide the node's "
        "mode, then restart the pods where their GPUs are."
    )
    users = tuple(Link(f"pod {u.describe()}: its GPUs are taken") for u in f.gpu_pods)
    kill = Link(f"{operand} {effect}", users)
    return _cordoned_finding(
        f,
        message,
        _label_link(f, policy, Link(f"the GPU Operator sets {f.rebind_pin}=true", (kill,))),
        (
            f"if {n} is meant for containers: stop its GPU VMs, then {_relabel(n, 'container')}"
            " (the operator removes the VM operands and brings back the driver and device plugin)",
            f"restart the GPU pods ({few(keys)}: kubectl delete pod; their controllers recreate "
            "them), on a container-mode node if the mode stays",
        ),
        tuple(object_ref(POD, u.pod.namespace, u.pod.name) for u in f.gpu_pods),
    )


# --- live VMs under the wrong mode ---------------------------------------------------------------


def _is_vgpu_device(name: str, mdevs: frozenset[str]) -> bool:
    return is_vgpu_resource(name, mdevs, False) or looks_like_vgpu(name)


def _stranded(vmi: VMIInfo, mode: str, mdevs: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """The NVIDIA devices of ``vmi`` that a node in ``mode`` does not serve, each with the mode
    that would."""
    out = []
    for device in vmi.devices:
        name = device.device_name
        if not is_nvidia_resource(name) or is_container_gpu_resource(name):
            continue
        needs = VM_VGPU if _is_vgpu_device(name, mdevs) else VM_PASSTHROUGH
        if needs != mode:
            out.append((name, needs))
    return tuple(out)


def _vms_under_wrong_mode(
    f: NodeFacts, policy: ClusterPolicyInfo | None, view: AuditView
) -> DiagnosisFinding | None:
    n = f.name
    mdevs = permitted_mdevs(view.cluster.kubevirt())
    hit = [(v, s) for v in gpu_vmis_on(n, view.cluster) if (s := _stranded(v, f.mode, mdevs))]
    if not hit:
        return None
    needed = sorted({needs for _, stranded in hit for _, needs in stranded})
    vmis = [v.key for v, _ in hit]
    message = (
        f"{n} is in {f.mode_text} mode under live GPU VMs that need {' and '.join(needed)} "
        f"({few(vmis)}): the GPU Operator removed the sandbox device plugin and the operand that "
        "served their devices, whose preStop unbinds them under the VM; a restart finds no "
        "provider. Stop the VMs or give the node back its mode."
    )
    users = tuple(
        Link(f"VMI {v.key} ({v.phase}): {', '.join(f'{d} (needs {m})' for d, m in s)}")
        for v, s in hit
    )
    gone = Link("the sandbox device plugin and the VM operand are removed: devices unbound", users)
    return _cordoned_finding(
        f,
        message,
        _label_link(f, policy, gone),
        (
            *(virtctl_stop(v) for v, _ in hit),
            (
                f"if {n} is meant for these VMs: {_relabel(n, needed[0])}, wait for their "
                f"resources in {n}'s allocatable, then start them"
                if len(needed) == 1
                else "start each VM on a node in the mode it needs"
            ),
        ),
        tuple(object_ref(VIRTUAL_MACHINE_INSTANCE, v.namespace, v.name) for v, _ in hit),
    )


# --- a vGPU profile other than the one the VMs hold -----------------------------------------------


def _profile_differs(
    f: NodeFacts, policy: ClusterPolicyInfo | None, view: AuditView
) -> DiagnosisFinding | None:
    n = f.name
    config = f.node.labels.get(VGPU_CONFIG_LABEL, "")
    if f.mode != VM_VGPU or VGPU_TYPE.fullmatch(config) is None:
        return None
    holders = vgpu_holders_on(n, f.node.labels, view.cluster, policy)
    other = [h for h in holders if _profiles(h) and config.casefold() not in _profiles(h)]
    if not other:
        return None
    held = sorted({p for h in other for p in _profiles(h)})
    state = f.node.labels.get(VGPU_CONFIG_STATE_LABEL, "unset")
    message = (
        f"{VGPU_CONFIG_LABEL}={config} on {n}, but live VMIs there hold "
        f"{few(sorted({profile_of(r) for h in other for r in h.resources}))} vGPUs "
        f"({few([h.vmi.key for h in other])}): the vGPU Device Manager deletes the GPU's mdevs "
        f"to apply {config}, in use or not ({VGPU_CONFIG_STATE_LABEL} {state}). Put the "
        "profile back, or stop the VMs and let it stand."
    )
    users = tuple(Link(f"VMI {h.describe()}") for h in other)
    deleted = Link(f"the vGPU Device Manager deletes the mdevs to create {config}", users)
    chain = Link(f"{VGPU_CONFIG_LABEL}={config} on {n}", (deleted,))
    back = held[0] if len(held) == 1 else None
    return DiagnosisFinding(
        resource=object_ref(NODE, "", n),
        message=message,
        chain=Link(f"Node {n}", (chain,)),
        remediation=(
            *(virtctl_stop(h.vmi) for h in other),
            (
                f"kubectl label node {n} {VGPU_CONFIG_LABEL}={_spelt(other, back)} --overwrite, "
                f"if the VMs should keep {_spelt(other, back)}"
                if back is not None
                else f"set {VGPU_CONFIG_LABEL} on {n} to a config the VMs' profiles come from"
            ),
            f"wait for {VGPU_CONFIG_STATE_LABEL}=success on {n}, then start the VMs",
        ),
        workloads=tuple(
            object_ref(VIRTUAL_MACHINE_INSTANCE, h.vmi.namespace, h.vmi.name) for h in other
        ),
    )


def _profiles(holder: VgpuHolder) -> frozenset[str]:
    """The vGPU types a VMI holds, folded (``a10-12q``): only names that are types."""
    return frozenset(
        profile_of(r).casefold() for r in holder.resources if VGPU_TYPE.fullmatch(profile_of(r))
    )


def _spelt(holders: Sequence[VgpuHolder], folded: str) -> str:
    """The profile as the resource names spell it (``A10-12Q``), the config named after it."""
    for h in holders:
        for r in h.resources:
            if profile_of(r).casefold() == folded:
                return profile_of(r)
    return folded


# --- the diagnosis --------------------------------------------------------------------------------


def _diagnose(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    cluster = view.cluster
    policy = cluster.cluster_policy()
    if workload_label_ignored(policy, cluster.gpu_clusters()):
        return
    for f in gpu_nodes_of(view):
        if f.mode in VM_MODES and f.gpu_pods and not f.trapped and not f.rebind_blocked:
            yield _pods_under_vm_mode(f, policy)
        for found in (_vms_under_wrong_mode(f, policy, view), _profile_differs(f, policy, view)):
            if found is not None:
                yield found


GPU_MODE_KILLS_USERS_DIAGNOSIS = Diagnosis(
    id=GPU_MODE_KILLS_USERS,
    summary=(
        "A node's GPU mode takes the GPUs from what runs there: vm-passthrough or vm-vgpu with "
        "pods holding its NVIDIA GPUs, live GPU VMs on a node whose mode does not serve their "
        "devices, or an nvidia.com/vgpu.config naming another vGPU type than live VMs hold."
    ),
    default_action=Action.DENY,
    default_severity=Severity.HIGH,
    reason=(
        "What admission denies (workload-switch-with-gpu-pods, passthrough-to-container-with-"
        "live-vms, vgpu-reconfig-with-live-vms) the audit finds once it exists, whatever door it "
        "came through: the users are losing or have lost their GPUs, and the repair has an order."
    ),
    diagnose=_diagnose,
    reads=NODE_FACTS_READS | {GPU_CLUSTER, KUBEVIRT, VIRTUAL_MACHINE_INSTANCE},
)

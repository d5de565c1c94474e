"""vgpu-reconfig-with-live-vms: a node's vGPU profile changed under the VMs that hold its vGPUs.

The vGPU Device Manager applies ``nvidia.com/vgpu.config`` when the label changes to another
config: for every GPU whose mdev counts differ from the config it pauses the sandbox device
plugin, then ``SetVGPUConfig`` calls ``ClearVGPUConfig``, which deletes every mdev on that GPU
(``/sys/bus/mdev/devices/<uuid>/remove``) before it creates the new ones, with no check of who
holds them: no VM, VMI or virt-launcher is looked at, stopped or evicted
(NVIDIA/vgpu-device-manager v0.5.0 ``cmd/nvidia-k8s-vgpu-dm/main.go`` ``updateConfig``,
``pkg/vgpu/config.go``; go-nvlib ``nvmdev.go`` ``Delete``; docs/vgpu.md section 3). The running
VM loses its vGPU or the apply hangs with the node's vGPUs unallocatable (by kernel and driver:
the vendor driver's part is not verified); NVIDIA's guide says to shut down or migrate the VMs
first. Removing the label changes nothing at once (an empty value wakes no one), but the
manager's next start applies the default config: a warning, since nothing breaks now.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.cluster.conditions import find_condition
from policies.cluster.gpu_operator import ClusterPolicyInfo
from policies.cluster.gpu_users import virtctl_stop
from policies.cluster.identities import KUBELET
from policies.cluster.kinds import CLUSTER_POLICY, KUBEVIRT, NODE, VIRTUAL_MACHINE_INSTANCE
from policies.cluster.policy_in_force import change_under_each_policy_in_force
from policies.cluster.vgpu import VgpuHolder, vgpu_holders_on
from policies.cluster.view import ClusterView
from policies.cluster.workload import (
    VGPU_CONFIG_LABEL,
    VGPU_CONFIG_STATE_LABEL,
    VGPU_DEFAULT_CONFIG,
)
from policies.vocabulary.fields import request_labels
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest
from policies.vocabulary.text import few, plural
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "vgpu-reconfig-with-live-vms"


def _change(old: str | None, new: str | None) -> str:
    if old is None:
        return f"set to {new}"
    return f"{old} -> {new}"


def _stop_or_migrate(holder: VgpuHolder) -> str:
    """``virtctl migrate`` where KubeVirt says the VMI may move (VGPULiveMigration), else stop."""
    vmi = holder.vmi
    migratable = find_condition(vmi.conditions, "LiveMigratable")
    if migratable is not None and migratable.status == "True":
        return (
            f"virtctl migrate {vmi.owner_vm or vmi.name} -n {vmi.namespace} "
            "(LiveMigratable; needs another node with the same profile)"
        )
    return virtctl_stop(vmi)


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    return change_under_each_policy_in_force(request, view, _judge)


def _judge(
    request: AdmissionRequest, view: ClusterView, policy: ClusterPolicyInfo | None
) -> Sequence[Finding]:
    new = request_labels(request)
    old = request_labels(request, old=True)
    before, after = old.get(VGPU_CONFIG_LABEL), new.get(VGPU_CONFIG_LABEL)
    if before == after:
        return ()
    node = request.name
    holders = vgpu_holders_on(node, old if request.old is not None else new, view, policy)
    if not holders:
        return ()
    vms = f"{plural(len(holders), 'live VMI')} ({few([h.vmi.key for h in holders])})"
    chain = tuple(f"{h.describe()} on {node}" for h in holders)
    stops = tuple(_stop_or_migrate(h) for h in holders)
    if after is None or after == "":
        default = policy.vgpu_default_config if policy is not None else VGPU_DEFAULT_CONFIG
        how = "removed" if after is None else "emptied"
        message = (
            f"{VGPU_CONFIG_LABEL} {how} on {node} (was {before}) under {vms}: no change now, "
            f"but the vGPU Device Manager's next start applies config {default}. Keep the "
            "label, or stop the VMs first."
        )
        return (
            Finding(
                message,
                Action.WARN,
                chain=chain,
                remediation=(
                    f"kubectl label node {node} {VGPU_CONFIG_LABEL}={before} --overwrite "
                    "(to keep the profile named)",
                    *stops,
                ),
            ),
        )
    message = (
        f"{VGPU_CONFIG_LABEL} {_change(before, after)} on {node} under {vms}: the vGPU "
        "Device Manager deletes the GPU's mdevs, in use or not. Stop or migrate the VMs first."
    )
    return (
        Finding(
            message,
            chain=chain,
            remediation=(
                *stops,
                f"kubectl label node {node} {VGPU_CONFIG_LABEL}={after} --overwrite",
                f"wait for {VGPU_CONFIG_STATE_LABEL}=success on {node}, then start the VMs",
            ),
        ),
    )


POLICY = Policy(
    id=ID,
    summary=(
        "A node's nvidia.com/vgpu.config (the vGPU profile) is set, changed or removed while "
        "live VMIs there hold its vGPUs (permitted mediated devices, or NVIDIA devices of a "
        "vm-vgpu node)."
    ),
    scope={NODE: frozenset({CREATE, UPDATE})},
    owners=(KUBELET,),
    default_action=Action.DENY,
    default_reason=(
        "The vGPU Device Manager deletes every mdev of a GPU whose profile changes without "
        "asking who holds it (vgpu-device-manager v0.5.0 ClearVGPUConfig): the VM loses its "
        "vGPU. Stopping or migrating the VMs first is cheap. Removing the label only warns: "
        "nothing changes until the manager restarts. A policy error only warns."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=frozenset({CLUSTER_POLICY, KUBEVIRT, NODE, VIRTUAL_MACHINE_INSTANCE}),
)

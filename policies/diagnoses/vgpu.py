"""vgpu-config-failed: the vGPU Device Manager could not apply a node's vGPU profile.

The device manager writes ``nvidia.com/vgpu.config.state=failed`` after every apply attempt that
returned an error, and nothing retries: it waits for the next change of ``nvidia.com/vgpu.config``
(or its own restart, which applies the label's config again). Depending on where it failed the
node's mdevs are untouched (a config name not in the file, a type the GPU does not support) or
already deleted (more instances than the GPU takes, a create that failed), so the node may
advertise fewer vGPUs or none (NVIDIA/vgpu-device-manager v0.5.0 ``main.go``
``updateConfig``, ``pkg/vgpu/config.go``; docs/vgpu.md section 2). The VMs on the node are named:
theirs are the vGPUs a failed apply may have taken.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from policies.cluster.kinds import (
    CLUSTER_POLICY,
    KUBEVIRT,
    NODE,
    POD,
    VIRTUAL_MACHINE_INSTANCE,
    object_ref,
)
from policies.cluster.nodes import NodeInfo
from policies.cluster.vgpu import mdev_resources, permitted_mdevs
from policies.cluster.view import AuditView
from policies.cluster.workload import (
    VGPU_CONFIG_FAILED,
    VGPU_CONFIG_LABEL,
    VGPU_CONFIG_STATE_LABEL,
    VGPU_DEFAULT_CONFIG,
)
from policies.vocabulary.audit import Diagnosis, DiagnosisFinding, Link
from policies.vocabulary.text import few, plural
from policies.vocabulary.verdicts import Action, Severity

VGPU_CONFIG_FAILED_ID = "vgpu-config-failed"
DEVICE_MANAGER_APP = "nvidia-vgpu-device-manager"


def _advertised(node: NodeInfo, mdevs: frozenset[str]) -> str:
    """ "it advertises nvidia.com/NVIDIA_A10-12Q: 1", or that it advertises no vGPU."""
    held = mdev_resources(node, mdevs, True)
    if not held:
        return "it advertises no vGPU"
    return "it advertises " + ", ".join(f"{r}: {n}" for r, n in held)


def _diagnose(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    cluster = view.cluster
    mdevs = permitted_mdevs(cluster.kubevirt())
    policy = cluster.cluster_policy()
    default = policy.vgpu_default_config if policy is not None else VGPU_DEFAULT_CONFIG
    for node in cluster.nodes():
        if node.labels.get(VGPU_CONFIG_STATE_LABEL) != VGPU_CONFIG_FAILED:
            continue
        name = node.name
        label = node.labels.get(VGPU_CONFIG_LABEL)
        config = label or f"{default} (the default: no {VGPU_CONFIG_LABEL})"
        vmis = [v for v in cluster.vmis_on(name) if v.live]
        advertised = _advertised(node, mdevs)
        if vmis:
            at_stake = f"{plural(len(vmis), 'live VMI')} there: {few([v.key for v in vmis])}"
        else:
            at_stake = "no VM runs there"
        managers = [p for p in cluster.pods_on(name) if p.app == DEVICE_MANAGER_APP]
        logs = (
            f"kubectl logs -n {managers[0].namespace} {managers[0].name}"
            if managers
            else (
                f"kubectl get pods -A -l app={DEVICE_MANAGER_APP} "
                f"--field-selector spec.nodeName={name}, then kubectl logs of it"
            )
        )
        retry = (
            f"delete the device manager's pod on {name} (at start it applies {label} again)"
            if label
            else f"kubectl label node {name} {VGPU_CONFIG_LABEL}=<config> --overwrite"
        )
        yield DiagnosisFinding(
            resource=object_ref(NODE, "", name),
            message=(
                f"{VGPU_CONFIG_STATE_LABEL}=failed on {name}: the vGPU Device Manager could not "
                f"apply config {config}, and retries only when the label changes; "
                f"{advertised}; {at_stake}"
            ),
            chain=Link(
                f"{name}: {VGPU_CONFIG_LABEL} {label or 'unset'}, state failed",
                (
                    Link(advertised),
                    *(Link(f"VMI {v.key} ({v.phase})") for v in vmis),
                ),
            ),
            remediation=(
                f"read why: {logs}",
                "fix the cause (a config name not in the device manager's ConfigMap, a vGPU "
                "type the GPU does not support, more instances than it takes)",
                f"once no VM holds {name}'s vGPUs: {retry}, or set {VGPU_CONFIG_LABEL} to the "
                "config you meant",
            ),
            severity=Severity.HIGH if vmis else None,
            workloads=tuple(
                object_ref(VIRTUAL_MACHINE_INSTANCE, v.namespace, v.name) for v in vmis
            ),
        )


VGPU_CONFIG_FAILED_DIAGNOSIS = Diagnosis(
    id=VGPU_CONFIG_FAILED_ID,
    summary=(
        "A node's nvidia.com/vgpu.config.state is failed: the vGPU Device Manager could not "
        "apply its profile, may have deleted mdevs already, and does not retry."
    ),
    default_action=Action.WARN,
    default_severity=Severity.MEDIUM,
    reason=(
        "Nothing retries a failed profile: the node serves fewer vGPUs (or none) until someone "
        "looks. High when VMs run there, whose vGPUs the attempt may have taken."
    ),
    diagnose=_diagnose,
    reads=frozenset({CLUSTER_POLICY, KUBEVIRT, NODE, POD, VIRTUAL_MACHINE_INSTANCE}),
)

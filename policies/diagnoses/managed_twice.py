"""gpu-managed-twice: a node whose GPUs both NVIDIA's device plugin and its DRA driver hand out.

The device plugin advertises GPUs to kubelet as extended resources (``nvidia.com/gpu``,
``nvidia.com/gpu.shared``, MIG profiles; the sandbox plugin: passthrough resources named from
pci.ids) and kubelet gives them to pods; the DRA driver (``gpu.nvidia.com``) publishes the same GPUs
in ResourceSlices and the scheduler allocates them to claims. Neither knows of the other, so one GPU
can be handed to two workloads (docs/field-guide.md section 5). NVIDIA's DRA install guide asks for
the GPU Operator "with the NVIDIA Kubernetes Device Plugin disabled to avoid conflicts"
(``devicePlugin.enabled=false``); the GPU Operator's DRA mode replaces the device plugin. On one
node, a deploy label that is already there keeps its value (docs/field-guide.md section 2), so
``nvidia.com/gpu.deploy.device-plugin=false`` keeps the plugin off that node (inferred from the same
rule that makes ``vfio-manager=false`` block the rebind). docs/dra.md has the sources.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from policies.cluster.dra import NVIDIA_DRIVER
from policies.cluster.hardware import is_gpu_function
from policies.cluster.kinds import (
    NODE,
    object_ref,
)
from policies.cluster.pciids import PciDatabase
from policies.cluster.resources import is_container_gpu_resource
from policies.cluster.view import AuditView, ClusterView
from policies.cluster.workload import DEPLOY_LABEL_PREFIX
from policies.diagnoses.facts import NODE_FACTS_READS, NodeFacts, describe_device, node_facts_of
from policies.vocabulary.audit import Diagnosis, DiagnosisFinding, Link
from policies.vocabulary.text import few, plural
from policies.vocabulary.verdicts import Action, Severity

GPU_MANAGED_TWICE = "gpu-managed-twice"
#: The ClusterPolicy's usual name (the GPU Operator chart's), when the state holds none.
DEFAULT_CLUSTER_POLICY = "cluster-policy"


@dataclass(frozen=True, slots=True)
class _Plugin:
    """One of NVIDIA's device plugins: how the operator deploys it and how to turn it off."""

    what: str
    operand: str
    """Its deploy-label operand (``nvidia.com/gpu.deploy.<operand>``)."""
    cluster_policy_field: str


_DEVICE_PLUGIN = _Plugin("the NVIDIA device plugin", "device-plugin", "devicePlugin")
_SANDBOX_PLUGIN = _Plugin(
    "the sandbox device plugin", "sandbox-device-plugin", "sandboxDevicePlugin"
)


def _plugin_of(resource: str, db: PciDatabase) -> _Plugin | None:
    """Which device plugin advertises ``resource`` as a GPU, if one does: container GPUs, or a
    passthrough name pci.ids maps to an NVIDIA GPU (not its audio or USB functions)."""
    if is_container_gpu_resource(resource):
        return _DEVICE_PLUGIN
    ids = db.ids_for_resource_name(resource)
    return _SANDBOX_PLUGIN if any(is_gpu_function(pci, db) for pci in ids) else None


def _plugin_holders(f: NodeFacts, view: ClusterView, resources: Sequence[str]) -> list[str]:
    """Unfinished pods on the node holding one of the plugin's resources."""
    return [
        pod.key
        for pod in view.pods_on(f.name)
        if not pod.finished and any(pod.extended.get(r, 0) > 0 for r in resources)
    ]


def _claim_holders(f: NodeFacts, view: ClusterView) -> list[str]:
    """Claims allocated on the node with a device of NVIDIA's DRA driver."""
    return [
        f"{nc.claim.key} ({few([a.device for a, _ in nc.devices], 2)})"
        for nc in view.claims_allocated_on(f.name)
        if any(a.driver == NVIDIA_DRIVER for a, _ in nc.devices)
    ]


def _remediation(f: NodeFacts, plugins: Sequence[_Plugin], policy: str) -> tuple[str, ...]:
    n = f.name
    fields = ",".join(f'"{p.cluster_policy_field}":{{"enabled":false}}' for p in plugins)
    labels = " ".join(f"{DEPLOY_LABEL_PREFIX}{p.operand}=false" for p in plugins)
    names = " and ".join(p.what for p in plugins)
    return (
        f"decide which allocator {n}'s GPUs belong to; until then each may hand out a GPU the "
        "other already gave away (nvidia-smi on the node lists who uses them)",
        f"to keep DRA (it replaces the device plugin), turn off {names} on {n}: kubectl label "
        f"node {n} {labels} --overwrite; or cluster-wide in the ClusterPolicy: kubectl patch "
        f"clusterpolicy {policy} --type merge -p '{{\"spec\":{{{fields}}}}}'",
        f"or, to keep the device plugin, take {n} out of the DRA driver's kubelet plugin (its "
        "chart's kubeletPlugin.nodeSelector; NVIDIA's guide labels DRA nodes "
        f"nvidia.com/dra-kubelet-plugin=true) so its ResourceSlices for {n} go away",
    )


def _finding(f: NodeFacts, view: ClusterView) -> DiagnosisFinding | None:
    db = view.pci_database
    advertised: dict[_Plugin, list[tuple[str, int]]] = {}
    for resource, count in f.nvidia_allocatable:
        plugin = _plugin_of(resource, db)
        if plugin is not None:
            advertised.setdefault(plugin, []).append((resource, count))
    if not advertised or not f.dra_devices:
        return None
    n = f.name
    plugins = [p for p in (_DEVICE_PLUGIN, _SANDBOX_PLUGIN) if p in advertised]
    plugin_links: list[Link] = []
    plugin_texts: list[str] = []
    holders: list[str] = []
    for plugin in plugins:
        listed = ", ".join(f"{r}: {c}" for r, c in advertised[plugin])
        plugin_texts.append(f"{plugin.what} advertises {listed}")
        held = _plugin_holders(f, view, [r for r, _ in advertised[plugin]])
        holders += held
        children = (Link(f"pods holding them: {few(held)}"),) if held else ()
        plugin_links.append(Link(f"{plugin.what} advertises {listed} (allocatable)", children))
    devices = [describe_device(d) for d in f.dra_devices]
    slices = sorted({d.slice for d in f.dra_devices})
    claims = _claim_holders(f, view)
    published = (
        f"NVIDIA's DRA driver ({NVIDIA_DRIVER}) publishes {plural(len(devices), 'device')} "
        f"({few(devices, 2)})"
    )
    dra_link = Link(
        f"{published} in ResourceSlice {few(slices, 2)}",
        (Link(f"claims allocated there: {few(claims)}"),) if claims else (),
    )
    both = Link(
        "two allocators hand out the same GPUs independently: one GPU can go to a pod through "
        "the device plugin and to a claim through DRA at once"
    )
    links = [*plugin_links, dra_link, both]
    if not f.health.healthy:
        links.append(Link(f"{n} is {f.health.describe()}: both sides may be stale"))
    message = (
        f"{n}: {' and '.join(plugin_texts)}, and {published}: the two allocate the same GPUs "
        "independently, so one GPU can be handed to two workloads. Disable one (DRA replaces "
        f"the device plugin): label {n} {DEPLOY_LABEL_PREFIX}{plugins[0].operand}=false, or "
        f"set {plugins[0].cluster_policy_field}.enabled=false in the ClusterPolicy"
    )
    in_use = bool(holders and claims)
    if in_use:
        message += "; GPUs of both are in use there"
    policy = view.cluster_policy()
    return DiagnosisFinding(
        resource=object_ref(NODE, "", n),
        message=message,
        chain=Link(f"Node {n}", tuple(links)),
        remediation=_remediation(f, plugins, policy.name if policy else DEFAULT_CLUSTER_POLICY),
        severity=Severity.CRITICAL if in_use else None,
    )


def _diagnose(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    facts = node_facts_of(view)
    for name in view.cluster.nodes_with_devices(NVIDIA_DRIVER):
        f = facts.get(name)
        if f is not None and f.nvidia_allocatable:
            finding = _finding(f, view.cluster)
            if finding is not None:
                yield finding


GPU_MANAGED_TWICE_DIAGNOSIS = Diagnosis(
    id=GPU_MANAGED_TWICE,
    summary=(
        "A node where NVIDIA's device plugin advertises GPUs (nvidia.com/gpu, gpu.shared, MIG, "
        "sandbox passthrough resources) and NVIDIA's DRA driver (gpu.nvidia.com) publishes "
        "devices too: two allocators that hand out the same GPUs independently."
    ),
    default_action=Action.WARN,
    default_severity=Severity.HIGH,
    reason=(
        "The same GPU can be handed to two workloads (docs/field-guide.md section 5; NVIDIA's DRA "
        "install guide requires the device plugin disabled, devicePlugin.enabled=false). It is "
        "configuration, fixed in the ClusterPolicy or a node's deploy label, and may be a "
        "migration in progress, so warn; critical when GPUs of both are in use on the node."
    ),
    diagnose=_diagnose,
    reads=NODE_FACTS_READS,
)

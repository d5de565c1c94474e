"""Which fields of each kind gpu-guard reads: one schema per kind, for every way objects arrive.

Each is named in its kind's row of ``policies.cluster.projections.READ_KINDS``, beside the
projection that reads those fields. ``webhook.wire.decode`` decodes a document against these
TypedDicts (msgspec) into plain dicts holding only the fields named here (a key not named is
skipped by the decoder, never built), so the projections of ``policies/cluster/``, the pod
prefilter in ``policies/state/`` and the policies that read a request's raw object (a review to
/validate is pruned too) read the pruned dicts exactly as they read fully decoded ones. A leaf is
``Any`` (kept as sent): its type is the projection's to judge, with its own message.
``tests/test_wire.py`` holds every projection of a pruned object to the full object's,
``tests/test_wire_review.py`` every answer to a pruned review to the whole review's.

A kind without a schema (the DRA kinds, whose objects are nearly all read) is decoded whole.
Typing only: nothing here runs.
"""

from __future__ import annotations

from typing import Any, TypedDict

# --- shared parts ---------------------------------------------------------------------------

#: The annotations gpu-guard reads: a policy's override (policies/vocabulary/overrides.py), and
#: a Node's driver-upgrade wait (policies/cluster/nodes.py).
Annotations = TypedDict(
    "Annotations",
    {
        "gpu-guard.io/override": Any,
        "gpu-guard.io/override-reason": Any,
        # A Node's: when the GPU driver upgrade began waiting for its jobs (nodes.py).
        "nvidia.com/gpu-driver-upgrade-wait-for-pod-completion-start-time": Any,
    },
    total=False,
)


class Metadata(TypedDict, total=False):
    name: Any
    namespace: Any
    labels: Any
    annotations: Annotations | None
    resourceVersion: Any
    deletionTimestamp: Any
    creationTimestamp: Any
    ownerReferences: Any


class KubeObject(TypedDict, total=False):
    """What every object sends beside its own spec and status."""

    apiVersion: Any
    kind: Any
    metadata: Metadata | None


class Condition(TypedDict, total=False):
    type: Any
    status: Any
    reason: Any
    message: Any
    lastTransitionTime: Any


# --- Node -----------------------------------------------------------------------------------


class NodeSpec(TypedDict, total=False):
    unschedulable: Any
    taints: Any


class NodeSystemInfo(TypedDict, total=False):
    kubeletVersion: Any
    swap: Any


class NodeStatus(TypedDict, total=False):
    conditions: list[Condition] | None
    allocatable: Any
    nodeInfo: NodeSystemInfo | None


class Node(KubeObject, total=False):
    spec: NodeSpec | None
    status: NodeStatus | None


# --- Pod ------------------------------------------------------------------------------------


class EnvVar(TypedDict, total=False):
    name: Any
    value: Any
    valueFrom: Any


class VolumeMount(TypedDict, total=False):
    name: Any


class SecurityContext(TypedDict, total=False):
    privileged: Any


class HostPathSource(TypedDict, total=False):
    path: Any


class Volume(TypedDict, total=False):
    name: Any
    hostPath: HostPathSource | None


class Container(TypedDict, total=False):
    resources: Any
    restartPolicy: Any
    env: list[EnvVar] | None
    volumeMounts: list[VolumeMount] | None
    securityContext: SecurityContext | None


class PodSpec(TypedDict, total=False):
    nodeName: Any
    runtimeClassName: Any
    volumes: list[Volume] | None
    containers: list[Container] | None
    initContainers: list[Container] | None
    resourceClaims: Any
    nodeSelector: Any
    affinity: Any


class ContainerStatus(TypedDict, total=False):
    name: Any
    state: Any
    allocatedResourcesStatus: Any


class PodStatus(TypedDict, total=False):
    phase: Any
    reason: Any
    conditions: list[Condition] | None
    containerStatuses: list[ContainerStatus] | None
    resourceClaimStatuses: Any
    extendedResourceClaimStatus: Any


class Pod(KubeObject, total=False):
    spec: PodSpec | None
    status: PodStatus | None


# --- KubeVirt VirtualMachine / VirtualMachineInstance ----------------------------------------


class Devices(TypedDict, total=False):
    gpus: Any
    hostDevices: Any


class Domain(TypedDict, total=False):
    devices: Devices | None


class VmiSpec(TypedDict, total=False):
    domain: Domain | None
    evictionStrategy: Any
    resourceClaims: Any


class VmiTemplate(TypedDict, total=False):
    spec: VmiSpec | None


class VmSpec(TypedDict, total=False):
    runStrategy: Any
    running: Any
    template: VmiTemplate | None
    instancetype: Any


class StateChangeRequest(TypedDict, total=False):
    action: Any


class VmStatus(TypedDict, total=False):
    printableStatus: Any
    conditions: list[Condition] | None
    stateChangeRequests: list[StateChangeRequest] | None
    instancetypeRef: Any


class VirtualMachine(KubeObject, total=False):
    spec: VmSpec | None
    status: VmStatus | None


class VmiStatus(TypedDict, total=False):
    nodeName: Any
    phase: Any
    conditions: list[Condition] | None


class VirtualMachineInstance(KubeObject, total=False):
    spec: VmiSpec | None
    status: VmiStatus | None


# --- KubeVirt's VM templates (policies/cluster/vm_templates.py) ----------------------------


class ReplicaSetSpec(TypedDict, total=False):
    replicas: Any
    paused: Any
    template: VmiTemplate | None


class VirtualMachineInstanceReplicaSet(KubeObject, total=False):
    spec: ReplicaSetSpec | None


class VmTemplate(TypedDict, total=False):
    spec: VmSpec | None


class PoolSpec(TypedDict, total=False):
    replicas: Any
    paused: Any
    virtualMachineTemplate: VmTemplate | None


class VirtualMachinePool(KubeObject, total=False):
    spec: PoolSpec | None


class InstancetypeMetadata(Metadata, total=False):
    """Also what KubeVirt names its copy of an instancetype after (vm_templates.py)."""

    uid: Any
    generation: Any


class Instancetype(TypedDict, total=False):
    """Both kinds: VirtualMachineInstancetype and VirtualMachineClusterInstancetype."""

    apiVersion: Any
    kind: Any
    metadata: InstancetypeMetadata | None
    spec: Devices | None


# --- operators: the KubeVirt CR, NVIDIA's ClusterPolicy, NFD's NodeFeature -------------------


class DeveloperConfiguration(TypedDict, total=False):
    featureGates: Any
    disabledFeatureGates: Any


class KubeVirtConfiguration(TypedDict, total=False):
    permittedHostDevices: Any
    developerConfiguration: DeveloperConfiguration | None
    evictionStrategy: Any


class KubeVirtSpec(TypedDict, total=False):
    configuration: KubeVirtConfiguration | None


class KubeVirtStatus(TypedDict, total=False):
    observedKubeVirtVersion: Any
    operatorVersion: Any


class KubeVirt(KubeObject, total=False):
    spec: KubeVirtSpec | None
    status: KubeVirtStatus | None


class VgpuDeviceManager(TypedDict, total=False):
    config: Any


class OperatorSpec(TypedDict, total=False):
    runtimeClass: Any


class ClusterPolicySpec(TypedDict, total=False):
    sandboxWorkloads: Any
    vgpuDeviceManager: VgpuDeviceManager | None
    ccManager: Any
    operator: OperatorSpec | None
    driver: Any


class ClusterPolicyStatus(TypedDict, total=False):
    state: Any


class ClusterPolicy(KubeObject, total=False):
    spec: ClusterPolicySpec | None
    status: ClusterPolicyStatus | None


class ComputeDomains(TypedDict, total=False):
    enabled: Any


class DraDriver(TypedDict, total=False):
    featureGates: Any
    computeDomains: ComputeDomains | None


class GPUClusterSpec(TypedDict, total=False):
    draDriver: DraDriver | None


class GPUCluster(KubeObject, total=False):
    spec: GPUClusterSpec | None
    status: ClusterPolicyStatus | None


class NVIDIADriverSpec(TypedDict, total=False):
    default: Any
    repository: Any
    image: Any
    version: Any
    nodeSelector: Any
    upgradePolicy: Any


class NVIDIADriver(KubeObject, total=False):
    spec: NVIDIADriverSpec | None


FeatureInstances = TypedDict("FeatureInstances", {"pci.device": Any}, total=False)


class Features(TypedDict, total=False):
    instances: FeatureInstances | None


class NodeFeatureSpec(TypedDict, total=False):
    features: Features | None


class NodeFeature(KubeObject, total=False):
    spec: NodeFeatureSpec | None


# --- OpenShift Virtualization's HyperConverged (policies/cluster/hyperconverged.py) -----------

HcoAnnotations = TypedDict(
    "HcoAnnotations",
    {
        "gpu-guard.io/override": Any,
        "gpu-guard.io/override-reason": Any,
        "kubevirt.kubevirt.io/jsonpatch": Any,
    },
    total=False,
)


class HcoMetadata(TypedDict, total=False):
    name: Any
    namespace: Any
    labels: Any
    annotations: HcoAnnotations | None
    resourceVersion: Any
    deletionTimestamp: Any
    creationTimestamp: Any


class HcoVirtualization(TypedDict, total=False):
    permittedHostDevices: Any


class HyperConvergedSpec(TypedDict, total=False):
    featureGates: Any
    """v1: a list of {name, state}; v1beta1: a map of booleans."""
    permittedHostDevices: Any
    """v1beta1's place."""
    virtualization: HcoVirtualization | None
    """v1's place."""


class HyperConverged(TypedDict, total=False):
    apiVersion: Any
    kind: Any
    metadata: HcoMetadata | None
    spec: HyperConvergedSpec | None

"""The read-only cluster snapshot policies see (``ClusterView``;
``policies.state.cluster.ClusterState`` implements it), and one audit's view of it (``AuditView``),
which the diagnoses share.

Every method is an index hit: policies run on the API server's critical path and must not scan
the cluster per request. Sequences are returned sorted by name so messages are stable.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from policies.cluster.admin_access import NamespaceInfo
from policies.cluster.counters import Counters
from policies.cluster.device_taints import DeviceTaint, DeviceTaintRuleInfo
from policies.cluster.dra import DeviceClassInfo, DeviceId, PublishedDevice, ResourceSliceInfo
from policies.cluster.dra_claims import (
    AllocatedDevice,
    ResourceClaimInfo,
    ResourceClaimTemplateInfo,
)
from policies.cluster.gpu_operator import ClusterPolicyInfo, GPUClusterInfo
from policies.cluster.hyperconverged import HyperConvergedInfo
from policies.cluster.kubevirt import KubeVirtInfo, VMIInfo, VMInfo
from policies.cluster.nodes import NodeInfo
from policies.cluster.nvidia_driver import NVIDIADriverInfo
from policies.cluster.pciids import PciDatabase, PciId
from policies.cluster.pods import PodInfo
from policies.cluster.vm_templates import InstancetypeInfo, PoolInfo, ReplicaSetInfo
from policies.cluster.workload import GPU_PRESENT_LABEL, WORKLOAD_LABEL
from policies.vocabulary.audit import Track, untracked

T = TypeVar("T")

HOSTNAME_LABEL = "kubernetes.io/hostname"
#: The node labels ``ClusterView.nodes_labelled`` answers for: a pod pinned by hostname, nodes
#: by their GPU Operator workload mode, and the GPU nodes NVIDIADrivers are routed to. Other keys
#: are not indexed.
INDEXED_NODE_LABELS = frozenset({HOSTNAME_LABEL, WORKLOAD_LABEL, GPU_PRESENT_LABEL})


@dataclass(frozen=True, slots=True)
class RequestCounts:
    """Of a class's devices, per node ('' for node-independent ones), how many a request's own
    selectors accept, and at most how many it could take (accepted plus undecided)."""

    accepted: Mapping[str, int]
    possible: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class NodeClaim:
    """A claim allocated on a node: each device it got (as published now: None once the driver
    no longer publishes it) and the pods of its reservedFor that the state knows."""

    claim: ResourceClaimInfo
    devices: tuple[tuple[AllocatedDevice, PublishedDevice | None], ...]
    pods: tuple[PodInfo, ...]


@dataclass(frozen=True, slots=True)
class ClaimReferrers:
    """The pods, VMs and VMIs whose spec.resourceClaims name a claim (or a template)."""

    pods: tuple[PodInfo, ...]
    vms: tuple[VMInfo, ...]
    vmis: tuple[VMIInfo, ...]


class ClusterView(Protocol):
    @property
    def pci_database(self) -> PciDatabase: ...

    def node(self, name: str) -> NodeInfo | None: ...

    def nodes(self) -> Sequence[NodeInfo]: ...

    def gpu_pods_on(self, node: str) -> Sequence[PodInfo]:
        """Unfinished pods bound to ``node`` that hold NVIDIA container GPU resources (device
        plugin); ``policies.cluster.gpu_users.gpu_users_on`` adds those holding DRA GPUs."""
        ...

    def pods_on(self, node: str) -> Sequence[PodInfo]:
        """Every kept pod bound to ``node`` (GPU pods, GPU operand pods, virt-launchers)."""
        ...

    def vmis_on(self, node: str) -> Sequence[VMIInfo]: ...

    def nodes_labelled(self, key: str, value: str) -> Sequence[str]:
        """Names of the nodes whose label ``key`` is ``value``; ``key`` in INDEXED_NODE_LABELS
        (any other key raises ValueError: it would need a scan)."""
        ...

    def gpu_nodes_without_workload_label(self) -> Sequence[str]:
        """Names of GPU nodes (``workload.is_gpu_node``) whose workload label is missing or not a
        valid mode: the ClusterPolicy's defaultWorkload decides their mode."""
        ...

    def vms(self) -> Sequence[VMInfo]: ...

    def vmis(self) -> Sequence[VMIInfo]: ...

    def vms_using(self, device_name: str) -> Sequence[VMInfo]:
        """VMs with ``device_name`` in gpus/hostDevices (entries that use a claim name none), or
        naming an instancetype that gives it."""
        ...

    def vmis_using(self, device_name: str) -> Sequence[VMIInfo]:
        """VMIs (any phase: callers keep the live ones) with ``device_name`` in gpus/hostDevices."""
        ...

    def vms_needing_gate(self, gate: str) -> Sequence[VMInfo]:
        """VMs with an entry that needs the KubeVirt feature gate ``gate``
        (``DeviceRequest.gates_needed``: HostDevices, GPUsWithDRA, HostDevicesWithDRA)."""
        ...

    def vmis_needing_gate(self, gate: str) -> Sequence[VMIInfo]:
        """VMIs (any phase) with an entry that needs the feature gate ``gate``."""
        ...

    # A node provides a resource when its allocatable has it > 0 (a device plugin advertises it)
    # or when DRA devices of a DeviceClass whose extendedResourceName it is are published for it
    # (pods asking it in their limits are served from them). Each node counts once.

    def providers_of(self, resource: str) -> Sequence[str]:
        """Nodes that provide ``resource``, healthy or not."""
        ...

    def has_provider(self, resource: str) -> bool:
        """Whether any node provides ``resource``: providers_of without sorting the names."""
        ...

    def healthy_provider_count(self, resource: str) -> int:
        """Providers of ``resource`` that ``policies.cluster.health`` calls healthy."""
        ...

    def resources_provided_on(self, node: str) -> Mapping[str, int]:
        """What ``node`` provides, from either source, with how many units: its allocatable's
        where a device plugin advertises it, else its devices of the serving classes."""
        ...

    def advertised_like(self, resource: str) -> Sequence[str]:
        """Advertised resource names equal to ``resource`` ignoring case (itself included)."""
        ...

    def advertised_for_pci(self, pci: PciId) -> Sequence[str]:
        """Advertised resource names that pci.ids maps to ``pci`` (sandbox names and raw ids)."""
        ...

    def nodes_with_hardware(self, pci: PciId) -> Mapping[str, frozenset[str]]:
        """Node name -> the sources that show ``pci`` there."""
        ...

    def known_hardware(self, vendor: str) -> Sequence[PciId]:
        """Every device id of ``vendor`` seen on some node."""
        ...

    def kubevirt(self) -> KubeVirtInfo | None: ...

    def kubevirts(self) -> Sequence[KubeVirtInfo]: ...

    def cluster_policy(self) -> ClusterPolicyInfo | None:
        """The ClusterPolicy the GPU Operator acts on, or most likely does: the first of
        ``cluster_policies_in_force``. What is shown; a deny asks ``cluster_policies_in_force``
        (``policies.cluster.policy_in_force.under_each_policy_in_force``)."""
        ...

    def cluster_policies_in_force(self) -> Sequence[ClusterPolicyInfo]:
        """The ClusterPolicies the GPU Operator may be acting on, oldest first
        (``gpu_operator.cluster_policies_in_force`` for the configured operator version): one
        from v26.7.0, every one where the choice lives in the operator's memory."""
        ...

    def gpu_operator_version(self) -> str:
        """The GPU Operator's version as configured (``gpuOperator.version``), '' if unknown."""
        ...

    def cluster_policies(self) -> Sequence[ClusterPolicyInfo]:
        """Every ClusterPolicy, by name."""
        ...

    def gpu_clusters(self) -> Sequence[GPUClusterInfo]:
        """Every GPUCluster (a singleton by the CRD's rule: none or one), by name."""
        ...

    def nvidia_drivers(self) -> Sequence[NVIDIADriverInfo]:
        """Every NVIDIADriver, by name (a handful: one per set of GPU nodes)."""
        ...

    def kubevirts_in(self, namespace: str) -> Sequence[KubeVirtInfo]:
        """The KubeVirt CRs in ``namespace``, by name (HCO's is in its HyperConverged's)."""
        ...

    def hyperconverged(self, namespace: str) -> HyperConvergedInfo | None:
        """OpenShift Virtualization's HyperConverged in ``namespace`` (HCO reconciles one)."""
        ...

    def hyperconvergeds(self) -> Sequence[HyperConvergedInfo]:
        """Every HyperConverged, by namespace and name."""
        ...

    def instancetype(self, namespace: str, name: str) -> InstancetypeInfo | None:
        """A VirtualMachineInstancetype, as it is now (a VM runs with KubeVirt's copy of it)."""
        ...

    def cluster_instancetype(self, name: str) -> InstancetypeInfo | None:
        """A VirtualMachineClusterInstancetype, as it is now."""
        ...

    def vm_pool(self, namespace: str, name: str) -> PoolInfo | None:
        """A VirtualMachinePool as the state holds it (its scale is judged with its template)."""
        ...

    def vm_replica_set(self, namespace: str, name: str) -> ReplicaSetInfo | None:
        """A VirtualMachineInstanceReplicaSet as the state holds it."""
        ...

    def pod(self, namespace: str, name: str) -> PodInfo | None:
        """A kept pod (one holding device resources or claims, or a GPU operand)."""
        ...

    # --- Dynamic Resource Allocation (docs/dra.md) ------------------------------------------------
    # Devices are those of the newest generation of each pool. "node" '' stands for devices bound
    # to no one node (allNodes or a node selector: see PublishedDevice.all_nodes/node_selector).
    # A NotReady node's slices stay: its devices are listed, and ``node_health`` says they are
    # not provided (the healthy counts below already leave them out).

    def device_class(self, name: str) -> DeviceClassInfo | None: ...

    def device_classes(self) -> Sequence[DeviceClassInfo]:
        """Every DeviceClass (a cluster has few: did-you-mean and audits)."""
        ...

    def resource_slices(self) -> Sequence[ResourceSliceInfo]:
        """Every ResourceSlice, older generations included (audit)."""
        ...

    def published_devices(self) -> Iterable[PublishedDevice]:
        """Every device published now, in no promised order: judging a DeviceClass the index
        has not seen yet (admission stops at the first device it accepts)."""
        ...

    def published_device(self, device: DeviceId) -> PublishedDevice | None:
        """The device an allocation result names, if its pool publishes it now."""
        ...

    def devices_on(self, node: str, driver: str | None = None) -> Sequence[PublishedDevice]:
        """The devices published for ``node`` (of ``driver``, or of every driver)."""
        ...

    def dra_drivers_on(self, node: str) -> Sequence[str]: ...

    def pool_counter_sets(self, driver: str, pool: str) -> Mapping[str, Counters]:
        """The counter sets the newest generation of a pool declares (sharedCounters of its
        slices): counter set name -> counters."""
        ...

    def nodes_with_devices(self, driver: str) -> Sequence[str]:
        """Nodes for which ``driver`` publishes at least one device, healthy or not."""
        ...

    def class_device_counts(self, class_name: str) -> Mapping[str, int]:
        """Node -> how many of its devices every selector of the class accepts: a view of the
        index (O(1) to ask, read before the state changes)."""
        ...

    def class_request_counts(self, class_name: str, selectors: tuple[str, ...]) -> RequestCounts:
        """How many of the class's devices a request's own selectors accept, per node; nodes
        where they accept and leave undecided none are left out."""
        ...

    def class_attribute_values(self, class_name: str, key: str) -> frozenset[str]:
        """The strings the class's devices publish under ``key`` (``"driver"`` or
        ``"<domain>/<name>"``): what near-miss hints compare a selector's value with."""
        ...

    def class_devices_on(self, class_name: str, node: str) -> Sequence[PublishedDevice]: ...

    def class_undecided(self, class_name: str) -> Sequence[tuple[PublishedDevice, str]]:
        """Devices the class's selectors could not be evaluated on, with why (never counted as
        matching or as not matching)."""
        ...

    def device_taints(self, device: PublishedDevice) -> tuple[DeviceTaint, ...]:
        """Its slice's taints, then each acting DeviceTaintRule's that selects it."""
        ...

    def may_keep_off(self, node: str) -> bool:
        """Whether a device for ``node`` ('' node-independent) may carry a NoSchedule or
        NoExecute taint: where a claim's fit looks device by device (an index hit)."""
        ...

    def device_taint_rules(self) -> Sequence[DeviceTaintRuleInfo]:
        """Every DeviceTaintRule, acting or not."""
        ...

    def devices_selected(self, rule: DeviceTaintRuleInfo) -> Sequence[PublishedDevice]:
        """The published devices a DeviceTaintRule's deviceSelector selects (node-independent
        ones too): a lookup by pool when it names one, else by device name, else the driver's
        nodes (every node's devices for an empty selector)."""
        ...

    def nodes_selected(self, rule: DeviceTaintRuleInfo, at_most: int) -> Sequence[str]:
        """Nodes with a node-local device the rule selects, sorted, at most ``at_most`` of
        them: the lookups stop there, so a bound is checked without listing what it bounds."""
        ...

    def namespace(self, name: str) -> NamespaceInfo | None:
        """A Namespace, read for its labels only (DRA admin access)."""
        ...

    def admin_access_namespaces(self) -> Sequence[str]:
        """Namespaces labelled ``resource.kubernetes.io/admin-access: "true"``."""
        ...

    def device_taint_rules_act(self) -> bool:
        """Whether the guard is told the DRADeviceTaintRules gate is on (``--device-taint-rules``):
        without it no rule taints anything."""
        ...

    def extended_resource_providers(self, resource: str) -> Sequence[str]:
        """Nodes with devices of a class whose extendedResourceName is ``resource``: DRA serves
        pods that ask it in their limits there (providers_of counts them with device plugins)."""
        ...

    def healthy_extended_resource_provider_count(self, resource: str) -> int: ...

    def claim(self, namespace: str, name: str) -> ResourceClaimInfo | None: ...

    def claims(self) -> Sequence[ResourceClaimInfo]: ...

    def claim_template(self, namespace: str, name: str) -> ResourceClaimTemplateInfo | None: ...

    def claim_templates(self) -> Sequence[ResourceClaimTemplateInfo]: ...

    def claims_allocated_on(self, node: str) -> Sequence[NodeClaim]:
        """Claims whose allocation pins them to ``node``, with their devices and pods; for ''
        the allocated claims pinned to no node (node-independent devices: allNodes, a node
        selector)."""
        ...

    def claim_referrers(self, namespace: str, name: str, template: bool = False) -> ClaimReferrers:
        """Who names claim ``name`` (a pod also when the claim was made for it from a template),
        or with ``template`` the ResourceClaimTemplate ``name``."""
        ...


class AuditView:
    """One audit's snapshot: what several diagnoses (and the report's tables) read of it, such as
    the facts of every node, is computed once per audit (``once``), then shared."""

    __slots__ = ("_memo", "cluster", "track")

    def __init__(self, cluster: ClusterView, track: Track = untracked) -> None:
        self.cluster = cluster
        self.track = track
        self._memo: dict[Hashable, Any] = {}

    def once(self, key: Hashable, compute: Callable[[], T]) -> T:
        if key not in self._memo:
            self._memo[key] = compute()
        value: T = self._memo[key]
        return value

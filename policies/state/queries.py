"""The read side of ClusterState: the queries of ``policies.cluster.view.ClusterView`` other than
DRA's (``policies.state.dra.DraView``), each a dict hit on the indexes ClusterState keeps, and what
its feeders ask back (the keys a relist compares, the counts a summary shows).

Apart from ``policies.state.cluster``, whose ``upsert`` and ``delete`` keep those indexes right
through add, modify and delete: the writer and the readers of one set of tables, mixed into one
class, so that a reader never sees a table the writer does not fill (the attributes below are
the ones it reads, declared for the type checker).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from policies.cluster.admin_access import NamespaceInfo
from policies.cluster.gpu_operator import (
    ClusterPolicyInfo,
    GPUClusterInfo,
    cluster_policies_in_force,
)
from policies.cluster.hyperconverged import HyperConvergedInfo
from policies.cluster.kinds import POD, VM_CLUSTER_INSTANCETYPE, VM_INSTANCETYPE, WATCHED_KINDS
from policies.cluster.kubevirt import KubeVirtInfo, VMIInfo, VMInfo
from policies.cluster.nfd import NodeFeatureInfo
from policies.cluster.nodes import NodeInfo
from policies.cluster.nvidia_driver import NVIDIADriverInfo
from policies.cluster.pciids import PciDatabase, PciId
from policies.cluster.pods import PodInfo
from policies.cluster.view import INDEXED_NODE_LABELS
from policies.cluster.vm_templates import InstancetypeInfo, PoolInfo, ReplicaSetInfo
from policies.state.dra import DraIndex
from policies.state.instancetypes import InstancetypeIndex
from policies.state.providers import ProviderIndex
from policies.vocabulary.requests import GroupKind

Key = tuple[str, str]  # (namespace, name)


class ClusterQueries:
    """Mixed into ClusterState, which fills the tables and indexes these read."""

    _db: PciDatabase
    _unkept_pods: set[Key]
    _node_features: dict[Key, NodeFeatureInfo]
    _ignored: Counter[GroupKind]
    _known: dict[GroupKind, set[Key]]
    _nodes: dict[str, NodeInfo]
    _pods: dict[Key, PodInfo]
    _vms: dict[Key, VMInfo]
    _vmis: dict[Key, VMIInfo]
    _kubevirt_table: dict[Key, KubeVirtInfo]
    _cluster_policy_table: dict[Key, ClusterPolicyInfo]
    _operator_version: Callable[[], str] | None = None
    """Where the GPU Operator's version comes from (``follow_gpu_operator_version``)."""
    _gpu_cluster_table: dict[Key, GPUClusterInfo]
    _nvidia_driver_table: dict[Key, NVIDIADriverInfo]
    _hyperconverged_table: dict[Key, HyperConvergedInfo]
    _vm_replica_set_table: dict[Key, ReplicaSetInfo]
    _vm_pool_table: dict[Key, PoolInfo]
    _instancetypes: InstancetypeIndex
    _namespaces: dict[str, NamespaceInfo]
    _provision: ProviderIndex
    _dra: DraIndex
    _pods_by_node: dict[str, dict[Key, PodInfo]]
    _gpu_pods_by_node: dict[str, dict[Key, PodInfo]]
    _vmis_by_node: dict[str, dict[Key, VMIInfo]]
    _vms_by_device: dict[str, set[Key]]
    _vmis_by_device: dict[str, set[Key]]
    _vms_by_gate: dict[str, set[Key]]
    _vmis_by_gate: dict[str, set[Key]]
    _nodes_by_label: dict[tuple[str, str], set[str]]
    _unlabelled_gpu_nodes: set[str]
    _advertised_casefold: dict[str, set[str]]
    _advertised_by_pci: dict[PciId, set[str]]
    _nodes_by_pci: dict[PciId, dict[str, frozenset[str]]]
    listed: frozenset[GroupKind] = frozenset()
    """Kinds a snapshot's record says were listed (seen, even with no object): set by the
    state-file loader (``webhook.state.files``)."""

    def keys(self, kind: GroupKind) -> set[Key]:
        """Every object of ``kind`` the state knows, for relists that must drop the vanished."""
        if kind == POD:
            return set(self._pods) | self._unkept_pods
        return set(self._known.get(kind, ()))

    def counts(self) -> dict[str, int]:
        """Objects per kind, pods counted whether kept or not."""
        counts = {str(kind): len(self.keys(kind)) for kind in WATCHED_KINDS if kind != POD}
        counts[str(POD)] = len(self._pods) + len(self._unkept_pods)
        return counts

    def seen_kinds(self) -> frozenset[GroupKind]:
        """The watched kinds this state holds an object of, or that a snapshot listed."""
        counts = self.counts()
        return frozenset(k for k in WATCHED_KINDS if counts[str(k)]) | self.listed

    def ignored(self) -> Mapping[GroupKind, int]:
        """Objects fed in whose kind no policy reads, per kind: a state of only these is empty."""
        return self._ignored

    # --- the ClusterView policies read -----------------------------------------------------------

    @property
    def pci_database(self) -> PciDatabase:
        return self._db

    def node(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def nodes(self) -> Sequence[NodeInfo]:
        return [self._nodes[name] for name in sorted(self._nodes)]

    def gpu_pods_on(self, node: str) -> Sequence[PodInfo]:
        pods = self._gpu_pods_by_node.get(node, {})
        return [pods[key] for key in sorted(pods)]

    def pods_on(self, node: str) -> Sequence[PodInfo]:
        pods = self._pods_by_node.get(node, {})
        return [pods[key] for key in sorted(pods)]

    def vmis_on(self, node: str) -> Sequence[VMIInfo]:
        vmis = self._vmis_by_node.get(node, {})
        return [vmis[key] for key in sorted(vmis)]

    def nodes_labelled(self, key: str, value: str) -> Sequence[str]:
        if key not in INDEXED_NODE_LABELS:
            raise ValueError(f"node label {key} is not indexed")
        return sorted(self._nodes_by_label.get((key, value), ()))

    def gpu_nodes_without_workload_label(self) -> Sequence[str]:
        return sorted(self._unlabelled_gpu_nodes)

    def vms(self) -> Sequence[VMInfo]:
        return [self._vms[key] for key in sorted(self._vms)]

    def vmis(self) -> Sequence[VMIInfo]:
        return [self._vmis[key] for key in sorted(self._vmis)]

    def pods(self) -> Sequence[PodInfo]:
        return [self._pods[key] for key in sorted(self._pods)]

    def vms_using(self, device_name: str) -> Sequence[VMInfo]:
        keys = self._vms_by_device.get(device_name, set())
        keys = keys | self._instancetypes.vms_using(device_name)
        return [self._vms[key] for key in sorted(keys)]

    def vmis_using(self, device_name: str) -> Sequence[VMIInfo]:
        keys = self._vmis_by_device.get(device_name, set())
        return [self._vmis[key] for key in sorted(keys)]

    def vms_needing_gate(self, gate: str) -> Sequence[VMInfo]:
        keys = self._vms_by_gate.get(gate, set()) | self._instancetypes.vms_needing_gate(gate)
        return [self._vms[key] for key in sorted(keys)]

    def vmis_needing_gate(self, gate: str) -> Sequence[VMIInfo]:
        return [self._vmis[key] for key in sorted(self._vmis_by_gate.get(gate, ()))]

    def providers_of(self, resource: str) -> Sequence[str]:
        return self._provision.providers(resource)

    def has_provider(self, resource: str) -> bool:
        return self._provision.any(resource)

    def healthy_provider_count(self, resource: str) -> int:
        return self._provision.healthy_count(resource)

    def resources_provided_on(self, node: str) -> Mapping[str, int]:
        info = self._nodes.get(node)
        allocatable = info.allocatable if info is not None else {}
        out = {}
        for resource in self._provision.resources_on(node):
            advertised = allocatable.get(resource, 0)
            served = self._dra.extended.get(resource, {}).get(node, 0)
            out[resource] = advertised if advertised > 0 else served
        return out

    def advertised_like(self, resource: str) -> Sequence[str]:
        return sorted(self._advertised_casefold.get(resource.casefold(), ()))

    def advertised_for_pci(self, pci: PciId) -> Sequence[str]:
        return sorted(self._advertised_by_pci.get(pci, ()))

    def nodes_with_hardware(self, pci: PciId) -> Mapping[str, frozenset[str]]:
        return self._nodes_by_pci.get(pci, {})

    def known_hardware(self, vendor: str) -> Sequence[PciId]:
        return sorted(pci for pci in self._nodes_by_pci if pci.vendor == vendor)

    def kubevirt(self) -> KubeVirtInfo | None:
        return self._kubevirt_table[min(self._kubevirt_table)] if self._kubevirt_table else None

    def kubevirts(self) -> Sequence[KubeVirtInfo]:
        return [self._kubevirt_table[key] for key in sorted(self._kubevirt_table)]

    def cluster_policy(self) -> ClusterPolicyInfo | None:
        in_force = self.cluster_policies_in_force()
        return in_force[0] if in_force else None

    def cluster_policies_in_force(self) -> Sequence[ClusterPolicyInfo]:
        return cluster_policies_in_force(
            self._cluster_policy_table.values(), self.gpu_operator_version()
        )

    def gpu_operator_version(self) -> str:
        return self._operator_version() if self._operator_version is not None else ""

    def follow_gpu_operator_version(self, source: Callable[[], str]) -> None:
        """Reads the GPU Operator's version from ``source`` (the configuration's
        ``gpuOperator.version``, which a reload may change): how the operator picks among
        several ClusterPolicies (docs/security.md, the ClusterPolicy in force)."""
        self._operator_version = source

    def cluster_policies(self) -> Sequence[ClusterPolicyInfo]:
        return [self._cluster_policy_table[key] for key in sorted(self._cluster_policy_table)]

    def gpu_clusters(self) -> Sequence[GPUClusterInfo]:
        return [self._gpu_cluster_table[key] for key in sorted(self._gpu_cluster_table)]

    def nvidia_drivers(self) -> Sequence[NVIDIADriverInfo]:
        return [self._nvidia_driver_table[key] for key in sorted(self._nvidia_driver_table)]

    def kubevirts_in(self, namespace: str) -> Sequence[KubeVirtInfo]:
        return [kv for (ns, _), kv in sorted(self._kubevirt_table.items()) if ns == namespace]

    def hyperconverged(self, namespace: str) -> HyperConvergedInfo | None:
        table = self._hyperconverged_table
        found = [hc for (ns, _), hc in sorted(table.items()) if ns == namespace]
        return found[0] if found else None

    def hyperconvergeds(self) -> Sequence[HyperConvergedInfo]:
        return [self._hyperconverged_table[key] for key in sorted(self._hyperconverged_table)]

    def instancetype(self, namespace: str, name: str) -> InstancetypeInfo | None:
        return self._instancetypes.types.get((VM_INSTANCETYPE, namespace, name))

    def cluster_instancetype(self, name: str) -> InstancetypeInfo | None:
        return self._instancetypes.types.get((VM_CLUSTER_INSTANCETYPE, "", name))

    def vm_pool(self, namespace: str, name: str) -> PoolInfo | None:
        return self._vm_pool_table.get((namespace, name))

    def vm_replica_set(self, namespace: str, name: str) -> ReplicaSetInfo | None:
        return self._vm_replica_set_table.get((namespace, name))

"""ClusterState: compact projections of the watched objects and the indexes policies hit.

One class, two feeders: state files (``webhook.state.files``) and live watches. Both go through
``upsert`` and ``delete``, which keep every index correct through add, modify and delete, so a
per-request lookup is a dict hit and never a scan of the cluster. No I/O: what the machine adds
(its pci.ids, a log of what a slice keeps unread) is handed in by the feeders
(``webhook.state.feeding``).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from policies.cluster.admin_access import NamespaceInfo
from policies.cluster.dra import DeviceClassInfo, ResourceSliceInfo
from policies.cluster.dra_claims import ResourceClaimInfo, ResourceClaimTemplateInfo
from policies.cluster.gpu_operator import ClusterPolicyInfo, GPUClusterInfo
from policies.cluster.gpu_users import holds_gpu_resources
from policies.cluster.hardware import (
    Hardware,
    node_feature_hardware,
    node_hardware,
    published_hardware,
)
from policies.cluster.health import node_health
from policies.cluster.hyperconverged import HyperConvergedInfo
from policies.cluster.kinds import (
    POD,
    VIRTUAL_MACHINE,
    VIRTUAL_MACHINE_INSTANCE,
    VM_CLUSTER_INSTANCETYPE,
    VM_INSTANCETYPE,
    group_kind_of,
)
from policies.cluster.kubevirt import KubeVirtInfo, VMIInfo, VMInfo
from policies.cluster.nfd import NodeFeatureInfo
from policies.cluster.nodes import NodeInfo
from policies.cluster.nvidia_driver import NVIDIADriverInfo
from policies.cluster.pciids import PciDatabase, PciId, bundled_database
from policies.cluster.pods import PodInfo
from policies.cluster.projections import READ_KIND_OF
from policies.cluster.view import INDEXED_NODE_LABELS
from policies.cluster.vm_templates import InstancetypeInfo, PoolInfo, ReplicaSetInfo
from policies.cluster.workload import MODES, WORKLOAD_LABEL, is_gpu_node
from policies.state.dra import DraIndex, DraView
from policies.state.instancetypes import InstancetypeIndex
from policies.state.pod_filter import _keep_pod, _may_be_kept
from policies.state.providers import DEVICE_PLUGIN, DRA, ProviderIndex
from policies.state.queries import ClusterQueries
from policies.state.taint_view import TaintView
from policies.vocabulary.fields import get_map, get_str
from policies.vocabulary.requests import GroupKind, JSONObject

Key = tuple[str, str]  # (namespace, name)
K = TypeVar("K")
V = TypeVar("V")


def _add(index: dict[K, set[V]], key: K, value: V) -> None:
    index.setdefault(key, set()).add(value)


def _discard(index: dict[K, set[V]], key: K, value: V) -> None:
    values = index.get(key)
    if values is not None:
        values.discard(value)
        if not values:
            del index[key]


class ClusterState(ClusterQueries, DraView, TaintView):
    """Read-only to policies (it implements ``policies.cluster.view.ClusterView``); one writer."""

    def __init__(
        self,
        pci_database: PciDatabase | None = None,
        on_unread: Callable[[ResourceSliceInfo], None] | None = None,
    ) -> None:
        """``pci_database`` defaults to the committed files alone (the feeders pass the
        machine's); ``on_unread`` hears each slice as it is kept, to say what it keeps unread."""
        self._db = pci_database if pci_database is not None else bundled_database()
        self._on_unread = on_unread
        self._nodes: dict[str, NodeInfo] = {}
        self._pods: dict[Key, PodInfo] = {}
        self._unkept_pods: set[Key] = set()
        self._vms: dict[Key, VMInfo] = {}
        self._vmis: dict[Key, VMIInfo] = {}
        self._kubevirt_table: dict[Key, KubeVirtInfo] = {}
        self._cluster_policy_table: dict[Key, ClusterPolicyInfo] = {}
        self._gpu_cluster_table: dict[Key, GPUClusterInfo] = {}
        self._nvidia_driver_table: dict[Key, NVIDIADriverInfo] = {}
        self._hyperconverged_table: dict[Key, HyperConvergedInfo] = {}
        self._vm_replica_set_table: dict[Key, ReplicaSetInfo] = {}
        self._vm_pool_table: dict[Key, PoolInfo] = {}
        self._instancetypes = InstancetypeIndex()
        self._namespaces: dict[str, NamespaceInfo] = {}
        self._node_features: dict[Key, NodeFeatureInfo] = {}
        self._ignored: Counter[GroupKind] = Counter()
        self._known: dict[GroupKind, set[Key]] = {}
        """The keys of every kind but pods (whose keys are their tables'), for relists."""
        # indexes
        self._healthy_nodes: set[str] = set()
        self._provision = ProviderIndex(self._healthy_nodes)
        self._dra = DraIndex(self._dra_serves)
        self._pods_by_node: dict[str, dict[Key, PodInfo]] = {}
        self._gpu_pods_by_node: dict[str, dict[Key, PodInfo]] = {}
        self._vmis_by_node: dict[str, dict[Key, VMIInfo]] = {}
        self._vms_by_device: dict[str, set[Key]] = {}
        self._vmis_by_device: dict[str, set[Key]] = {}
        self._vms_by_gate: dict[str, set[Key]] = {}
        self._vmis_by_gate: dict[str, set[Key]] = {}
        self._nodes_by_label: dict[tuple[str, str], set[str]] = {}
        self._unlabelled_gpu_nodes: set[str] = set()
        self._providers: dict[str, set[str]] = {}  # resource -> nodes whose plugins advertise it
        self._advertised_casefold: dict[str, set[str]] = {}
        self._advertised_by_pci: dict[PciId, set[str]] = {}
        self._features_by_node: dict[str, dict[Key, Hardware]] = {}
        self._published_by_node: dict[str, Hardware] = {}
        """What the devices DRA drivers publish for each node show (computed per slice change)."""
        self._hardware_of_node: dict[str, Hardware] = {}
        self._nodes_by_pci: dict[PciId, dict[str, frozenset[str]]] = {}

    # --- feeding ---------------------------------------------------------------------------------

    def upsert(self, obj: JSONObject, kind: GroupKind | None = None) -> GroupKind | None:
        """Add or replace one object; returns its kind, or None for a kind no policy reads.

        ``kind`` is ``group_kind_of(obj)`` when the caller has it already (the state-file loader
        checks it first), so it is not computed twice per object. Raises
        ``policies.vocabulary.fields.ObjectError`` when a field the policies read is malformed.
        """
        if kind is None:
            kind = group_kind_of(obj)
        if kind == POD and not _may_be_kept(obj):
            meta = obj["metadata"]
            # a few dozen namespaces for 100,000s of pods: one string each, not one per pod
            key = (sys.intern(meta.get("namespace", "") or ""), meta["name"])
            self._unset_pod(key)
            self._unkept_pods.add(key)
            return kind
        row = READ_KIND_OF.get(kind)
        if row is None:
            self._ignored[kind] += 1
            return None
        info = row.project(obj)
        key = (getattr(info, "namespace", ""), info.name)  # cluster-scoped infos have none
        setter = getattr(self, f"_set_{row.store}", None)
        if setter is not None:
            setter(info)
        else:
            table: dict[Key, object] = getattr(self, f"_{row.store}_table")
            table[key] = info
        if kind != POD:  # a pod's keys are its tables' (most pods are counted, not kept)
            self._known.setdefault(kind, set()).add(key)
        return kind

    def delete(self, kind: GroupKind, namespace: str, name: str) -> None:
        """Drop one object, through its kind's store (``policies.cluster.projections``)."""
        row = READ_KIND_OF.get(kind)
        if row is None:
            return
        key = (namespace, name)
        unset = getattr(self, f"_unset_{row.store}", None)
        if unset is not None:
            unset(key)
        else:
            getattr(self, f"_{row.store}_table").pop(key, None)
        self._known.get(kind, set()).discard(key)

    def delete_object(self, obj: JSONObject) -> None:
        meta = get_map(obj, "metadata", "")
        namespace, name = get_str(meta, "namespace", "metadata"), get_str(meta, "name", "metadata")
        self.delete(group_kind_of(obj), namespace, name)

    def _dra_serves(self, resource: str, node: str, serves: bool) -> None:
        """DraIndex's word that DRA devices for ``resource`` appeared on or left ``node``."""
        (self._provision.add if serves else self._provision.remove)(resource, node, DRA)

    # DRA: DraIndex keeps the tables and indexes; a slice changes its nodes' published hardware

    def _set_device_class(self, info: DeviceClassInfo) -> None:
        self._dra.set_class(info)

    def _unset_device_class(self, key: Key) -> None:
        self._dra.unset_class(key[1])

    def _set_resource_slice(self, info: ResourceSliceInfo) -> None:
        if self._on_unread is not None:
            self._on_unread(info)  # what it keeps unread: said once, not at every event
        self._dra.set_slice(info)
        self._reindex_published_hardware()

    def _unset_resource_slice(self, key: Key) -> None:
        self._dra.unset_slice(key[1])
        self._reindex_published_hardware()

    def _set_resource_claim(self, info: ResourceClaimInfo) -> None:
        self._dra.set_claim(info)

    def _unset_resource_claim(self, key: Key) -> None:
        self._dra.unset_claim(key)

    def _set_claim_template(self, info: ResourceClaimTemplateInfo) -> None:
        self._dra.templates[(info.namespace, info.name)] = info

    def _unset_claim_template(self, key: Key) -> None:
        self._dra.templates.pop(key, None)

    # instancetypes: InstancetypeIndex keeps them, what they give and the VMs naming them

    def _set_instancetype(self, info: InstancetypeInfo) -> None:
        self._instancetypes.keep(info)

    def _unset_instancetype(self, key: Key) -> None:
        self._instancetypes.drop((VM_INSTANCETYPE, *key))

    def _set_cluster_instancetype(self, info: InstancetypeInfo) -> None:
        self._instancetypes.keep(info)

    def _unset_cluster_instancetype(self, key: Key) -> None:
        self._instancetypes.drop((VM_CLUSTER_INSTANCETYPE, *key))

    # nodes

    def _set_node(self, node: NodeInfo) -> None:
        self._unset_node(("", node.name), keep_features=True)
        self._nodes[node.name] = node
        for key in INDEXED_NODE_LABELS:
            value = node.labels.get(key)
            if value is not None:
                _add(self._nodes_by_label, (key, value), node.name)
        if node.labels.get(WORKLOAD_LABEL) not in MODES and is_gpu_node(node):
            self._unlabelled_gpu_nodes.add(node.name)
        healthy = node_health(node).healthy
        if healthy:
            self._healthy_nodes.add(node.name)
        for resource, count in node.allocatable.items():
            if count <= 0:
                continue
            if resource not in self._providers:
                _add(self._advertised_casefold, resource.casefold(), resource)
                for pci in self._db.ids_for_resource_name(resource):
                    _add(self._advertised_by_pci, pci, resource)
            _add(self._providers, resource, node.name)
            self._provision.add(resource, node.name, DEVICE_PLUGIN)
        self._provision.health_changed(node.name)
        self._reindex_hardware(node.name)

    def _unset_node(self, key: Key, keep_features: bool = False) -> None:
        name = key[1]
        node = self._nodes.pop(name, None)
        if node is None:
            return
        for label in INDEXED_NODE_LABELS:
            value = node.labels.get(label)
            if value is not None:
                _discard(self._nodes_by_label, (label, value), name)
        self._unlabelled_gpu_nodes.discard(name)
        self._healthy_nodes.discard(name)
        self._provision.health_changed(name)
        for resource in node.allocatable:
            self._provision.remove(resource, name, DEVICE_PLUGIN)
            _discard(self._providers, resource, name)
            if resource not in self._providers:
                _discard(self._advertised_casefold, resource.casefold(), resource)
                for pci in self._db.ids_for_resource_name(resource):
                    _discard(self._advertised_by_pci, pci, resource)
        if not keep_features:
            self._reindex_hardware(name)

    def _reindex_hardware(self, node_name: str) -> None:
        for pci in self._hardware_of_node.pop(node_name, {}):
            holders = self._nodes_by_pci.get(pci)
            if holders is not None:
                holders.pop(node_name, None)
                if not holders:
                    del self._nodes_by_pci[pci]
        combined: Hardware = {}
        node = self._nodes.get(node_name)
        parts = [node_hardware(node, self._db)] if node is not None else []
        parts.extend(self._features_by_node.get(node_name, {}).values())
        published = self._published_by_node.get(node_name)
        if published is not None:
            parts.append(published)
        for part in parts:
            for pci, sources in part.items():
                combined.setdefault(pci, set()).update(sources)
        if combined:
            self._hardware_of_node[node_name] = combined
            for pci, sources in combined.items():
                self._nodes_by_pci.setdefault(pci, {})[node_name] = frozenset(sources)

    def _reindex_published_hardware(self) -> None:
        """A slice changed its nodes' devices: their hardware too ('' is no one node)."""
        touched, self._dra.touched_nodes = self._dra.touched_nodes, set()
        for node_name in touched - {""}:
            published = published_hardware(self.devices_on(node_name), self._db)
            if published:
                self._published_by_node[node_name] = published
            else:
                self._published_by_node.pop(node_name, None)
            self._reindex_hardware(node_name)

    def _set_node_feature(self, feature: NodeFeatureInfo) -> None:
        key = (feature.namespace, feature.name)
        self._unset_node_feature(key)
        self._node_features[key] = feature
        self._features_by_node.setdefault(feature.node, {})[key] = node_feature_hardware(feature)
        self._reindex_hardware(feature.node)

    def _unset_node_feature(self, key: Key) -> None:
        feature = self._node_features.pop(key, None)
        if feature is None:
            return
        by_key = self._features_by_node.get(feature.node, {})
        by_key.pop(key, None)
        if not by_key:
            self._features_by_node.pop(feature.node, None)
        self._reindex_hardware(feature.node)

    # pods

    def _set_pod(self, pod: PodInfo) -> None:
        key = (pod.namespace, pod.name)
        self._unset_pod(key)
        if not _keep_pod(pod):
            self._unkept_pods.add(key)
            return
        self._unkept_pods.discard(key)
        self._pods[key] = pod
        self._dra.link(POD.kind, key, pod.claims, add=True)
        if pod.node:
            self._pods_by_node.setdefault(pod.node, {})[key] = pod
            if holds_gpu_resources(pod):
                self._gpu_pods_by_node.setdefault(pod.node, {})[key] = pod

    def _unset_pod(self, key: Key) -> None:
        self._unkept_pods.discard(key)
        pod = self._pods.pop(key, None)
        if pod is not None:
            self._dra.link(POD.kind, key, pod.claims, add=False)
        if pod is None or not pod.node:
            return
        for index in (self._pods_by_node, self._gpu_pods_by_node):
            on_node = index.get(pod.node)
            if on_node is not None:
                on_node.pop(key, None)
                if not on_node:
                    del index[pod.node]

    # VMs and VMIs

    def _set_vm(self, vm: VMInfo) -> None:
        key = (vm.namespace, vm.name)
        self._unset_vm(key)
        self._vms[key] = vm
        self._dra.link(VIRTUAL_MACHINE.kind, key, vm.claims, add=True)
        self._instancetypes.link(key, vm, add=True)
        for device in vm.devices:
            if device.device_name:  # a claim entry is no user of a device plugin's resource
                _add(self._vms_by_device, device.device_name, key)
            for gate in device.gates_needed:
                _add(self._vms_by_gate, gate, key)

    def _unset_vm(self, key: Key) -> None:
        vm = self._vms.pop(key, None)
        if vm is not None:
            self._dra.link(VIRTUAL_MACHINE.kind, key, vm.claims, add=False)
            self._instancetypes.link(key, vm, add=False)
            for device in vm.devices:
                _discard(self._vms_by_device, device.device_name, key)
                for gate in device.gates_needed:
                    _discard(self._vms_by_gate, gate, key)

    def _set_vmi(self, vmi: VMIInfo) -> None:
        key = (vmi.namespace, vmi.name)
        self._unset_vmi(key)
        self._vmis[key] = vmi
        self._dra.link(VIRTUAL_MACHINE_INSTANCE.kind, key, vmi.claims, add=True)
        if vmi.node:
            self._vmis_by_node.setdefault(vmi.node, {})[key] = vmi
        for device in vmi.devices:
            if device.device_name:
                _add(self._vmis_by_device, device.device_name, key)
            for gate in device.gates_needed:
                _add(self._vmis_by_gate, gate, key)

    def _unset_vmi(self, key: Key) -> None:
        vmi = self._vmis.pop(key, None)
        if vmi is not None:
            self._dra.link(VIRTUAL_MACHINE_INSTANCE.kind, key, vmi.claims, add=False)
            for device in vmi.devices:
                _discard(self._vmis_by_device, device.device_name, key)
                for gate in device.gates_needed:
                    _discard(self._vmis_by_gate, gate, key)
        if vmi is not None and vmi.node:
            on_node = self._vmis_by_node.get(vmi.node, {})
            on_node.pop(key, None)
            if not on_node:
                self._vmis_by_node.pop(vmi.node, None)

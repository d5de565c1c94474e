"""The read-only cluster snapshot policies see; ``webhook.state.cluster.ClusterState`` implements
it.

Every method is an index hit: policies run on the API server's critical path and must not scan
the cluster per request. Sequences are returned sorted by name so messages are stable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from policies.objects import (
    ClusterPolicyInfo,
    KubeVirtInfo,
    NodeInfo,
    PodInfo,
    VMIInfo,
    VMInfo,
)
from policies.pciids import PciDatabase, PciId
from policies.workload import WORKLOAD_LABEL

HOSTNAME_LABEL = "kubernetes.io/hostname"
#: The node labels ``ClusterView.nodes_labelled`` answers for: a pod pinned by hostname, and
#: nodes by their GPU Operator workload mode. Other keys are not indexed.
INDEXED_NODE_LABELS = frozenset({HOSTNAME_LABEL, WORKLOAD_LABEL})


class ClusterView(Protocol):
    @property
    def pci_database(self) -> PciDatabase: ...

    def node(self, name: str) -> NodeInfo | None: ...

    def nodes(self) -> Sequence[NodeInfo]: ...

    def gpu_pods_on(self, node: str) -> Sequence[PodInfo]:
        """Unfinished pods bound to ``node`` that hold NVIDIA container GPU resources."""
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

    def vms_using(self, device_name: str) -> Sequence[VMInfo]: ...

    def vmis_using(self, device_name: str) -> Sequence[VMIInfo]:
        """VMIs (any phase: callers keep the live ones) with ``device_name`` in gpus/hostDevices."""
        ...

    def vms_with_host_devices(self) -> Sequence[VMInfo]:
        """VMs with at least one hostDevices[] entry (they need the HostDevices feature gate)."""
        ...

    def vmis_with_host_devices(self) -> Sequence[VMIInfo]:
        """VMIs (any phase) with at least one hostDevices[] entry."""
        ...

    def providers_of(self, resource: str) -> Sequence[str]:
        """Nodes whose allocatable has ``resource`` > 0, healthy or not."""
        ...

    def has_provider(self, resource: str) -> bool:
        """Whether any node advertises ``resource``: providers_of without sorting the names."""
        ...

    def healthy_provider_count(self, resource: str) -> int: ...

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

    def cluster_policy(self) -> ClusterPolicyInfo | None: ...

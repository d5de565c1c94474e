"""The read-only cluster snapshot policies see. ``webhook.state.ClusterState`` implements it.

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

    def vms(self) -> Sequence[VMInfo]: ...

    def vmis(self) -> Sequence[VMIInfo]: ...

    def vms_using(self, device_name: str) -> Sequence[VMInfo]: ...

    def providers_of(self, resource: str) -> Sequence[str]:
        """Nodes whose allocatable has ``resource`` > 0, healthy or not."""
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

"""How the policies read each watched kind: one row per kind.

A row names the kind (where it lives in the API is its row of ``kinds.WATCHED``), the projection
that is the one way its objects are read, the wire schema naming the fields that projection and
the policies read (``policies.cluster.schemas``: list pages, watch events, state files and
reviews are decoded with only those), and the state's store that keeps it. The state
(``policies/state``), the live watches, the wire decoding and the tests take what they need from
here; none of them lists the kinds again.

Apart from objects.py and dra.py so that both can be table entries without an import circle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from policies.cluster import schemas
from policies.cluster.admin_access import project_namespace
from policies.cluster.device_taints import project_device_taint_rule
from policies.cluster.dra import project_device_class, project_resource_slice
from policies.cluster.dra_claims import project_resource_claim, project_resource_claim_template
from policies.cluster.gpu_operator import project_cluster_policy, project_gpu_cluster
from policies.cluster.hyperconverged import project_hyperconverged
from policies.cluster.kinds import (
    CLUSTER_POLICY,
    DEVICE_CLASS,
    DEVICE_TAINT_RULE,
    GPU_CLUSTER,
    HYPERCONVERGED,
    KUBEVIRT,
    NAMESPACE,
    NODE,
    NODE_FEATURE,
    NVIDIA_DRIVER,
    POD,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    RESOURCE_SLICE,
    VIRTUAL_MACHINE,
    VIRTUAL_MACHINE_INSTANCE,
    VM_CLUSTER_INSTANCETYPE,
    VM_INSTANCETYPE,
    VM_POOL,
    VM_REPLICA_SET,
    WATCHED_KINDS,
)
from policies.cluster.kubevirt import project_kubevirt, project_vm, project_vmi
from policies.cluster.nfd import project_node_feature
from policies.cluster.nodes import project_node
from policies.cluster.nvidia_driver import project_nvidia_driver
from policies.cluster.pods import project_pod
from policies.cluster.vm_templates import (
    project_vm_cluster_instancetype,
    project_vm_instancetype,
    project_vm_pool,
    project_vm_replica_set,
)
from policies.vocabulary.requests import AdmissionRequest, GroupKind, JSONObject


@dataclass(frozen=True, slots=True)
class ReadKind:
    """One watched kind as the policies read it."""

    kind: GroupKind
    project: Callable[[JSONObject], Any]
    schema: type[Any] | None
    """The fields read off the wire; None: the object is decoded whole."""
    store: str
    """The state's store for it: ``ClusterState`` keeps it with its hooks ``_set_<store>`` and
    ``_unset_<store>`` when it has them (a kind with indexes), else in its plain table
    ``_<store>_table`` by (namespace, name)."""


#: Every watched kind, in the order of ``kinds.WATCHED``.
READ_KINDS: tuple[ReadKind, ...] = (
    ReadKind(NODE, project_node, schemas.Node, "node"),
    ReadKind(POD, project_pod, schemas.Pod, "pod"),
    ReadKind(VIRTUAL_MACHINE, project_vm, schemas.VirtualMachine, "vm"),
    ReadKind(VIRTUAL_MACHINE_INSTANCE, project_vmi, schemas.VirtualMachineInstance, "vmi"),
    ReadKind(KUBEVIRT, project_kubevirt, schemas.KubeVirt, "kubevirt"),
    ReadKind(CLUSTER_POLICY, project_cluster_policy, schemas.ClusterPolicy, "cluster_policy"),
    ReadKind(GPU_CLUSTER, project_gpu_cluster, schemas.GPUCluster, "gpu_cluster"),
    ReadKind(NVIDIA_DRIVER, project_nvidia_driver, schemas.NVIDIADriver, "nvidia_driver"),
    ReadKind(NODE_FEATURE, project_node_feature, schemas.NodeFeature, "node_feature"),
    ReadKind(DEVICE_CLASS, project_device_class, None, "device_class"),
    ReadKind(RESOURCE_SLICE, project_resource_slice, None, "resource_slice"),
    ReadKind(RESOURCE_CLAIM, project_resource_claim, None, "resource_claim"),
    ReadKind(RESOURCE_CLAIM_TEMPLATE, project_resource_claim_template, None, "claim_template"),
    ReadKind(DEVICE_TAINT_RULE, project_device_taint_rule, None, "device_taint_rule"),
    ReadKind(NAMESPACE, project_namespace, None, "namespace"),
    ReadKind(HYPERCONVERGED, project_hyperconverged, schemas.HyperConverged, "hyperconverged"),
    ReadKind(
        VM_REPLICA_SET,
        project_vm_replica_set,
        schemas.VirtualMachineInstanceReplicaSet,
        "vm_replica_set",
    ),
    ReadKind(VM_POOL, project_vm_pool, schemas.VirtualMachinePool, "vm_pool"),
    ReadKind(VM_INSTANCETYPE, project_vm_instancetype, schemas.Instancetype, "instancetype"),
    ReadKind(
        VM_CLUSTER_INSTANCETYPE,
        project_vm_cluster_instancetype,
        schemas.Instancetype,
        "cluster_instancetype",
    ),
)
assert tuple(row.kind for row in READ_KINDS) == WATCHED_KINDS, "one row per watched kind"
READ_KIND_OF: Mapping[GroupKind, ReadKind] = MappingProxyType({r.kind: r for r in READ_KINDS})
PROJECTIONS: Mapping[GroupKind, Callable[[JSONObject], Any]] = MappingProxyType(
    {row.kind: row.project for row in READ_KINDS}
)
#: The schema of each kind that has one.
SCHEMAS: Mapping[GroupKind, type[Any]] = MappingProxyType(
    {row.kind: row.schema for row in READ_KINDS if row.schema is not None}
)


def request_projection(request: AdmissionRequest, old: bool = False) -> Any:
    """The request's object (or oldObject) through its kind's projection, read once for every
    policy that asks: a KubeVirt CR update is read by several policies."""

    def project() -> Any:
        obj = request.old if old else request.obj
        if obj is None:
            return None
        return PROJECTIONS[request.group_kind](obj)

    return request.once(("projection", old), project)

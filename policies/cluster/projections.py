"""The projection of each watched kind: the one way an object of that kind is read.

Apart from objects.py and dra.py so that both can be table entries without an import circle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

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
    POD,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    RESOURCE_SLICE,
    VIRTUAL_MACHINE,
    VIRTUAL_MACHINE_INSTANCE,
)
from policies.cluster.kubevirt import project_kubevirt, project_vm, project_vmi
from policies.cluster.nfd import project_node_feature
from policies.cluster.nodes import project_node
from policies.cluster.pods import project_pod
from policies.vocabulary.requests import AdmissionRequest, GroupKind, JSONObject

PROJECTIONS: Mapping[GroupKind, Callable[[JSONObject], Any]] = MappingProxyType(
    {
        NODE: project_node,
        POD: project_pod,
        VIRTUAL_MACHINE: project_vm,
        VIRTUAL_MACHINE_INSTANCE: project_vmi,
        KUBEVIRT: project_kubevirt,
        CLUSTER_POLICY: project_cluster_policy,
        GPU_CLUSTER: project_gpu_cluster,
        NODE_FEATURE: project_node_feature,
        DEVICE_CLASS: project_device_class,
        RESOURCE_SLICE: project_resource_slice,
        RESOURCE_CLAIM: project_resource_claim,
        RESOURCE_CLAIM_TEMPLATE: project_resource_claim_template,
        DEVICE_TAINT_RULE: project_device_taint_rule,
        NAMESPACE: project_namespace,
        HYPERCONVERGED: project_hyperconverged,
    }
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

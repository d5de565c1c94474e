"""Every kind gpu-guard talks to the API server about, and where it lives there: one table.

A kind's group, version, REST plural and scope are written here once; the live watches, the
snapshot, the review envelopes ``make demo`` and the tests send, the object references findings
carry, the report and certificate writers and the RBAC tests all read them from this table.
The API double (tests/kubeapi_wire.py) serves ``WATCHED`` and ``make generate`` writes its RBAC.
Adding a kind the policies read is its GroupKind constant and one row of ``WATCHED``, then its row
of ``READ_KINDS`` in projections.py (how it is read: projection, wire schema, the state's store;
CONTRIBUTING.md "Adding a kind"). A kind the policies only judge when it is sent for review, and
never read from the cluster, is a row of ``REVIEWED``: nothing lists or watches it, so it needs no
RBAC.

Pure: names and paths only, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from policies.vocabulary.fields import get_str
from policies.vocabulary.requests import AdmissionRequest, GroupKind, JSONObject, ObjectRef

CORE_GROUP = ""
KUBEVIRT_GROUP = "kubevirt.io"
NVIDIA_GROUP = "nvidia.com"
NFD_GROUP = "nfd.k8s-sigs.io"
RESOURCE_GROUP = "resource.k8s.io"
POLICY_GROUP = "policy"
APPS_GROUP = "apps"
BATCH_GROUP = "batch"
POLICY_REPORT_GROUP = "wgpolicyk8s.io"
OPENREPORTS_GROUP = "openreports.io"
ADMISSION_REGISTRATION_GROUP = "admissionregistration.k8s.io"
COORDINATION_GROUP = "coordination.k8s.io"
HCO_GROUP = "hco.kubevirt.io"
INSTANCETYPE_GROUP = "instancetype.kubevirt.io"
POOL_GROUP = "pool.kubevirt.io"

# --- the kinds the policies read ------------------------------------------------------------------
NODE = GroupKind(CORE_GROUP, "Node")
POD = GroupKind(CORE_GROUP, "Pod")
# Read for their labels only (DRA admin access); projected in policies.cluster.admin_access.
NAMESPACE = GroupKind(CORE_GROUP, "Namespace")
VIRTUAL_MACHINE = GroupKind(KUBEVIRT_GROUP, "VirtualMachine")
VIRTUAL_MACHINE_INSTANCE = GroupKind(KUBEVIRT_GROUP, "VirtualMachineInstance")
KUBEVIRT = GroupKind(KUBEVIRT_GROUP, "KubeVirt")
CLUSTER_POLICY = GroupKind(NVIDIA_GROUP, "ClusterPolicy")
# GPU Operator 26.7: the DRA driver's operator CR; projected in policies.cluster.gpu_operator.
GPU_CLUSTER = GroupKind(NVIDIA_GROUP, "GPUCluster")
# The GPU Operator's per-node-set driver CR; projected in policies.cluster.nvidia_driver.
NVIDIA_DRIVER = GroupKind(NVIDIA_GROUP, "NVIDIADriver")
NODE_FEATURE = GroupKind(NFD_GROUP, "NodeFeature")
# Dynamic Resource Allocation (resource.k8s.io/v1, GA since 1.34); projected in
# policies.cluster.dra.
DEVICE_CLASS = GroupKind(RESOURCE_GROUP, "DeviceClass")
RESOURCE_SLICE = GroupKind(RESOURCE_GROUP, "ResourceSlice")
RESOURCE_CLAIM = GroupKind(RESOURCE_GROUP, "ResourceClaim")
RESOURCE_CLAIM_TEMPLATE = GroupKind(RESOURCE_GROUP, "ResourceClaimTemplate")
# KEP-5055's cluster-wide device taints; projected in policies.cluster.device_taints.
DEVICE_TAINT_RULE = GroupKind(RESOURCE_GROUP, "DeviceTaintRule")
# OpenShift Virtualization's HyperConverged CR (HCO), which HCO translates onto the KubeVirt CR;
# projected in policies.cluster.hyperconverged.
HYPERCONVERGED = GroupKind(HCO_GROUP, "HyperConverged")
# KubeVirt's VM templates: a replica set of VMIs, a pool of VMs, and the instancetypes a VM (or a
# pool's VM template) refers to for its devices; projected in policies.cluster.vm_templates.
VM_REPLICA_SET = GroupKind(KUBEVIRT_GROUP, "VirtualMachineInstanceReplicaSet")
VM_POOL = GroupKind(POOL_GROUP, "VirtualMachinePool")
VM_INSTANCETYPE = GroupKind(INSTANCETYPE_GROUP, "VirtualMachineInstancetype")
VM_CLUSTER_INSTANCETYPE = GroupKind(INSTANCETYPE_GROUP, "VirtualMachineClusterInstancetype")

# --- the kinds the policies judge when sent, and never read from the cluster ----------------------
# Workload controllers: their pod template is judged as the pods it makes
# (policies.cluster.pod_templates).
DEPLOYMENT = GroupKind(APPS_GROUP, "Deployment")
STATEFUL_SET = GroupKind(APPS_GROUP, "StatefulSet")
DAEMON_SET = GroupKind(APPS_GROUP, "DaemonSet")
REPLICA_SET = GroupKind(APPS_GROUP, "ReplicaSet")
JOB = GroupKind(BATCH_GROUP, "Job")
CRON_JOB = GroupKind(BATCH_GROUP, "CronJob")

# --- the kinds gpu-guard writes (audit reports, --manage-certs, --leader-elect) -------------------
POLICY_REPORT = GroupKind(POLICY_REPORT_GROUP, "PolicyReport")
CLUSTER_POLICY_REPORT = GroupKind(POLICY_REPORT_GROUP, "ClusterPolicyReport")
# OpenReports, the successor of the wgpolicyk8s.io reports (Kyverno moves to it): the same
# result schema under openreports.io/v1alpha1 (tests/fixtures/crds/openreports).
REPORT = GroupKind(OPENREPORTS_GROUP, "Report")
CLUSTER_REPORT = GroupKind(OPENREPORTS_GROUP, "ClusterReport")
SECRET = GroupKind(CORE_GROUP, "Secret")
VALIDATING_WEBHOOK_CONFIGURATION = GroupKind(
    ADMISSION_REGISTRATION_GROUP, "ValidatingWebhookConfiguration"
)
MUTATING_WEBHOOK_CONFIGURATION = GroupKind(
    ADMISSION_REGISTRATION_GROUP, "MutatingWebhookConfiguration"
)
LEASE = GroupKind(COORDINATION_GROUP, "Lease")
#: The record the API server's own policy reads (policies/cluster/record.py).
CONFIG_MAP = GroupKind(CORE_GROUP, "ConfigMap")

#: Reviewed by the API server as a subresource of another kind's resource (pods/eviction).
EVICTION = GroupKind(POLICY_GROUP, "Eviction")
#: What a ``<plural>/scale`` write sends for review, whatever kind it scales.
SCALE = GroupKind("autoscaling", "Scale")

NAMESPACED = True
CLUSTER_SCOPED = False

#: The served versions of the HyperConverged, in the order HCO lists them (v1 is the storage one).
HCO_VERSIONS = ("v1", "v1beta1")
#: The well-known label a writer names itself with: on gpu-guard's reports, on HCO's KubeVirt CR.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"


def api_version_of(group: str, version: str) -> str:
    """``apps/v1``; the core group has none: ``v1``."""
    return f"{group}/{version}" if group else version


def split_api_version(api_version: str) -> tuple[str, str]:
    """``"kubevirt.io/v1"`` -> ``("kubevirt.io", "v1")``; ``"v1"`` -> ``("", "v1")``."""
    group, _, version = api_version.rpartition("/")
    return group, version


def group_kind_of(obj: JSONObject) -> GroupKind:
    group, _ = split_api_version(get_str(obj, "apiVersion", ""))
    return GroupKind(group, get_str(obj, "kind", ""))


@dataclass(frozen=True, slots=True)
class ApiResource:
    """Where one kind lives in the API: its version, REST plural and scope."""

    kind: GroupKind
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return api_version_of(self.kind.group, self.version)

    @property
    def path(self) -> str:
        """The collection across all namespaces: what a list or watch of every object reads."""
        return self.collection_path("")

    @property
    def discovery_path(self) -> str:
        """Its group version's discovery document: which resources the API server serves."""
        return f"/apis/{self.api_version}" if self.kind.group else f"/api/{self.version}"

    def collection_path(self, namespace: str) -> str:
        """The collection in ``namespace`` (across all of them when empty or cluster-scoped)."""
        prefix = f"/apis/{self.kind.group}" if self.kind.group else "/api"
        scope = f"/namespaces/{namespace}" if self.namespaced and namespace else ""
        return f"{prefix}/{self.version}{scope}/{self.plural}"

    def object_path(self, namespace: str, name: str) -> str:
        return f"{self.collection_path(namespace)}/{name}"

    def ref(self, namespace: str, name: str) -> ObjectRef:
        return ObjectRef(self.api_version, self.kind.kind, namespace, name)


#: Every kind the policies read, in watch order: what a live watch lists and watches, what a
#: snapshot holds and a state file may contain.
WATCHED: tuple[ApiResource, ...] = (
    ApiResource(NODE, "v1", "nodes", CLUSTER_SCOPED),
    ApiResource(POD, "v1", "pods", NAMESPACED),
    ApiResource(VIRTUAL_MACHINE, "v1", "virtualmachines", NAMESPACED),
    ApiResource(VIRTUAL_MACHINE_INSTANCE, "v1", "virtualmachineinstances", NAMESPACED),
    ApiResource(KUBEVIRT, "v1", "kubevirts", NAMESPACED),
    ApiResource(CLUSTER_POLICY, "v1", "clusterpolicies", CLUSTER_SCOPED),
    # A cluster without the CRD (every GPU Operator before 26.7) answers 404: counted as empty.
    ApiResource(GPU_CLUSTER, "v1alpha1", "gpuclusters", CLUSTER_SCOPED),
    # A cluster without the CRD (an operator installed without it) answers 404: counted as empty.
    ApiResource(NVIDIA_DRIVER, "v1alpha1", "nvidiadrivers", CLUSTER_SCOPED),
    ApiResource(NODE_FEATURE, "v1alpha1", "nodefeatures", NAMESPACED),
    # A cluster without resource.k8s.io/v1 answers 404: counted as empty, like a missing CRD.
    ApiResource(DEVICE_CLASS, "v1", "deviceclasses", CLUSTER_SCOPED),
    ApiResource(RESOURCE_SLICE, "v1", "resourceslices", CLUSTER_SCOPED),
    ApiResource(RESOURCE_CLAIM, "v1", "resourceclaims", NAMESPACED),
    ApiResource(RESOURCE_CLAIM_TEMPLATE, "v1", "resourceclaimtemplates", NAMESPACED),
    # Served as v1beta2 by 1.36 only with --runtime-config=resource.k8s.io/v1beta2=true (v1 is
    # expected in 1.37); a cluster that does not serve it answers 404: counted as empty.
    ApiResource(DEVICE_TAINT_RULE, "v1beta2", "devicetaintrules", CLUSTER_SCOPED),
    ApiResource(NAMESPACE, "v1", "namespaces", CLUSTER_SCOPED),
    # v1 is HCO's storage and preferred version; v1beta1 objects are served as v1 by HCO's
    # conversion webhook. A cluster without HCO answers 404: counted as empty.
    ApiResource(HYPERCONVERGED, "v1", "hyperconvergeds", NAMESPACED),
    # KubeVirt's (pkg/virt-operator/resource/generate/components/crds.go); a cluster without
    # KubeVirt answers 404: counted as empty. Pools: v1beta1 since KubeVirt 1.8 (the storage
    # version), v1alpha1 before and still served (SERVED_VERSIONS); instancetypes: v1beta1 only.
    ApiResource(VM_REPLICA_SET, "v1", "virtualmachineinstancereplicasets", NAMESPACED),
    ApiResource(VM_POOL, "v1beta1", "virtualmachinepools", NAMESPACED),
    ApiResource(VM_INSTANCETYPE, "v1beta1", "virtualmachineinstancetypes", NAMESPACED),
    ApiResource(
        VM_CLUSTER_INSTANCETYPE, "v1beta1", "virtualmachineclusterinstancetypes", CLUSTER_SCOPED
    ),
)

#: Every kind the policies judge only as it is sent for review: never listed, watched or held in
#: a state, so the live state and RBAC know nothing of them.
REVIEWED: tuple[ApiResource, ...] = (
    ApiResource(DEPLOYMENT, "v1", "deployments", NAMESPACED),
    ApiResource(STATEFUL_SET, "v1", "statefulsets", NAMESPACED),
    ApiResource(DAEMON_SET, "v1", "daemonsets", NAMESPACED),
    ApiResource(REPLICA_SET, "v1", "replicasets", NAMESPACED),
    ApiResource(JOB, "v1", "jobs", NAMESPACED),
    ApiResource(CRON_JOB, "v1", "cronjobs", NAMESPACED),
)

#: Every kind gpu-guard writes and never watches.
WRITTEN: tuple[ApiResource, ...] = (
    ApiResource(POLICY_REPORT, "v1alpha2", "policyreports", NAMESPACED),
    ApiResource(CLUSTER_POLICY_REPORT, "v1alpha2", "clusterpolicyreports", CLUSTER_SCOPED),
    ApiResource(REPORT, "v1alpha1", "reports", NAMESPACED),
    ApiResource(CLUSTER_REPORT, "v1alpha1", "clusterreports", CLUSTER_SCOPED),
    ApiResource(SECRET, "v1", "secrets", NAMESPACED),
    ApiResource(
        VALIDATING_WEBHOOK_CONFIGURATION, "v1", "validatingwebhookconfigurations", CLUSTER_SCOPED
    ),
    ApiResource(
        MUTATING_WEBHOOK_CONFIGURATION, "v1", "mutatingwebhookconfigurations", CLUSTER_SCOPED
    ),
    ApiResource(LEASE, "v1", "leases", NAMESPACED),
    ApiResource(CONFIG_MAP, "v1", "configmaps", NAMESPACED),
)

#: Kinds served under more than one version across the releases gpu-guard meets, newest first:
#: a live read asks discovery which one the cluster serves (``WATCHED`` holds the fallback).
SERVED_VERSIONS: Mapping[GroupKind, tuple[str, ...]] = MappingProxyType(
    {DEVICE_TAINT_RULE: ("v1", "v1beta2"), VM_POOL: ("v1beta1", "v1alpha1")}
)

RESOURCE_OF: Mapping[GroupKind, ApiResource] = MappingProxyType(
    {r.kind: r for r in (*WATCHED, *REVIEWED, *WRITTEN)}
)
WATCHED_KINDS: tuple[GroupKind, ...] = tuple(r.kind for r in WATCHED)
REVIEWED_KINDS: tuple[GroupKind, ...] = tuple(r.kind for r in REVIEWED)
#: The kinds a policy's scope may name: what the cluster sends for review.
JUDGED_KINDS: tuple[GroupKind, ...] = (*WATCHED_KINDS, *REVIEWED_KINDS)
NAMESPACED_KINDS = frozenset(r.kind for r in (*WATCHED, *REVIEWED) if r.namespaced)

#: Kinds the API server sends for review under another kind's resource: (that kind, subresource).
REVIEWED_AS_SUBRESOURCE: Mapping[GroupKind, tuple[GroupKind, str]] = MappingProxyType(
    {EVICTION: (POD, "eviction")}
)

#: Subresources whose writes change what the kind's policies read, judged like the kind itself.
#: ``nodes/status``: the API server's node status strategy (pkg/registry/core/node/strategy.go,
#: ``nodeStatusStrategy.PrepareForUpdate``) resets the spec to the stored one but keeps
#: ``metadata``, so a status write can set, change or remove a GPU-mode label. The status of a
#: custom resource keeps nothing but ``status`` (apiextensions-apiserver's status strategy).
#: ``pods/status``: the only way a pod's phase changes (``UPDATED_THROUGH``); marking a GPU user
#: Succeeded or Failed stops the guard counting it (gpu-user-marked-finished judges who may).
#: ``virtualmachines/status``: ``virtctl start`` of a Manual VM has virt-api add a Start entry to
#: ``status.stateChangeRequests`` (``VMInfo.start_requested``): the VM is asked to run, and the
#: policies that judge a VM asked to run judge it (the webhook sends only such writes).
#: ``<plural>/scale`` of a VM template kind: the replica count ``kubectl scale`` and autoscalers
#: raise (an autoscaling/v1 Scale, judged as its parent asked to run: ``scaled_kind``).
JUDGED_SUBRESOURCES: frozenset[tuple[GroupKind, str]] = frozenset(
    {
        (NODE, "status"),
        (POD, "status"),
        (VIRTUAL_MACHINE, "status"),
        (VM_POOL, "scale"),
        (VM_REPLICA_SET, "scale"),
    }
)

#: Kinds whose UPDATE the policies judge only through a subresource, because a write of the kind
#: itself cannot change what they read: the pod strategy keeps the stored status on a pod's update
#: (pkg/registry/core/pod/strategy.go, ``PrepareForUpdate``), so its phase moves only through
#: ``pods/status``. (A VMI has no status subresource: its phase moves with the VMI.)
UPDATED_THROUGH: Mapping[GroupKind, str] = MappingProxyType({POD: "status"})


def scaled_kind(request: AdmissionRequest) -> GroupKind | None:
    """The kind whose ``scale`` subresource a Scale review is for, told by ``request.resource``
    (the object is an autoscaling/v1 Scale whatever it scales); None for any other request."""
    if request.group_kind != SCALE or request.sub_resource != "scale":
        return None
    sent = (request.resource.group, request.resource.resource)
    return next((r.kind for r in WATCHED if (r.kind.group, r.plural) == sent), None)


def judged_as(request: AdmissionRequest) -> GroupKind:
    """The kind whose policies judge ``request``: a Scale's parent, else the request's kind."""
    return scaled_kind(request) or request.group_kind


def object_ref(kind: GroupKind, namespace: str, name: str) -> ObjectRef:
    """How a finding names an object of a known kind: its served apiVersion, kind and name."""
    return RESOURCE_OF[kind].ref(namespace, name)


def is_namespaced(kind: GroupKind) -> bool | None:
    """The kind's scope from this table; None for a kind it does not hold, whose scope only the
    API server's discovery knows (kubectl asks it; a file cannot)."""
    resource = RESOURCE_OF.get(kind)
    return resource.namespaced if resource is not None else None


#: Kinds a change file almost always changes rather than creates: the cluster makes them (a
#: kubelet registers its Node, NFD writes NodeFeatures, a DRA driver publishes ResourceSlices)
#: or an operator's install does (the one KubeVirt CR, the ClusterPolicy). One of these missing
#: from the state is most likely a patch about to be judged against nothing.
CHANGED_RATHER_THAN_CREATED = frozenset(
    {NODE, NODE_FEATURE, RESOURCE_SLICE, KUBEVIRT, CLUSTER_POLICY, GPU_CLUSTER}
)

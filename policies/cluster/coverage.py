"""Which kinds of cluster state each ``ClusterView`` question reads, and a view that records them.

A policy whose answer needs a kind the state never saw (a state file of Nodes alone, a live
server before its Pod watch synced) must say "not judged", never answer as if none existed.
Which kinds an answer rested on is learnt by asking: ``Recording`` wraps a view and notes the
kinds of every question asked of it, so a policy that stopped before a question (the label it
judges did not change) is not held to that question's kinds. ``READS_OF`` is the one table of
what each question reads; a test holds every method of ``ClusterView`` to a row, and every
policy and diagnosis to declaring (``Policy.reads``, ``Diagnosis.reads``) what it was seen to
ask.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, cast

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
    WATCHED,
)
from policies.cluster.view import ClusterView
from policies.vocabulary.requests import GroupKind

_DRA_DEVICES = frozenset({DEVICE_CLASS, RESOURCE_SLICE})
#: A resource a node provides comes from its allocatable or from DRA devices of a class.
PROVIDER_READS = frozenset({NODE, *_DRA_DEVICES})
#: Hardware seen on a node: its labels, NFD's NodeFeatures, the devices DRA publishes.
_HARDWARE = frozenset({NODE, NODE_FEATURE, RESOURCE_SLICE})


def _name(method: Any) -> str:
    function: Any = method.fget if isinstance(method, property) else method
    return str(function.__name__)


def _rows(
    rows: Mapping[frozenset[GroupKind], tuple[Any, ...]],
) -> Mapping[str, frozenset[GroupKind]]:
    """Rows name the methods themselves (a misspelt one fails at import), keyed by name."""
    return MappingProxyType(
        {_name(method): kinds for kinds, methods in rows.items() for method in methods}
    )


V = ClusterView


#: ``ClusterView`` method -> the kinds its answer is computed from.
READS_OF: Mapping[str, frozenset[GroupKind]] = _rows(
    {
        # data and configuration, no cluster state
        frozenset(): (V.pci_database, V.gpu_operator_version, V.device_taint_rules_act),
        frozenset({NODE}): (V.node, V.nodes, V.nodes_labelled, V.gpu_nodes_without_workload_label),
        frozenset({POD}): (V.gpu_pods_on, V.pods_on, V.pod),
        frozenset({VIRTUAL_MACHINE}): (V.vms,),
        frozenset({VIRTUAL_MACHINE, VM_INSTANCETYPE, VM_CLUSTER_INSTANCETYPE}): (
            V.vms_using,
            V.vms_needing_gate,
        ),
        frozenset({VIRTUAL_MACHINE_INSTANCE}): (
            V.vmis,
            V.vmis_on,
            V.vmis_using,
            V.vmis_needing_gate,
        ),
        PROVIDER_READS: (
            V.providers_of,
            V.has_provider,
            V.healthy_provider_count,
            V.resources_provided_on,
            V.advertised_like,
            V.extended_resource_providers,
            V.healthy_extended_resource_provider_count,
        ),
        frozenset({NODE, *_HARDWARE}): (
            V.advertised_for_pci,
            V.nodes_with_hardware,
            V.known_hardware,
        ),
        frozenset({VM_INSTANCETYPE}): (V.instancetype,),
        frozenset({VM_CLUSTER_INSTANCETYPE}): (V.cluster_instancetype,),
        frozenset({VM_POOL}): (V.vm_pool,),
        frozenset({VM_REPLICA_SET}): (V.vm_replica_set,),
        frozenset({KUBEVIRT}): (V.kubevirt, V.kubevirts, V.kubevirts_in),
        frozenset({CLUSTER_POLICY}): (
            V.cluster_policy,
            V.cluster_policies,
            V.cluster_policies_in_force,
        ),
        frozenset({GPU_CLUSTER}): (V.gpu_clusters,),
        frozenset({NVIDIA_DRIVER}): (V.nvidia_drivers,),
        frozenset({HYPERCONVERGED}): (V.hyperconverged, V.hyperconvergeds),
        frozenset({DEVICE_CLASS}): (V.device_class, V.device_classes),
        frozenset({RESOURCE_SLICE}): (
            V.resource_slices,
            V.published_devices,
            V.published_device,
            V.devices_on,
            V.dra_drivers_on,
            V.nodes_with_devices,
            V.devices_selected,
            V.nodes_selected,
            V.pool_counter_sets,
        ),
        _DRA_DEVICES: (
            V.class_device_counts,
            V.class_request_counts,
            V.class_attribute_values,
            V.class_devices_on,
            V.class_undecided,
        ),
        frozenset({RESOURCE_SLICE, DEVICE_TAINT_RULE}): (V.device_taints, V.may_keep_off),
        frozenset({DEVICE_TAINT_RULE}): (V.device_taint_rules,),
        frozenset({NAMESPACE}): (V.namespace, V.admin_access_namespaces),
        frozenset({RESOURCE_CLAIM}): (V.claim, V.claims),
        frozenset({RESOURCE_CLAIM, RESOURCE_SLICE, POD}): (V.claims_allocated_on,),
        frozenset({RESOURCE_CLAIM_TEMPLATE}): (V.claim_template, V.claim_templates),
        frozenset({POD, VIRTUAL_MACHINE, VIRTUAL_MACHINE_INSTANCE}): (V.claim_referrers,),
    }
)

#: How an export names a kind: ``kubectl get pods -A -o yaml`` (the REST plural, with its group).
EXPORT_NAME: Mapping[GroupKind, str] = MappingProxyType(
    {r.kind: f"{r.plural}.{r.kind.group}" if r.kind.group else r.plural for r in WATCHED}
)


class Recording:
    """A ``ClusterView`` that answers as ``view`` does and notes the kinds of every question.

    A question with no row in ``READS_OF`` raises: an unknown question is a kind nobody
    declared, and coverage resting on a guess would be the silent allow it exists to stop."""

    __slots__ = ("_view", "kinds")

    def __init__(self, view: ClusterView) -> None:
        self._view = view
        self.kinds: set[GroupKind] = set()

    def __getattr__(self, name: str) -> Any:
        kinds = READS_OF.get(name)
        if kinds is None:
            raise AttributeError(f"ClusterView.{name} has no row in READS_OF")
        self.kinds.update(kinds)
        return getattr(self._view, name)

    @property
    def view(self) -> ClusterView:
        """This recorder, typed as the view it stands for."""
        return cast(ClusterView, self)


def kind_names(kinds: Mapping[GroupKind, object] | frozenset[GroupKind] | list[GroupKind]) -> str:
    """ "Pods and VirtualMachineInstances": how a message names kinds, in watch order."""
    order = {r.kind: i for i, r in enumerate(WATCHED)}
    ordered = sorted(kinds, key=lambda k: (order.get(k, 99), str(k)))
    named = [f"{k.kind[:-1]}ies" if k.kind.endswith("y") else f"{k.kind}s" for k in ordered]
    return named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"


#: Kinds whose absence from a state means none, for every policy and diagnosis that reads them:
#: a cluster without DRA has no DeviceClasses, slices or claims; GPU Operators before 26.7 no
#: GPUCluster CRD; NFD, OpenShift's HyperConverged and the GPU Operator itself may not be
#: installed (no ClusterPolicy: no operator acts on the labels). Nodes, Pods, VMs, VMIs and the
#: KubeVirt CR are required: a dump without them is one that forgot them.
MAY_BE_ABSENT = frozenset(
    {
        DEVICE_CLASS,
        RESOURCE_SLICE,
        RESOURCE_CLAIM,
        RESOURCE_CLAIM_TEMPLATE,
        GPU_CLUSTER,
        NVIDIA_DRIVER,  # a GPU Operator run by its ClusterPolicy alone has none
        NODE_FEATURE,
        HYPERCONVERGED,
        CLUSTER_POLICY,
        DEVICE_TAINT_RULE,  # served only with the DRADeviceTaintRules gate
        NAMESPACE,  # read for labels only; exports seldom hold them: none labelled
        # A VM's instancetype missing from a seen state is "cannot tell" in the policies that
        # resolve it (policies.cluster.vms_to_run), never "none"; the kinds may be absent.
        VM_INSTANCETYPE,
        VM_CLUSTER_INSTANCETYPE,
        # A scaled pool or VMIRS missing from the state is "cannot tell" in the same way.
        VM_POOL,
        VM_REPLICA_SET,
    }
)


# What the questions several policies and diagnoses ask through a shared helper read, so that
# each declares its ``reads`` as the helpers it asks and no kind list is written twice (a test
# holds each set to what its helper is seen to ask; ``PROVIDER_READS`` above is
# ``providers_of``'s and ``healthy_provider_count``'s).

#: ``gpu_users.gpu_users_on``: the pods, the DRA claims allocated on the node and the devices
#: they hold, the ClusterPolicy's runtime class.
GPU_USERS_READS = frozenset({CLUSTER_POLICY, POD, RESOURCE_CLAIM, RESOURCE_SLICE})
#: ``gpu_users.vm_users_on``: the live GPU VMIs and the Kata pods (``gpu_vmis_on``: the VMIs).
VM_USERS_READS = frozenset({POD, VIRTUAL_MACHINE_INSTANCE})
#: ``claims_allocated_on`` named by ``gpu_users.pod_workload``: the pods holding a node's
#: allocated devices, each as the VM or VMI whose launcher it is.
DEVICE_HOLDERS_READS = frozenset({POD, RESOURCE_CLAIM, RESOURCE_SLICE, VIRTUAL_MACHINE_INSTANCE})
#: ``vms_to_run.vms_to_run``: the VMs, their VMIs and the instancetypes they name.
VMS_TO_RUN_READS = frozenset(
    {VIRTUAL_MACHINE, VIRTUAL_MACHINE_INSTANCE, VM_INSTANCETYPE, VM_CLUSTER_INSTANCETYPE}
)
#: ``claim_fit.claim_fit`` and ``fitting_nodes``: the classes' devices and the rules that keep
#: them off, the nodes, and the claims already allocated there (shared counters).
#: ``vms_to_run.asked_to_run`` (and ``scaled``): those, and the pools and replica sets a scale
#: names (read from the state; not held: cannot tell).
ASKED_TO_RUN_READS = VMS_TO_RUN_READS | {VM_POOL, VM_REPLICA_SET}
CLAIM_FIT_READS = frozenset({DEVICE_TAINT_RULE, NODE, POD, RESOURCE_CLAIM, *_DRA_DEVICES})


def absent_means_none(reads: frozenset[GroupKind]) -> frozenset[GroupKind]:
    """Of ``reads``, the kinds whose absence means none (``MAY_BE_ABSENT``): what a policy or
    diagnosis may go without. Derived, never declared: the same kind is optional for all."""
    return reads & MAY_BE_ABSENT


def required(reads: Iterable[GroupKind]) -> list[GroupKind]:
    """Of ``reads``, in their order, the kinds an answer cannot go without: unseen, it is
    "not judged" rather than one about none."""
    return [kind for kind in reads if kind not in MAY_BE_ABSENT]

"""KubeVirt's VM templates, each read for the devices the VMs it makes will ask for:
VirtualMachineInstanceReplicaSet (``spec.template``, a VMI template), VirtualMachinePool
(``spec.virtualMachineTemplate.spec``, a VM spec, instancetype and all), and the two
instancetypes (``spec.gpus``, ``spec.hostDevices``), whose lists KubeVirt copies into a VM that
names one in ``spec.instancetype`` (kubevirt/kubevirt pkg/instancetype/apply/gpu.go and
hostdevices.go).

Apart from kubevirt.py, whose VirtualMachine and VMI these build on, to keep each module a size
one can read.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.cluster.kinds import VM_CLUSTER_INSTANCETYPE, VM_INSTANCETYPE
from policies.cluster.kubevirt import DeviceRequest, VMInfo, device_entries, vm_of_spec, vmi_devices
from policies.vocabulary.fields import get_bool, get_int, get_map, get_str
from policies.vocabulary.requests import GroupKind, JSONObject

#: What ``spec.replicas`` is when it is not set (both types.go: "Defaults to 1").
DEFAULT_REPLICAS = 1


@dataclass(frozen=True, slots=True)
class ReplicaSetInfo:
    """A VirtualMachineInstanceReplicaSet: ``replicas`` VMIs made from one template."""

    namespace: str
    name: str
    replicas: int
    paused: bool
    devices: tuple[DeviceRequest, ...]
    eviction_strategy: str = ""


@dataclass(frozen=True, slots=True)
class PoolInfo:
    """A VirtualMachinePool: ``replicas`` VMs made from ``vm``, its template."""

    namespace: str
    name: str
    replicas: int
    paused: bool
    vm: VMInfo


@dataclass(frozen=True, slots=True)
class InstancetypeInfo:
    """A VirtualMachineInstancetype (namespaced) or VirtualMachineClusterInstancetype
    (``namespace`` '') and the devices it gives every VM that names it."""

    kind: GroupKind
    namespace: str
    name: str
    devices: tuple[DeviceRequest, ...]
    uid: str = ""
    generation: int = 0

    @property
    def label(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind.kind} {where}{self.name}"

    def copied_as(self, revision: str) -> bool:
        """Whether ``revision`` is KubeVirt's copy of this instancetype as it is now: virt-
        controller names a copy ``<vm>-<name>-<version>-<uid>-<generation>``
        (pkg/instancetype/revision/store.go ``GenerateName``), so an edit since (a new
        generation) or a re-creation (a new uid) shows in the name."""
        return bool(self.uid) and revision.endswith(f"-{self.uid}-{self.generation}")


def _meta(obj: JSONObject) -> tuple[str, str]:
    meta = get_map(obj, "metadata", "")
    return get_str(meta, "namespace", "metadata"), get_str(meta, "name", "metadata")


def project_vm_replica_set(obj: JSONObject) -> ReplicaSetInfo:
    namespace, name = _meta(obj)
    spec = get_map(obj, "spec", "")
    vmi_spec = get_map(get_map(spec, "template", "spec"), "spec", "spec.template")
    return ReplicaSetInfo(
        namespace=namespace,
        name=name,
        replicas=get_int(spec, "replicas", "spec", DEFAULT_REPLICAS),
        paused=get_bool(spec, "paused", "spec"),
        devices=vmi_devices(vmi_spec, "spec.template.spec"),
        eviction_strategy=get_str(vmi_spec, "evictionStrategy", "spec.template.spec"),
    )


def project_vm_pool(obj: JSONObject) -> PoolInfo:
    namespace, name = _meta(obj)
    spec = get_map(obj, "spec", "")
    template = get_map(spec, "virtualMachineTemplate", "spec")
    path = "spec.virtualMachineTemplate.spec"
    vm_spec = get_map(template, "spec", "spec.virtualMachineTemplate")
    return PoolInfo(
        namespace=namespace,
        name=name,
        replicas=get_int(spec, "replicas", "spec", DEFAULT_REPLICAS),
        paused=get_bool(spec, "paused", "spec"),
        vm=vm_of_spec(vm_spec, {}, namespace, name, path),
    )


def _instancetype(obj: JSONObject, kind: GroupKind) -> InstancetypeInfo:
    namespace, name = _meta(obj)
    meta = get_map(obj, "metadata", "")
    return InstancetypeInfo(
        kind,
        namespace,
        name,
        device_entries(get_map(obj, "spec", ""), "spec"),
        uid=get_str(meta, "uid", "metadata"),
        generation=get_int(meta, "generation", "metadata", 0),
    )


def project_vm_instancetype(obj: JSONObject) -> InstancetypeInfo:
    return _instancetype(obj, VM_INSTANCETYPE)


def project_vm_cluster_instancetype(obj: JSONObject) -> InstancetypeInfo:
    return _instancetype(obj, VM_CLUSTER_INSTANCETYPE)

"""Compact projections of Dynamic Resource Allocation objects (resource.k8s.io/v1).

DeviceClass and ResourceSlice are cluster-scoped, ResourceClaim and ResourceClaimTemplate
namespaced (docs/dra.md has the facts and their sources). As in the other projections of
``policies.cluster``, a projection keeps what policies read and a malformed field raises
``ObjectError`` naming its path. Attribute and capacity names are stored fully qualified: an
unqualified name belongs to the driver's domain, which is how the scheduler's CEL environment sees
it (``device.attributes["gpu.nvidia.com"]``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from policies.cel.values import AttributeScalar, AttributeValue, Unreadable
from policies.cluster.counters import (
    Counters,
    CounterUse,
    NoEntries,
    RequestPolicy,
    project_consumes,
    project_counter_sets,
    project_request_policy,
)
from policies.cluster.device_taints import DeviceTaint, project_taints
from policies.cluster.dra_claims import selectors_of
from policies.cluster.node_selector import NodeSelector, project_node_selector
from policies.vocabulary.fields import (
    ObjectError,
    get_bool,
    get_int,
    get_map,
    get_maps,
    get_str,
    parse_quantity,
)
from policies.vocabulary.requests import JSONObject
from policies.vocabulary.semver import parse_version

#: NVIDIA's DRA driver for GPUs, and the values of its ``type`` attribute.
NVIDIA_DRIVER = "gpu.nvidia.com"
#: One shared empty mapping: most devices have no request policy, most slices no counters.
NO_POLICIES: Mapping[str, RequestPolicy] = NoEntries()
NO_COUNTER_SETS: Mapping[str, Counters] = NoEntries()
#: Every DeviceClass serves pods asking ``<prefix><class name>`` (KEP-5004's implicit name).
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"
GPU_TYPES = frozenset({"gpu", "mig"})
VFIO_TYPE = "vfio"
#: ``DeviceInfo.type`` of a device whose type attribute cannot be read.
UNREADABLE_TYPE = "(unreadable)"
#: The same fact under the names different driver releases publish, the standard one first.
PCI_BUS_ID_ATTRIBUTES = ("resource.kubernetes.io/pciBusID", "pcieBusID")
NUMA_NODE_ATTRIBUTES = ("resource.kubernetes.io/numaNode", "numa")


def qualified(name: str, driver: str) -> str:
    """An attribute or capacity name with its domain: unqualified names are the driver's."""
    return name if "/" in name else f"{driver}/{name}"


# --- DeviceClass ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceClassInfo:
    name: str
    selectors: tuple[str, ...]
    """CEL expressions, ANDed: a device belongs to the class when every one is true."""
    extended_resource_name: str
    """A pod asking this resource in its limits may be served by the class (1.34+), else ''."""

    served_resources: tuple[str, ...] = ()
    """The extended resource names a pod may ask the class by: its explicit
    ``extendedResourceName`` and the implicit ``deviceclass.resource.kubernetes.io/<name>``
    every class has (KEP-5004; docs/dra.md). Worked out once, at projection."""


def project_device_class(obj: JSONObject) -> DeviceClassInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    name = get_str(meta, "name", "metadata")
    explicit = get_str(spec, "extendedResourceName", "spec")
    implicit = IMPLICIT_EXTENDED_PREFIX + name
    return DeviceClassInfo(
        name=name,
        selectors=selectors_of(spec, "spec"),
        extended_resource_name=explicit,
        served_resources=(explicit, implicit) if explicit and explicit != implicit else (implicit,),
    )


# --- ResourceSlice -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    driver: str
    name: str
    attributes: Mapping[str, AttributeValue]
    """Fully qualified name -> typed value (string, int, bool, or a semantic version)."""
    capacity: Mapping[str, Decimal]
    """Fully qualified name -> quantity."""
    taints: tuple[DeviceTaint, ...]
    """The slice's own taints (``policies.cluster.device_taints``; rules add theirs)."""
    node: str
    """With perDeviceNodeSelection: the device's own nodeName / allNodes / nodeSelector."""
    all_nodes: bool
    node_selector: NodeSelector | None
    consumes: tuple[CounterUse, ...] = ()
    """consumesCounters: what it draws on its pool's shared counters (policies.cluster.counters)."""
    multiple: bool = False
    """allowMultipleAllocations: several requests (of several claims) may share it."""
    request_policies: Mapping[str, RequestPolicy] = NO_POLICIES
    """Fully qualified capacity name -> how a request's share of it is rounded."""
    unmodelled: tuple[str, ...] = ()
    """Fields that change what it can give and are not modelled (``policies.cel.selectors``)."""

    def attribute(self, *names: str) -> AttributeValue | None:
        """The first of ``names`` the device has (unqualified names are the driver's)."""
        for name in names:
            value = self.attributes.get(qualified(name, self.driver))
            if value is not None:
                return value
        return None

    @property
    def type(self) -> str:
        """NVIDIA's ``type`` attribute (gpu, mig, vfio), '' when absent, ``UNREADABLE_TYPE``
        when published as a value this code cannot read."""
        value = self.attribute("type")
        if isinstance(value, Unreadable | tuple):  # a list of types is none we know either
            return UNREADABLE_TYPE
        return value if isinstance(value, str) else ""

    @property
    def unreadable(self) -> tuple[str, ...]:
        """The attributes whose values this code cannot read (kept, never dropped)."""
        return tuple(sorted(n for n, v in self.attributes.items() if isinstance(v, Unreadable)))

    @property
    def pci_bus_id(self) -> str:
        value = self.attribute(*PCI_BUS_ID_ATTRIBUTES)
        return value if isinstance(value, str) else ""


#: The value types of a device attribute, and (KEP-5491) their lists.
_SCALAR_TYPES = ("string", "int", "bool", "version")
_LIST_TYPES = {"strings": "string", "ints": "int", "bools": "bool", "versions": "version"}


def _scalar(kind: str, raw: object, path: str) -> AttributeScalar:
    if kind == "bool" and isinstance(raw, bool):
        return raw
    if kind == "int" and isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if kind == "string" and isinstance(raw, str):
        return raw
    if kind == "version" and isinstance(raw, str):
        version = parse_version(raw)
        if version is None:
            raise ObjectError(path, f"not a semantic version: {raw!r}")
        return version
    raise ObjectError(path, f"expected a {kind}")


def _attribute(value: object, path: str) -> AttributeValue:
    """A typed value; a value of a type this code does not know (or beside one it knows) is
    kept as ``Unreadable`` rather than refusing the slice: the API server stores what a newer
    release or an alpha gate allows, and the rest of the device still counts."""
    if not isinstance(value, Mapping) or not value:
        raise ObjectError(path, "expected a typed value: int, bool, string, version or a list")
    known = [k for k in value if k in _SCALAR_TYPES or k in _LIST_TYPES]
    if len(known) > 1:
        raise ObjectError(path, f"more than one value: {', '.join(map(str, known))}")
    if len(value) != 1 or not known:
        return Unreadable(", ".join(sorted(str(k) for k in value)))
    ((kind, raw),) = value.items()
    if kind in _SCALAR_TYPES:
        return _scalar(kind, raw, f"{path}.{kind}")
    if not isinstance(raw, list) or not raw:
        raise ObjectError(f"{path}.{kind}", "expected a non-empty list")
    item = _LIST_TYPES[kind]
    return tuple(_scalar(item, r, f"{path}.{kind}[{i}]") for i, r in enumerate(raw))


#: Device fields that change what a device can give and are not modelled yet: while a device
#: publishes one, no selection of it is certain ("cannot tell"). Counters, shared allocation and
#: taints are modelled now (``policies.cluster.counters``, ``device_taints``); a newer field of
#: that sort is added here until it is.
UNMODELLED_DEVICE_FIELDS: tuple[str, ...] = ()


def _unmodelled(obj: JSONObject) -> tuple[str, ...]:
    """The fields of a device that change what it can give and gpu-guard does not model."""
    return tuple(f for f in UNMODELLED_DEVICE_FIELDS if obj.get(f))


def _device(obj: JSONObject, path: str, driver: str) -> DeviceInfo:
    attributes = {
        qualified(str(name), driver): _attribute(value, f"{path}.attributes.{name}")
        for name, value in get_map(obj, "attributes", path).items()
    }
    capacity = {}
    policies = {}
    for name, value in get_map(obj, "capacity", path).items():
        where = f"{path}.capacity.{name}"
        if not isinstance(value, Mapping):
            raise ObjectError(where, "expected a mapping")
        amount = parse_quantity(value.get("value"), f"{where}.value")
        capacity[qualified(str(name), driver)] = amount
        if "requestPolicy" in value:
            policy = project_request_policy(value, where)
            if policy is not None:
                policies[qualified(str(name), driver)] = policy
    taints = project_taints(obj, path)
    return DeviceInfo(
        driver=driver,
        name=get_str(obj, "name", path),
        attributes=attributes,
        capacity=capacity,
        taints=taints,
        node=get_str(obj, "nodeName", path),
        all_nodes=get_bool(obj, "allNodes", path),
        node_selector=project_node_selector(obj, "nodeSelector", path),
        consumes=project_consumes(obj, path),
        multiple=get_bool(obj, "allowMultipleAllocations", path),
        request_policies=policies or NO_POLICIES,
        unmodelled=_unmodelled(obj),
    )


@dataclass(frozen=True, slots=True)
class ResourceSliceInfo:
    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    """pool.resourceSliceCount: how many slices make the pool whole."""
    node: str
    """spec.nodeName: the one node whose devices these are, '' for other pools."""
    all_nodes: bool
    node_selector: NodeSelector | None
    per_device_node_selection: bool
    devices: tuple[DeviceInfo, ...]
    counter_sets: Mapping[str, Counters] = NO_COUNTER_SETS
    """sharedCounters: counter set name -> counters (1.35+: in a slice without devices)."""

    @property
    def pool_key(self) -> tuple[str, str]:
        return (self.driver, self.pool)


def project_resource_slice(obj: JSONObject) -> ResourceSliceInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    pool = get_map(spec, "pool", "spec")
    driver = get_str(spec, "driver", "spec")
    return ResourceSliceInfo(
        name=get_str(meta, "name", "metadata"),
        driver=driver,
        pool=get_str(pool, "name", "spec.pool"),
        generation=get_int(pool, "generation", "spec.pool", 0),
        slice_count=get_int(pool, "resourceSliceCount", "spec.pool", 1),
        node=get_str(spec, "nodeName", "spec"),
        all_nodes=get_bool(spec, "allNodes", "spec"),
        node_selector=project_node_selector(spec, "nodeSelector", "spec"),
        per_device_node_selection=get_bool(spec, "perDeviceNodeSelection", "spec"),
        devices=tuple(_device(d, w, driver) for w, d in get_maps(spec, "devices", "spec")),
        counter_sets=project_counter_sets(spec, "spec") or NO_COUNTER_SETS,
    )


@dataclass(frozen=True, order=True, slots=True)
class DeviceId:
    """How allocation results name a device: driver, pool, device."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class PublishedDevice:
    """A device of the current generation of its pool, with where it can be used."""

    slice: str
    pool: str
    node: str
    """The one node whose device it is; '' for devices not bound to one node (see access)."""
    all_nodes: bool
    node_selector: NodeSelector | None
    device: DeviceInfo

    @property
    def id(self) -> DeviceId:
        return DeviceId(self.device.driver, self.pool, self.device.name)


def published_devices(slice_: ResourceSliceInfo) -> tuple[PublishedDevice, ...]:
    """The slice's devices with their node: the slice's, else with perDeviceNodeSelection the
    device's own, else none (allNodes or a label selector)."""
    out = []
    for device in slice_.devices:
        node, all_nodes, selector = slice_.node, slice_.all_nodes, slice_.node_selector
        if slice_.per_device_node_selection:
            node, all_nodes, selector = device.node, device.all_nodes, device.node_selector
        out.append(PublishedDevice(slice_.name, slice_.pool, node, all_nodes, selector, device))
    return tuple(out)

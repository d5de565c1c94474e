"""Compact, typed projections of the Kubernetes objects the policies read.

One projection per kind, used both for objects arriving in admission requests and for objects the
cluster state keeps, so a field is interpreted in exactly one place. A projection keeps only what
some policy or the audit needs; a field of the wrong type raises ``ObjectError`` naming its path.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from types import MappingProxyType
from typing import Any

from policies.cluster.feature_gates import (
    DRA_GATES,
    HOST_DEVICES_GATE,
    FeatureGates,
    GateReading,
    feature_gates,
)
from policies.cluster.kinds import VIRTUAL_MACHINE, VIRTUAL_MACHINE_INSTANCE, split_api_version
from policies.cluster.pciids import PciId, parse_pci_id
from policies.cluster.resources import is_container_gpu_resource, is_extended_resource
from policies.vocabulary.model import CREATE, UPDATE, AdmissionRequest, GroupKind, JSONObject

#: KubeVirt names a VMI's pod ``virt-launcher-<vmi>-<5 random characters>`` (generateName).
_LAUNCHER = re.compile(r"^virt-launcher-(?P<vmi>.+)-[a-z0-9]{5}$")


def launched_vmi(pod_name: str) -> str:
    """The name of the VMI whose virt-launcher pod ``pod_name`` is, '' for any other pod."""
    match = _LAUNCHER.match(pod_name)
    return match.group("vmi") if match is not None else ""


#: The requests that can start a VM: a VirtualMachine created or changed (its run strategy or
#: template), a VirtualMachineInstance created. What a VM asks for in order to run is judged here.
VM_STARTING_REQUESTS: Mapping[GroupKind, frozenset[str]] = MappingProxyType(
    {
        VIRTUAL_MACHINE: frozenset({CREATE, UPDATE}),
        VIRTUAL_MACHINE_INSTANCE: frozenset({CREATE}),
    }
)

#: Run strategies under which KubeVirt keeps (or starts) a VMI for the VM.
RUNNING_STRATEGIES = frozenset({"Always", "RerunOnFailure", "Once"})
FINISHED_POD_PHASES = frozenset({"Succeeded", "Failed"})


class ObjectError(ValueError):
    """A field of an object has the wrong shape; ``path`` is its dotted location."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


# --- typed field access -------------------------------------------------------------------------


def _type_name(value: object) -> str:
    return {dict: "mapping", list: "list", str: "string", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


def get_map(obj: JSONObject, key: str, path: str) -> JSONObject:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ObjectError(
            f"{path}.{key}".lstrip("."), f"expected a mapping, got {_type_name(value)}"
        )
    return value


def get_list(obj: JSONObject, key: str, path: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ObjectError(f"{path}.{key}".lstrip("."), f"expected a list, got {_type_name(value)}")
    return value


def get_str(obj: JSONObject, key: str, path: str, default: str = "") -> str:
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ObjectError(
            f"{path}.{key}".lstrip("."), f"expected a string, got {_type_name(value)}"
        )
    return value


def get_bool(obj: JSONObject, key: str, path: str, default: bool = False) -> bool:
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ObjectError(
            f"{path}.{key}".lstrip("."), f"expected a boolean, got {_type_name(value)}"
        )
    return value


def _maps(items: list[Any], path: str) -> list[tuple[str, JSONObject]]:
    out = []
    for i, item in enumerate(items):
        where = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            raise ObjectError(where, f"expected a mapping, got {_type_name(item)}")
        out.append((where, item))
    return out


def get_maps(obj: JSONObject, key: str, path: str) -> list[tuple[str, JSONObject]]:
    """``obj[key]`` as a list of mappings, each with the path it stands at."""
    return _maps(get_list(obj, key, path), f"{path}.{key}".lstrip("."))


def get_strings(obj: JSONObject, key: str, path: str) -> tuple[str, ...]:
    """``obj[key]`` as a list of strings."""
    values = get_list(obj, key, path)
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise ObjectError(
                f"{path}.{key}[{i}]".lstrip("."), f"expected a string, got {_type_name(value)}"
            )
    return tuple(values)


def get_int(obj: JSONObject, key: str, path: str, default: int) -> int:
    """``obj[key]`` as an integer (a boolean is none), ``default`` when absent."""
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise ObjectError(
            f"{path}.{key}".lstrip("."), f"expected an integer, got {_type_name(value)}"
        )
    return value


def get_string_map(obj: JSONObject, key: str, path: str) -> dict[str, str]:
    where = f"{path}.{key}".lstrip(".")
    out = {}
    for k, v in get_map(obj, key, path).items():
        if not isinstance(v, str):
            raise ObjectError(f"{where}.{k}", f"expected a string, got {_type_name(v)}")
        out[str(k)] = v
    return out


def parse_time(text: str, path: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ObjectError(path, f"not an RFC 3339 time: {text!r}") from None
    if value.tzinfo is None:
        raise ObjectError(path, f"time without a zone: {text!r}")
    return value


def labels_of(obj: JSONObject | None) -> dict[str, str]:
    """metadata.labels of an object (empty for None): what node-label policies compare."""
    if obj is None:
        return {}
    return get_string_map(get_map(obj, "metadata", ""), "labels", "metadata")


def request_labels(request: AdmissionRequest, old: bool = False) -> Mapping[str, str]:
    """labels_of the request's object (or oldObject), read once for every policy that asks."""
    return request.once(("labels", old), lambda: labels_of(request.old if old else request.obj))


def get_time(obj: JSONObject, key: str, path: str) -> datetime | None:
    text = get_str(obj, key, path)
    return parse_time(text, f"{path}.{key}".lstrip(".")) if text else None


_SUFFIXES = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


MAX_QUANTITY_DIGITS = 30


def parse_count(value: object, path: str) -> int:
    """A Kubernetes quantity as a whole count (extended resources are integers)."""
    return int(parse_quantity(value, path))


def parse_quantity(value: object, path: str) -> Decimal:
    """A Kubernetes quantity exactly ("32607Mi", "1.5", "500m"): DRA capacities compare as such."""
    if isinstance(value, bool):
        raise ObjectError(path, "expected a quantity, got boolean")
    if isinstance(value, int):
        return Decimal(value)
    if not isinstance(value, str):
        raise ObjectError(path, f"expected a quantity, got {_type_name(value)}")
    text = value.strip()
    number, suffix = text, ""
    for candidate in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E", "m"):
        if text.endswith(candidate) and len(text) > len(candidate):
            number, suffix = text[: -len(candidate)], candidate
            break
    try:
        amount = Decimal(number)
    except (InvalidOperation, ArithmeticError):
        raise ObjectError(path, f"not a quantity: {value!r}") from None
    if not amount.is_finite():
        raise ObjectError(path, f"not a quantity: {value!r}")
    if amount.adjusted() > MAX_QUANTITY_DIGITS:
        # Kubernetes caps quantities far below this; refuse before building a huge int.
        raise ObjectError(path, f"quantity out of range: {value!r}")
    if suffix == "m":
        return amount / 1000
    return amount * _SUFFIXES[suffix]


def _int_map(obj: JSONObject, key: str, path: str, keep: Any) -> dict[str, int]:
    where = f"{path}.{key}".lstrip(".")
    return {
        str(name): parse_count(qty, f"{where}.{name}")
        for name, qty in get_map(obj, key, path).items()
        if keep(str(name))
    }


# --- common metadata ------------------------------------------------------------------------------


def group_kind_of(obj: JSONObject) -> GroupKind:
    group, _ = split_api_version(get_str(obj, "apiVersion", ""))
    return GroupKind(group, get_str(obj, "kind", ""))


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    last_transition: datetime | None


def _conditions(status: JSONObject, path: str) -> tuple[Condition, ...]:
    out = []
    for where, c in _maps(get_list(status, "conditions", path), f"{path}.conditions"):
        out.append(
            Condition(  # a handful of types, statuses and reasons across every object
                type=sys.intern(get_str(c, "type", where)),
                status=sys.intern(get_str(c, "status", where)),
                reason=sys.intern(get_str(c, "reason", where)),
                message=get_str(c, "message", where),
                last_transition=get_time(c, "lastTransitionTime", where),
            )
        )
    return tuple(out)


def find_condition(conditions: tuple[Condition, ...], type_: str) -> Condition | None:
    for condition in conditions:
        if condition.type == type_:
            return condition
    return None


# --- Node -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    unschedulable: bool
    taints: tuple[Taint, ...]
    conditions: tuple[Condition, ...]
    allocatable: Mapping[str, int]
    """Extended resources only (names with a domain), as last reported."""
    kubelet_version: str
    swap_capacity: int | None

    def condition(self, type_: str) -> Condition | None:
        return find_condition(self.conditions, type_)


def project_scheduling(obj: JSONObject) -> tuple[bool, tuple[Taint, ...]]:
    """A node's spec.unschedulable and spec.taints alone: what cordons and taints change,
    read without the cost of the whole node (status is most of an 18 KB Node)."""
    spec = get_map(obj, "spec", "")
    taints = tuple(
        Taint(get_str(t, "key", w), get_str(t, "value", w), get_str(t, "effect", w))
        for w, t in _maps(get_list(spec, "taints", "spec"), "spec.taints")
    )
    return get_bool(spec, "unschedulable", "spec"), taints


def _shared_strings(labels: dict[str, str]) -> dict[str, str]:
    """Node labels with one string per distinct key and value: thousands of nodes repeat the
    same few dozen keys and a few thousand values, each decoded as a fresh string."""
    return {sys.intern(k): sys.intern(v) for k, v in labels.items()}


def project_node(obj: JSONObject) -> NodeInfo:
    meta = get_map(obj, "metadata", "")
    status = get_map(obj, "status", "")
    node_info = get_map(status, "nodeInfo", "status")
    swap = get_map(node_info, "swap", "status.nodeInfo")
    unschedulable, taints = project_scheduling(obj)
    swap_capacity = swap.get("capacity")
    return NodeInfo(
        name=get_str(meta, "name", "metadata"),
        labels=_shared_strings(get_string_map(meta, "labels", "metadata")),
        unschedulable=unschedulable,
        taints=taints,
        conditions=_conditions(status, "status"),
        allocatable=_int_map(status, "allocatable", "status", is_extended_resource),
        kubelet_version=get_str(node_info, "kubeletVersion", "status.nodeInfo"),
        swap_capacity=(
            None
            if swap_capacity is None
            else parse_count(swap_capacity, "status.nodeInfo.swap.capacity")
        ),
    )


# --- Pod ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """One spec.resourceClaims[] entry of a pod, VM or VMI: a ResourceClaim named outright, or one
    made from a ResourceClaimTemplate (for a pod, status.resourceClaimStatuses names it)."""

    name: str
    claim: str
    template: str


def claim_refs(
    spec: JSONObject, path: str, status: JSONObject | None = None
) -> tuple[ClaimRef, ...]:
    """spec.resourceClaims[], each resolved to its claim's name where one is known; for a pod
    whose extended resources DRA serves, the claim the scheduler made (named '')."""
    entries = _maps(get_list(spec, "resourceClaims", path), f"{path}.resourceClaims")
    extended = get_map(status, "extendedResourceClaimStatus", "status") if status else {}
    if not entries and not extended:
        return ()
    made: dict[str, str] = {}
    if status is not None:
        for w, s in _maps(
            get_list(status, "resourceClaimStatuses", "status"), "status.resourceClaimStatuses"
        ):
            made[get_str(s, "name", w)] = get_str(s, "resourceClaimName", w)
    refs = []
    for w, entry in entries:
        name = get_str(entry, "name", w)
        template = get_str(entry, "resourceClaimTemplateName", w)
        claim = get_str(entry, "resourceClaimName", w) or (made.get(name, "") if template else "")
        refs.append(ClaimRef(name, claim, template))
    scheduler_made = get_str(extended, "resourceClaimName", "status.extendedResourceClaimStatus")
    if scheduler_made:
        refs.append(ClaimRef("", scheduler_made, ""))
    return tuple(refs)


@dataclass(frozen=True, slots=True)
class PodInfo:
    namespace: str
    name: str
    node: str
    phase: str
    terminating: bool
    gpu: Mapping[str, int]
    """NVIDIA GPU resources (nvidia.com/gpu, gpu.shared, mig-*) the pod holds now."""
    extended: Mapping[str, int]
    """Every extended resource it holds (passthrough devices of virt-launcher pods included)."""
    app: str
    problem: str
    """Why the pod is unhealthy as kubectl shows it (Error, CrashLoopBackOff, ...), else ''."""
    claims: tuple[ClaimRef, ...] = ()
    """The DRA claims it uses (spec.resourceClaims[])."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED_POD_PHASES


def _container_resources(container: JSONObject, path: str) -> dict[str, int]:
    """Requests and limits merged: a container holds the larger of the two."""
    res = get_map(container, "resources", path)
    where = f"{path}.resources"
    held: dict[str, int] = {}
    for key in ("requests", "limits"):
        for name, count in _int_map(res, key, where, is_extended_resource).items():
            held[name] = max(held.get(name, 0), count)
    return held


def _is_initializing(status: JSONObject, phase: str) -> bool:
    """Initialized != True, read straight from the list: building every condition here was
    half the cost of projecting a pod."""
    for where, condition in _maps(get_list(status, "conditions", "status"), "status.conditions"):
        if condition.get("type") == "Initialized":
            return get_str(condition, "status", where) != "True"
    return phase in ("", "Pending")


def _pod_problem(status: JSONObject, terminating: bool) -> str:
    if terminating:
        return "Terminating"
    worst = get_str(status, "reason", "status")
    for where, cs in _maps(
        get_list(status, "containerStatuses", "status"), "status.containerStatuses"
    ):
        state = get_map(cs, "state", where)
        for phase in ("waiting", "terminated"):
            detail = get_map(state, phase, f"{where}.state")
            reason = get_str(detail, "reason", f"{where}.state.{phase}")
            if reason and reason not in ("Completed", "ContainerCreating", "PodInitializing"):
                return reason
    return worst if worst else ("Failed" if get_str(status, "phase", "status") == "Failed" else "")


def project_pod(obj: JSONObject) -> PodInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    status = get_map(obj, "status", "")
    phase = get_str(status, "phase", "status")
    extended: dict[str, int] = {}
    for where, c in _maps(get_list(spec, "containers", "spec"), "spec.containers"):
        for name, count in _container_resources(c, where).items():
            extended[name] = extended.get(name, 0) + count
    initializing = _is_initializing(status, phase)
    init_peak: dict[str, int] = {}
    for where, c in _maps(get_list(spec, "initContainers", "spec"), "spec.initContainers"):
        held = _container_resources(c, where)
        if get_str(c, "restartPolicy", where) == "Always":
            # A native sidecar runs for the pod's whole life, beside the app containers.
            for name, count in held.items():
                extended[name] = extended.get(name, 0) + count
        elif initializing:
            # Plain init containers run one at a time, before the app: the largest counts.
            for name, count in held.items():
                init_peak[name] = max(init_peak.get(name, 0), count)
    for name, count in init_peak.items():
        extended[name] = max(extended.get(name, 0), count)
    extended = {k: v for k, v in extended.items() if v > 0}
    terminating = meta.get("deletionTimestamp") is not None
    return PodInfo(
        # tens of thousands of pods share a few dozen namespaces and a few thousand nodes
        namespace=sys.intern(get_str(meta, "namespace", "metadata")),
        name=get_str(meta, "name", "metadata"),
        node=sys.intern(get_str(spec, "nodeName", "spec")),
        phase=sys.intern(phase),
        terminating=terminating,
        gpu={k: v for k, v in extended.items() if is_container_gpu_resource(k)},
        extended=extended,
        app=sys.intern(get_string_map(meta, "labels", "metadata").get("app", "")),
        problem=_pod_problem(status, terminating),
        claims=claim_refs(spec, "spec", status),
    )


# --- KubeVirt VirtualMachine / VirtualMachineInstance ---------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One gpus[] or hostDevices[] entry: a request for one unit of ``device_name``."""

    field: str  # "gpus" or "hostDevices"
    name: str
    device_name: str
    claim_name: str = ""
    """With KubeVirt's DRA gates: the spec.resourceClaims[] entry it takes a device from."""
    request_name: str = ""

    @property
    def uses_claim(self) -> bool:
        """KubeVirt's DRA form (IsGPUDRA, IsHostDeviceDRA): a claim instead of a deviceName.
        Device plugins and permittedHostDevices play no part in it; its feature gate does."""
        return not self.device_name and bool(self.claim_name or self.request_name)

    @property
    def label(self) -> str:
        """What the entry asks for, as messages name it: its deviceName, or its claim."""
        return self.device_name or f"claim {self.claim_name or '(none)'}"

    @property
    def gates_needed(self) -> tuple[str, ...]:
        """The KubeVirt feature gates without which KubeVirt rejects a VMI with this entry:
        hostDevices[] always need HostDevices; an entry that uses a claim its field's DRA gate."""
        gates = [DRA_GATES[self.field]] if self.uses_claim and self.field in DRA_GATES else []
        if self.field == "hostDevices":
            gates.append(HOST_DEVICES_GATE)
        return tuple(gates)


@dataclass(frozen=True, slots=True)
class VMInfo:
    namespace: str
    name: str
    run_strategy: str
    devices: tuple[DeviceRequest, ...]
    eviction_strategy: str
    printable_status: str
    conditions: tuple[Condition, ...]
    claims: tuple[ClaimRef, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def should_run(self) -> bool:
        return self.run_strategy in RUNNING_STRATEGIES


@dataclass(frozen=True, slots=True)
class VMIInfo:
    namespace: str
    name: str
    node: str
    phase: str
    devices: tuple[DeviceRequest, ...]
    eviction_strategy: str
    conditions: tuple[Condition, ...]
    owner_vm: str
    claims: tuple[ClaimRef, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def live(self) -> bool:
        return self.phase not in ("Succeeded", "Failed")


def _devices(vmi_spec: JSONObject, path: str) -> tuple[DeviceRequest, ...]:
    domain = get_map(vmi_spec, "domain", path)
    devices = get_map(domain, "devices", f"{path}.domain")
    where = f"{path}.domain.devices"
    out = []
    for field_name in ("gpus", "hostDevices"):
        for w, d in _maps(get_list(devices, field_name, where), f"{where}.{field_name}"):
            out.append(
                DeviceRequest(
                    field_name,
                    get_str(d, "name", w),
                    get_str(d, "deviceName", w),
                    get_str(d, "claimName", w),
                    get_str(d, "requestName", w),
                )
            )
    return tuple(out)


def run_strategy_of(spec: JSONObject) -> str:
    """spec.runStrategy, else the deprecated spec.running (true: Always, false: Halted)."""
    strategy = get_str(spec, "runStrategy", "spec")
    if strategy:
        return strategy
    running = spec.get("running")
    if running is None:
        return "Halted"
    return "Always" if get_bool(spec, "running", "spec") else "Halted"


def project_vm(obj: JSONObject) -> VMInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    status = get_map(obj, "status", "")
    template = get_map(spec, "template", "spec")
    vmi_spec = get_map(template, "spec", "spec.template")
    return VMInfo(
        namespace=sys.intern(get_str(meta, "namespace", "metadata")),
        name=get_str(meta, "name", "metadata"),
        run_strategy=sys.intern(run_strategy_of(spec)),
        devices=_devices(vmi_spec, "spec.template.spec"),
        eviction_strategy=get_str(vmi_spec, "evictionStrategy", "spec.template.spec"),
        printable_status=sys.intern(get_str(status, "printableStatus", "status")),
        conditions=_conditions(status, "status"),
        claims=claim_refs(vmi_spec, "spec.template.spec"),
    )


def project_vmi(obj: JSONObject) -> VMIInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    status = get_map(obj, "status", "")
    owner = ""
    for where, ref in _maps(
        get_list(meta, "ownerReferences", "metadata"), "metadata.ownerReferences"
    ):
        if get_str(ref, "kind", where) == "VirtualMachine":
            owner = get_str(ref, "name", where)
    return VMIInfo(
        namespace=sys.intern(get_str(meta, "namespace", "metadata")),
        name=get_str(meta, "name", "metadata"),
        node=sys.intern(get_str(status, "nodeName", "status")),
        phase=sys.intern(get_str(status, "phase", "status")),
        devices=_devices(spec, "spec"),
        eviction_strategy=get_str(spec, "evictionStrategy", "spec"),
        conditions=_conditions(status, "status"),
        owner_vm=owner,
        claims=claim_refs(spec, "spec"),
    )


def devices_of(request_kind: GroupKind, obj: JSONObject) -> tuple[DeviceRequest, ...]:
    if request_kind == VIRTUAL_MACHINE:
        return project_vm(obj).devices
    return project_vmi(obj).devices


# --- KubeVirt CR ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PermittedPciDevice:
    index: int
    selector: str
    pci: PciId | None
    resource_name: str
    external: bool


@dataclass(frozen=True, slots=True)
class PermittedMdev:
    index: int
    selector: str
    resource_name: str
    external: bool


@dataclass(frozen=True, slots=True)
class PermittedUsb:
    """A permittedHostDevices.usb[] entry; ``selectors`` as "vendor:product" texts."""

    index: int
    selectors: tuple[str, ...]
    resource_name: str
    external: bool


@dataclass(frozen=True, slots=True)
class KubeVirtInfo:
    namespace: str
    name: str
    pci_devices: tuple[PermittedPciDevice, ...]
    mediated_devices: tuple[PermittedMdev, ...]
    eviction_strategy: str
    gates: FeatureGates
    usb_devices: tuple[PermittedUsb, ...] = ()

    @property
    def permitted_resource_names(self) -> frozenset[str]:
        return frozenset(
            [d.resource_name for d in self.pci_devices]
            + [d.resource_name for d in self.mediated_devices]
            + [d.resource_name for d in self.usb_devices]
        )

    def permits(self, device: DeviceRequest) -> bool:
        """KubeVirt starts a VMI with this device only when its name is permitted."""
        return device.device_name in self.permitted_resource_names

    def lacks_gate_for(self, device: DeviceRequest) -> GateReading | None:
        """hostDevices[] need the HostDevices feature gate; gpus[] need none (GPU is GA): the
        gate's reading when this CR leaves it off for ``device``."""
        missing = [r for r in self.missing_gates(device) if r.gate == HOST_DEVICES_GATE]
        return missing[0] if missing else None

    def missing_gates(self, device: DeviceRequest) -> tuple[GateReading, ...]:
        """The gates ``device`` needs that this CR does not turn on, as KubeVirt reads them."""
        readings = (self.gates.read(g) for g in device.gates_needed)
        return tuple(r for r in readings if not r.on)


def effective_eviction_strategy(own: str, kubevirt: KubeVirtInfo | None) -> str:
    """A VM/VMI's own evictionStrategy, else the KubeVirt CR's cluster-wide default, else ''."""
    if own:
        return own
    return kubevirt.eviction_strategy if kubevirt is not None else ""


def project_kubevirt(obj: JSONObject) -> KubeVirtInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    config = get_map(spec, "configuration", "spec")
    base = "spec.configuration"
    permitted = get_map(config, "permittedHostDevices", base)
    pbase = f"{base}.permittedHostDevices"
    dev_config = get_map(config, "developerConfiguration", base)
    dev_base = f"{base}.developerConfiguration"
    status = get_map(obj, "status", "")
    gates = feature_gates(
        get_strings(dev_config, "featureGates", dev_base),
        get_strings(dev_config, "disabledFeatureGates", dev_base),
        get_str(status, "observedKubeVirtVersion", "status")
        or get_str(status, "operatorVersion", "status"),
    )
    pci = []
    for i, (w, d) in enumerate(
        _maps(get_list(permitted, "pciHostDevices", pbase), f"{pbase}.pciHostDevices")
    ):
        selector = get_str(d, "pciVendorSelector", w)
        pci.append(
            PermittedPciDevice(
                i,
                selector,
                parse_pci_id(selector),
                get_str(d, "resourceName", w),
                get_bool(d, "externalResourceProvider", w),
            )
        )
    mdevs = [
        PermittedMdev(
            i,
            get_str(d, "mdevNameSelector", w),
            get_str(d, "resourceName", w),
            get_bool(d, "externalResourceProvider", w),
        )
        for i, (w, d) in enumerate(
            _maps(get_list(permitted, "mediatedDevices", pbase), f"{pbase}.mediatedDevices")
        )
    ]
    usbs = [
        PermittedUsb(
            i,
            tuple(
                f"{get_str(sel, 'vendor', sw)}:{get_str(sel, 'product', sw)}"
                for sw, sel in _maps(get_list(d, "selectors", w), f"{w}.selectors")
            ),
            get_str(d, "resourceName", w),
            get_bool(d, "externalResourceProvider", w),
        )
        for i, (w, d) in enumerate(_maps(get_list(permitted, "usb", pbase), f"{pbase}.usb"))
    ]
    return KubeVirtInfo(
        namespace=get_str(meta, "namespace", "metadata"),
        name=get_str(meta, "name", "metadata"),
        pci_devices=tuple(pci),
        mediated_devices=tuple(mdevs),
        eviction_strategy=get_str(config, "evictionStrategy", base),
        usb_devices=tuple(usbs),
        gates=gates,
    )


# --- NVIDIA ClusterPolicy -------------------------------------------------------------------------


#: ``status.state`` the GPU Operator writes on every ClusterPolicy but the one it uses.
IGNORED_STATE = "ignored"


@dataclass(frozen=True, slots=True)
class ClusterPolicyInfo:
    name: str
    sandbox_enabled: bool
    default_workload: str
    created: datetime | None = None
    state: str = ""
    """``status.state``: ready, notReady, ... or ``ignored`` when the operator uses another."""


def project_cluster_policy(obj: JSONObject) -> ClusterPolicyInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    sandbox = get_map(spec, "sandboxWorkloads", "spec")
    return ClusterPolicyInfo(
        name=get_str(meta, "name", "metadata"),
        sandbox_enabled=get_bool(sandbox, "enabled", "spec.sandboxWorkloads"),
        default_workload=get_str(sandbox, "defaultWorkload", "spec.sandboxWorkloads", "container"),
        created=get_time(meta, "creationTimestamp", "metadata"),
        state=get_str(get_map(obj, "status", ""), "state", "status"),
    )


def cluster_policy_in_force(policies: Iterable[ClusterPolicyInfo]) -> ClusterPolicyInfo | None:
    """The ClusterPolicy the GPU Operator acts on when there are several (OLM's
    ``gpu-cluster-policy`` beside a Helm ``cluster-policy`` is common).

    The operator keeps the first one it reconciles as its singleton and marks every other
    ``status.state: ignored`` (NVIDIA/gpu-operator controllers/clusterpolicy_controller.go,
    ``Reconcile``). So: one it has not marked ignored; among those, the oldest
    (``creationTimestamp``), which is the one an operator running since before the others were
    made has taken; the name breaks ties.
    """
    candidates = list(policies)
    used = [p for p in candidates if p.state != IGNORED_STATE] or candidates
    if not used:
        return None
    never = datetime.max.replace(tzinfo=UTC)
    return min(used, key=lambda p: (p.created or never, p.name))


# --- NFD NodeFeature ------------------------------------------------------------------------------

NFD_NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"


@dataclass(frozen=True, slots=True)
class NodeFeatureInfo:
    namespace: str
    name: str
    node: str
    pci_devices: tuple[PciId, ...]


def project_node_feature(obj: JSONObject) -> NodeFeatureInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    features = get_map(spec, "features", "spec")
    instances = get_map(features, "instances", "spec.features")
    pci_device = get_map(instances, "pci.device", "spec.features.instances")
    where = "spec.features.instances.pci.device"
    found = []
    for w, element in _maps(get_list(pci_device, "elements", where), f"{where}.elements"):
        attrs = get_string_map(element, "attributes", w)
        pci = parse_pci_id(f"{attrs.get('vendor', '')}:{attrs.get('device', '')}")
        if pci is not None:
            found.append(pci)
    name = get_str(meta, "name", "metadata")
    return NodeFeatureInfo(
        namespace=get_str(meta, "namespace", "metadata"),
        name=name,
        node=get_string_map(meta, "labels", "metadata").get(NFD_NODE_NAME_LABEL, name),
        pci_devices=tuple(found),
    )

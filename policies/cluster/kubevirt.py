"""The KubeVirt family's projections: VirtualMachine and VirtualMachineInstance (run strategy,
gpus[] and hostDevices[] entries, eviction strategy, conditions, claims) and the KubeVirt CR
(permittedHostDevices, the cluster-wide eviction strategy, feature gates as KubeVirt reads
them).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from policies.cluster.conditions import Condition, conditions_of
from policies.cluster.dra_claims import ClaimRef, claim_refs
from policies.cluster.feature_gates import (
    DRA_GATES,
    HOST_DEVICES_GATE,
    FeatureGates,
    GateReading,
    feature_gates,
)
from policies.cluster.kinds import (
    RESOURCE_OF,
    VIRTUAL_MACHINE,
    VIRTUAL_MACHINE_INSTANCE,
    VM_CLUSTER_INSTANCETYPE,
    VM_INSTANCETYPE,
)
from policies.cluster.pciids import PciId, parse_pci_id
from policies.cluster.vm_run import RUNNING_STRATEGIES, asks_to_start, run_strategy_of
from policies.vocabulary.fields import (
    as_maps,
    get_bool,
    get_list,
    get_map,
    get_str,
    get_string_map,
    get_strings,
)
from policies.vocabulary.requests import CREATE, UPDATE, GroupKind, JSONObject

#: The requests that can start a VM: a VirtualMachine created or changed (its run strategy or
#: template), a VirtualMachineInstance created. What a VM asks for in order to run is judged here.
VM_STARTING_REQUESTS: Mapping[GroupKind, frozenset[str]] = MappingProxyType(
    {
        VIRTUAL_MACHINE: frozenset({CREATE, UPDATE}),
        VIRTUAL_MACHINE_INSTANCE: frozenset({CREATE}),
    }
)


#: The eviction strategy that moves a running VM away when its node drains.
LIVE_MIGRATE = "LiveMigrate"


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


#: How KubeVirt reads spec.instancetype.kind (pkg/instancetype/find/spec.go, lower-cased): the
#: singular or plural resource name; none means the cluster-wide kind.
INSTANCETYPE_KINDS: Mapping[str, GroupKind] = MappingProxyType(
    {
        **{
            name: kind
            for kind in (VM_INSTANCETYPE, VM_CLUSTER_INSTANCETYPE)
            for name in (kind.kind.lower(), RESOURCE_OF[kind].plural)
        },
        "": VM_CLUSTER_INSTANCETYPE,
    }
)


@dataclass(frozen=True, slots=True)
class InstancetypeRef:
    """A VM's spec.instancetype: the instancetype whose gpus[] and hostDevices[] KubeVirt copies
    into the VM's (pkg/instancetype/apply). ``kind`` is None when KubeVirt knows no such kind."""

    kind: GroupKind | None
    written_kind: str
    name: str
    revision: str
    """The ControllerRevision the VM runs with (spec.instancetype.revisionName, else
    status.instancetypeRef.controllerRevisionRef.name): KubeVirt's copy of the instancetype made
    when it first synced the VM; '' before."""

    @property
    def label(self) -> str:
        """How messages name it: ``VirtualMachineClusterInstancetype gpu-large``."""
        kind = self.kind.kind if self.kind is not None else self.written_kind
        return f"{kind} {self.name or '(unnamed)'}"


def instancetype_ref(
    spec: JSONObject, status: JSONObject, path: str = "spec"
) -> InstancetypeRef | None:
    matcher = get_map(spec, "instancetype", path)
    if not matcher:
        return None
    where = f"{path}.instancetype"
    written = get_str(matcher, "kind", where)
    ref = get_map(status, "instancetypeRef", "status")
    controller_revision = get_map(ref, "controllerRevisionRef", "status.instancetypeRef")
    return InstancetypeRef(
        INSTANCETYPE_KINDS.get(written.lower()),
        written,
        get_str(matcher, "name", where),
        get_str(matcher, "revisionName", where)
        or get_str(controller_revision, "name", "status.instancetypeRef.controllerRevisionRef"),
    )


@dataclass(frozen=True, slots=True)
class VMInfo:
    namespace: str
    name: str
    run_strategy: str
    devices: tuple[DeviceRequest, ...]
    """Its own gpus[] and hostDevices[]; an instancetype's are resolved against the view
    (``policies.cluster.vms_to_run.resolved``)."""
    eviction_strategy: str
    printable_status: str
    conditions: tuple[Condition, ...]
    claims: tuple[ClaimRef, ...] = ()
    start_requested: bool = False
    """A Start entry is pending in status.stateChangeRequests: virt-controller starts the VM
    (Manual), or sets its run strategy to Always (Halted), whatever the strategy says now."""
    instancetype: InstancetypeRef | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def should_run(self) -> bool:
        return self.run_strategy in RUNNING_STRATEGIES or self.start_requested


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


def vmi_devices(vmi_spec: JSONObject, path: str) -> tuple[DeviceRequest, ...]:
    domain = get_map(vmi_spec, "domain", path)
    return device_entries(get_map(domain, "devices", f"{path}.domain"), f"{path}.domain.devices")


def device_entries(devices: JSONObject, where: str) -> tuple[DeviceRequest, ...]:
    """The gpus[] and hostDevices[] of ``devices``: a VMI's domain.devices, or an instancetype's
    spec (which holds both lists at its top)."""
    out = []
    for field_name in ("gpus", "hostDevices"):
        for w, d in as_maps(get_list(devices, field_name, where), f"{where}.{field_name}"):
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


def project_vm(obj: JSONObject) -> VMInfo:
    meta = get_map(obj, "metadata", "")
    return vm_of_spec(
        get_map(obj, "spec", ""),
        get_map(obj, "status", ""),
        get_str(meta, "namespace", "metadata"),
        get_str(meta, "name", "metadata"),
    )


def vm_of_spec(
    spec: JSONObject, status: JSONObject, namespace: str, name: str, path: str = "spec"
) -> VMInfo:
    """A VM from its spec at ``path``: a VirtualMachine's, or the one a VirtualMachinePool's
    template makes (``spec.virtualMachineTemplate.spec``)."""
    template = get_map(spec, "template", path)
    where = f"{path}.template.spec"
    vmi_spec = get_map(template, "spec", f"{path}.template")
    return VMInfo(
        namespace=sys.intern(namespace),
        name=name,
        run_strategy=sys.intern(run_strategy_of(spec, path)),
        devices=vmi_devices(vmi_spec, where),
        eviction_strategy=get_str(vmi_spec, "evictionStrategy", where),
        printable_status=sys.intern(get_str(status, "printableStatus", "status")),
        conditions=conditions_of(status, "status"),
        claims=claim_refs(vmi_spec, where),
        instancetype=instancetype_ref(spec, status, path),
        start_requested=asks_to_start(status),
    )


def project_vmi(obj: JSONObject) -> VMIInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    status = get_map(obj, "status", "")
    owner = ""
    for where, ref in as_maps(
        get_list(meta, "ownerReferences", "metadata"), "metadata.ownerReferences"
    ):
        if get_str(ref, "kind", where) == "VirtualMachine":
            owner = get_str(ref, "name", where)
    return VMIInfo(
        namespace=sys.intern(get_str(meta, "namespace", "metadata")),
        name=get_str(meta, "name", "metadata"),
        node=sys.intern(get_str(status, "nodeName", "status")),
        phase=sys.intern(get_str(status, "phase", "status")),
        devices=vmi_devices(spec, "spec"),
        eviction_strategy=get_str(spec, "evictionStrategy", "spec"),
        conditions=conditions_of(status, "status"),
        owner_vm=owner,
        claims=claim_refs(spec, "spec"),
    )


def devices_of(request_kind: GroupKind, obj: JSONObject) -> tuple[DeviceRequest, ...]:
    if request_kind == VIRTUAL_MACHINE:
        return project_vm(obj).devices
    return project_vmi(obj).devices


# --- the KubeVirt CR ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PermittedPciDevice:
    index: int
    selector: str
    pci: PciId | None
    resource_name: str
    external: bool
    field: str = ""
    """Where the entry was written when not in the KubeVirt CR itself (a HyperConverged's)."""


@dataclass(frozen=True, slots=True)
class PermittedMdev:
    index: int
    selector: str
    resource_name: str
    external: bool
    field: str = ""


@dataclass(frozen=True, slots=True)
class PermittedUsb:
    """A permittedHostDevices.usb[] entry; ``selectors`` as "vendor:product" texts."""

    index: int
    selectors: tuple[str, ...]
    resource_name: str
    external: bool
    field: str = ""


@dataclass(frozen=True, slots=True)
class KubeVirtInfo:
    namespace: str
    name: str
    pci_devices: tuple[PermittedPciDevice, ...]
    mediated_devices: tuple[PermittedMdev, ...]
    eviction_strategy: str
    gates: FeatureGates
    usb_devices: tuple[PermittedUsb, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    origin: str = ""
    """What the configuration is when it is not a stored KubeVirt CR: "the KubeVirt CR HCO writes
    from HyperConverged ns/name" (policies.cluster.hyperconverged); '' for a KubeVirt CR."""

    @property
    def label(self) -> str:
        """How messages name it."""
        return self.origin or f"KubeVirt {self.namespace}/{self.name}"

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


def entry_field(entry: PermittedPciDevice | PermittedMdev | PermittedUsb) -> str:
    """The entry's field as its writer wrote it: ``pciHostDevices[1]`` of the KubeVirt CR, or the
    HyperConverged's (``spec.virtualization.permittedHostDevices.pciHostDevices[1]``)."""
    if entry.field:
        return entry.field
    kind = {PermittedPciDevice: "pciHostDevices", PermittedMdev: "mediatedDevices"}
    return f"{kind.get(type(entry), 'usb')}[{entry.index}]"


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
        as_maps(get_list(permitted, "pciHostDevices", pbase), f"{pbase}.pciHostDevices")
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
            as_maps(get_list(permitted, "mediatedDevices", pbase), f"{pbase}.mediatedDevices")
        )
    ]
    usbs = [
        PermittedUsb(
            i,
            tuple(
                f"{get_str(sel, 'vendor', sw)}:{get_str(sel, 'product', sw)}"
                for sw, sel in as_maps(get_list(d, "selectors", w), f"{w}.selectors")
            ),
            get_str(d, "resourceName", w),
            get_bool(d, "externalResourceProvider", w),
        )
        for i, (w, d) in enumerate(as_maps(get_list(permitted, "usb", pbase), f"{pbase}.usb"))
    ]
    return KubeVirtInfo(
        namespace=get_str(meta, "namespace", "metadata"),
        name=get_str(meta, "name", "metadata"),
        pci_devices=tuple(pci),
        mediated_devices=tuple(mdevs),
        eviction_strategy=get_str(config, "evictionStrategy", base),
        usb_devices=tuple(usbs),
        gates=gates,
        labels=get_string_map(meta, "labels", "metadata"),
    )

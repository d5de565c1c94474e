"""ResourceClaim and ResourceClaimTemplate projections: what a claim asks, and what it got.

A request is ``exactly`` one choice or a ``firstAvailable`` list of them (the scheduler takes the
first it can satisfy); v1beta1 spelled ``exactly`` flat in the request, which is read too.
``status.allocation`` names each device a request got (driver, pool, device) and the nodes they
are on; ``status.reservedFor`` the pods using the claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from policies.cluster.counters import project_capacity_requests
from policies.cluster.device_taints import Toleration, project_tolerations
from policies.cluster.node_selector import NodeSelector, project_node_selector
from policies.vocabulary.fields import (
    as_maps,
    get_bool,
    get_int,
    get_list,
    get_map,
    get_maps,
    get_str,
    parse_quantity,
)
from policies.vocabulary.requests import JSONObject

EXACT_COUNT = "ExactCount"
ALL_DEVICES = "All"


def selectors_of(obj: JSONObject, path: str) -> tuple[str, ...]:
    """selectors[].cel.expression; a selector of another (future) type reads as ''."""
    out = []
    for w, selector in get_maps(obj, "selectors", path):
        cel = get_map(selector, "cel", w)
        out.append(get_str(cel, "expression", f"{w}.cel"))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class DeviceChoice:
    """What one request (``exactly``) or one of its ``firstAvailable`` alternatives asks."""

    name: str
    device_class: str
    selectors: tuple[str, ...]
    allocation_mode: str
    """ExactCount (``count`` devices) or All (every matching device)."""
    count: int
    admin_access: bool
    capacity: tuple[tuple[str, Decimal], ...] = ()
    """capacity.requests: what it asks of a shared device's capacities (KEP-5075), as
    (name as written, amount) pairs: a choice is hashed."""
    tolerations: tuple[Toleration, ...] = ()
    """The device taints it tolerates (``policies.cluster.device_taints``)."""


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    name: str
    exactly: DeviceChoice | None
    first_available: tuple[DeviceChoice, ...]

    @property
    def choices(self) -> tuple[DeviceChoice, ...]:
        """The alternatives in the scheduler's order of preference (one for ``exactly``)."""
        return (self.exactly,) if self.exactly is not None else self.first_available


def _choice(obj: JSONObject, path: str, name: str) -> DeviceChoice:
    return DeviceChoice(
        name=name,
        device_class=get_str(obj, "deviceClassName", path),
        selectors=selectors_of(obj, path),
        allocation_mode=get_str(obj, "allocationMode", path, EXACT_COUNT),
        count=get_int(obj, "count", path, 1),
        admin_access=get_bool(obj, "adminAccess", path),
        capacity=tuple(sorted(project_capacity_requests(obj, path).items())),
        tolerations=project_tolerations(obj, path),
    )


def _requests(spec: JSONObject, path: str) -> tuple[ClaimRequest, ...]:
    devices = get_map(spec, "devices", path)
    out = []
    for w, request in get_maps(devices, "requests", f"{path}.devices"):
        name = get_str(request, "name", w)
        exactly = get_map(request, "exactly", w)
        alternatives = tuple(
            _choice(sub, sw, get_str(sub, "name", sw))
            for sw, sub in get_maps(request, "firstAvailable", w)
        )
        choice = None
        if exactly:
            choice = _choice(exactly, f"{w}.exactly", name)
        elif not alternatives and "deviceClassName" in request:
            choice = _choice(request, w, name)  # v1beta1 spelled the request flat
        out.append(ClaimRequest(name, choice, alternatives))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """status.allocation.devices.results[]: the device one request got."""

    request: str
    driver: str
    pool: str
    device: str
    share_id: str = ""
    """shareID: which share of a device with allowMultipleAllocations ('' for a whole one)."""
    consumed: tuple[tuple[str, Decimal], ...] = ()
    """consumedCapacity: what this allocation takes of the device's capacities (name as
    written, amount)."""


@dataclass(frozen=True, slots=True)
class Consumer:
    """status.reservedFor[]: who uses the claim (pods, as a rule)."""

    resource: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class ResourceClaimInfo:
    namespace: str
    name: str
    requests: tuple[ClaimRequest, ...]
    allocated: bool
    results: tuple[AllocatedDevice, ...]
    node_selector: NodeSelector | None
    """status.allocation.nodeSelector: where the allocated devices can be used."""
    reserved_for: tuple[Consumer, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes its allocation pins it to (node-local devices); () when not pinned."""
        return self.node_selector.pinned_nodes() if self.node_selector is not None else ()

    @property
    def reserving_pods(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.reserved_for if c.resource == "pods")


def project_resource_claim(obj: JSONObject) -> ResourceClaimInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    status = get_map(obj, "status", "")
    allocation = get_map(status, "allocation", "status")
    base = "status.allocation"
    devices = get_map(allocation, "devices", base)
    results = tuple(
        AllocatedDevice(
            get_str(r, "request", w),
            get_str(r, "driver", w),
            get_str(r, "pool", w),
            get_str(r, "device", w),
            get_str(r, "shareID", w),
            tuple(
                (str(name), parse_quantity(value, f"{w}.consumedCapacity.{name}"))
                for name, value in sorted(get_map(r, "consumedCapacity", w).items())
            ),
        )
        for w, r in get_maps(devices, "results", f"{base}.devices")
    )
    consumers = tuple(
        Consumer(get_str(c, "resource", w), get_str(c, "name", w), get_str(c, "uid", w))
        for w, c in get_maps(status, "reservedFor", "status")
    )
    return ResourceClaimInfo(
        namespace=get_str(meta, "namespace", "metadata"),
        name=get_str(meta, "name", "metadata"),
        requests=_requests(spec, "spec"),
        allocated=bool(allocation),
        results=results,
        node_selector=project_node_selector(allocation, "nodeSelector", base),
        reserved_for=consumers,
    )


@dataclass(frozen=True, slots=True)
class ResourceClaimTemplateInfo:
    namespace: str
    name: str
    requests: tuple[ClaimRequest, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def project_resource_claim_template(obj: JSONObject) -> ResourceClaimTemplateInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    return ResourceClaimTemplateInfo(
        namespace=get_str(meta, "namespace", "metadata"),
        name=get_str(meta, "name", "metadata"),
        requests=_requests(get_map(spec, "spec", "spec"), "spec.spec"),
    )


# --- spec.resourceClaims[] of the pods, VMs and VMIs that use claims
# -------------------------------


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """One spec.resourceClaims[] entry of a pod, VM or VMI: a ResourceClaim named outright, or one
    made from a ResourceClaimTemplate (for a pod, status.resourceClaimStatuses names it)."""

    name: str
    claim: str
    template: str


def through_extended_resource_only(refs: Sequence[ClaimRef], claim: str) -> bool:
    """Whether ``claim`` reaches its pod only as the claim the scheduler made for an extended
    resource (status.extendedResourceClaimStatus: the entry ``claim_refs`` names '')."""
    named = [ref.name for ref in refs if ref.claim == claim]
    return bool(named) and not any(named)


def claim_refs(
    spec: JSONObject, path: str, status: JSONObject | None = None
) -> tuple[ClaimRef, ...]:
    """spec.resourceClaims[], each resolved to its claim's name where one is known; for a pod
    whose extended resources DRA serves, the claim the scheduler made (named '')."""
    entries = as_maps(get_list(spec, "resourceClaims", path), f"{path}.resourceClaims")
    extended = get_map(status, "extendedResourceClaimStatus", "status") if status else {}
    if not entries and not extended:
        return ()
    made: dict[str, str] = {}
    if status is not None:
        for w, s in as_maps(
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

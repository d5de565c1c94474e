"""The DRA part of ClusterState: device classes, slices, claims and templates, and their indexes.

Kept correct through every upsert and delete, like the rest of the state, so that admission asks
a dict and never scans: the devices of the current generation of each pool by node and driver;
the devices each DeviceClass selects (its CEL selectors evaluated once per device, remembered);
allocated claims by node; who references each claim and template. Node health is not kept here:
``ClusterState`` owns nodes and passes its healthy set where a count needs it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from policies.cel.hints import published_value
from policies.cel.selectors import select
from policies.cel.values import Outcome
from policies.cluster.counter_fit import newest_counter_sets
from policies.cluster.counters import Counters
from policies.cluster.dra import (
    DeviceClassInfo,
    DeviceId,
    PublishedDevice,
    ResourceSliceInfo,
    published_devices,
)
from policies.cluster.dra_claims import ClaimRef, ResourceClaimInfo, ResourceClaimTemplateInfo
from policies.cluster.kinds import POD, VIRTUAL_MACHINE, VIRTUAL_MACHINE_INSTANCE
from policies.cluster.kubevirt import VMIInfo, VMInfo
from policies.cluster.pods import PodInfo
from policies.cluster.view import ClaimReferrers, NodeClaim, RequestCounts
from policies.state.taints import TaintIndex

Key = tuple[str, str]  # (namespace, name)
PoolKey = tuple[str, str]  # (driver, pool)
#: Who references a claim or template: ("Pod" | "VirtualMachine" | "VirtualMachineInstance", key).
Referrer = tuple[str, Key]


def _drop(index: dict[str, dict[DeviceId, PublishedDevice]], key: str, device: DeviceId) -> None:
    inner = index.get(key)
    if inner is not None:
        inner.pop(device, None)
        if not inner:
            del index[key]


#: Told (resource, node, True) when a node gets its first device serving an extendedResourceName,
#: (resource, node, False) when it loses its last one.
ServesExtended = Callable[[str, str, bool], None]


#: Request shapes whose per-node counts are kept (least recently used go first).
REQUEST_COUNTS_KEPT = 512


class DraIndex:
    def __init__(self, on_extended: ServesExtended | None = None) -> None:
        self._on_extended = on_extended
        self.classes: dict[str, DeviceClassInfo] = {}
        self.slices: dict[str, ResourceSliceInfo] = {}
        self.claims: dict[Key, ResourceClaimInfo] = {}
        self.templates: dict[Key, ResourceClaimTemplateInfo] = {}
        self.devices: dict[DeviceId, PublishedDevice] = {}
        self._pool_slices: dict[PoolKey, set[str]] = {}
        self._pool_devices: dict[PoolKey, set[DeviceId]] = {}
        self.by_node: dict[str, dict[str, dict[DeviceId, PublishedDevice]]] = {}
        """node ('' for devices of no one node) -> driver -> devices."""
        self.nodes_by_driver: dict[str, dict[str, int]] = {}
        """driver -> node -> how many devices it publishes there."""
        self.class_devices: dict[str, dict[str, dict[DeviceId, PublishedDevice]]] = {}
        """class -> node -> the devices all its selectors accept."""
        self.class_unknown: dict[str, dict[DeviceId, str]] = {}
        """class -> devices its selectors could not decide, with why."""
        self.extended: dict[str, dict[str, int]] = {}
        """extendedResourceName -> node -> devices of classes serving it there."""
        self.claims_by_node: dict[str, set[Key]] = {}
        self.touched_nodes: set[str] = set()
        """Nodes whose published devices changed since the state last took them."""
        self.referrers: dict[tuple[bool, str, str], set[Referrer]] = {}
        """(template?, namespace, name) -> who names that claim (False) or template (True)."""
        self.taints = TaintIndex()
        self.version = 0
        """Bumped whenever a class or a published device changes: what request counts rest on."""
        self._class_values: dict[tuple[str, str], tuple[int, frozenset[str]]] = {}
        self._request_counts: OrderedDict[
            tuple[str, tuple[str, ...]], tuple[int, RequestCounts]
        ] = OrderedDict()

    # --- device classes --------------------------------------------------------------------------

    def set_class(self, info: DeviceClassInfo) -> None:
        self.version += 1
        self.unset_class(info.name)
        self.classes[info.name] = info
        self.class_devices[info.name] = {}
        self.class_unknown[info.name] = {}
        for device in self.devices.values():
            self._judge(info, device)

    def unset_class(self, name: str) -> None:
        self.version += 1
        info = self.classes.pop(name, None)
        if info is None:
            return
        for node, devices in self.class_devices.pop(name, {}).items():
            self._count_extended(info, node, -len(devices))
        self.class_unknown.pop(name, None)

    def _judge(self, info: DeviceClassInfo, device: PublishedDevice) -> None:
        result = select(info.selectors, device.device)
        if result.outcome is Outcome.MATCH:
            self.class_devices[info.name].setdefault(device.node, {})[device.id] = device
            self._count_extended(info, device.node, 1)
        elif result.outcome is Outcome.UNKNOWN:
            self.class_unknown[info.name][device.id] = result.reason

    def _count_extended(self, info: DeviceClassInfo, node: str, delta: int) -> None:
        for resource in info.served_resources if delta else ():
            self._count_resource(resource, node, delta)

    def _count_resource(self, resource: str, node: str, delta: int) -> None:
        nodes = self.extended.setdefault(resource, {})
        before = nodes.get(node, 0)
        nodes[node] = before + delta
        if nodes[node] <= 0:
            del nodes[node]
            if not nodes:
                del self.extended[resource]
        serves = node in nodes
        if self._on_extended is not None and node and serves != (before > 0):
            self._on_extended(resource, node, serves)

    def class_values(self, class_name: str, key: str) -> frozenset[str]:
        """The strings the class's devices publish under ``key``, kept until a class or a
        device changes (near-miss hints of many claims read the same ones)."""
        hit = self._class_values.get((class_name, key))
        if hit is not None and hit[0] == self.version:
            return hit[1]
        values = frozenset(
            value
            for devices in self.class_devices.get(class_name, {}).values()
            for device in devices.values()
            if (value := published_value(device.device, key)) is not None
        )
        if hit is None and len(self._class_values) >= REQUEST_COUNTS_KEPT:
            self._class_values.clear()
        self._class_values[(class_name, key)] = (self.version, values)
        return values

    def request_counts(self, class_name: str, selectors: tuple[str, ...]) -> RequestCounts:
        """Node ('' for node-independent devices) -> how many of the class's devices a request's
        own ``selectors`` accept, and how many they could not decide: one pass over the class's
        devices, then the same answer until a class or a device changes. Claims of one shape
        (from one template, or asking one product) are judged on counts, not device by device."""
        key = (class_name, selectors)
        hit = self._request_counts.get(key)
        if hit is not None and hit[0] == self.version:
            self._request_counts.move_to_end(key)
            return hit[1]
        accepted: dict[str, int] = {}
        possible: dict[str, int] = {}
        for node, devices in self.class_devices.get(class_name, {}).items():
            matched = undecided = 0
            for device in devices.values():
                outcome = select(selectors, device.device).outcome
                if outcome is Outcome.MATCH:
                    matched += 1
                elif outcome is Outcome.UNKNOWN:
                    undecided += 1
            if matched or undecided:
                accepted[node] = matched
                possible[node] = matched + undecided
        counts = RequestCounts(accepted, possible)
        self._request_counts[key] = (self.version, counts)
        if len(self._request_counts) > REQUEST_COUNTS_KEPT:
            self._request_counts.popitem(last=False)
        return counts

    # --- slices and the devices of each pool's current generation --------------------------------

    def set_slice(self, info: ResourceSliceInfo) -> None:
        old = self.slices.get(info.name)
        self.slices[info.name] = info
        self._pool_slices.setdefault(info.pool_key, set()).add(info.name)
        if old is not None and old.pool_key != info.pool_key:
            self._pool_slices[old.pool_key].discard(info.name)
            self._reindex_pool(old.pool_key)
        self._reindex_pool(info.pool_key)

    def unset_slice(self, name: str) -> None:
        old = self.slices.pop(name, None)
        if old is not None:
            self._pool_slices[old.pool_key].discard(name)
            self._reindex_pool(old.pool_key)

    def _reindex_pool(self, pool: PoolKey) -> None:
        """Only the newest generation of a pool counts; older slices stay until the driver
        replaces them, their devices hidden (the scheduler ignores them too)."""
        self.version += 1
        for device_id in self._pool_devices.pop(pool, set()):
            self._remove_device(device_id)
        names = self._pool_slices.get(pool, set())
        if not names:
            self._pool_slices.pop(pool, None)
            return
        current = [self.slices[name] for name in names]
        newest = max(s.generation for s in current)
        ids: set[DeviceId] = set()
        for slice_ in sorted(current, key=lambda s: s.name):
            if slice_.generation != newest:
                continue
            for device in published_devices(slice_):
                if device.id not in ids:  # a device named twice in a pool: the first stands
                    ids.add(device.id)
                    self._add_device(device)
        if ids:
            self._pool_devices[pool] = ids

    def pool_counter_sets(self, pool: PoolKey) -> Mapping[str, Counters]:
        """The counter sets of the pool's newest generation (a pool has few slices)."""
        return newest_counter_sets([self.slices[n] for n in self._pool_slices.get(pool, ())])

    def _add_device(self, device: PublishedDevice) -> None:
        self.devices[device.id] = device
        self.touched_nodes.add(device.node)
        self.taints.add(device)
        driver = device.device.driver
        self.by_node.setdefault(device.node, {}).setdefault(driver, {})[device.id] = device
        if device.node:
            nodes = self.nodes_by_driver.setdefault(driver, {})
            nodes[device.node] = nodes.get(device.node, 0) + 1
        for info in self.classes.values():
            self._judge(info, device)

    def _remove_device(self, device_id: DeviceId) -> None:
        device = self.devices.pop(device_id, None)
        if device is None:
            return
        self.touched_nodes.add(device.node)
        self.taints.remove(device)
        driver = device.device.driver
        drivers = self.by_node.get(device.node, {})
        _drop(drivers, driver, device_id)
        if not drivers:
            self.by_node.pop(device.node, None)
        if device.node:
            nodes = self.nodes_by_driver[driver]
            nodes[device.node] -= 1
            if not nodes[device.node]:
                del nodes[device.node]
                if not nodes:
                    del self.nodes_by_driver[driver]
        for name, by_node in self.class_devices.items():
            if device_id in by_node.get(device.node, {}):
                _drop(by_node, device.node, device_id)
                self._count_extended(self.classes[name], device.node, -1)
        for unknown in self.class_unknown.values():
            unknown.pop(device_id, None)

    def pool_devices(self) -> Mapping[PoolKey, set[DeviceId]]:
        """(driver, pool) -> the devices of its current generation."""
        return self._pool_devices

    # --- claims and templates --------------------------------------------------------------------

    def set_claim(self, info: ResourceClaimInfo) -> None:
        key = (info.namespace, info.name)
        self.unset_claim(key)
        self.claims[key] = info
        if info.allocated:  # '' holds the claims on node-independent devices (allNodes)
            for node in info.nodes or ("",):
                self.claims_by_node.setdefault(node, set()).add(key)

    def unset_claim(self, key: Key) -> None:
        info = self.claims.pop(key, None)
        if info is None:
            return
        for node in info.nodes or ("",):
            keys = self.claims_by_node.get(node)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.claims_by_node[node]

    def link(self, kind: str, key: Key, claims: Sequence[ClaimRef], add: bool) -> None:
        """Record (or forget) that the pod, VM or VMI ``key`` names these claims and templates."""
        for ref in claims:
            targets = [(False, ref.claim)] if ref.claim else []
            if ref.template:
                targets.append((True, ref.template))
            for template, name in targets:
                index_key = (template, key[0], name)
                if add:
                    self.referrers.setdefault(index_key, set()).add((kind, key))
                    continue
                found = self.referrers.get(index_key)
                if found is not None:
                    found.discard((kind, key))
                    if not found:
                        del self.referrers[index_key]


class DeviceCounts(Mapping[str, int]):
    """Node -> how many devices, read through to the index: no copy of 5,000 nodes per request
    that asks one node's count (a view: read it before the state changes again)."""

    __slots__ = ("_by_node",)

    def __init__(self, by_node: Mapping[str, Mapping[DeviceId, PublishedDevice]]) -> None:
        self._by_node = by_node

    def __getitem__(self, node: str) -> int:
        return len(self._by_node[node])

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_node)

    def __len__(self) -> int:
        return len(self._by_node)


class DraView:
    """The DRA queries of ``policies.cluster.view.ClusterView``, mixed into ClusterState, whose
    tables (pods, VMs, VMIs, healthy nodes) they join with the DRA index."""

    _dra: DraIndex
    _pods: dict[Key, PodInfo]
    _vms: dict[Key, VMInfo]
    _vmis: dict[Key, VMIInfo]
    _healthy_nodes: set[str]

    def device_class(self, name: str) -> DeviceClassInfo | None:
        return self._dra.classes.get(name)

    def device_classes(self) -> Sequence[DeviceClassInfo]:
        return [self._dra.classes[name] for name in sorted(self._dra.classes)]

    def resource_slices(self) -> Sequence[ResourceSliceInfo]:
        return [self._dra.slices[name] for name in sorted(self._dra.slices)]

    def published_devices(self) -> Iterable[PublishedDevice]:
        return self._dra.devices.values()

    def published_device(self, device: DeviceId) -> PublishedDevice | None:
        return self._dra.devices.get(device)

    def devices_on(self, node: str, driver: str | None = None) -> Sequence[PublishedDevice]:
        drivers = self._dra.by_node.get(node, {})
        chosen = [drivers.get(driver, {})] if driver is not None else list(drivers.values())
        return sorted((d for group in chosen for d in group.values()), key=lambda d: d.id)

    def dra_drivers_on(self, node: str) -> Sequence[str]:
        return sorted(self._dra.by_node.get(node, {}))

    def nodes_with_devices(self, driver: str) -> Sequence[str]:
        return sorted(self._dra.nodes_by_driver.get(driver, {}))

    def pool_counter_sets(self, driver: str, pool: str) -> Mapping[str, Counters]:
        return self._dra.pool_counter_sets((driver, pool))

    def class_device_counts(self, class_name: str) -> Mapping[str, int]:
        return DeviceCounts(self._dra.class_devices.get(class_name, {}))

    def class_request_counts(self, class_name: str, selectors: tuple[str, ...]) -> RequestCounts:
        return self._dra.request_counts(class_name, selectors)

    def class_attribute_values(self, class_name: str, key: str) -> frozenset[str]:
        return self._dra.class_values(class_name, key)

    def class_devices_on(self, class_name: str, node: str) -> Sequence[PublishedDevice]:
        devices = self._dra.class_devices.get(class_name, {}).get(node, {})
        return [devices[key] for key in sorted(devices)]

    def class_undecided(self, class_name: str) -> Sequence[tuple[PublishedDevice, str]]:
        unknown = self._dra.class_unknown.get(class_name, {})
        return [(self._dra.devices[key], unknown[key]) for key in sorted(unknown)]

    def extended_resource_providers(self, resource: str) -> Sequence[str]:
        return sorted(node for node in self._dra.extended.get(resource, {}) if node)

    def healthy_extended_resource_provider_count(self, resource: str) -> int:
        nodes = self._dra.extended.get(resource, {})
        return sum(1 for node in nodes if node in self._healthy_nodes)

    def claim(self, namespace: str, name: str) -> ResourceClaimInfo | None:
        return self._dra.claims.get((namespace, name))

    def claims(self) -> Sequence[ResourceClaimInfo]:
        return [self._dra.claims[key] for key in sorted(self._dra.claims)]

    def claim_template(self, namespace: str, name: str) -> ResourceClaimTemplateInfo | None:
        return self._dra.templates.get((namespace, name))

    def claim_templates(self) -> Sequence[ResourceClaimTemplateInfo]:
        return [self._dra.templates[key] for key in sorted(self._dra.templates)]

    def pod(self, namespace: str, name: str) -> PodInfo | None:
        return self._pods.get((namespace, name))

    def claims_allocated_on(self, node: str) -> Sequence[NodeClaim]:
        out = []
        for key in sorted(self._dra.claims_by_node.get(node, ())):
            claim = self._dra.claims[key]
            devices = tuple(
                (result, self._dra.devices.get(DeviceId(result.driver, result.pool, result.device)))
                for result in claim.results
            )
            pods = tuple(
                pod
                for name in claim.reserving_pods
                if (pod := self._pods.get((claim.namespace, name))) is not None
            )
            out.append(NodeClaim(claim, devices, pods))
        return out

    def claim_referrers(self, namespace: str, name: str, template: bool = False) -> ClaimReferrers:
        found = sorted(self._dra.referrers.get((template, namespace, name), ()))
        tables: dict[str, Mapping[Key, Any]] = {
            POD.kind: self._pods,
            VIRTUAL_MACHINE.kind: self._vms,
            VIRTUAL_MACHINE_INSTANCE.kind: self._vmis,
        }
        picked = {kind: [tables[kind][key] for k, key in found if k == kind] for kind in tables}
        return ClaimReferrers(
            tuple(picked[POD.kind]),
            tuple(picked[VIRTUAL_MACHINE.kind]),
            tuple(picked[VIRTUAL_MACHINE_INSTANCE.kind]),
        )

"""The device-taint and admin-access queries of the cluster view (``policies.state.taints``
keeps the taints' index; Namespaces are kept for their labels), apart from ``DraView`` so that
each module stays small."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from policies.cluster.admin_access import NamespaceInfo
from policies.cluster.device_taints import DeviceTaint, DeviceTaintRuleInfo
from policies.cluster.dra import PublishedDevice
from policies.state.dra import DraIndex


class TaintView:
    """The device-taint queries of ``policies.cluster.view.ClusterView`` and the rules' store,
    mixed into ClusterState beside ``DraView``."""

    _dra: DraIndex
    _namespaces: dict[str, NamespaceInfo]

    def device_taints(self, device: PublishedDevice) -> tuple[DeviceTaint, ...]:
        return self._dra.taints.taints_of(device)

    def may_keep_off(self, node: str) -> bool:
        return self._dra.taints.may_keep_off(node, self._dra.by_node.get(node, {}))

    def device_taint_rules(self) -> Sequence[DeviceTaintRuleInfo]:
        rules = self._dra.taints.rules
        return [rules[name] for name in sorted(rules)]

    def device_taint_rules_act(self) -> bool:
        return self._dra.taints.rules_act()

    def follow_device_taint_rules(self, source: Callable[[], bool]) -> None:
        """Reads from ``source`` (the configuration, which a reload may change) whether the
        DRADeviceTaintRules gate is on: the guard cannot see kube-apiserver's gates."""
        self._dra.taints.rules_act = source

    def namespace(self, name: str) -> NamespaceInfo | None:
        return self._namespaces.get(name)

    def admin_access_namespaces(self) -> Sequence[str]:
        return sorted(n for n, info in self._namespaces.items() if info.admin_access)

    def _set_namespace(self, info: NamespaceInfo) -> None:
        self._namespaces[info.name] = info

    def _unset_namespace(self, key: tuple[str, str]) -> None:
        self._namespaces.pop(key[1], None)

    def _set_device_taint_rule(self, info: DeviceTaintRuleInfo) -> None:
        self._dra.taints.set_rule(info)

    def _unset_device_taint_rule(self, key: tuple[str, str]) -> None:
        self._dra.taints.unset_rule(key[1])

    def devices_selected(self, rule: DeviceTaintRuleInfo) -> Sequence[PublishedDevice]:
        dra = self._dra
        if rule.pool:
            named = dra.taints.pool_drivers.get(rule.pool, {})
            drivers = [rule.driver] if rule.driver else sorted(named)
            pools = dra.pool_devices()
            ids = [i for driver in drivers for i in pools.get((driver, rule.pool), ())]
            found = [dra.devices[i] for i in ids if not rule.device or i.device == rule.device]
            return sorted(found, key=lambda d: d.id)
        found = []
        for node, on in self._selected_nodes(rule):
            devices = dra.by_node.get(node, {})
            for driver in on:
                found += [
                    device
                    for device in devices.get(driver, {}).values()
                    if not rule.device or device.device.name == rule.device
                ]
        return sorted(found, key=lambda d: d.id)

    def nodes_selected(self, rule: DeviceTaintRuleInfo, at_most: int) -> Sequence[str]:
        if rule.pool:
            return sorted({d.node for d in self.devices_selected(rule) if d.node})[:at_most]
        found: set[str] = set()
        for node, _ in self._selected_nodes(rule):
            if node:
                found.add(node)
                if len(found) == at_most:
                    break
        return sorted(found)

    def _selected_nodes(self, rule: DeviceTaintRuleInfo) -> Iterator[tuple[str, Sequence[str]]]:
        """For a rule naming no pool: (node, the drivers to look at there) for each node ('' for
        node-independent devices) where it may select a device, from the index of device names (a
        name), of drivers' nodes (a driver), else every node with devices."""
        dra = self._dra
        if rule.device:
            named = dra.taints.named.get(rule.device, {})
            for driver in [rule.driver] if rule.driver else sorted(named):
                for node in named.get(driver, {}):
                    yield node, (driver,)
        elif rule.driver:
            for node in dra.nodes_by_driver.get(rule.driver, {}):
                yield node, (rule.driver,)
            if rule.driver in dra.by_node.get("", {}):
                yield "", (rule.driver,)
        else:
            for node, drivers in dra.by_node.items():
                yield node, tuple(drivers)

"""The device-taint and admin-access queries of the cluster view (``policies.state.taints``
keeps the taints' index; Namespaces are kept for their labels), apart from ``DraView`` so that
each module stays small."""

from __future__ import annotations

from collections.abc import Callable, Sequence

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
        pools = dra.pool_devices()
        if rule.pool:
            drivers = [rule.driver] if rule.driver else sorted({d for d, _ in pools})
            keys = [(driver, rule.pool) for driver in drivers]
        else:
            keys = sorted(k for k in pools if not rule.driver or k[0] == rule.driver)
        found = [
            dra.devices[device]
            for key in keys
            for device in pools.get(key, ())
            if not rule.device or device.device == rule.device
        ]
        return sorted(found, key=lambda d: d.id)

"""The device-taint part of the DRA state: which nodes have devices that keep requests off, and
the DeviceTaintRules, so that a claim's fit asks device by device only where a taint can matter.

Slice taints are indexed as devices come and go (``DraIndex`` tells ``TaintIndex``); rules are
few and read as they stand, and only when the guard is told the DRADeviceTaintRules gate is on
(``follow_device_taint_rules``): without the gate nothing acts on them. What a rule's
deviceSelector can name (a pool, a device name) is indexed too, so admitting a rule is an index
hit at any size: the nodes that have a device of a name, the drivers that have a pool of a name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from policies.cluster.device_taints import DeviceTaint, DeviceTaintRuleInfo
from policies.cluster.dra import DeviceId, PublishedDevice


class TaintIndex:
    def __init__(self) -> None:
        self.rules: dict[str, DeviceTaintRuleInfo] = {}
        self._by_pool: dict[str, dict[str, DeviceTaintRuleInfo]] = {}
        """pool -> the rules naming it; rules naming no pool are under ''."""
        self.tainted: dict[str, set[DeviceId]] = {}
        """node ('' for node-independent devices) -> devices whose slice taints keep off."""
        self.rules_act: Callable[[], bool] = lambda: False
        self.named: dict[str, dict[str, dict[str, int]]] = {}
        """device name -> driver -> node ('' for node-independent devices) -> devices so named."""
        self.pool_drivers: dict[str, dict[str, int]] = {}
        """pool name -> driver -> its devices (a pool is named per driver)."""

    def set_rule(self, rule: DeviceTaintRuleInfo) -> None:
        self.unset_rule(rule.name)
        self.rules[rule.name] = rule
        self._by_pool.setdefault(rule.pool, {})[rule.name] = rule

    def unset_rule(self, name: str) -> None:
        old = self.rules.pop(name, None)
        if old is not None:
            pooled = self._by_pool[old.pool]
            del pooled[name]
            if not pooled:
                del self._by_pool[old.pool]

    def add(self, device: PublishedDevice) -> None:
        if any(t.keeps_off for t in device.device.taints):
            self.tainted.setdefault(device.node, set()).add(device.id)
        driver = device.device.driver
        _count(self.named.setdefault(device.device.name, {}).setdefault(driver, {}), device.node)
        _count(self.pool_drivers.setdefault(device.pool, {}), driver)

    def remove(self, device: PublishedDevice) -> None:
        found = self.tainted.get(device.node)
        if found is not None:
            found.discard(device.id)
            if not found:
                del self.tainted[device.node]
        drivers = self.named[device.device.name]
        if _uncount(drivers[device.device.driver], device.node):
            del drivers[device.device.driver]
            if not drivers:
                del self.named[device.device.name]
        if _uncount(self.pool_drivers[device.pool], device.device.driver):
            del self.pool_drivers[device.pool]

    def _rules_for(self, pool: str) -> list[DeviceTaintRuleInfo]:
        """The acting rules that may select a device of ``pool``: those naming it, and those
        naming no pool (by pool first: a rule per node of a rack costs one lookup)."""
        if not self.rules or not self.rules_act():
            return []
        named = self._by_pool.get(pool, {}) if pool else {}
        return [*named.values(), *self._by_pool.get("", {}).values()]

    def taints_of(self, device: PublishedDevice) -> tuple[DeviceTaint, ...]:
        ruled = sorted(
            (
                rule
                for rule in self._rules_for(device.pool)
                if rule.selects(device.device.driver, device.pool, device.device.name)
            ),
            key=lambda rule: rule.name,
        )
        return (*device.device.taints, *(rule.taint for rule in ruled))

    def may_keep_off(
        self, node: str, drivers: Mapping[str, Mapping[DeviceId, PublishedDevice]]
    ) -> bool:
        """Whether some device of ``node`` (its devices by driver) carries a taint that keeps
        requests off: an index hit, then the acting rules that may select its pools' devices."""
        if node in self.tainted:
            return True
        if not self.rules or not self.rules_act():
            return False
        for driver, devices in drivers.items():
            for pool in {d.pool for d in devices}:
                for rule in self._rules_for(pool):
                    if rule.taint.keeps_off and any(
                        rule.selects(driver, d.pool, d.device) for d in devices
                    ):
                        return True
        return False


def _count(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


def _uncount(counts: dict[str, int], key: str) -> bool:
    """One fewer under ``key``; whether ``counts`` is now empty."""
    counts[key] -= 1
    if not counts[key]:
        del counts[key]
    return not counts

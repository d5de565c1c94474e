"""The device-taint part of the DRA state: which nodes have devices that keep requests off, and
the DeviceTaintRules, so that a claim's fit asks device by device only where a taint can matter.

Slice taints are indexed as devices come and go (``DraIndex`` tells ``TaintIndex``); rules are
few and read as they stand, and only when the guard is told the DRADeviceTaintRules gate is on
(``follow_device_taint_rules``): without the gate nothing acts on them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from policies.cluster.device_taints import DeviceTaint, DeviceTaintRuleInfo
from policies.cluster.dra import DeviceId, PublishedDevice


class TaintIndex:
    def __init__(self) -> None:
        self.rules: dict[str, DeviceTaintRuleInfo] = {}
        self.tainted: dict[str, set[DeviceId]] = {}
        """node ('' for node-independent devices) -> devices whose slice taints keep off."""
        self.rules_act: Callable[[], bool] = lambda: False

    def add(self, device: PublishedDevice) -> None:
        if any(t.keeps_off for t in device.device.taints):
            self.tainted.setdefault(device.node, set()).add(device.id)

    def remove(self, device: PublishedDevice) -> None:
        found = self.tainted.get(device.node)
        if found is not None:
            found.discard(device.id)
            if not found:
                del self.tainted[device.node]

    def acting_rules(self) -> Sequence[DeviceTaintRuleInfo]:
        if not self.rules or not self.rules_act():
            return ()
        return [self.rules[name] for name in sorted(self.rules)]

    def taints_of(self, device: PublishedDevice) -> tuple[DeviceTaint, ...]:
        ruled = tuple(
            rule.taint
            for rule in self.acting_rules()
            if rule.selects(device.device.driver, device.pool, device.device.name)
        )
        return (*device.device.taints, *ruled)

    def may_keep_off(
        self, node: str, drivers: Mapping[str, Mapping[DeviceId, PublishedDevice]]
    ) -> bool:
        """Whether some device of ``node`` (its devices by driver) carries a taint that keeps
        requests off: an index hit, then the acting rules over the node's few devices."""
        if node in self.tainted:
            return True
        for rule in self.acting_rules():
            if not rule.taint.keeps_off:
                continue
            for driver, devices in drivers.items():
                if rule.driver and rule.driver != driver:
                    continue
                if any(rule.selects(driver, d.pool, d.device) for d in devices):
                    return True
        return False

"""Which of a choice's devices a taint keeps it off, and the shortfall that says so: the device
taints' part of ``policies.cluster.claim_fit``, apart so that module stays one question."""

from __future__ import annotations

from policies.cel.selectors import select
from policies.cluster.claim_shortfall import Shortfall, Why
from policies.cluster.device_taints import DeviceTaint, describe_taint, untolerated
from policies.cluster.dra import PublishedDevice
from policies.cluster.dra_claims import DeviceChoice
from policies.cluster.view import ClusterView

#: A device its choice's selectors accept, and the first taint keeping the choice off it.
Held = tuple[PublishedDevice, DeviceTaint]


def blocked(view: ClusterView, device: PublishedDevice, choice: DeviceChoice) -> bool:
    """Whether a taint the choice does not tolerate keeps it off ``device``."""
    return bool(untolerated(view.device_taints(device), choice.tolerations))


def tainted_on(view: ClusterView, choice: DeviceChoice, node: str) -> list[Held]:
    """The devices of the choice's class on ``node`` its selectors accept and a taint keeps it
    off, each with the first such taint."""
    if not view.may_keep_off(node):
        return []
    out = []
    for device in view.class_devices_on(choice.device_class, node):
        keeping = untolerated(view.device_taints(device), choice.tolerations)
        if keeping and select(choice.selectors, device.device).matches:
            out.append((device, keeping[0]))
    return out


def tainted_shortfall(choice: DeviceChoice, alternative: str, held: list[Held]) -> Shortfall:
    device, taint = held[0]
    return Shortfall(
        Why.TAINTED,
        choice.device_class,
        alternative,
        found=len(held),
        reason=describe_taint(device.device.name, device.node, taint),
    )


def serving_count(view: ClusterView, class_name: str, node: str, counted: int) -> int:
    """Of the ``counted`` devices of a class on ``node``, those no taint keeps a request without
    tolerations off (the index's count where no device of the node may carry one)."""
    if not view.may_keep_off(node):
        return counted
    devices = view.class_devices_on(class_name, node)
    return sum(1 for d in devices if not untolerated(view.device_taints(d), ()))

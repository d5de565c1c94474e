"""DRA device taints and the tolerations of claim requests: when a tainted device still serves.

KEP-5055 (docs/dra.md, [taints]): a device is tainted by its ResourceSlice (``devices[].taints``)
and by every DeviceTaintRule whose ``spec.deviceSelector`` (driver, pool, device; each empty
field matches all) selects it. NoSchedule keeps new allocations off the device, NoExecute also
evicts the pods already using it, None (1.35+) only says something. A request's ``tolerations``
match a taint as a pod's match a node's: an empty key with Exists matches every key, Exists any
value, Equal (the default) the one value, and an empty effect every effect. DeviceTaintRules act
only when kube-apiserver and the scheduler run with the DRADeviceTaintRules gate (beta, off by
default in 1.36), which the guard cannot see: it is told (``--device-taint-rules``).

NVIDIA's DRA driver taints its own devices for health (driver gate NVMLDeviceHealthCheck):
``gpu.nvidia.com/gpu-lost`` NoSchedule, ``gpu.nvidia.com/xid=<code>`` NoSchedule when the XID
is fatal and None otherwise (the effect is the driver's verdict on the code),
``gpu.nvidia.com/unmonitored`` None (kubernetes-sigs/dra-driver-nvidia-gpu,
cmd/gpu-kubelet-plugin/device_health.go).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from policies.vocabulary.fields import ObjectError, get_int, get_map, get_maps, get_str, get_time
from policies.vocabulary.requests import JSONObject
from policies.vocabulary.text import rfc3339

NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
NO_EFFECT = "None"
#: The effects that keep a request off a device it does not tolerate.
KEEPING_OFF = frozenset({NO_SCHEDULE, NO_EXECUTE})
EXISTS = "Exists"
EQUAL = "Equal"

NOT_EVICTED = (
    "status.extendedResourceClaimStatus, which the device-taint eviction controller does not "
    "read (kubernetes/kubernetes#141290)"
)
"""Where a pod got its GPU when a NoExecute taint leaves it running: the controller reads a
pod's claims from spec.resourceClaims only, so a pod given its GPU for an extended resource
(KEP-5004, ``nvidia.com/gpu: 1`` served by DRA) is matched and never evicted; open in 1.36, a
fix proposed in kubernetes/kubernetes#142289."""

GPU_LOST = "gpu.nvidia.com/gpu-lost"
XID = "gpu.nvidia.com/xid"
#: The NVIDIA DRA driver's health taints; with NoSchedule they mean a failed GPU.
HEALTH_TAINT_KEYS = frozenset({GPU_LOST, XID})

#: The repair when taints keep a request off every device it could have.
TAINT_REPAIR = (
    "find why the devices are tainted (kubectl get resourceslices,devicetaintrules -o yaml): "
    "a gpu.nvidia.com/gpu-lost or fatal xid taint is the DRA driver's verdict that the GPU "
    "failed (drain its node, reset or replace the GPU); delete a DeviceTaintRule once its "
    "devices are fit",
    "or, when the workload may use such a device, add a toleration of the taint to the "
    "request (spec.devices.requests[].exactly.tolerations)",
)


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    """One taint of a device, from its slice or a DeviceTaintRule (``rule`` names it)."""

    key: str
    value: str
    effect: str
    time_added: datetime | None = None
    rule: str = ""

    def describe(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"

    @property
    def keeps_off(self) -> bool:
        return self.effect in KEEPING_OFF

    @property
    def health(self) -> bool:
        """The driver's verdict that the GPU failed (gpu-lost, a fatal XID)."""
        return self.key in HEALTH_TAINT_KEYS and self.effect == NO_SCHEDULE


def describe_taint(device: str, node: str, taint: DeviceTaint) -> str:
    """ "gpu-1 on node-a tainted gpu.nvidia.com/gpu-lost:NoSchedule since 2026-12-01T10:00:00Z
    (by DeviceTaintRule r)": how every message names a tainted device."""
    where = f" on {node}" if node else ""
    since = f" since {rfc3339(taint.time_added)}" if taint.time_added is not None else ""
    by = f" (by DeviceTaintRule {taint.rule})" if taint.rule else ""
    return f"{device}{where} tainted {taint.describe()}{since}{by}"


def project_taint(obj: JSONObject, path: str, rule: str = "") -> DeviceTaint:
    return DeviceTaint(
        key=get_str(obj, "key", path),
        value=get_str(obj, "value", path),
        effect=get_str(obj, "effect", path),
        time_added=get_time(obj, "timeAdded", path),
        rule=rule,
    )


def project_taints(obj: JSONObject, path: str) -> tuple[DeviceTaint, ...]:
    return tuple(project_taint(t, w) for w, t in get_maps(obj, "taints", path))


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str
    seconds: int | None = None
    """``tolerationSeconds``: a NoExecute taint it tolerates evicts once they have passed."""

    def tolerates(self, taint: DeviceTaint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == EXISTS
        if self.key != taint.key:
            return False
        return self.operator == EXISTS or self.value == taint.value


def project_tolerations(obj: JSONObject, path: str) -> tuple[Toleration, ...]:
    out = []
    for w, t in get_maps(obj, "tolerations", path):
        operator = get_str(t, "operator", w, EQUAL)
        if operator not in (EXISTS, EQUAL):
            raise ObjectError(f"{w}.operator", f"unknown operator {operator!r}")
        key, value, effect = (get_str(t, f, w) for f in ("key", "value", "effect"))
        seconds = get_int(t, "tolerationSeconds", w, -1)
        out.append(Toleration(key, operator, value, effect, None if seconds < 0 else seconds))
    return tuple(out)


def untolerated(
    taints: Iterable[DeviceTaint], tolerations: Sequence[Toleration]
) -> tuple[DeviceTaint, ...]:
    """The taints that keep a request with ``tolerations`` off the device (None never does)."""
    return tuple(
        t for t in taints if t.keeps_off and not any(tol.tolerates(t) for tol in tolerations)
    )


def evicting(
    taints: Iterable[DeviceTaint], tolerations: Sequence[Toleration]
) -> tuple[DeviceTaint, ...]:
    """The NoExecute taints that evict a pod whose request has ``tolerations``: those it does not
    tolerate, or tolerates for ``tolerationSeconds`` only (the eviction comes later)."""
    return tuple(
        t
        for t in taints
        if t.effect == NO_EXECUTE
        and not any(tol.tolerates(t) and tol.seconds is None for tol in tolerations)
    )


# --- DeviceTaintRule -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceTaintRuleInfo:
    name: str
    driver: str
    pool: str
    device: str
    """spec.deviceSelector: each empty field matches every driver, pool, device."""
    taint: DeviceTaint
    generation: int = 0

    @property
    def selects_everything(self) -> bool:
        return not (self.driver or self.pool or self.device)

    def selects(self, driver: str, pool: str, device: str) -> bool:
        return (
            (not self.driver or self.driver == driver)
            and (not self.pool or self.pool == pool)
            and (not self.device or self.device == device)
        )

    def describe_selector(self) -> str:
        parts = [
            f"{k}={v}"
            for k, v in (("driver", self.driver), ("pool", self.pool), ("device", self.device))
            if v
        ]
        return ", ".join(parts) if parts else "every device (deviceSelector is empty)"


def project_device_taint_rule(obj: JSONObject) -> DeviceTaintRuleInfo:
    meta = get_map(obj, "metadata", "")
    spec = get_map(obj, "spec", "")
    selector = get_map(spec, "deviceSelector", "spec")
    name = get_str(meta, "name", "metadata")
    return DeviceTaintRuleInfo(
        name=name,
        driver=get_str(selector, "driver", "spec.deviceSelector"),
        pool=get_str(selector, "pool", "spec.deviceSelector"),
        device=get_str(selector, "device", "spec.deviceSelector"),
        taint=project_taint(get_map(spec, "taint", "spec"), "spec.taint", rule=name),
        generation=get_int(meta, "generation", "metadata", 0),
    )

"""Shared counters and consumable capacity: what a device draws on besides being itself.

Partitionable devices (KEP-4815, beta in 1.36): a pool declares counter sets (``sharedCounters``,
since 1.35 in a ResourceSlice of its own, same pool and generation) and each device names what it
consumes of them (``consumesCounters``). NVIDIA's DynamicMIG gate publishes a whole GPU and every
MIG partition of it as devices drawing on that GPU's counters, so a full GPU and a partition of it
cannot both be allocated. A device naming a counter set the pool does not declare cannot be
allocated at all. Consumable capacity (KEP-5075, beta in 1.36): a device with
``allowMultipleAllocations`` serves several requests; each consumes of every capacity what it
asks (``capacity.requests``) rounded up by the capacity's ``requestPolicy``, else the policy's
default, else the whole capacity (docs/dra.md has the sources). The projections are here; the
search that honours them is ``policies.cluster.counter_fit``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from types import MappingProxyType
from typing import Any

from policies.vocabulary.fields import (
    ObjectError,
    get_list,
    get_map,
    get_maps,
    get_str,
    parse_quantity,
)
from policies.vocabulary.requests import JSONObject

Counters = Mapping[str, Decimal]
"""Counter name -> quantity (counter names are plain DNS labels, never qualified)."""


class NoEntries(Mapping[str, Any]):
    """An empty mapping a frozen dataclass may default to (hashable, immutable, one for all)."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __hash__(self) -> int:
        return 0


@dataclass(frozen=True, slots=True)
class CounterUse:
    """One ``consumesCounters`` entry: what a device takes from one counter set of its pool."""

    counter_set: str
    counters: Counters


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """``capacity.<name>.requestPolicy``: how one request's share of a capacity is rounded."""

    default: Decimal | None = None
    valid_values: tuple[Decimal, ...] = ()
    minimum: Decimal | None = None
    maximum: Decimal | None = None
    step: Decimal | None = None


def _counters(obj: JSONObject, path: str) -> dict[str, Decimal]:
    out = {}
    for name, value in get_map(obj, "counters", path).items():
        where = f"{path}.counters.{name}"
        if not isinstance(value, Mapping):
            raise ObjectError(where, "expected a mapping")
        out[str(name)] = parse_quantity(value.get("value"), f"{where}.value")
    return out


def project_counter_sets(spec: JSONObject, path: str) -> dict[str, Counters]:
    """A slice's ``sharedCounters``: counter set name -> its counters."""
    sets = get_maps(spec, "sharedCounters", path)
    return {get_str(s, "name", w): _counters(s, w) for w, s in sets}


#: Every distinct consumption read, kept once: under DynamicMIG the same few shapes repeat on
#: every node (a partition at a memory slice of a GPU), so 320,000 devices share a few hundred.
_INTERNED: dict[tuple[str, tuple[tuple[str, str], ...] | None], CounterUse] = {}
INTERNED_MOST = 65_536


def project_consumes(device: JSONObject, path: str) -> tuple[CounterUse, ...]:
    """A device's ``consumesCounters``, each entry shared with every equal one."""
    out = []
    for w, c in get_maps(device, "consumesCounters", path):
        key = (get_str(c, "counterSet", w), _raw_key(c))
        use = _INTERNED.get(key) if key[1] is not None else None
        if use is None:  # parsed (and checked) the first time a shape is met
            use = CounterUse(key[0], MappingProxyType(_counters(c, w)))
            if key[1] is not None and len(_INTERNED) < INTERNED_MOST:
                _INTERNED[key] = use
        out.append(use)
    return tuple(out)


def _raw_key(entry: JSONObject) -> tuple[tuple[str, str], ...] | None:
    """The entry's counters as written, to look its parsed form up without parsing; None when
    they are not plain ``{name: {value: "..."}}`` strings (then parsing says what is wrong)."""
    counters = entry.get("counters")
    if not isinstance(counters, Mapping):
        return None
    out = []
    for name, value in counters.items():
        raw = value.get("value") if isinstance(value, Mapping) else None
        if not isinstance(raw, str) or len(value) != 1:
            return None
        out.append((str(name), raw))
    out.sort()
    return tuple(out)


def _quantity(obj: JSONObject, key: str, path: str) -> Decimal | None:
    value = obj.get(key)
    return None if value is None else parse_quantity(value, f"{path}.{key}")


def project_request_policy(capacity: JSONObject, path: str) -> RequestPolicy | None:
    """A capacity's ``requestPolicy``, None when it has none."""
    raw = get_map(capacity, "requestPolicy", path)
    if not raw:
        return None
    where = f"{path}.requestPolicy"
    valid = get_map(raw, "validRange", where)
    values = get_list(raw, "validValues", where)
    return RequestPolicy(
        default=_quantity(raw, "default", where),
        valid_values=tuple(
            parse_quantity(v, f"{where}.validValues[{i}]") for i, v in enumerate(values)
        ),
        minimum=_quantity(valid, "min", f"{where}.validRange"),
        maximum=_quantity(valid, "max", f"{where}.validRange"),
        step=_quantity(valid, "step", f"{where}.validRange"),
    )


def project_capacity_requests(choice: JSONObject, path: str) -> dict[str, Decimal]:
    """A request's ``capacity.requests`` (names as written: unqualified ones are the driver's)."""
    requests = get_map(get_map(choice, "capacity", path), "requests", f"{path}.capacity")
    return {
        str(name): parse_quantity(value, f"{path}.capacity.requests.{name}")
        for name, value in requests.items()
    }


_BINARY = (("Ti", Decimal(2**40)), ("Gi", Decimal(2**30)), ("Mi", Decimal(2**20)))


def quantity_text(amount: Decimal) -> str:
    """A quantity as a person writes it: "30Gi" rather than 32212254720."""
    for suffix, unit in _BINARY:
        if amount >= unit and amount % unit == 0:
            return f"{amount // unit}{suffix}"
    return str(amount.normalize()) if amount == amount.to_integral_value() else str(amount)


def share_of(
    asked: Decimal | None, capacity: Decimal, policy: RequestPolicy | None
) -> Decimal | None:
    """What one request consumes of a shared device's capacity, as the scheduler rounds it
    (KEP-5075); None when the policy refuses the amount (the device cannot serve the request)."""
    if asked is None:
        if policy is None or policy.default is None:
            return capacity
        asked = policy.default
    if policy is None:
        return asked if asked <= capacity else None
    if policy.valid_values:
        fitting = [v for v in policy.valid_values if v >= asked]
        return min(fitting) if fitting else None
    if policy.minimum is not None:
        asked = max(asked, policy.minimum)
        if policy.step is not None and policy.step > 0:
            steps = ((asked - policy.minimum) / policy.step).to_integral_value(ROUND_CEILING)
            asked = policy.minimum + steps * policy.step
    if policy.maximum is not None and asked > policy.maximum:
        return None
    return asked if asked <= capacity else None

"""dra-counters: a DRA pool whose shared counters cannot work as published.

Two faults the scheduler meets only when it allocates (KEP-4815; docs/dra.md): a device that
consumes a counter set its pool does not declare (in no slice of the pool's newest generation)
can never be allocated, so claims that would fit on it stay Pending with nothing naming why; and
allocated devices drawing more of a counter set than it holds (a driver that shrank its counters
under allocated partitions, or allocations made before a gate changed) leave the GPU promised
twice. Shared devices (KEP-5075) are held to their capacity the same way: the allocations'
``consumedCapacity`` against the device's capacity.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal

from policies.cluster.counter_fit import CounterBook, special
from policies.cluster.counters import quantity_text
from policies.cluster.dra import DeviceId, PublishedDevice, qualified
from policies.cluster.kinds import RESOURCE_CLAIM, RESOURCE_SLICE, object_ref
from policies.cluster.view import AuditView, ClusterView
from policies.vocabulary.audit import Diagnosis, DiagnosisFinding, Link
from policies.vocabulary.text import few, plural
from policies.vocabulary.verdicts import Action, Severity

DRA_COUNTERS = "dra-counters"
Pool = tuple[str, str]


def _undeclared(view: ClusterView, book: CounterBook) -> Iterator[DiagnosisFinding]:
    """One finding per pool with devices consuming a counter set it does not declare."""
    by_pool: dict[Pool, list[tuple[PublishedDevice, str]]] = {}
    for device in view.published_devices():
        if device.device.consumes and (missing := book.undeclared(device)):
            by_pool.setdefault((device.device.driver, device.pool), []).append((device, missing))
    for (driver, pool), found in sorted(by_pool.items()):
        found.sort(key=lambda pair: pair[0].id)
        device, missing = found[0]
        names = [d.device.name for d, _ in found]
        yield DiagnosisFinding(
            resource=object_ref(RESOURCE_SLICE, "", device.slice),
            message=(
                f"pool {pool} of {driver}: {plural(len(found), 'device')} ({few(names)}) "
                f"consume counter set {missing}, which no slice of the pool declares: the "
                "scheduler cannot allocate them, and claims that would fit on them stay Pending"
            ),
            chain=Link(
                f"ResourceSlice {device.slice}: {device.device.name} consumes {missing}",
                (Link(f"pool {pool}: declares {few(sorted(book.sets(driver, pool))) or 'none'}"),),
            ),
            remediation=(
                f"kubectl get resourceslices -o yaml: check pool {pool}'s sharedCounters slice "
                "(same pool name and generation, counted in resourceSliceCount); restart the "
                "driver's kubelet plugin on the node if it is missing",
            ),
            device=f"{driver}/{pool}",
        )


def _drawn(
    view: ClusterView,
) -> tuple[
    dict[tuple[str, str, str, str], Decimal],
    dict[tuple[DeviceId, str], Decimal],
    dict[Pool, set[str]],
]:
    """What allocated claims draw: counters (each device once), shared capacity (each share),
    and the claims drawing on each pool."""
    counters: dict[tuple[str, str, str, str], Decimal] = {}
    capacity: dict[tuple[DeviceId, str], Decimal] = {}
    claims: dict[Pool, set[str]] = {}
    seen: set[DeviceId] = set()
    for claim in view.claims():
        for result in claim.results:
            device = view.published_device(DeviceId(result.driver, result.pool, result.device))
            if device is None or not special(device):
                continue
            claims.setdefault((result.driver, result.pool), set()).add(claim.key)
            for name, amount in result.consumed:
                key = (device.id, qualified(name, result.driver))
                capacity[key] = capacity.get(key, Decimal(0)) + amount
            if device.id in seen:
                continue
            seen.add(device.id)
            for use in device.device.consumes:
                for name, amount in use.counters.items():
                    ckey = (result.driver, result.pool, use.counter_set, name)
                    counters[ckey] = counters.get(ckey, Decimal(0)) + amount
    return counters, capacity, claims


def _overcommitted(view: ClusterView, book: CounterBook) -> Iterator[DiagnosisFinding]:
    counters, capacity, claims = _drawn(view)
    over: dict[Pool, list[str]] = {}
    for (driver, pool, counter_set, name), amount in sorted(counters.items()):
        total = book.sets(driver, pool).get(counter_set, {}).get(name)
        if total is not None and amount > total:
            over.setdefault((driver, pool), []).append(
                f"{counter_set}/{name}: {quantity_text(amount)} drawn of {quantity_text(total)}"
            )
    for (device_id, name), amount in sorted(capacity.items()):
        device = view.published_device(device_id)
        total = device.device.capacity.get(name) if device is not None else None
        if total is not None and amount > total:
            over.setdefault((device_id.driver, device_id.pool), []).append(
                f"{device_id.device} {name}: {quantity_text(amount)} allocated of "
                f"{quantity_text(total)}"
            )
    for (driver, pool), excess in sorted(over.items()):
        holders = sorted(claims.get((driver, pool), ()))
        yield DiagnosisFinding(
            resource=object_ref(RESOURCE_SLICE, "", _a_slice(view, driver, pool)),
            message=(
                f"pool {pool} of {driver} is over-committed: allocated claims draw more than its "
                f"shared counters or capacity hold ({few(excess, 2)}); the same GPU is promised "
                "twice"
            ),
            chain=Link(
                f"pool {pool}: {excess[0]}",
                tuple(Link(f"allocated: claim {key}") for key in holders),
            ),
            remediation=(
                f"delete and recreate the newest of the claims {few(holders)} (their pods are "
                "rescheduled within the counters), and check why the driver's counters shrank",
            ),
            device=f"{driver}/{pool}",
            severity=Severity.HIGH,
        )


def _a_slice(view: ClusterView, driver: str, pool: str) -> str:
    """A slice of the pool to name: the first by name."""
    names = sorted(s.name for s in view.resource_slices() if s.pool_key == (driver, pool))
    return names[0] if names else pool


def _diagnose(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
    del now
    book = CounterBook(view.cluster)
    yield from _undeclared(view.cluster, book)
    yield from _overcommitted(view.cluster, book)


DRA_COUNTERS_DIAGNOSIS = Diagnosis(
    id=DRA_COUNTERS,
    summary=(
        "A DRA pool's shared counters cannot work as published: a device consumes a counter "
        "set no slice of its pool declares, or allocated claims draw more than the counters "
        "(or a shared device's capacity) hold."
    ),
    default_action=Action.WARN,
    default_severity=Severity.MEDIUM,
    reason=(
        "The scheduler finds both only when it allocates: a device of an undeclared counter set "
        "is never allocated and its claims stay Pending without a reason naming it; an "
        "over-committed pool hands one GPU's partitions to more claims than it holds."
    ),
    diagnose=_diagnose,
    reads=frozenset({RESOURCE_CLAIM, RESOURCE_SLICE}),
)

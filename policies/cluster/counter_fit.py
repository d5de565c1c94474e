"""Whether one node's devices can serve a claim's requests within shared counters and shared
capacity, as the scheduler's allocator counts them (``policies.cluster.counters`` has the facts).

``claim_fit`` asks this only when a device it would give draws on counters or may be shared;
otherwise distinct devices are the whole question. Two budgets: the declared totals (can the
cluster as it stands ever satisfy the claim: ``claim_fit``'s question) and what the claims
allocated on the node leave (``Held``): a whole GPU does not fit while a MIG partition of it is
allocated. Counters of a shared device are drawn once, however many requests share it; its
capacities at each allocation (KEP-5075). The search tries devices that draw least first, and
gives up as "fits" past ``MAX_STEPS`` (silence over a false alarm; never reached by 8 GPUs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from policies.cluster.counters import Counters, share_of
from policies.cluster.dra import DeviceId, PublishedDevice, ResourceSliceInfo, qualified
from policies.cluster.dra_claims import DeviceChoice
from policies.cluster.view import ClusterView
from policies.vocabulary.text import few

#: Devices tried in all, per node and combination, before the answer is taken as "fits".
MAX_STEPS = 20_000
#: Nodes that fit on declared counters tried for what allocated claims leave, before the
#: claim is taken as fitting (silence over a false alarm).
MAX_REMAINING_NODES = 256
CounterKey = tuple[str, str, str, str]
"""(driver, pool, counter set, counter)."""
CapacityKey = tuple[DeviceId, str]


def special(device: PublishedDevice) -> bool:
    """Whether the device draws on shared counters or may be shared: distinct devices alone do
    not decide what it can serve."""
    return bool(device.device.consumes) or device.device.multiple


def draw(device: PublishedDevice) -> Decimal:
    """How much a device takes of its counters in all: cheaper partitions are tried first."""
    return sum((v for use in device.device.consumes for v in use.counters.values()), Decimal(0))


@dataclass(slots=True)
class Usage:
    """What is drawn so far: counters, shared devices' capacities, devices taken."""

    counters: dict[CounterKey, Decimal] = field(default_factory=dict)
    capacity: dict[CapacityKey, Decimal] = field(default_factory=dict)
    drawn: dict[DeviceId, int] = field(default_factory=dict)
    """Device -> allocations of it so far (a device's counters are drawn at its first)."""
    taken: set[DeviceId] = field(default_factory=set)
    """Devices no other request can have (not shared)."""


@dataclass(frozen=True, slots=True)
class Holder:
    """An allocated device that draws on counters or capacity a claim needs, and its claim."""

    device: DeviceId
    claim: str
    sets: frozenset[str] = frozenset()
    """The counter sets it draws on."""

    def describe(self) -> str:
        return f"{self.device.device} (claim {self.claim})"


def newest_counter_sets(slices: Sequence[ResourceSliceInfo]) -> dict[str, Counters]:
    """A pool's counter sets: those its newest generation's slices declare (the first slice by
    name wins a set declared twice)."""
    newest = max((s.generation for s in slices), default=0)
    sets: dict[str, Counters] = {}
    for slice_ in sorted(slices, key=lambda s: s.name):
        if slice_.generation == newest:
            for name, counters in slice_.counter_sets.items():
                sets.setdefault(name, counters)
    return sets


class CounterBook:
    """The counter sets of each pool, read once per question (a pool's slices, newest
    generation: ``ClusterView.pool_counter_sets``)."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self._sets: dict[tuple[str, str], Mapping[str, Counters]] = {}
        self.asked = False
        """Whether a question here needed counters or sharing (then what remains is asked too)."""

    def sets(self, driver: str, pool: str) -> Mapping[str, Counters]:
        key = (driver, pool)
        if key not in self._sets:
            self._sets[key] = self.view.pool_counter_sets(driver, pool)
        return self._sets[key]

    def undeclared(self, device: PublishedDevice) -> str:
        """The first counter set (or set/counter) the device consumes that its pool does not
        declare: the scheduler cannot allocate it (''  when all are declared)."""
        sets = self.sets(device.device.driver, device.pool)
        for use in device.device.consumes:
            declared = sets.get(use.counter_set)
            if declared is None:
                return use.counter_set
            missing = sorted(set(use.counters) - set(declared))
            if missing:
                return f"{use.counter_set}/{missing[0]}"
        return ""

    # --- one allocation ----------------------------------------------------------------------

    def _take(
        self, choice: DeviceChoice, device: PublishedDevice, usage: Usage, budgets: bool
    ) -> _Undo:
        """Allocate ``device`` to ``choice`` in ``usage``; what to undo, or raise _Refused."""
        info = device.device
        undo = _Undo(device.id)
        if device.id in usage.taken:
            raise _Refused
        if budgets and not usage.drawn.get(device.id, 0):
            sets = self.sets(info.driver, device.pool)
            for use in info.consumes:
                declared = sets.get(use.counter_set, {})
                for name, amount in use.counters.items():
                    key = (info.driver, device.pool, use.counter_set, name)
                    total = declared.get(name)
                    if total is None or usage.counters.get(key, Decimal(0)) + amount > total:
                        undo.revert(usage)
                        raise _Refused
                    usage.counters[key] = usage.counters.get(key, Decimal(0)) + amount
                    undo.counters.append((key, amount))
        if budgets and info.multiple:
            for name, capacity in info.capacity.items():
                asked = _asked(choice, name, info.driver)
                share = share_of(asked, capacity, info.request_policies.get(name))
                ckey = (device.id, name)
                if share is None or usage.capacity.get(ckey, Decimal(0)) + share > capacity:
                    undo.revert(usage)
                    raise _Refused
                usage.capacity[ckey] = usage.capacity.get(ckey, Decimal(0)) + share
                undo.capacity.append((ckey, share))
        usage.drawn[device.id] = usage.drawn.get(device.id, 0) + 1
        if not info.multiple:
            usage.taken.add(device.id)
        undo.placed = True
        return undo

    # --- the search --------------------------------------------------------------------------

    def assign(
        self,
        fixed: Sequence[tuple[DeviceChoice, Sequence[PublishedDevice]]],
        slots: Sequence[tuple[DeviceChoice, Sequence[PublishedDevice]]],
        usage: Usage,
        budgets: bool = True,
    ) -> bool:
        """Whether every device of ``fixed`` (All requests) can be taken and each slot (one per
        device an ExactCount request asks) given one, within ``usage``'s budgets."""
        self.asked = True
        usage = Usage(
            dict(usage.counters), dict(usage.capacity), dict(usage.drawn), set(usage.taken)
        )
        try:
            for choice, devices in fixed:
                for device in devices:
                    self._take(choice, device, usage, budgets)
        except _Refused:
            return False
        ordered = [sorted(devices, key=lambda d: (draw(d), d.id)) for _, devices in slots]
        steps = [0]

        def place(i: int, start: int) -> bool:
            if i == len(slots):
                return True
            choice = slots[i][0]
            for j in range(start, len(ordered[i])):
                steps[0] += 1
                if steps[0] > MAX_STEPS:
                    return True
                device = ordered[i][j]
                try:
                    undo = self._take(choice, device, usage, budgets)
                except _Refused:
                    continue
                same = i + 1 < len(slots) and slots[i + 1][0] is choice
                if place(i + 1, j if same else 0):
                    return True
                undo.revert(usage)
            return False

        return place(0, 0)

    def held(
        self,
        nodes: Iterable[str],
        fits: Callable[[str, Usage], bool],
        wanted: Callable[[str], Sequence[PublishedDevice]],
    ) -> tuple[str, ...]:
        """() when one of ``nodes`` (those that fit on declared counters, in order) fits on
        what its allocated claims leave (``fits``); else the devices holding what the claim's
        devices there (``wanted``) draw on, on the first node, with their claims. Past
        ``MAX_REMAINING_NODES`` it is taken as fitting."""
        named: tuple[str, ...] = ()
        for tried, name in enumerate(nodes):
            if tried == MAX_REMAINING_NODES:
                return ()
            usage, holders = self.held_on(name)
            if not holders or fits(name, usage):
                return ()
            if not named:
                devices = wanted(name)
                sets = {use.counter_set for d in devices for use in d.device.consumes}
                ids = {d.id for d in devices}
                named = tuple(h.describe() for h in holders if h.sets & sets or h.device in ids)
        return named

    def held_on(self, node: str) -> tuple[Usage, tuple[Holder, ...]]:
        """What the claims allocated on ``node`` draw of counters and shared capacity, and the
        devices that draw it (with their claims)."""
        usage = Usage()
        holders: list[Holder] = []
        for held in self.view.claims_allocated_on(node):
            for result, device in held.devices:
                if device is None or not special(device):
                    continue
                info = device.device
                if not usage.drawn.get(device.id, 0):
                    for use in info.consumes:
                        for name, amount in use.counters.items():
                            key = (info.driver, device.pool, use.counter_set, name)
                            usage.counters[key] = usage.counters.get(key, Decimal(0)) + amount
                for name, amount in result.consumed:
                    key2 = (device.id, qualified(name, info.driver))
                    usage.capacity[key2] = usage.capacity.get(key2, Decimal(0)) + amount
                usage.drawn[device.id] = usage.drawn.get(device.id, 0) + 1
                if not info.multiple:
                    usage.taken.add(device.id)
                sets = frozenset(use.counter_set for use in info.consumes)
                holders.append(Holder(device.id, held.claim.key, sets))
        return usage, tuple(holders)


#: One request's choice as the search takes it: the choice, whether it takes All, how many
#: devices it needs, and the devices it may have on the node.
Asked = tuple[DeviceChoice, bool, int, frozenset[DeviceId]]


def distinct_matching(slots: Sequence[frozenset[DeviceId]]) -> bool:
    """Whether every slot gets a device of its own (augmenting paths, Kuhn's algorithm)."""
    if len(slots) > len(frozenset().union(*slots)):
        return False
    owner: dict[DeviceId, int] = {}

    def place(slot: int, seen: set[DeviceId]) -> bool:
        for device in slots[slot]:
            if device not in seen:
                seen.add(device)
                if device not in owner or place(owner[device], seen):
                    owner[device] = slot
                    return True
        return False

    return all(place(slot, set()) for slot in range(len(slots)))


def assignable(
    combo: Sequence[Asked], book: CounterBook, usage: Usage | None, budgets: bool = True
) -> bool:
    """One choice per request on one node: All takes every device it accepts (at least one),
    ExactCount ``count`` distinct ones; no device serves two requests (unless it may be
    shared), and devices drawing on shared counters fit within them (``budgets``)."""
    answer = counted_fit(combo, book.view, book, usage, budgets)
    if answer is not None:
        return answer
    taken: set[DeviceId] = set()
    for _, takes_all, _, devices in combo:
        if takes_all:
            if not devices or devices & taken:
                return False
            taken |= devices
    slots = [
        devices - taken
        for _, takes_all, need, devices in combo
        if not takes_all
        for _ in range(need)
    ]
    return distinct_matching(slots)


def shares(view: ClusterView, choice: DeviceChoice, wheres: Sequence[str]) -> bool:
    """Whether a device of the choice's class on ``wheres`` may be shared (then one device can
    serve more than one of its slots)."""
    return any(
        d.device.multiple
        for where in wheres
        for d in view.class_devices_on(choice.device_class, where)
    )


def counted_fit(
    combo: Sequence[Asked],
    view: ClusterView,
    book: CounterBook,
    usage: Usage | None,
    budgets: bool = True,
) -> bool | None:
    """With a device that draws on shared counters or may be shared, whether the choices fit
    (within ``usage``: what allocated claims hold; without ``budgets``, whether they would
    if counters and capacity were endless); None when distinct devices decide."""
    published = {d: view.published_device(d) for *_, ids in combo for d in ids}
    if not any(p is not None and special(p) for p in published.values()):
        return None

    def devices(ids: frozenset[DeviceId]) -> list[PublishedDevice]:
        return [p for d in sorted(ids) if (p := published[d]) is not None]

    fixed = [(choice, devices(ids)) for choice, takes_all, _, ids in combo if takes_all]
    if any(not found for _, found in fixed):
        return False
    slots = [
        (choice, devices(ids))
        for choice, takes_all, need, ids in combo
        if not takes_all
        for _ in range(need)
    ]
    return book.assign(fixed, slots, usage or Usage(), budgets)


def limit_on(devices: Sequence[PublishedDevice], book: CounterBook) -> str:
    """Why devices that are there do not serve a claim together: a counter set their pool does
    not declare, counters that do not stretch, or a shared device's capacity."""
    for device in sorted(devices, key=lambda d: d.id):
        missing = book.undeclared(device)
        if missing:
            return (
                f"{device.device.name} consumes counter set {missing}, which its pool "
                f"{device.pool} does not declare (the scheduler cannot allocate it)"
            )
    sets = sorted({use.counter_set for d in devices for use in d.device.consumes})
    if sets:
        return (
            f"its devices draw on shared counters ({few(sets)}) that do not cover all it asks "
            "at once (a whole GPU and its MIG partitions share one GPU's counters)"
        )
    return (
        "the shared devices' capacity does not cover every request's share (capacity.requests, "
        "rounded up by the device's requestPolicy)"
    )


@dataclass(slots=True)
class _Undo:
    """What one allocation drew, to give back when the search backs out of it."""

    device: DeviceId
    counters: list[tuple[CounterKey, Decimal]] = field(default_factory=list)
    capacity: list[tuple[CapacityKey, Decimal]] = field(default_factory=list)
    placed: bool = False

    def revert(self, usage: Usage) -> None:
        for key, amount in self.counters:
            usage.counters[key] -= amount
        for ckey, share in self.capacity:
            usage.capacity[ckey] -= share
        if self.placed:
            usage.drawn[self.device] -= 1
            if not usage.drawn[self.device]:
                del usage.drawn[self.device]
            usage.taken.discard(self.device)


def counters_on(node: str, view: ClusterView) -> tuple[str, ...]:
    """One phrase per counter set the node's devices draw on: how much allocated claims draw
    of it (its most drawn counter) and which devices. Beside the devices a dynamic-MIG node
    publishes (a whole GPU and each partition of it), what is really free."""
    book = CounterBook(view)
    pools = sorted({(d.device.driver, d.pool) for d in view.devices_on(node) if d.device.consumes})
    if not pools:
        return ()
    usage, holders = book.held_on(node)
    out = []
    for driver, pool in pools:
        for name, counters in sorted(book.sets(driver, pool).items()):
            # the largest counter (memory, for a GPU) says how much is drawn; a memory
            # slice counter (1 of 1) would read 100 % for the smallest partition
            big = max(counters, key=lambda c: (counters[c], c), default="")
            total = counters.get(big, Decimal(0))
            drawn = usage.counters.get((driver, pool, name, big), Decimal(0))
            share = f"{int(drawn * 100 / total)}% of {big}" if total else big
            by = [h.describe() for h in holders if name in h.sets]
            used = f"{share} drawn by {few(by)}" if by else "free"
            out.append(f"{name}: {used}")
    return tuple(out)


class _Refused(Exception):
    """A device the budgets cannot afford."""


def _asked(choice: DeviceChoice, capacity: str, driver: str) -> Decimal | None:
    for name, amount in choice.capacity:
        if qualified(name, driver) == capacity:
            return amount
    return None

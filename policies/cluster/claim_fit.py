"""Can a claim's requests be satisfied by a Ready node, and if not, why: the one place that asks.

The scheduler allocates every request of a claim together, for the one node the pod goes to;
devices of node-independent pools (``allNodes``, a ``nodeSelector``) count on each node they
reach (docs/dra.md, [alloc]). A request is ``exactly`` one choice or ``firstAvailable``
alternatives tried in order; a choice's devices are those its DeviceClass's selectors accept,
then its own (``policies.cel.selectors``, in that order); ExactCount wants ``count`` distinct
devices, All every matching device the node reaches, at least one. Only what Ready, schedulable,
untainted nodes publish counts (``policies.cluster.health``): a NotReady node's slices stay and
serve nothing. Devices other claims hold are not subtracted: the question is whether the cluster as
it stands can ever satisfy the claim, not whether it can this minute (pods come and go). A device
tainted NoSchedule or NoExecute (by its slice, or by an acting DeviceTaintRule) serves only a
choice that tolerates the taint (``policies.cluster.device_taints``); where the view says no
device of a node may carry one, the counts stand as they are.

A selector this evaluator cannot decide (UNKNOWN) never reads as "no device": when the decided
devices fall short and an undecided one might make up the difference, the answer is "cannot be
judged" with the reason.

Admission asks the index first: a class's per-node counts bound what a node can offer, so a
claim that fits is decided by the first Ready node that has enough. The explanation (every
node's matches, did-you-mean over published values) is worked out only when nothing fits.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, islice, product

from policies.cel.hints import near_misses_in
from policies.cel.selectors import problems, select
from policies.cel.values import Outcome
from policies.cluster.claim_shortfall import Shortfall, UnmetRequest, Why
from policies.cluster.counter_fit import CounterBook, Usage, assignable, limit_on, shares
from policies.cluster.dra import DeviceId, PublishedDevice
from policies.cluster.dra_claims import ALL_DEVICES, ClaimRequest, DeviceChoice
from policies.cluster.health import NodeHealth, node_health
from policies.cluster.nodes import NodeInfo
from policies.cluster.taint_fit import Held, blocked, tainted_on, tainted_shortfall
from policies.cluster.view import ClusterView

#: Not-Ready nodes a shortfall names; the rest are counted.
SHOWN_NODES = 3
#: firstAvailable combinations tried per node (the API allows 8 alternatives per request).
MAX_COMBINATIONS = 256
#: How a node the state does not know reads in a message ("it is not a known node").
UNKNOWN_NODE = NodeHealth(False, ("not a known node",), None, "", "")
NEAR_CLASS_NAME = 0.75
"""difflib ratio from which a DeviceClass name counts as what a request meant."""
#: The devices a choice accepts on one node, and those its selectors could not decide (why).
Found = tuple[list[PublishedDevice], list[tuple[PublishedDevice, str]]]


def selector_problem(expressions: Sequence[str]) -> str:
    """Why the first expression that cannot be evaluated here cannot ("selector 2 does not
    compile: ..."), '' when all can."""
    return next((f"selector {i + 1} {why}" for i, why in problems(expressions)), "")


@dataclass(frozen=True, slots=True)
class ClaimFit:
    """The answer: where the claim fits, or each request that fits nowhere and why."""

    node: str
    """A Ready node where every request fits ('' when none)."""
    unmet: tuple[UnmetRequest, ...]

    @property
    def fits(self) -> bool:
        return not self.unmet


# --- what each choice can get ---------------------------------------------------------------------


class _Nodes:
    """Node health, each node looked up once per question."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self._health: dict[str, NodeHealth] = {}
        self.counters = CounterBook(view)

    def health(self, name: str) -> NodeHealth:
        if name not in self._health:
            info = self.view.node(name)
            self._health[name] = UNKNOWN_NODE if info is None else node_health(info)
        return self._health[name]

    def ready(self, name: str) -> bool:
        return self.health(name).healthy

    def ready_names(self) -> Iterator[str]:
        """Every Ready node: a listing, needed only for devices of node-independent pools."""
        for info in self.view.nodes():
            if self.ready(info.name):
                yield info.name


def _reaches(device: PublishedDevice, node: NodeInfo | None) -> bool:
    """Whether a device of a node-independent pool can be used on ``node``."""
    if node is None:
        return False
    if device.all_nodes:
        return True
    return device.node_selector is not None and device.node_selector.matches(node)


class _Choice:
    """One choice of a request with its class resolved; the devices it accepts on each node are
    worked out when first asked (its class's counts bound them without evaluating anything)."""

    def __init__(self, request: ClaimRequest, choice: DeviceChoice, view: ClusterView) -> None:
        self.choice = choice
        self.alternative = choice.name if request.exactly is None else ""
        self.view = view
        self.info = view.device_class(choice.device_class)
        self.problem = selector_problem(choice.selectors)
        self.counts = view.class_device_counts(choice.device_class) if self.info else {}
        self.matched: Mapping[str, int] | None = None
        """Per node, the class's devices the request's own selectors accept (None: no selectors
        or selectors that do not compile; then ``found`` decides)."""
        self.possible: Mapping[str, int] = self.counts
        """Per node, at most how many it can take: accepted plus undecided."""
        if self.info is not None and choice.selectors and not self.problem:
            counts = view.class_request_counts(choice.device_class, choice.selectors)
            self.matched, self.possible = counts.accepted, counts.possible
        self._found: dict[str, Found] = {}

    @property
    def usable(self) -> bool:
        return self.info is not None and not self.problem

    @property
    def takes_all(self) -> bool:
        return self.choice.allocation_mode == ALL_DEVICES

    @property
    def need(self) -> int:
        return 1 if self.takes_all else self.choice.count

    def bound(self, node: str) -> int:
        return self.possible.get(node, 0)

    def enough(self, node: str) -> bool:
        """Whether ``node`` may give what the choice asks: enough devices, or one that may be
        shared (KEP-5075: a shared device can serve several of its requests)."""
        wheres = [where for where in (node, "") if self.bound(where)]
        return sum(map(self.bound, wheres)) >= self.need or shares(self.view, self.choice, wheres)

    def found(self, node: str) -> Found:
        """The devices on ``node`` ('' for node-independent ones) that the request's selectors
        accept among its class's, and those they could not decide (with why)."""
        if node not in self._found:
            matched: list[PublishedDevice] = []
            undecided: list[tuple[PublishedDevice, str]] = []
            taints = self.view.may_keep_off(node)
            for device in self.view.class_devices_on(self.choice.device_class, node):
                if taints and blocked(self.view, device, self.choice):
                    continue  # a taint keeps it off: neither a match nor undecided
                result = select(self.choice.selectors, device.device)
                if result.matches:
                    matched.append(device)
                elif result.outcome is Outcome.UNKNOWN:
                    undecided.append((device, result.reason))
            self._found[node] = (matched, undecided)
        return self._found[node]

    def count_on(self, node: str) -> int:
        if self.view.may_keep_off(node):
            return len(self.found(node)[0])
        if self.matched is not None:
            return self.matched.get(node, 0)
        return len(self.found(node)[0]) if self.choice.selectors else self.bound(node)

    def on(self, node: str, nodes: _Nodes) -> frozenset[DeviceId]:
        """What it can take on ``node``: its devices there and the node-independent ones that
        reach it."""
        local = self.found(node)[0]
        shared: list[PublishedDevice] = []
        if self.bound(""):
            info = nodes.view.node(node)
            shared = [d for d in self.found("")[0] if _reaches(d, info)]
        return frozenset(d.id for d in (*local, *shared))


# --- does it fit: the first Ready node with enough ------------------------------------------------


def _fits_on(
    node: str,
    options: Sequence[Sequence[_Choice]],
    nodes: _Nodes,
    usage: Usage | None = None,
    budgets: bool = True,
) -> bool:
    """One choice per request on ``node`` (``policies.cluster.counter_fit.assignable``)."""
    per_request = [
        [(c.choice, c.takes_all, c.need, c.on(node, nodes)) for c in choices if c.usable]
        for choices in options
    ]
    combos = islice(product(*per_request), MAX_COMBINATIONS)
    return any(assignable(combo, nodes.counters, usage, budgets) for combo in combos)


def _wanted(options: Sequence[Sequence[_Choice]], node: str) -> list[PublishedDevice]:
    """The devices on ``node`` some choice accepts (what counters and holders are read of)."""
    return [p for choices in options for c in choices for p in c.found(node)[0]]


def _candidates(options: Sequence[Sequence[_Choice]], nodes: _Nodes) -> Iterator[str]:
    """Nodes with devices of some choice's class, then, when node-independent devices could
    serve, every Ready node."""
    seen: set[str] = set()
    for choices in options:
        for choice in choices:
            for name in choice.possible:
                if name and name not in seen:
                    seen.add(name)
                    yield name
    if any(choice.bound("") for choices in options for choice in choices):
        for name in nodes.ready_names():
            if name not in seen:
                seen.add(name)
                yield name


def _fits(name: str, options: Sequence[Sequence[_Choice]], nodes: _Nodes) -> bool:
    bounded = all(any(c.usable and c.enough(name) for c in choices) for choices in options)
    return bounded and nodes.ready(name) and _fits_on(name, options, nodes)


def _fitting_nodes(options: Sequence[Sequence[_Choice]], nodes: _Nodes) -> Iterator[str]:
    """The Ready nodes where every request fits, in the order they are tried: nodes whose
    devices may carry taints last (trying them is looking device by device)."""
    if not all(any(c.usable for c in choices) for choices in options):
        return
    tainted = []
    for name in _candidates(options, nodes):
        if nodes.view.may_keep_off(name):
            tainted.append(name)
        elif _fits(name, options, nodes):
            yield name
    yield from (name for name in tainted if _fits(name, options, nodes))


# --- why not: each request alone, then together ---------------------------------------------------


def _undecided(choice: _Choice, nodes: _Nodes) -> list[tuple[PublishedDevice, str]]:
    """Devices the class's or the request's selectors could not decide, on Ready nodes or
    node-independent, first by device id."""
    found = list(choice.view.class_undecided(choice.choice.device_class))
    if choice.choice.selectors:
        for node in choice.counts:
            if choice.matched is None or choice.possible.get(node, 0) > choice.matched.get(node, 0):
                found.extend(choice.found(node)[1])
    relevant = [(d, why) for d, why in found if not d.node or nodes.ready(d.node)]
    return sorted(relevant, key=lambda pair: pair[0].id)


def _cannot_judge(choice: _Choice, undecided: Sequence[tuple[PublishedDevice, str]]) -> Shortfall:
    device, why = undecided[0]
    reason = f"{why} ({device.id})"
    return Shortfall(
        Why.CANNOT_BE_JUDGED, choice.choice.device_class, choice.alternative, reason=reason
    )


def _best_ready(choice: _Choice, nodes: _Nodes) -> tuple[int, str]:
    """The most devices one Ready node can give the choice, and that node: the first Ready one
    by count (with node-independent devices, every Ready node and what it reaches)."""
    shared = choice.found("")[0] if choice.bound("") else []
    counts = {n: choice.count_on(n) for n in choice.counts if n}
    if shared:
        for name in nodes.ready_names():
            info = nodes.view.node(name)
            counts[name] = counts.get(name, 0) + sum(1 for d in shared if _reaches(d, info))
    for name in sorted(counts, key=lambda n: (-counts[n], n)):
        if counts[name] and nodes.ready(name):
            return counts[name], name
    return 0, ""


def _not_ready(choice: _Choice, nodes: _Nodes, least: int) -> Shortfall:
    """Who has at least ``least`` matching devices but is not Ready (none is)."""
    holders = sorted(
        n for n in choice.counts if n and choice.count_on(n) >= least and not nodes.ready(n)
    )
    shown = holders[:SHOWN_NODES]
    devices = (
        [d for n in shown for d in choice.found(n)[0]]
        if choice.choice.selectors
        else [d for n in shown for d in choice.view.class_devices_on(choice.choice.device_class, n)]
    )
    products = sorted(
        {p for d in devices if isinstance(p := d.device.attribute("productName"), str)}
    )
    return Shortfall(
        Why.NO_READY_NODE,
        choice.choice.device_class,
        choice.alternative,
        nodes=tuple((n, nodes.health(n)) for n in shown),
        more_nodes=len(holders) - len(shown),
        found=sum(choice.count_on(n) for n in holders),
        products=tuple(products),
    )


def _tainted(choice: _Choice, nodes: _Nodes) -> Shortfall | None:
    """When taints it does not tolerate are what keep the choice off enough devices on some
    Ready node: the first such device with its taint, and how many there are."""
    held: list[Held] = []
    enough = False
    for node in sorted(choice.counts):
        if node and nodes.ready(node):
            found = tainted_on(choice.view, choice.choice, node)
            held.extend(found)
            enough = enough or (bool(found) and choice.count_on(node) + len(found) >= choice.need)
    return tainted_shortfall(choice.choice, choice.alternative, held) if enough else None


def _nothing_matches(
    choice: _Choice, undecided: Sequence[tuple[PublishedDevice, str]]
) -> Shortfall:
    name = choice.choice.device_class
    if undecided:
        return _cannot_judge(choice, undecided)
    if not choice.counts:
        return Shortfall(Why.CLASS_MATCHES_NOTHING, name, choice.alternative)
    view = choice.view
    meant = near_misses_in(
        choice.choice.selectors, lambda key: view.class_attribute_values(name, key)
    )
    return Shortfall(
        Why.SELECTORS_MATCH_NOTHING,
        name,
        choice.alternative,
        found=sum(choice.counts.values()),
        suggestions=meant,
    )


def _shortfall(choice: _Choice, nodes: _Nodes) -> Shortfall | None:
    """Why the choice cannot be satisfied even alone; None when some Ready node can."""
    name = choice.choice.device_class
    if choice.info is None:
        classes = [c.name for c in choice.view.device_classes()]
        meant = difflib.get_close_matches(name, classes, n=1, cutoff=NEAR_CLASS_NAME)
        return Shortfall(Why.NO_CLASS, name, choice.alternative, suggestions=tuple(meant))
    if choice.problem:
        return Shortfall(Why.CANNOT_BE_JUDGED, name, choice.alternative, reason=choice.problem)
    best, best_on = _best_ready(choice, nodes)
    if best >= choice.need or (best and choice.enough(best_on)):
        return None
    undecided = _undecided(choice, nodes)
    if undecided:
        return _cannot_judge(choice, undecided)
    tainted = _tainted(choice, nodes)
    if tainted is not None:
        return tainted
    if not any(choice.count_on(n) for n in choice.counts):
        # Undecided anywhere, NotReady nodes too: "rejects every device" would be a guess.
        everywhere = [u for n in choice.counts for u in choice.found(n)[1]]
        return _nothing_matches(choice, [*choice.view.class_undecided(name), *everywhere])
    if best == 0:
        return _not_ready(choice, nodes, 1)
    enough = _not_ready(choice, nodes, choice.need)
    return Shortfall(
        Why.TOO_FEW_ON_ONE_NODE,
        name,
        choice.alternative,
        asks=choice.need,
        most=best,
        most_on=best_on,
        nodes=enough.nodes,
        more_nodes=enough.more_nodes,
    )


def _explain(
    requests: Sequence[ClaimRequest], options: Sequence[Sequence[_Choice]], nodes: _Nodes
) -> tuple[UnmetRequest, ...]:
    unmet = []
    for request, choices in zip(requests, options, strict=True):
        shortfalls = []
        for choice in choices:
            shortfall = _shortfall(choice, nodes)
            if shortfall is None:
                break
            shortfalls.append(shortfall)
        else:
            unmet.append(UnmetRequest(request.name, tuple(shortfalls)))
    if unmet:
        return tuple(unmet)
    for choices in options:
        for choice in choices:
            undecided = _undecided(choice, nodes)
            if undecided:
                return (UnmetRequest("", (_cannot_judge(choice, undecided),)),)
    if nodes.counters.asked:
        for name in _candidates(options, nodes):
            if nodes.ready(name) and _fits_on(name, options, nodes, budgets=False):
                reason = limit_on(_wanted(options, name), nodes.counters)
                short = Shortfall(Why.COUNTERS_SHORT, most_on=name, reason=reason)
                return (UnmetRequest("", (short,)),)
    together = Shortfall(Why.NOT_ON_ONE_NODE, requests=tuple(r.name for r in requests))
    return (UnmetRequest("", (together,)),)


def claim_fit(requests: Sequence[ClaimRequest], view: ClusterView) -> ClaimFit:
    """Whether one Ready node can satisfy every request of a claim (or a template), and if not,
    why, request by request; requests with no choice (a future API field) are left out."""
    asked = [r for r in requests if r.choices]
    options = [[_Choice(r, c, view) for c in r.choices] for r in asked]
    if not options:
        return ClaimFit("", ())
    nodes = _Nodes(view)
    fitting = _fitting_nodes(options, nodes)
    node = next(fitting, "")
    if node and nodes.counters.asked:
        held = nodes.counters.held(
            chain((node,), fitting),
            lambda n, usage: _fits_on(n, options, nodes, usage),
            lambda n: _wanted(options, n),
        )
        if held:
            short = Shortfall(Why.COUNTERS_HELD, most_on=node, held=held)
            return ClaimFit("", (UnmetRequest("", (short,)),))
    if node:
        return ClaimFit(node, ())
    return ClaimFit("", _explain(asked, options, nodes))


def fitting_nodes(
    requests: Sequence[ClaimRequest], view: ClusterView, most: int
) -> tuple[str, ...]:
    """Up to ``most`` Ready nodes where one could satisfy every request of a claim (or a
    template) together: how many places a workload has to go, ``claim_fit``'s question asked
    past the first answer. Requests with no choice are left out, as there."""
    options = [[_Choice(r, c, view) for c in r.choices] for r in requests if r.choices]
    if not options:
        return ()
    return tuple(islice(_fitting_nodes(options, _Nodes(view)), most))

"""Why a claim's request cannot be satisfied, as data with its wording: what ``claim_fit``
answers, and what every message about it (admission, audit, diagnoses) says.

The wording follows the device-plugin policies: the names of the nodes that would serve and
their condition ("only node-9 has a matching device (NVIDIA H100 NVL) and it is NotReady since
2026-10-14"), the counts ("asks 8, at most 4 on one node (dgx-3)"), did-you-mean where a name or
a value is a near miss, and "cannot be judged" where a selector could not be evaluated.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

from policies.cluster.health import NodeHealth
from policies.vocabulary.text import few, plural


class Why(enum.Enum):
    NO_CLASS = "no such DeviceClass"
    CLASS_MATCHES_NOTHING = "the class matches no published device"
    SELECTORS_MATCH_NOTHING = "the request's selectors match none of the class's devices"
    NO_READY_NODE = "only nodes that are not Ready have matching devices"
    TOO_FEW_ON_ONE_NODE = "no Ready node has as many matching devices as asked"
    NOT_ON_ONE_NODE = "the requests fit each alone, not together on one node"
    CANNOT_BE_JUDGED = "a selector could not be evaluated where it matters"
    COUNTERS_SHORT = "the devices exist, but their shared counters or capacity do not cover them"
    COUNTERS_HELD = "allocated devices hold the shared counters or capacity it needs"
    TAINTED = "its matching devices carry taints it does not tolerate"


@dataclass(frozen=True, slots=True)
class Shortfall:
    """Why one choice of a request (or the claim as a whole) cannot be satisfied; ``describe``
    is the wording every message uses."""

    why: Why
    device_class: str = ""
    alternative: str = ""
    """The firstAvailable sub-request this is about; '' for ``exactly``."""
    asks: int = 0
    """TOO_FEW_ON_ONE_NODE: the devices asked for."""
    most: int = 0
    """TOO_FEW_ON_ONE_NODE: the most matching devices one Ready node reaches ..."""
    most_on: str = ""
    """... and that node."""
    nodes: tuple[tuple[str, NodeHealth], ...] = ()
    """Not-Ready nodes with matching devices (NO_READY_NODE) or with enough of them
    (TOO_FEW_ON_ONE_NODE): the first ``SHOWN_NODES``, with their health."""
    more_nodes: int = 0
    found: int = 0
    """NO_READY_NODE: how many matching devices those nodes publish; SELECTORS_MATCH_NOTHING:
    how many devices the class has."""
    products: tuple[str, ...] = ()
    """productName of those devices."""
    suggestions: tuple[str, ...] = ()
    """Did-you-mean: class names (NO_CLASS), selectors over published values (SELECTORS_...)."""
    reason: str = ""
    """CANNOT_BE_JUDGED: what the evaluator could not decide, and on which device; TAINTED: the
    first tainted device, its node and taint."""
    requests: tuple[str, ...] = ()
    """NOT_ON_ONE_NODE: the requests that fit each alone."""
    held: tuple[str, ...] = ()
    """COUNTERS_HELD: the allocated devices (with their claims) holding what it needs."""

    @property
    def since(self) -> datetime | None:
        """When the earliest of the named nodes stopped being Ready."""
        times = [health.since for _, health in self.nodes if health.since is not None]
        return min(times) if times else None

    @property
    def chain(self) -> tuple[str, ...]:
        """Cause to effect, for the audit: the nodes that would serve and their condition."""
        named = tuple(f"{node}: {health.describe()}" for node, health in self.nodes)
        if self.why is Why.TOO_FEW_ON_ONE_NODE:
            return (f"the most on one Ready node: {self.most} ({self.most_on})", *named)
        return named

    def describe(self) -> str:
        meant = f" (did you mean {few(self.suggestions)}?)" if self.suggestions else ""
        if self.why is Why.NO_CLASS:
            return f"no DeviceClass {self.device_class}{meant}"
        if self.why is Why.CLASS_MATCHES_NOTHING:
            return f"class {self.device_class} matches no published device"
        if self.why is Why.SELECTORS_MATCH_NOTHING:
            return (
                f"its selectors reject every device of class {self.device_class} "
                f"({plural(self.found, 'device')}){meant}"
            )
        if self.why is Why.NO_READY_NODE:
            return self._no_ready_node()
        if self.why is Why.TOO_FEW_ON_ONE_NODE:
            text = f"asks {self.asks}, at most {self.most} on one node ({self.most_on})"
            if self.nodes:
                node, health = self.nodes[0]
                text += f"; {node} has {self.asks} but is {health.describe()}"
            return text
        if self.why is Why.TAINTED:
            return (
                f"{plural(self.found, 'matching device')} on Ready nodes carry a taint it does "
                f"not tolerate: {self.reason}"
            )
        if self.why is Why.NOT_ON_ONE_NODE:
            return (
                f"requests {few(self.requests)} each fit on a Ready node, but no one node has "
                "them all (a claim is allocated on one node)"
            )
        if self.why is Why.COUNTERS_SHORT:
            return f"on {self.most_on}: {self.reason}"
        if self.why is Why.COUNTERS_HELD:
            return (
                f"fits {self.most_on} only once {few(self.held)} release the shared counters or "
                "capacity they hold (a whole GPU does not fit while a partition of it is allocated)"
            )
        return f"cannot be judged: {self.reason}"

    def _no_ready_node(self) -> str:
        if not self.nodes:
            return "its matching devices are node-independent and no Ready node reaches them"
        what = f" ({few(self.products, 2)})" if self.products else ""
        if len(self.nodes) == 1 and not self.more_nodes:
            node, health = self.nodes[0]
            has = "a matching device" if self.found == 1 else plural(self.found, "matching device")
            return f"only {node} has {has}{what} and it is {health.describe()}"
        shown = [node for node, _ in self.nodes]
        who = f"{', '.join(shown)} and {self.more_nodes} more" if self.more_nodes else few(shown)
        states = ", ".join(f"{node} {health.describe()}" for node, health in self.nodes)
        return f"only {who} have matching devices{what}, none Ready: {states}"


@dataclass(frozen=True, slots=True)
class UnmetRequest:
    """A request no Ready node can satisfy ('' for the claim as a whole), with why each of its
    choices falls short (one for ``exactly``, one per firstAvailable alternative, in order)."""

    request: str
    shortfalls: tuple[Shortfall, ...]

    @property
    def since(self) -> datetime | None:
        times = [s.since for s in self.shortfalls if s.since is not None]
        return min(times) if times else None

    def describe(self) -> str:
        texts = [s.describe() for s in self.shortfalls]
        if len(set(texts)) == 1:
            return texts[0]
        parts = [f"{s.alternative}: {text}" for s, text in zip(self.shortfalls, texts, strict=True)]
        return "no alternative fits: " + "; ".join(parts)

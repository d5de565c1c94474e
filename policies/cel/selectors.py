"""DRA device selectors: CEL expressions evaluated over one device, as the scheduler does.

The evaluator is cel-python (a real CEL implementation, pure Python), with the functions the
Kubernetes CEL environment gives DRA selectors added (``policies.cel.environment``). The scheduler's
rules (k8s.io/dynamic-resource-allocation, docs/dra.md): the input is ``device`` with ``driver``,
``attributes[domain][name]`` (typed values; unqualified names in the driver's domain) and
``capacity[domain][name]`` (quantities); an unknown domain is an empty map; a device belongs to a
class or request when every selector is true, tried in order and stopping at the first false; an
error aborts the allocation. Here an error, or an expression this evaluator cannot run, is
``UNKNOWN`` with the reason: never "matches nothing", which would read as an all-clear.

Each expression is compiled once (a bounded cache) and its results are remembered by what it
read: the sequence of device fields read, with their values, leads to the result (a decision
trie), so 40,000 alike GPUs cost one evaluation and a few dict lookups each.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from policies.cel.values import (
    MATCH,
    Device,
    Outcome,
    Path,
    Selection,
    Trace,
    read,
)

#: Results remembered per expression; past it expressions are still evaluated, just not stored.
MAX_REMEMBERED = 4096
COMPILED_CACHE = 4096

# --- remembering results -------------------------------------------------------------------------


@dataclass(slots=True)
class _Step:
    path: Path
    branches: dict[object, _Step | Selection]


class Memo:
    """A decision trie: read ``path``, follow the branch of its value, until a result."""

    def __init__(self) -> None:
        self.root: _Step | Selection | None = None
        self.remembered = 0
        self.disabled = False

    def lookup(self, device: Device) -> Selection | None:
        node = self.root
        while isinstance(node, _Step):
            node = node.branches.get(read(device, node.path))
        return node

    def remember(self, trace: Trace, result: Selection) -> None:
        if self.disabled or trace.opaque or self.remembered >= MAX_REMEMBERED:
            self.disabled = self.disabled or trace.opaque
            return
        reads = trace.reads
        if not reads:
            self.root = result  # the expression never looks at the device
            self.remembered += 1
            return
        if self.root is None:
            self.root = _Step(reads[0][0], {})
        node = self.root
        for i, (path, key) in enumerate(reads):
            if not isinstance(node, _Step) or node.path != path:
                self.disabled = True  # not deterministic in its reads: do not trust the trie
                return
            if i == len(reads) - 1:
                node.branches[key] = result
                self.remembered += 1
                return
            child = node.branches.get(key)
            if child is None:
                child = node.branches[key] = _Step(reads[i + 1][0], {})
            node = child


# --- compiling and evaluating --------------------------------------------------------------------


class CompiledSelector:
    """One expression, compiled once; ``problem`` says why it cannot be evaluated, if so."""

    def __init__(self, expression: str) -> None:
        # cel-python loads in ~0.1 s: only when a selector comes
        from policies.cel import environment as cel_library

        self.expression = expression
        self.memo = Memo()
        self.program: Any = None
        self.problem, self.unsupported = cel_library.check(expression)
        if not self.problem:
            try:
                self.program = cel_library.compile_program(expression)
            except Exception as exc:  # the evaluator's own limits (recursion, grammar corners)
                self.problem, self.unsupported = f"cannot be evaluated here: {exc}", True

    def evaluate(self, device: Device) -> Selection:
        if self.problem:
            return Selection(Outcome.UNKNOWN, self.problem)
        found = self.memo.lookup(device)
        if found is not None:
            return found
        from policies.cel import environment as cel_library

        trace = Trace()
        result = cel_library.run(self.program, device, trace)
        self.memo.remember(trace, result)
        return result


@lru_cache(maxsize=COMPILED_CACHE)
def compile_selector(expression: str) -> CompiledSelector:
    return CompiledSelector(expression)


def select(expressions: Sequence[str], device: Device) -> Selection:
    """Whether the device satisfies every expression, tried in order as the scheduler does: the
    first false decides (later ones never run), and an error or an unknown stops there too. A
    device publishing fields that change what it can give, which this code does not model yet
    (``policies.cluster.dra.UNMODELLED_DEVICE_FIELDS``), is never a certain match: UNKNOWN, so
    what rests on it is "cannot tell" until it is modelled (a selector's no still stands)."""
    for i, expression in enumerate(expressions):
        result = compile_selector(expression).evaluate(device)
        if not result.matches:
            return Selection(result.outcome, result.reason, i)
    if device.unmodelled:
        fields = ", ".join(device.unmodelled)
        return Selection(Outcome.UNKNOWN, f"publishes {fields}, which gpu-guard does not model")
    return MATCH


def problems(expressions: Sequence[str]) -> Iterator[tuple[int, str]]:
    """(index, why) for each expression that does not compile or cannot run here."""
    for i, expression in enumerate(expressions):
        compiled = compile_selector(expression)
        if compiled.problem:
            yield i, compiled.problem

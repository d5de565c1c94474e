"""DRA's CEL environment on cel-python: what ``policies.cel.selectors`` compiles and runs.

The functions Kubernetes adds come from ``policies.cel.functions``. Here: the part of the type
checker that catches everyday mistakes (an undeclared name, an unknown function), which
cel-python, an interpreter, would only find while running; the ``device`` variable, whose maps
record every read for ``policies.cel.selectors``'s memo; and one evaluation. Names Kubernetes has
but this evaluator does not (``cel.bind``, the lists, URL, IP and format libraries) make an
expression "not evaluated here", which is not the same as "does not compile".
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Mapping
from decimal import InvalidOperation
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.evaluation import CELEvalError, base_functions

from policies.cel.functions import FUNCTIONS, cel_type, cel_type_named, to_cel
from policies.cel.values import (
    KEYS,
    MAX_COMPREHENSION_DEPTH,
    MAX_EXPRESSION_LENGTH,
    NO_MATCH,
    Device,
    Outcome,
    Path,
    Selection,
    Trace,
    Unreadable,
    value_key,
)

MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
TYPE_NAMES = frozenset(
    {"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type"}
)
#: Kubernetes CEL functions this evaluator does not have: such an expression is not judged.
NOT_HERE = frozenset(
    {
        "bind", "isSorted", "sum", "min", "max", "find", "findAll", "url", "isURL", "getScheme",
        "getHost", "getHostname", "getPort", "getEscapedPath", "getQuery", "ip", "isIP",
        "cidr", "isCIDR", "format", "quote", "reverse", "optMap", "optFlatMap", "orValue",
        "hasValue", "value", "of", "none", "sets", "contains", "containsAll", "intersects",
        "equivalent", "lists", "range", "distinct", "flatten", "slice", "sortBy", "first", "last",
        "family", "isCanonical", "isLoopback", "isUnspecified", "isGlobalUnicast", "containsIP",
        "containsCIDR", "prefixLength", "masked", "strings", "base64", "encode", "decode",
        "jsonpatch", "escapeKey", "authorizer", "isEmpty", "dyn",
    }
)  # fmt: skip


KNOWN_FUNCTIONS = frozenset(FUNCTIONS) | frozenset(base_functions) | MACROS | {"has"}


# --- the checks a type checker would make ---------------------------------------------------------


def _token(tree: lark.Tree[Any], index: int) -> str:
    child = tree.children[index]
    return str(child.value) if isinstance(child, lark.Token) else ""


def _macro_variable(call: lark.Tree[Any]) -> str:
    """The bound variable of ``x.all(v, ...)``: the first argument, a bare identifier."""
    args = call.children[2] if len(call.children) > 2 else None
    if isinstance(args, lark.Tree) and args.children:
        idents = [t for t in args.children[0].iter_subtrees() if t.data == "ident"]
        if idents:
            return _token(idents[0], 0)
    return ""


def _depth(tree: lark.Tree[Any]) -> int:
    """How deeply comprehensions nest in ``tree``."""
    inner = max((_depth(c) for c in tree.children if isinstance(c, lark.Tree)), default=0)
    is_macro = tree.data == "member_dot_arg" and _token(tree, 1) in MACROS
    return inner + 1 if is_macro else inner


def _names(tree: lark.Tree[Any]) -> Iterator[tuple[str, str]]:
    """("ident" | "call" | "bound" | "odd", name) for every name the expression uses."""
    for node in tree.iter_subtrees():
        if node.data == "ident":
            yield "ident", _token(node, 0)
        elif node.data == "ident_arg":
            yield "call", _token(node, 0)
        elif node.data == "member_dot_arg":
            method = _token(node, 1)
            yield "call", method
            if method in MACROS:
                yield "bound", _macro_variable(node)
        elif node.data in ("dot_ident", "dot_ident_arg", "member_object"):
            yield "odd", node.data


def _syntax_error(exc: Exception) -> str:
    """cel-python echoes the source with a caret under the offending spot: say where it is."""
    lines = str(exc).splitlines()
    if len(lines) >= 2 and "^" in lines[1]:
        return f"syntax error at column {lines[1].index('^') + 1}"
    return lines[0] if lines else type(exc).__name__


def check(expression: str) -> tuple[str, bool]:
    """(problem, unsupported): why the expression cannot be evaluated here ('' if it can), and
    whether that is this evaluator's limit rather than an expression Kubernetes would refuse."""
    if not expression.strip():
        return "has no CEL expression", False
    if len(expression) > MAX_EXPRESSION_LENGTH:
        return f"is longer than the API server accepts ({MAX_EXPRESSION_LENGTH} bytes)", False
    try:
        tree = _environment().compile(expression)
    except RecursionError:
        return "nests too deeply to be evaluated here", True
    except Exception as exc:  # CELParseError, and lark's own errors on odd input
        return f"does not compile: {_syntax_error(exc)}", False
    if _depth(tree) > MAX_COMPREHENSION_DEPTH:
        return f"nests comprehensions deeper than {MAX_COMPREHENSION_DEPTH} levels", True
    names = list(_names(tree))
    bound = {name for what, name in names if what == "bound"}
    calls = {name for what, name in names if what == "call"}
    for what, name in names:
        if what == "odd":
            return "uses syntax this evaluator does not run (messages, leading dots)", True
        if what == "call" and name in NOT_HERE and name not in KNOWN_FUNCTIONS:
            return f"uses {name}(), which this evaluator does not have", True
        if what == "call" and name not in KNOWN_FUNCTIONS:
            return f"does not compile: found no matching overload for {name!r}", False
    for what, name in names:
        allowed = {"device"} | bound | TYPE_NAMES | ({"cel"} if "bind" in calls else set())
        if what == "ident" and name not in allowed:
            return f"does not compile: undeclared reference to {name!r}", False
    return "", False


# --- running over one device ----------------------------------------------------------------------


class _Traced(celtypes.MapType):
    """A CEL map whose reads are recorded: iterating or sizing it reads its keys, and using it
    whole (comparing, listing items or values) makes the result depend on everything in it."""

    trace: Trace

    def _keys_read(self) -> None:
        raise NotImplementedError

    def _whole(self) -> None:
        self.trace.opaque = True

    def __iter__(self) -> Iterator[Any]:
        self._keys_read()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._keys_read()
        return dict.__len__(self)

    def keys(self) -> Any:
        self._keys_read()
        return dict.keys(self)

    def __eq__(self, other: object) -> bool:
        self._whole()
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]


class _Section(_Traced):
    """device.attributes or device.capacity: domain -> names; an unknown domain is empty."""

    def __init__(self, section: str, values: Mapping[str, object], trace: Trace) -> None:
        super().__init__()
        self.section, self.trace = section, trace
        domains: dict[str, dict[str, object]] = {}
        for name, value in values.items():
            domain, _, ident = name.partition("/")
            domains.setdefault(domain, {})[ident] = value
        for domain, members in domains.items():
            dict.__setitem__(self, celtypes.StringType(domain), _Domain(self, domain, members))

    def _keys_read(self) -> None:
        self.trace.record((self.section, KEYS), tuple(sorted(str(k) for k in dict.keys(self))))

    def __getitem__(self, key: Any) -> Any:
        found = dict.get(self, key)
        return found if found is not None else _Domain(self, str(key), {})

    def __contains__(self, key: object) -> bool:
        self._keys_read()
        return dict.__contains__(self, key)


class _Domain(_Traced):
    """One domain's attributes or capacities; every lookup is recorded."""

    def __init__(self, parent: _Section, domain: str, members: Mapping[str, object]) -> None:
        super().__init__()
        self.parent, self.domain, self.members = parent, domain, members
        self.trace = parent.trace
        for name, value in members.items():
            cel: Any = value if isinstance(value, Unreadable) else to_cel(value)
            dict.__setitem__(self, celtypes.StringType(name), cel)

    def _path(self, name: object) -> Path:
        return (self.parent.section, self.domain, str(name))

    def __getitem__(self, key: Any) -> Any:
        value = self.members.get(str(key)) if isinstance(key, str) else None
        self.trace.record(self._path(key), value_key(value))
        if value is None:
            raise KeyError(key)
        if isinstance(value, Unreadable):
            raise TypeError(f"attribute {key} is of a type gpu-guard cannot read ({value.kind})")
        return dict.__getitem__(self, key)

    def __contains__(self, key: object) -> bool:
        value = self.members.get(str(key)) if isinstance(key, str) else None
        self.trace.record(self._path(key), value_key(value))
        return value is not None

    def _keys_read(self) -> None:
        path: Path = (self.parent.section, self.domain, KEYS)
        self.trace.record(path, tuple(sorted(self.members)))

    def items(self) -> Any:
        self._whole()
        return super().items()

    def values(self) -> Any:
        self._whole()
        return super().values()


class _Device(celtypes.MapType):
    def __init__(self, device: Device, trace: Trace) -> None:
        super().__init__()
        self.trace = trace
        dict.__setitem__(self, celtypes.StringType("driver"), celtypes.StringType(device.driver))
        for section in ("attributes", "capacity"):
            values = device.attributes if section == "attributes" else device.capacity
            dict.__setitem__(self, celtypes.StringType(section), _Section(section, values, trace))

    def __getitem__(self, key: Any) -> Any:
        if key == "driver":
            self.trace.record(("driver",), value_key(str(dict.__getitem__(self, key))))
        return dict.__getitem__(self, key)

    def __eq__(self, other: object) -> bool:
        self.trace.opaque = True
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]


_ENVIRONMENT: list[Any] = []


def _environment() -> Any:
    if not _ENVIRONMENT:
        limit = sys.getrecursionlimit()
        _ENVIRONMENT.append(celpy.Environment())
        sys.setrecursionlimit(limit)  # cel-python raises it for the whole process: not here
    return _ENVIRONMENT[0]


def compile_program(expression: str) -> Any:
    environment = _environment()
    return environment.program(environment.compile(expression), functions=dict(FUNCTIONS))


#: cel-python's grammar rules for the operators, as CEL (and the API server) names them.
OPERATORS = {
    "relation_lt": "_<_", "relation_le": "_<=_", "relation_gt": "_>_", "relation_ge": "_>=_",
    "relation_eq": "_==_", "relation_ne": "_!=_", "relation_in": "@in",
    "addition_add": "_+_", "addition_sub": "_-_", "multiplication_mul": "_*_",
    "multiplication_div": "_/_", "multiplication_mod": "_%_", "unary_neg": "-_",
    "unary_not": "!_",
}  # fmt: skip
_RULE = re.compile(r"Token\('RULE', '(\w+)'\)")
_CLASS = re.compile(r"<class '([\w.]+)'>")


def _describe(error: CELEvalError) -> str:
    """cel-python's error in CEL's words: operators and types named as the API server names
    them, and the message of a function's ValueError or of a regex error instead of cel-python's
    generic "return error for overflow" or "match error"."""
    head = error.args[0] if error.args else error
    text = str(head).split(" (in activation")[0]
    cause = error.args[2] if len(error.args) > 2 and isinstance(error.args[2], tuple) else ()
    detail = cause[0] if cause else ""
    detail = detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)
    if text == "return error for overflow" and detail and error.args[1] is ValueError:
        text = detail
    elif text == "no such overload" and detail.startswith(text):
        text = detail  # ours name the types: "no such overload for string and ..."
    elif text == "match error" and detail:
        text = f"not a regular expression: {detail}"
    text = _RULE.sub(lambda m: repr(OPERATORS.get(m[1], m[1])), text)
    return _CLASS.sub(lambda m: cel_type_named(m[1]), text)


def run(program: Any, device: Device, trace: Trace) -> Selection:
    """One evaluation: MATCH or NO_MATCH for a boolean, UNKNOWN with the error otherwise."""
    try:
        result = program.evaluate({"device": _Device(device, trace)})
    except CELEvalError as exc:
        return Selection(Outcome.UNKNOWN, f"fails on this device: {_describe(exc)}")
    except (RecursionError, InvalidOperation, ArithmeticError, TypeError, ValueError) as exc:
        return Selection(Outcome.UNKNOWN, f"fails on this device: {exc}")
    if isinstance(result, CELEvalError):
        return Selection(Outcome.UNKNOWN, f"fails on this device: {_describe(result)}")
    if isinstance(result, celtypes.BoolType):
        return Selection(Outcome.MATCH) if result else NO_MATCH
    return Selection(Outcome.UNKNOWN, f"evaluates to {cel_type(result)}, not a bool")

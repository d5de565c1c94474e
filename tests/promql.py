"""The metric names a PromQL expression reads, for checking alerts and dashboards against what the
server exports (tests/test_monitoring.py).

A tokenizer, not a parser: strings, label matchers (``{...}``) and ranges or subqueries
(``[...]``, Grafana's ``$__rate_interval`` included) are skipped whole; an identifier followed by
``(`` is a function or an aggregation, one followed by ``by``/``without`` an aggregation; the label
lists after ``by``, ``without``, ``on``, ``ignoring``, ``group_left`` and ``group_right`` are
skipped; keywords and numbers are not names. Every other identifier is a metric name. A selector
that names its metric by ``__name__`` is refused: the check could not see it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

LABEL_LIST_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
KEYWORDS = LABEL_LIST_KEYWORDS | {"bool", "offset", "and", "or", "unless", "atan2", "inf", "nan"}
AGGREGATIONS = frozenset(
    {
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    }
)

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+)(?![\w:])
  | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<variable>\$\{\w+\}|\$\w+)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<open>[(\[{])
  | (?P<close>[)\]}])
  | (?P<operator>==|!=|>=|<=|=~|!~|[-+*/%^<>=,@])
    """,
    re.VERBOSE,
)

Token = tuple[str, str]


def tokens(expr: str) -> list[Token]:
    out: list[Token] = []
    position = 0
    while position < len(expr):
        match = _TOKEN.match(expr, position)
        if match is None:
            raise ValueError(f"cannot read {expr[position:]!r} in {expr!r}")
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            out.append((kind, match.group()))
        position = match.end()
    return out


def _closing(items: list[Token], start: int) -> int:
    """The index of the bracket closing the one at ``start``."""
    depth = 0
    for index in range(start, len(items)):
        kind, _ = items[index]
        depth += {"open": 1, "close": -1}.get(kind, 0)
        if depth == 0:
            return index
    raise AssertionError("checked balanced first")


def _matchers(items: list[Token], start: int, end: int) -> Iterator[str]:
    """The label names of a ``{...}`` selector."""
    for index in range(start + 1, end):
        kind, text = items[index]
        if kind == "ident" and index + 1 < end and items[index + 1][0] == "operator":
            yield text


def _check_balanced(items: list[Token], expr: str) -> None:
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    for kind, text in items:
        if kind == "open":
            stack.append(text)
        elif kind == "close" and (not stack or stack.pop() != pairs[text]):
            raise ValueError(f"unbalanced brackets in {expr!r}")
    if stack:
        raise ValueError(f"unbalanced brackets in {expr!r}")


def metric_names(expr: str) -> set[str]:
    items = tokens(expr)
    _check_balanced(items, expr)
    names: set[str] = set()
    index = 0
    while index < len(items):
        kind, text = items[index]
        following = items[index + 1][1] if index + 1 < len(items) else ""
        if text in ("{", "["):
            end = _closing(items, index)
            if text == "{" and "__name__" in _matchers(items, index, end):
                raise ValueError(f"a selector names its metric by __name__: {expr!r}")
            index = end
        elif kind == "ident" and text.lower() in LABEL_LIST_KEYWORDS:
            if following == "(":
                index = _closing(items, index + 1)
        elif kind == "ident" and text.lower() in KEYWORDS:
            pass
        elif kind == "ident" and following == "(":
            pass  # a function or an aggregation
        elif kind == "ident" and following.lower() in ("by", "without"):
            if text not in AGGREGATIONS:
                raise ValueError(f"{text} {following} is not an aggregation: {expr!r}")
        elif kind == "ident":
            names.add(text)
        index += 1
    return names

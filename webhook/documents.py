"""YAML and JSON read strictly: a mapping key given twice is an error naming its line.

Both formats let a key repeat, and both parsers then keep the last value without a word: a label
given twice, or two objects pasted together without ``---`` (the second's ``apiVersion``,
``kind`` and ``metadata`` silently replacing the first's), would be judged as something nobody
wrote. kubectl's strict field validation refuses such a file; so does gpu-guard, for state,
change and configuration files alike.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

#: Keys that repeat at the top of a document when two objects were pasted together.
_OBJECT_KEYS = frozenset({"apiVersion", "kind"})


class DuplicateKeyError(ValueError):
    """One key twice in one mapping; ``str()`` is the line-level part of the message."""

    def __init__(self, key: str, line: int | None = None, first_line: int | None = None) -> None:
        self.key, self.line, self.first_line = key, line, first_line
        where = f"line {line}: " if line is not None else ""
        first = f" (first at line {first_line})" if first_line is not None else ""
        hint = "; two objects without '---' between them?" if key in _OBJECT_KEYS else ""
        super().__init__(f"{where}key {key!r} given twice in one mapping{first}{hint}")


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _check_unique_keys(node: yaml.MappingNode) -> None:
    """Compares scalar keys as written, with their resolved tag (``1`` and ``"1"`` differ), so
    nothing is constructed twice; merged keys may override (YAML's own rule), and complex keys
    are left to the base constructor."""
    lines: dict[tuple[str, str], int] = {}
    for key_node, _ in node.value:
        if type(key_node) is not yaml.ScalarNode or key_node.tag == _MERGE_TAG:
            continue
        key = (key_node.tag, key_node.value)
        line = key_node.start_mark.line + 1
        if key in lines:
            raise DuplicateKeyError(key_node.value, line, lines[key])
        lines[key] = line


def unique_key_loader(base: type[Any]) -> type[Any]:
    """``base`` (SafeLoader or the C CSafeLoader) refusing a key given twice in one mapping."""

    def construct_mapping(self: Any, node: yaml.Node, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode) and len(node.value) > 1:
            _check_unique_keys(node)
        return base.construct_mapping(self, node, deep=deep)

    return type(f"UniqueKey{base.__name__}", (base,), {"construct_mapping": construct_mapping})


UniqueKeySafeLoader: type[Any] = unique_key_loader(yaml.SafeLoader)


class _RepeatedKey(ValueError):
    """Raised by the pairs hook, which knows the key but not where it is."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKey(key)
            seen.add(key)
    return mapping


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_json(text: str) -> Any:
    """``json.loads`` that refuses a repeated key (``DuplicateKeyError`` with both lines) and
    the NaN/Infinity that are not JSON. Raises ``json.JSONDecodeError`` for broken JSON."""
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_refuse_constant)
    except _RepeatedKey as repeated:
        raise locate_json_duplicate(text) or DuplicateKeyError(repeated.key) from None


# A string (and the colon after it when it is a key), or a bracket; everything else between
# tokens (numbers, literals, commas, white space) is skipped by the search.
_JSON_TOKEN = re.compile(r'("(?:[^"\\]|\\.)*")(\s*:)?|([{}\[\]])', re.DOTALL)


def locate_json_duplicate(text: str) -> DuplicateKeyError | None:
    """The first repeated key of valid JSON ``text``, with its line and the first one's.

    Only on the error path (the pairs hook said there is one): a walk over the tokens that
    keeps, per open object, where each of its keys was.
    """
    open_objects: list[dict[str, int] | None] = []
    for token in _JSON_TOKEN.finditer(text):
        string, colon, bracket = token.groups()
        if bracket in ("{", "["):
            open_objects.append({} if bracket == "{" else None)
        elif bracket is not None:
            open_objects.pop()
        elif colon is not None and open_objects and open_objects[-1] is not None:
            keys = open_objects[-1]
            key, offset = json.loads(string), token.start()
            if key in keys:
                return DuplicateKeyError(key, _line_at(text, offset), _line_at(text, keys[key]))
            keys[key] = offset
    return None


def _line_at(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1

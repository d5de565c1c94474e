"""Strict YAML and JSON: a key given twice in one mapping is found, with its line, and only then."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from webhook.documents import DuplicateKeyError, UniqueKeySafeLoader, loads_json


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=UniqueKeySafeLoader)


@pytest.mark.parametrize(
    "load, text, key, line, first_line",
    [
        (loads_json, '{"a": 1,\n "a": 2}', "a", 2, 1),
        (loads_json, '{"x": {"a": 1}, "y": {"a": 1,\n\n "b": 2, "a": 3}}', "a", 3, 1),
        (loads_json, '[{"a": 1}, {"a": 2},\n {"b": [{"c": 1, "c": 2}]}]', "c", 2, 2),
        (loads_json, '{"s": "{\\"a\\": 1, \\"a\\": 2}", "t": "]}",\n "s": 0}', "s", 2, 1),
        (loads_json, '{"a\\u0062": 1, "ab": 2}', "ab", 1, 1),
        (load_yaml, "a: 1\nb: 2\na: 3\n", "a", 3, 1),
        (load_yaml, "x:\n  labels:\n    k: v\n    k: w\n", "k", 4, 3),
        (load_yaml, "x: {k: 1, k: 2}\n", "k", 1, 1),
        (load_yaml, "- {a: 1}\n- b: 1\n  b: 2\n", "b", 3, 2),
    ],
    ids=[
        "JSON: at the top",
        "JSON: in a nested object, beside a sibling with the same key",
        "JSON: in an object in a list",
        "JSON: after strings holding brackets and quotes",
        "JSON: written with an escape the second time",
        "YAML: at the top",
        "YAML: nested",
        "YAML: in a flow mapping on one line",
        "YAML: in a list item",
    ],
)
def test_a_key_given_twice_is_found_with_both_lines(
    load: Callable[[str], Any], text: str, key: str, line: int, first_line: int
) -> None:
    with pytest.raises(DuplicateKeyError) as caught:
        load(text)
    assert (caught.value.key, caught.value.line, caught.value.first_line) == (key, line, first_line)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": {"k": 1}, "b": {"k": 1}}',
        '[{"k": 1}, {"k": 2}]',
        '{"k": ["k", "k"], "v": "k"}',
        '{"a": "\\"a\\": 1"}',
    ],
    ids=["the same key in sibling objects", "in list items", "as values", "inside a string"],
)
def test_json_without_a_repeated_key_loads_as_the_standard_library_reads_it(text: str) -> None:
    assert loads_json(text) == json.loads(text)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_json_constants_that_are_not_json_are_refused(constant: str) -> None:
    with pytest.raises(ValueError, match="is not JSON"):
        loads_json(f'{{"a": {constant}}}')


@pytest.mark.parametrize(
    "text, expected",
    [
        ("base: &b {a: 1, c: 3}\nx: {<<: *b, a: 2}\n", {"a": 2, "c": 3}),
        ("x: {1: int, '1': str}\n", {1: "int", "1": "str"}),
        ("x: {a: 1}\ny: {a: 1}\n", {"a": 1}),
    ],
    ids=["a merge key overridden", "a number and a string", "the same key in siblings"],
)
def test_yaml_without_a_repeated_key_loads_as_the_safe_loader_reads_it(
    text: str, expected: Any
) -> None:
    loaded = load_yaml(text)
    assert loaded == yaml.safe_load(text)
    assert loaded["x"] == expected


def test_the_c_loader_refuses_a_repeated_key_too() -> None:
    from webhook.state.files import _YamlLoader

    with pytest.raises(DuplicateKeyError) as caught:
        list(yaml.load_all("a: 1\n---\nb: 1\nb: 2\n", Loader=_YamlLoader))
    assert (caught.value.key, caught.value.line) == ("b", 4)

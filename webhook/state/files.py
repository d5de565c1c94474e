"""State files: what people already have (`kubectl get ... -o yaml|json`), read into objects.

A file holds a YAML or JSON stream of objects, or ``kind: List`` documents (any ``*List`` with
``items``). JSON goes through orjson, never the YAML loader: a 60 MB dump must load in seconds.
Every problem names the file, the object and the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

from policies.kinds import NAMESPACED_KINDS
from policies.model import GroupKind, JSONObject
from policies.objects import PROJECTIONS, ObjectError, group_kind_of
from policies.pciids import PciDatabase
from policies.text import printable
from webhook.state.cluster import ClusterState, collector_paused

try:  # the C loader is 10x faster; fall back where libyaml is missing
    _YamlLoader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on the PyYAML build
    _YamlLoader = yaml.SafeLoader


class StateFileError(ValueError):
    """A state or change file that cannot be used; the text names file, object and field."""


@dataclass(frozen=True, slots=True)
class LoadedObject:
    path: str
    position: str  # "document 2, items[14]"
    obj: JSONObject

    def describe(self) -> str:
        """ "Node omen2" when the object has a name, else its position in the file."""
        meta = self.obj.get("metadata")
        kind = self.obj.get("kind")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if isinstance(kind, str) and isinstance(name, str) and name:
            namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
            prefix = f"{namespace}/" if isinstance(namespace, str) and namespace else ""
            return printable(f"{kind} {prefix}{name}")
        return self.position

    def error(self, field: str, problem: str) -> StateFileError:
        return StateFileError(printable(f"{self.path}: {self.describe()}: {field}: {problem}"))


def _parse_documents(path: str, text: bytes) -> list[Any]:
    stripped = text.lstrip()
    if stripped[:1] in (b"{", b"["):
        try:
            document = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise StateFileError(f"{path}: not valid JSON: {exc}") from None
        return document if isinstance(document, list) else [document]
    try:
        return list(yaml.load_all(text, Loader=_YamlLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise StateFileError(f"{path}: not valid YAML{where}: {problem}") from None


def _identity_kind(obj: JSONObject) -> GroupKind:
    """The kind of an object whose identity is usable, checked on the raw dict.

    Raises ``ObjectError`` naming the field; the caller names the object only then, so a
    175,000-item file does not build a description per item for an error that never comes.
    """
    for field in ("apiVersion", "kind"):
        value = obj.get(field)
        if not isinstance(value, str) or not value:
            raise ObjectError(field, "missing or not a string")
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise ObjectError("metadata", "missing or not a mapping")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ObjectError("metadata.name", "missing or not a string")
    kind = group_kind_of(obj)
    if kind in NAMESPACED_KINDS and not isinstance(meta.get("namespace"), str):
        raise ObjectError("metadata.namespace", f"a {obj['kind']} must have a namespace")
    return kind


def _check_identity(item: LoadedObject) -> None:
    """``_identity_kind`` with the file and the object named in the error."""
    try:
        _identity_kind(item.obj)
    except ObjectError as exc:
        raise item.error(exc.path, exc.problem) from None


def read_objects(path: str) -> Iterator[LoadedObject]:
    """Every object in one file, lists flattened, with its position for error messages."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise StateFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    for d, document in enumerate(_parse_documents(path, text), start=1):
        if document is None:
            continue
        where = f"document {d}"
        if not isinstance(document, Mapping):
            raise StateFileError(
                f"{path}: {where}: expected an object, got {type(document).__name__}"
            )
        kind = document.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and "items" in document:
            items = document["items"]
            if items is None:
                continue
            if not isinstance(items, list):
                raise StateFileError(f"{path}: {where}: items: expected a list")
            for i, item in enumerate(items):
                position = f"{where}, items[{i}]"
                if not isinstance(item, Mapping):
                    raise StateFileError(f"{path}: {position}: expected an object")
                loaded = LoadedObject(path, position, item)
                _check_identity(loaded)
                yield loaded
        else:
            loaded = LoadedObject(path, where, document)
            _check_identity(loaded)
            yield loaded


def check_object(item: LoadedObject) -> None:
    """Reads the object the way the policies will, so a bad field is reported here, by name."""
    projection = PROJECTIONS.get(group_kind_of(item.obj))
    if projection is not None:
        try:
            projection(item.obj)
        except ObjectError as exc:
            raise item.error(exc.path, exc.problem) from None


def load_state_objects(
    paths: Sequence[str], pci_database: PciDatabase | None = None
) -> tuple[ClusterState, list[LoadedObject]]:
    """A ClusterState from state files, and the objects themselves (check needs the originals)."""
    state = ClusterState(pci_database)
    items = []
    for path in paths:
        for item in read_objects(path):
            try:
                state.upsert(item.obj)
            except ObjectError as exc:
                raise item.error(exc.path, exc.problem) from None
            items.append(item)
    return state, items


def load_state(paths: Sequence[str], pci_database: PciDatabase | None = None) -> ClusterState:
    """A ClusterState from state files; later files win for an object named twice.

    A JSON ``kind: List`` (what ``snapshot`` writes, and ``kubectl get -o json``) is decoded
    one item at a time and each item dropped once projected: parsing a 70 MB document whole
    leaves hundreds of MB resident for good, the state's strings scattered over its arenas.
    Anything else, and any problem at all, goes through the full loader, which names the file,
    the object and the field.
    """
    state = ClusterState(pci_database)
    for path in paths:
        if not _stream_json_list(path, state):
            return load_state_objects(paths, pci_database)[0]
    return state


_SPACE = re.compile(r"[ \t\n\r]*")


class _NotStreamable(Exception):
    """Not a JSON List, or something the full loader must explain."""


def _stream_json_list(path: str, state: ClusterState) -> bool:
    """Upserts the items of a JSON ``*List`` file one by one; False when the file is anything
    else or has any problem (the caller then loads everything the thorough way)."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if not text.lstrip().startswith("{"):
        return False
    with collector_paused():
        try:
            _upsert_items(text, state)
        except (_NotStreamable, ObjectError, StateFileError, ValueError, IndexError):
            return False
    return True


def _upsert_items(text: str, state: ClusterState) -> None:
    decoder = json.JSONDecoder()

    def skip(i: int) -> int:
        match = _SPACE.match(text, i)
        return match.end() if match else i

    i = skip(0) + 1  # past "{"
    kind: object = None
    seen_items = False
    while True:
        i = skip(i)
        if text[i] == "}":
            break
        key, i = decoder.raw_decode(text, i)
        i = skip(i)
        if text[i] != ":":
            raise _NotStreamable
        i = skip(i + 1)
        if key == "items" and text[i] == "[":
            seen_items = True
            i = skip(i + 1)
            while text[i] != "]":
                obj, i = decoder.raw_decode(text, i)
                if not isinstance(obj, dict):
                    raise _NotStreamable
                # an ObjectError sends the file to the full loader, which names the object
                state.upsert(obj, _identity_kind(obj))
                i = skip(i)
                if text[i] == ",":
                    i = skip(i + 1)
            i += 1
        else:
            value, i = decoder.raw_decode(text, i)
            if key == "kind":
                kind = value
        i = skip(i)
        if text[i] == ",":
            i += 1
    if not seen_items or not isinstance(kind, str) or not kind.endswith("List"):
        raise _NotStreamable

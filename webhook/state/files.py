"""State and change files: what people already have (`kubectl get ... -o yaml|json`), read into
objects.

A file holds a YAML or JSON stream of objects, or ``kind: List`` documents (any ``*List`` with
``items``); ``-`` is standard input. A JSON ``*List`` state (what ``snapshot`` and ``kubectl get
-o json`` write) is decoded item by item with only the fields the projections read
(``webhook.wire``): a 70 MB dump must load in a second or two.
Any other JSON, and any problem, goes through the full loader. Every problem names the file, the
object and the field. A key given twice in one mapping is refused with its line
(``webhook.documents``) everywhere but in a streamed List: written by a JSON encoder, where a key
cannot repeat, and the check (a pairs hook per object) would add a third to that path's time.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from policies.cluster.coverage import EXPORT_NAME
from policies.cluster.kinds import NAMESPACED_KINDS, WATCHED_KINDS, group_kind_of
from policies.cluster.pciids import PciDatabase
from policies.cluster.projections import PROJECTIONS
from policies.state.cluster import ClusterState
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.requests import GroupKind, JSONObject
from policies.vocabulary.text import printable
from webhook.documents import DuplicateKeyError, loads_json, unique_key_loader
from webhook.state.feeding import collector_paused, new_state
from webhook.wire.decode import REFUSED, decode_list_document, decode_object, head_of

try:  # the C loader is 10x faster; fall back where libyaml is missing
    _YamlLoader: Any = unique_key_loader(yaml.CSafeLoader)
except AttributeError:  # pragma: no cover - depends on the PyYAML build
    _YamlLoader = unique_key_loader(yaml.SafeLoader)

STDIN = "-"
#: How kubectl names standard input in its messages (``error when creating "STDIN"``).
STDIN_NAME = "STDIN"
#: The files ``-f DIR`` reads, as kubectl does.
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


#: Snapshot's record of the kinds it listed, on its ``kind: List``: a kind listed with no object
#: is seen (none), not missing. kubectl drops a List's own metadata, as older readers do.
LISTED_ANNOTATION = "gpu-guard.io/listed-kinds"
_KIND_OF_EXPORT_NAME = {name: kind for kind, name in EXPORT_NAME.items()}


def listed_record(kinds: Sequence[GroupKind]) -> dict[str, Any]:
    """The List metadata that records ``kinds`` as listed (``kubectl get`` names, in order)."""
    return {"annotations": {LISTED_ANNOTATION: ",".join(EXPORT_NAME[k] for k in kinds)}}


def listed_in(document: Mapping[str, Any]) -> frozenset[GroupKind]:
    """The kinds a List's record names; names this version does not know are left out."""
    meta = document.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    record = annotations.get(LISTED_ANNOTATION) if isinstance(annotations, Mapping) else None
    if not isinstance(record, str):
        return frozenset()
    names = (name.strip() for name in record.split(","))
    return frozenset(_KIND_OF_EXPORT_NAME[n] for n in names if n in _KIND_OF_EXPORT_NAME)


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
    is_json = text.lstrip()[:1] in (b"{", b"[")
    try:
        with collector_paused():
            if is_json:
                return _parse_json(text)
            return list(yaml.load_all(text, Loader=_YamlLoader))
    except DuplicateKeyError as exc:
        raise StateFileError(printable(f"{path}: {exc}")) from None
    except json.JSONDecodeError as exc:
        raise StateFileError(
            f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise StateFileError(f"{path}: not valid YAML{where}: {problem}") from None
    except ValueError as exc:  # not UTF-8, NaN; a YAML timestamp out of range
        language = "JSON" if is_json else "YAML"
        raise StateFileError(printable(f"{path}: not valid {language}: {exc}")) from None
    except RecursionError:
        raise StateFileError(f"{path}: nested too deeply to be Kubernetes objects") from None


def _parse_json(text: bytes) -> list[Any]:
    document = loads_json(text.decode("utf-8"))
    return document if isinstance(document, list) else [document]


@lru_cache(maxsize=256)
def _kind_named(api_version: str, kind: str) -> GroupKind:
    """``group_kind_of`` for the few (apiVersion, kind) pairs a state holds, computed once."""
    return group_kind_of({"apiVersion": api_version, "kind": kind})


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
    if type(meta) is not dict and not isinstance(meta, Mapping):  # the ABC check is slow
        raise ObjectError("metadata", "missing or not a mapping")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ObjectError("metadata.name", "missing or not a string")
    kind = _kind_named(obj["apiVersion"], obj["kind"])
    if kind in NAMESPACED_KINDS and not isinstance(meta.get("namespace"), str):
        raise ObjectError("metadata.namespace", f"a {obj['kind']} must have a namespace")
    return kind


def check_identity(item: LoadedObject) -> None:
    """``_identity_kind`` with the file and the object named in the error."""
    try:
        _identity_kind(item.obj)
    except ObjectError as exc:
        raise item.error(exc.path, exc.problem) from None


def source_name(path: str) -> str:
    """How messages name a file: its path, or kubectl's ``STDIN`` for ``-``."""
    return STDIN_NAME if path == STDIN else path


def _read_bytes(path: str) -> bytes:
    if path == STDIN:
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise StateFileError(f"{path}: cannot read: {exc.strerror or exc}") from None


def file_entries(
    path: str, listed: set[GroupKind] | None = None
) -> Iterator[LoadedObject | StateFileError]:
    """Every object in one file, lists flattened, with its position for error messages, or the
    problem of a document that is not an object. A file that cannot be read or parsed raises
    before anything is yielded. Identities are not checked here (see ``check_identity``).
    A List's record of the kinds listed goes into ``listed``."""
    name = source_name(path)
    for d, document in enumerate(_parse_documents(name, _read_bytes(path)), start=1):
        if document is None:
            continue
        where = f"document {d}"
        if not isinstance(document, Mapping):
            yield StateFileError(
                f"{name}: {where}: expected an object, got {type(document).__name__}"
            )
            continue
        kind = document.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and "items" in document:
            if listed is not None:
                listed |= listed_in(document)
            items = document["items"]
            if items is None:
                continue
            if not isinstance(items, list):
                yield StateFileError(f"{name}: {where}: items: expected a list")
                continue
            for i, item in enumerate(items):
                position = f"{where}, items[{i}]"
                if isinstance(item, Mapping):
                    yield LoadedObject(name, position, item)
                else:
                    yield StateFileError(f"{name}: {position}: expected an object")
        else:
            yield LoadedObject(name, where, document)


def read_objects(path: str, listed: set[GroupKind] | None = None) -> Iterator[LoadedObject]:
    """Every object in one file, each with a usable identity; raises at the first problem."""
    for entry in file_entries(path, listed):
        if isinstance(entry, StateFileError):
            raise entry
        check_identity(entry)
        yield entry


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
    state = new_state(pci_database)
    items = []
    listed: set[GroupKind] = set()
    for path in paths:
        for item in read_objects(path, listed):
            try:
                state.upsert(item.obj)
            except ObjectError as exc:
                raise item.error(exc.path, exc.problem) from None
            items.append(item)
    state.listed = frozenset(listed)
    return state, items


def load_state(paths: Sequence[str], pci_database: PciDatabase | None = None) -> ClusterState:
    """A ClusterState from state files; later files win for an object named twice.

    A JSON ``kind: List`` (what ``snapshot`` writes, and ``kubectl get -o json``) is decoded
    one item at a time and each item dropped once projected: parsing a 70 MB document whole
    leaves hundreds of MB resident for good, the state's strings scattered over its arenas.
    Anything else, and any problem at all, goes through the full loader, which names the file,
    the object and the field.
    """
    state = new_state(pci_database)
    for path in paths:
        if not _stream_json_list(path, state):
            return load_state_objects(paths, pci_database)[0]
    return state


#: How to make a state file, for the message that says one holds no nodes: snapshot reads every
#: kind the cluster serves (a CRD it lacks is recorded as none); kubectl, only the core kinds
#: every cluster serves (naming a CRD it lacks fails the whole command and writes nothing).
STATE_COMMAND = "gpu-guard snapshot -o state.json; or at least kubectl get nodes,pods -A -o yaml"


def _kinds_counted(counts: Mapping[GroupKind, int]) -> str:
    """ "3 Deployment, 1 ConfigMap": most first, by kind name as kubectl's users write it."""
    ordered = sorted(counts.items(), key=lambda kc: (-kc[1], kc[0].kind, kc[0].group))
    return ", ".join(f"{count} {kind.kind}" for kind, count in ordered if count)


def ignored_kinds(state: ClusterState) -> str | None:
    """ "ignored: 3 Deployment, 1 ConfigMap": the kinds of a state no policy reads, or None."""
    listed = _kinds_counted(state.ignored())
    return f"ignored: {listed} (no policy reads these kinds)" if listed else None


def refuse_without_nodes(state: ClusterState, paths: Sequence[str]) -> None:
    """A state with no Node is a failed or mistyped dump, never a clean cluster: every verdict
    on it would be an all-clear about nothing. Raises ``StateFileError`` saying what was read."""
    if state.nodes():
        return
    read_counts = state.counts()
    counts = {kind: read_counts[str(kind)] for kind in WATCHED_KINDS}
    counts.update(state.ignored())
    listed = _kinds_counted(counts)
    read = f"read {listed}" if listed else "read no objects"
    names = ", ".join(source_name(p) for p in paths)
    raise StateFileError(f"{names}: {read}, and no Node: a state needs the nodes ({STATE_COMMAND})")


_SPACE = re.compile(rb"[ \t\n\r]*")


class _NotStreamable(Exception):
    """Not a JSON List, or something the full loader must explain."""


def _stream_json_list(path: str, state: ClusterState) -> bool:
    """Upserts the items of a JSON ``*List`` file one by one, each decoded with only the fields
    its kind's projection reads (``webhook.wire``); False when the file is anything else or has
    any problem (the caller then loads everything the thorough way)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return False
    match = _SPACE.match(data)
    if data[match.end() if match else 0 :][:1] != b"{":
        return False
    if not data.isascii():
        try:
            data.decode("utf-8")  # skipped fields are not decoded: check them here
        except UnicodeDecodeError:
            return False
    with collector_paused():
        try:
            _upsert_items(data, state)
        except (_NotStreamable, ObjectError, StateFileError, ValueError, *REFUSED):
            return False
    return True


def _upsert_items(data: bytes, state: ClusterState) -> None:
    document = decode_list_document(data)
    kind, items = document.get("kind"), document.get("items")
    if not isinstance(kind, str) or not kind.endswith("List") or items is None:
        raise _NotStreamable
    state.listed |= listed_in(document)
    guess: GroupKind | None = None  # items come grouped by kind: try the last one's first
    for raw in items:
        if guess is None:
            api_version, item_kind = head_of(raw)
            guess = group_kind_of({"apiVersion": api_version, "kind": item_kind})
        obj = decode_object(guess, raw)
        if not isinstance(obj, dict):
            raise _NotStreamable
        # an ObjectError sends the file to the full loader, which names the object
        kind = _identity_kind(obj)  # every schema keeps the identity
        if kind != guess:
            guess = kind
            obj = decode_object(kind, raw)
        state.upsert(obj, kind)

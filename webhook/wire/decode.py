"""Decoders for objects as they arrive: state-file items, list pages, watch events.

Each decodes with its kind's schema (``webhook.wire.schemas``) and gives the same dicts, pruned,
that ``orjson.loads`` would give, for every input both accept. Anything the typed decoder refuses
(a field of an unexpected shape, JSON it reads differently) is decoded again in full, the way it
was before: the projection then reports the field exactly as it always did, and JSON that is
not JSON fails with orjson's message. Partial decoding is a shortcut, never a second judge.

Two differences stay, both in numbers the API server never sends: an integer beyond 64 bits is
an int here (as the stdlib decoder of the state files' full loader reads it) where orjson reads a
float, and a number beyond a double in a skipped field is skipped where orjson refuses the page.
Reviews are not decoded here for that reason (bench/RESULTS.md, "Typed partial decoding").
"""

from __future__ import annotations

from functools import cache
from typing import Any, Generic, TypedDict, TypeVar

import msgspec
import orjson

from policies.model import GroupKind
from webhook.wire.schemas import SCHEMAS

#: What the typed decoders raise for input they will not take as given.
REFUSED = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)

T = TypeVar("T")

_WHOLE: msgspec.json.Decoder[Any] = msgspec.json.Decoder()


@cache
def _object_decoder(kind: GroupKind) -> msgspec.json.Decoder[Any]:
    schema = SCHEMAS.get(kind)
    return _WHOLE if schema is None else msgspec.json.Decoder(schema | None)


class _Page(TypedDict, Generic[T], total=False):
    metadata: Any
    items: list[T] | None


class _Event(TypedDict, Generic[T], total=False):
    type: Any
    object: T | None


@cache
def _page_decoder(kind: GroupKind) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(_Page[SCHEMAS.get(kind, Any)])  # type: ignore[misc]


@cache
def _event_decoder(kind: GroupKind) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(_Event[SCHEMAS.get(kind, Any)])  # type: ignore[misc]


class _Head(TypedDict, total=False):
    apiVersion: Any
    kind: Any


_HEAD = msgspec.json.Decoder(_Head)


def decode_object(kind: GroupKind, data: bytes | msgspec.Raw) -> Any:
    """One object of ``kind``, pruned to its schema (whole for a kind without one)."""
    try:
        return _object_decoder(kind).decode(data)
    except REFUSED:
        return orjson.loads(data)


def head_of(data: bytes | msgspec.Raw) -> tuple[Any, Any]:
    """An object's apiVersion and kind as given, read without building anything else."""
    head = _HEAD.decode(data)
    return head.get("apiVersion"), head.get("kind")


def decode_list_page(kind: GroupKind, body: bytes) -> Any:
    """A list page of ``kind`` (``{"metadata": ..., "items": [...]}``), items pruned."""
    try:
        return _page_decoder(kind).decode(body)
    except REFUSED:
        return orjson.loads(body)


def decode_watch_event(kind: GroupKind, line: bytes) -> Any:
    """One watch event of ``kind``; an ERROR event's object (a Status) is kept whole."""
    try:
        event = _event_decoder(kind).decode(line)
    except REFUSED:
        return orjson.loads(line)
    if isinstance(event, dict) and event.get("type") == "ERROR":
        return orjson.loads(line)
    return event


class _ListDocument(TypedDict, total=False):
    kind: Any
    items: list[msgspec.Raw] | None


_LIST_DOCUMENT = msgspec.json.Decoder(_ListDocument)


def decode_list_document(data: bytes) -> Any:
    """A ``kind: List`` document with each item left as its bytes (``msgspec.Raw``), to be
    decoded by its own kind (``head_of``, then ``decode_object``); raises what ``REFUSED``
    names for anything else."""
    return _LIST_DOCUMENT.decode(data)

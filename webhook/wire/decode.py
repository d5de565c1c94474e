"""Decoders for objects as they arrive: state-file items, list pages, watch events, reviews.

Each decodes with its kind's schema (``policies.cluster.schemas``) and gives the same dicts, pruned,
that ``orjson.loads`` would give, for every input both accept. Anything the typed decoder refuses
(a field of an unexpected shape, JSON it reads differently) is decoded again in full, the way it
was before: the projection then reports the field exactly as it always did, and JSON that is
not JSON fails with orjson's message. Partial decoding is a shortcut, never a second judge.

Two differences stay, both in numbers the API server never sends: an integer beyond 64 bits is
an int here (as the stdlib decoder of the state files' full loader reads it) where orjson reads a
float, and a number beyond a double in a skipped field is skipped where orjson refuses the page.
``decode_review`` says what they mean for an AdmissionReview.
"""

from __future__ import annotations

import re
import sys
from functools import cache
from typing import Any, Generic, TypedDict, TypeVar

import msgspec
import orjson

from policies.cluster.projections import SCHEMAS
from policies.vocabulary.requests import GroupKind

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
    metadata: Any
    items: list[msgspec.Raw] | None


_LIST_DOCUMENT = msgspec.json.Decoder(_ListDocument)


def decode_list_document(data: bytes) -> Any:
    """A ``kind: List`` document with each item left as its bytes (``msgspec.Raw``), to be
    decoded by its own kind (``head_of``, then ``decode_object``); raises what ``REFUSED``
    names for anything else."""
    return _LIST_DOCUMENT.decode(data)


class _Request(TypedDict, Generic[T], total=False):
    uid: Any
    kind: Any
    operation: Any
    namespace: Any
    name: Any
    subResource: Any
    resource: Any
    userInfo: Any
    dryRun: Any
    object: T | None
    oldObject: T | None


class _Review(TypedDict, Generic[T], total=False):
    apiVersion: Any
    kind: Any
    request: _Request[T] | None


@cache
def _review_decoder(kind: GroupKind) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(_Review[SCHEMAS[kind]])  # type: ignore[valid-type]


ORJSON_MAX_DEPTH = 1024
"""The deepest nesting ``orjson.loads`` takes."""

_REQUEST_KIND = re.compile(rb'"kind"\s*:\s*\{')


_SCHEMA_KINDS = {(kind.group, kind.kind): kind for kind in SCHEMAS}


def _kind_named(body: bytes) -> GroupKind | None:
    """The kind with a schema that the first ``"kind":{...}`` of ``body`` names (the API server
    writes the request's first), a guess that ``decode_review`` checks against what it decoded."""
    found = _REQUEST_KIND.search(body)
    end = body.find(b"}", found.end()) if found else -1
    if found is None or end < 0:
        return None
    try:
        named = orjson.loads(body[found.end() - 1 : end + 1])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(named, dict):
        return None
    group, kind = named.get("group"), named.get("kind")
    if not isinstance(group, str) or not isinstance(kind, str):
        return None
    return _SCHEMA_KINDS.get((group, kind))


_RECURSION_IS_THE_C_LIMIT = sys.version_info[:2] == (3, 11)


def _nesting_bounded() -> bool:
    """Whether msgspec refuses every nesting orjson refuses (see ``decode_review``)."""
    return _RECURSION_IS_THE_C_LIMIT and sys.getrecursionlimit() <= ORJSON_MAX_DEPTH


def decode_review(body: bytes) -> Any:
    """An AdmissionReview with ``request.object`` and ``oldObject`` pruned to the schema of the
    kind ``request.kind`` names; anything else (a kind without a schema, a body the typed
    decoder refuses or reads differently) ``orjson.loads`` whole, errors included.

    Exact for every body orjson takes, with two differences, both in bodies the API server
    cannot send (its encoder writes neither), neither able to clear what would be refused:
    an integer beyond 64 bits in a kept field is that integer here (orjson rounds it to a
    float, which a quantity or count then refuses as malformed): the value as written, as the
    API server's own quantity parser reads it; and a number beyond a double in a skipped field
    is skipped, where orjson refuses the body: no policy reads that field, so the answer is the
    one every field the policies read gives. Invalid UTF-8, which msgspec only notices in the
    strings it builds, is checked over the whole body (``isascii``, 1 µs for 41 KB) first.
    Nesting: orjson refuses what is deeper than 1,024 levels; msgspec, on Python 3.11, what is
    deeper than the recursion limit leaves room for (skipped fields included). With the limit
    at most 1,024 (Python's default is 1,000) msgspec refuses first and orjson then decides;
    above it (celpy raises it to 2,500 when it compiles a CEL selector) or on another Python,
    whose C recursion limit is not the recursion limit, the review is decoded whole.
    """
    kind = _kind_named(body)
    if kind is None or not _nesting_bounded():
        return orjson.loads(body)
    try:
        if not body.isascii():
            body.decode()
        review = _review_decoder(kind).decode(body)
    except (*REFUSED, UnicodeDecodeError):
        return orjson.loads(body)
    request = review.get("request")
    named = request.get("kind") if isinstance(request, dict) else None
    said = (named.get("group"), named.get("kind")) if isinstance(named, dict) else None
    if said != (kind.group, kind.kind):
        return orjson.loads(body)
    return review

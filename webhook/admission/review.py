"""AdmissionReview admission.k8s.io/v1 in: the envelope, parsed strictly, no HTTP.

Decoding, apart from deciding (``webhook.engine``) and answering (``webhook.admission.response``):
what the API server sends becomes an ``AdmissionRequest`` here, and anything it would never send
is a ``ReviewError`` with a one-line reason (the server answers it with 400). The reviews that
``check``, ``make demo``, the benchmarks and the tests send are composed in the same shape by
``webhook.admission.compose`` (the reviews recorded in tests/fixtures are the reference for both).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

from policies.vocabulary.requests import (
    OPERATIONS,
    AdmissionRequest,
    GroupVersionResource,
    UserInfo,
)
from webhook.admission.warnings import ELLIPSIS
from webhook.wire.decode import decode_review

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"


class ReviewError(ValueError):
    """A request that is not a usable AdmissionReview; ``str()`` is a one-line reason."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.status = status


def _one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + ELLIPSIS


def _shown(value: object) -> str:
    """A value for a one-line reason: strings quoted and cut, anything else by its type (repr
    of a deeply nested value would recurse without end)."""
    if isinstance(value, str):
        return _one_line(repr(value), 60)
    return "nothing" if value is None else f"a {type(value).__name__}"


def _str_field(request: Mapping[str, Any], key: str, required: bool = False) -> str:
    value = request.get(key)
    if value is None:
        if required:
            raise ReviewError(f"request.{key}: missing")
        return ""
    if not isinstance(value, str):
        raise ReviewError(f"request.{key}: expected a string, got {type(value).__name__}")
    if required and not value:
        raise ReviewError(f"request.{key}: empty")
    return value


def _object_field(request: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    value = request.get(key)
    if value is not None and not isinstance(value, Mapping):
        raise ReviewError(f"request.{key}: expected an object or null, got {type(value).__name__}")
    return value


def _user(request: Mapping[str, Any]) -> UserInfo:
    info = request.get("userInfo")
    if info is None:
        return UserInfo()
    if not isinstance(info, Mapping):
        raise ReviewError("request.userInfo: expected an object")
    username = info.get("username", "")
    groups = info.get("groups")
    groups = [] if groups is None else groups
    if not isinstance(username, str):
        raise ReviewError("request.userInfo.username: expected a string")
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise ReviewError("request.userInfo.groups: expected a list of strings")
    return UserInfo(username, tuple(groups))


def _resource(request: Mapping[str, Any]) -> GroupVersionResource:
    """``request.resource``: absent is allowed (a file's review names none)."""
    resource = request.get("resource")
    if resource is None:
        return GroupVersionResource()
    values = (
        tuple(resource.get(k, "") for k in ("group", "version", "resource"))
        if isinstance(resource, Mapping)
        else (None,)
    )
    if not all(isinstance(v, str) for v in values):
        raise ReviewError("request.resource: needs string group, version and resource")
    return GroupVersionResource(*values)


class _DuplicateKey(Exception):
    """An object of the body names a key twice."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> None:
    if len(pairs) > 1 and len({key for key, _ in pairs}) != len(pairs):
        keys = [key for key, _ in pairs]
        raise _DuplicateKey(next(key for i, key in enumerate(keys) if key in keys[:i]))


_KEYS_ONLY = json.JSONDecoder(object_pairs_hook=_unique_keys)
"""Reads a body only to find a key named twice in one object: orjson and msgspec keep the last
value without a word, Go's encoding/json (the API server's) never writes one. The stdlib's
scanner is the one that shows every pair; it builds nothing else (the hook returns None)."""


def _no_duplicate_keys(body: bytes) -> None:
    try:
        _KEYS_ONLY.decode(body.decode())
    except _DuplicateKey as exc:
        raise ReviewError(f"body names the key {_shown(exc.args[0])} twice in one object") from None
    except (ValueError, RecursionError):  # what orjson read and this reader does not: refuse it
        raise ReviewError("body is not JSON this server reads") from None


def parse_review(body: bytes, pruned: bool = False) -> AdmissionRequest:
    """The AdmissionRequest in a review body, or ReviewError saying what is wrong with it.

    ``pruned``: the object and old object hold only the fields their kind's schema names
    (``webhook.wire``), which every validating policy reads; a mutation needs them whole
    (its JSON patch is computed against the object as sent)."""
    try:
        review = decode_review(body) if pruned else orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReviewError(f"body is not valid JSON: {_one_line(str(exc))}") from None
    if not isinstance(review, dict):
        raise ReviewError(f"expected an AdmissionReview object, got {type(review).__name__}")
    if review.get("apiVersion") != API_VERSION:
        raise ReviewError(
            f"apiVersion must be {API_VERSION}, got {_shown(review.get('apiVersion'))}"
        )
    if review.get("kind") != KIND:
        raise ReviewError(f"kind must be {KIND}, got {_shown(review.get('kind'))}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise ReviewError("request: missing or not an object")
    uid = _str_field(request, "uid", required=True)
    kind = request.get("kind")
    if not isinstance(kind, dict):
        raise ReviewError("request.kind: missing or not an object")
    group, version, kind_name = (kind.get(k, "") for k in ("group", "version", "kind"))
    if not all(isinstance(v, str) for v in (group, version, kind_name)) or not kind_name:
        raise ReviewError("request.kind: needs string group, version and kind")
    operation = _str_field(request, "operation", required=True)
    if operation not in OPERATIONS:
        raise ReviewError(f"request.operation: unknown operation {_one_line(repr(operation), 40)}")
    obj = _object_field(request, "object")
    old = _object_field(request, "oldObject")
    if operation in ("CREATE", "UPDATE") and obj is None:
        raise ReviewError(f"request.object: required for {operation}")
    if operation == "UPDATE" and old is None:
        raise ReviewError("request.oldObject: required for UPDATE")
    dry_run = request.get("dryRun", False)
    if not isinstance(dry_run, bool):
        raise ReviewError("request.dryRun: expected a boolean")
    name = _str_field(request, "name")
    if not name:
        current = obj if obj is not None else old
        meta = current.get("metadata") if current is not None else None
        if isinstance(meta, Mapping) and isinstance(meta.get("name"), str):
            name = meta["name"]
    _no_duplicate_keys(body)  # last: a field's own reason first (it reads deep nesting better)
    return AdmissionRequest(
        uid=uid,
        group=group,
        version=version,
        kind=kind_name,
        operation=operation,
        namespace=_str_field(request, "namespace"),
        name=name,
        obj=obj,
        old=old,
        sub_resource=_str_field(request, "subResource"),
        resource=_resource(request),
        user=_user(request),
        dry_run=dry_run,
    )

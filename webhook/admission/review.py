"""AdmissionReview admission.k8s.io/v1 in and out: strict parsing, faithful answers, no HTTP.

The one place that knows the envelope: what the API server sends is parsed here, and the reviews
``make demo``, the benchmarks and the tests send are built here in the same shape (the reviews
recorded in tests/fixtures are the reference for both).

Anything the API server would never send is a ``ReviewError`` with a one-line reason (the
server answers it with 400). Warnings are fitted to what the API server passes on: 256
characters each (a longer one is split into parts, its instruction first), 4,096 bytes in total;
past that kubectl would show truncated or no text. A denial's message is not cut and stays whole.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from policies.cluster.kinds import RESOURCE_OF, REVIEWED_AS_SUBRESOURCE
from policies.vocabulary.requests import OPERATIONS, AdmissionRequest, UserInfo
from webhook.engine import Decision
from webhook.wire.decode import decode_review

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
WARNING_MAX_CHARS = 256
WARNINGS_MAX_BYTES = 4096
ELLIPSIS = "…"


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
        user=_user(request),
        dry_run=dry_run,
    )


def _resource(request: AdmissionRequest) -> tuple[dict[str, str], str]:
    """The resource and subresource the API server names for a request of this kind."""
    kind = request.group_kind
    parent, subresource = REVIEWED_AS_SUBRESOURCE.get(kind, (kind, ""))
    served = RESOURCE_OF.get(parent)
    if served is None:
        raise ValueError(f"no API resource known for {kind}: add it to policies/cluster/kinds.py")
    version = request.version if parent == kind else served.version
    resource = {"group": parent.group, "version": version, "resource": served.plural}
    return resource, request.sub_resource or subresource


def review_of(request: AdmissionRequest) -> dict[str, Any]:
    """The AdmissionReview the API server would POST for ``request``; ``parse_review`` of its
    bytes gives ``request`` back."""
    kind = {"group": request.group, "version": request.version, "kind": request.kind}
    resource, subresource = _resource(request)
    body: dict[str, Any] = {
        "uid": request.uid,
        "kind": kind,
        "resource": resource,
        "requestKind": dict(kind),
        "requestResource": dict(resource),
        "name": request.name,
        "namespace": request.namespace or None,
        "operation": request.operation,
        "userInfo": {"username": request.user.username, "groups": list(request.user.groups)},
        "object": request.obj,
        "oldObject": request.old,
        "dryRun": request.dry_run,
    }
    if subresource:
        body["subResource"] = body["requestSubResource"] = subresource
    return {"apiVersion": API_VERSION, "kind": KIND, "request": body}


_TAG = re.compile(r"(\[[^\]\s]+\]) ")
INSTRUCTION_JOINER = " — "
_LEAST_WHAT = 40
"""The shortest "what" worth putting before the instruction in a first warning."""


def _sentences(text: str) -> list[str]:
    """``text`` cut after each ``.``, ``?`` or ``!`` that ends a sentence (never inside
    parentheses, where "(Kubelet stopped posting node status.)" keeps its full stop)."""
    out: list[str] = []
    depth = start = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        ends = char in ".?!" and depth <= 0 and (i + 1 == len(text) or text[i + 1] == " ")
        if ends:
            out.append(text[start : i + 1].strip())
            start = i + 1
    rest = text[start:].strip()
    return [*out, rest] if rest else out


_CLAUSE_ENDS = frozenset(".?!:;,")


def _cut(text: str, room: int) -> tuple[str, str]:
    """The head of ``text`` within ``room`` characters and the rest: cut after its last sentence
    or clause end (``.?!:;,`` and a space) outside parentheses; at a word boundary only when no
    such end leaves the head at least half full (a clause longer than that), then at a space
    outside parentheses when one does. Never a parenthesis cut open while a cut outside one fits."""
    if len(text) <= room:
        return text, ""
    depth, clause, outside, inside = 0, -1, -1, -1
    for i, char in enumerate(text[: room + 1]):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == " ":
            inside = i
            outside = i if depth <= 0 else outside
        elif char in _CLAUSE_ENDS and depth <= 0 and i < room and text[i + 1 : i + 2] == " ":
            clause = i
    if clause >= room // 2:
        return text[: clause + 1], text[clause + 2 :].strip()
    at = outside if outside >= room // 2 else inside
    if at <= 0:  # one word longer than a warning: cut inside it
        return text[: room - 1] + ELLIPSIS, text[room - 1 :]
    return text[:at], text[at + 1 :].strip()


def _pieces(text: str, room: int) -> list[str]:
    pieces: list[str] = []
    while text:
        piece, text = _cut(text, room)
        pieces.append(piece)
    return pieces


def split_warning(text: str) -> list[str]:
    """One warning as the API server passes it on: each part within 256 characters (it cuts
    longer ones), none of the text lost. A message that does not fit becomes
    ``[id] <what> — <what to do>`` (its last sentence, the instruction, in the first part,
    the one kubectl users read) and continuations ``[id] (2/3) ...`` with the rest in order."""
    flat = " ".join(text.split())
    if len(flat) <= WARNING_MAX_CHARS:
        return [flat]
    tagged = _TAG.match(flat)
    tag = tagged.group(1) + " " if tagged else ""
    body = flat[len(tag) :]
    sentences = _sentences(body)
    instruction = sentences[-1] if len(sentences) > 1 else ""
    room = WARNING_MAX_CHARS - len(tag) - len(INSTRUCTION_JOINER) - len(instruction)
    if instruction and room >= _LEAST_WHAT:
        what, rest = _cut(" ".join(sentences[:-1]), room)
        first = [f"{tag}{what.rstrip(':;,')}{INSTRUCTION_JOINER}{instruction}"]
    else:
        first, rest = [], body
    count = len(first) + 1
    while True:  # the numbering's width depends on the count it numbers
        label = f"({count}/{count}) "
        pieces = _pieces(rest, WARNING_MAX_CHARS - len(tag) - len(label))
        if len(first) + len(pieces) <= count:
            break
        count = len(first) + len(pieces)
    total = len(first) + len(pieces)
    numbered = [f"{tag}({n}/{total}) {p}" for n, p in enumerate(pieces, len(first) + 1)]
    return first + numbered


def fit_warnings(texts: Sequence[str]) -> list[str]:
    """Every warning split to fit 256 characters, all within 4,096 bytes. When not all fit,
    the first parts (each with its instruction) come before any continuation, in order, and a
    note counts what is left out."""
    groups = [split_warning(t) for t in texts]
    total = sum(len(g) for g in groups)
    if sum(len(p.encode()) for g in groups for p in g) <= WARNINGS_MAX_BYTES:
        return [p for g in groups for p in g]
    budget = WARNINGS_MAX_BYTES - len(_left_out_note(total).encode())
    kept: list[list[str]] = []
    for group in groups:  # first parts, until one does not fit
        if len(group[0].encode()) > budget:
            break
        kept.append([group[0]])
        budget -= len(group[0].encode())
    every_lead_kept = len(kept) == len(groups)
    for group, parts in zip(groups, kept, strict=False):  # then continuations, in order
        for part in group[1:] if every_lead_kept else ():
            if len(part.encode()) > budget:
                break
            parts.append(part)
            budget -= len(part.encode())
    out = [p for parts in kept for p in parts]
    return [*out, _left_out_note(total - len(out))]


def _left_out_note(count: int) -> str:
    noun = "warning" if count == 1 else "warnings"
    return f"[gpu-guard] {count} more {noun} left out; gpu-guard check shows them all"


def make_response(
    uid: str,
    allowed: bool,
    message: str = "",
    warnings: Sequence[str] = (),
    patch: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The ``response`` of an AdmissionReview: what kubectl will show comes from here."""
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": message}
    if warnings:
        response["warnings"] = fit_warnings(warnings)
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(list(patch))).decode()
    return response


def decision_response(uid: str, decision: Decision) -> dict[str, Any]:
    return make_response(
        uid, decision.allowed, decision.deny_message, [v.text for v in decision.warnings]
    )


def review_body(response: Mapping[str, Any]) -> bytes:
    return orjson.dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})

"""Turns a proposed object into the AdmissionRequest the API server would send for it.

``check`` and ``make demo`` both start from change files: an object that exists in the state is
an UPDATE, the file applied to it as a JSON merge patch (RFC 7386: mappings merge, lists
replace, null removes, what ``kubectl patch --type=merge`` does); any other object is a CREATE.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from policies.kinds import split_api_version
from policies.model import CREATE, UPDATE, AdmissionRequest, GroupKind, JSONObject, UserInfo
from policies.objects import group_kind_of

# Re-exported for bench/harness.py; the envelope itself is built in review.py.
from webhook.admission.review import review_of as review_of
from webhook.state.files import LoadedObject

ObjectKey = tuple[GroupKind, str, str]
CHECK_USER = UserInfo("gpu-guard-check", ("system:authenticated",))


def object_key(obj: JSONObject) -> ObjectKey:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else ""
    name = meta.get("name") if isinstance(meta.get("name"), str) else ""
    return (group_kind_of(obj), str(namespace), str(name))


def index_objects(items: Iterable[LoadedObject]) -> dict[ObjectKey, JSONObject]:
    return {object_key(item.obj): item.obj for item in items}


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def proposed_request(
    change: JSONObject,
    existing: JSONObject | None,
    user: UserInfo = CHECK_USER,
    dry_run: bool = True,
) -> AdmissionRequest:
    kind, namespace, name = object_key(change)
    api_version = change.get("apiVersion")
    version = split_api_version(api_version)[1] if isinstance(api_version, str) else ""
    if existing is None:
        operation, obj, old = CREATE, change, None
    else:
        operation, obj, old = UPDATE, merge_patch(existing, change), existing
    return AdmissionRequest(
        uid=str(uuid.uuid4()),
        group=kind.group,
        version=version,
        kind=kind.kind,
        operation=operation,
        namespace=namespace,
        name=name,
        obj=obj,
        old=old,
        user=user,
        dry_run=dry_run,
    )

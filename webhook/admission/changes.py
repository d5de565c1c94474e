"""Change files, read as kubectl reads them, and each object as the AdmissionRequest the API
server would send for it.

``check`` and ``make demo`` both start from change files: an object that exists in the state is
an UPDATE, the file applied to it as a JSON merge patch (RFC 7386: mappings merge, lists
replace, null removes, what ``kubectl patch --type=merge`` does); any other object is a CREATE,
of the file's object with its nulls dropped (the merge patch applied to nothing). So
``labels: {nvidia.com/vgpu.config: null}`` removes a label, as ``kubectl label ... key-`` does.

A manifest without ``metadata.namespace`` goes to the namespace given (``-n``, default
``default``) when its kind is namespaced; a kind outside ``policies.cluster.kinds`` is left as
written, since only the API server's discovery knows its scope and no policy reads it. ``-f DIR``
reads the directory's YAML and JSON files in name order (its subdirectories too with ``-R``), ``-f
-`` standard input. A file's problems are each reported and the rest of the run goes on.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from policies.cluster.kinds import (
    CHANGED_RATHER_THAN_CREATED,
    group_kind_of,
    is_namespaced,
    split_api_version,
)
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.requests import (
    CREATE,
    UPDATE,
    AdmissionRequest,
    GroupKind,
    JSONObject,
    UserInfo,
)
from webhook.state.files import (
    MANIFEST_SUFFIXES,
    STDIN,
    LoadedObject,
    StateFileError,
    check_identity,
    check_object,
    file_entries,
    source_name,
)

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
        operation, obj, old = CREATE, merge_patch(None, change), None
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


DEFAULT_NAMESPACE = "default"


@dataclass(slots=True)
class ChangeFiles:
    """What the change files hold, in the order kubectl would send it, and every problem."""

    objects: list[LoadedObject] = field(default_factory=list)
    problems: list[StateFileError] = field(default_factory=list)


def read_change_files(
    paths: Sequence[str], namespace: str = DEFAULT_NAMESPACE, recursive: bool = False
) -> ChangeFiles:
    """Every object of every file (directories expanded), each checked as the policies will
    read it; a file or object with a problem is reported and skipped, the others kept."""
    changes = ChangeFiles()
    for path in paths:
        if path != STDIN and Path(path).is_dir():
            files = _manifests_in(Path(path), recursive)
            if not files:
                suffixes = ", ".join(MANIFEST_SUFFIXES)
                changes.problems.append(StateFileError(f"{path}: no {suffixes} files in it"))
            for file in files:
                _read_change_file(str(file), namespace, changes)
        else:
            _read_change_file(path, namespace, changes)
    return changes


def _manifests_in(folder: Path, recursive: bool) -> list[Path]:
    found = folder.rglob("*") if recursive else folder.iterdir()
    return sorted(p for p in found if p.suffix in MANIFEST_SUFFIXES and p.is_file())


def _read_change_file(path: str, namespace: str, changes: ChangeFiles) -> None:
    try:
        entries = list(file_entries(path))
    except StateFileError as exc:
        changes.problems.append(exc)
        return
    for entry in entries:
        if isinstance(entry, StateFileError):
            changes.problems.append(entry)
            continue
        item = in_namespace(entry, namespace)
        try:
            check_identity(item)
            # Read as it will be judged: a null removes what it names, it is no value to check.
            check_object(replace(item, obj=merge_patch(None, item.obj)))
        except StateFileError as exc:
            changes.problems.append(exc)
            continue
        changes.objects.append(item)
    if not entries:
        changes.problems.append(StateFileError(f"{source_name(path)}: no objects in it"))


def in_namespace(item: LoadedObject, namespace: str) -> LoadedObject:
    """The object as kubectl sends it: a namespaced kind without a namespace gets ``namespace``."""
    meta = item.obj.get("metadata")
    if not isinstance(meta, Mapping) or meta.get("namespace"):
        return item
    try:
        namespaced = is_namespaced(group_kind_of(item.obj))
    except ObjectError:
        return item  # no usable kind: check_identity says so
    if not namespaced:
        return item
    obj = {**item.obj, "metadata": {**meta, "namespace": namespace}}
    return replace(item, obj=obj)


def reads_as_a_change(change: JSONObject) -> bool:
    """Whether a file's object reads as a change to one that exists: a kind the cluster or an
    install makes (``CHANGED_RATHER_THAN_CREATED``), or nothing but names, labels and
    annotations (what ``kubectl label`` and ``annotate`` change). Judged as a CREATE, such an
    object is judged against nothing, and the answer must say so."""
    if group_kind_of(change) in CHANGED_RATHER_THAN_CREATED:
        return True
    return set(change) <= {"apiVersion", "kind", "metadata"}

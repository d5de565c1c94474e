"""Just enough of kustomize to render ``manifests/`` without kubectl (CI machines have none).

Implemented, with kustomize's behaviour (tests/test_manifests.py compares the output with
``kubectl kustomize`` wherever kubectl exists):

- ``resources``: YAML files (one or more documents) and directories holding a kustomization;
- ``configMapGenerator``: ``files`` (``key=path`` or ``path``) and ``literals``, behaviours
  ``create``, ``replace`` and ``merge``, the content-hash name suffix, and the rename of the
  references to it in pod templates' volumes; ``options``: ``labels``, ``annotations`` and
  ``disableNameSuffixHash``;
- ``patches`` from ``path`` or inline ``patch``: JSON6902 operations (``add``, ``remove``,
  ``replace``, ``test``; a ``target`` is required) and strategic-merge patches made of mappings
  only, or ``$patch: delete`` to drop a resource;
- ``images``: ``newName``, ``newTag`` and ``digest`` on containers and init containers;
- the output order of ``kubectl kustomize`` (kustomize's legacy sort).

Anything else raises KustomizeError instead of rendering something kustomize would not: lists in a
strategic-merge patch in particular (their merge keys come from the OpenAPI schema, which this
module does not carry), so the manifests patch lists with JSON6902 operations.

    python -m tests.kustomize manifests/overlays/enforce   # prints the rendered stream
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Resource = dict[str, Any]

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
KNOWN_FIELDS = frozenset(
    {"apiVersion", "kind", "resources", "configMapGenerator", "patches", "images"}
)

# kustomize's legacy resource order (api/resid/gvk.go): these kinds first, in this order ...
ORDER_FIRST = (
    "Namespace",
    "ResourceQuota",
    "StorageClass",
    "CustomResourceDefinition",
    "ServiceAccount",
    "PodSecurityPolicy",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "ConfigMap",
    "Secret",
    "Endpoints",
    "Service",
    "LimitRange",
    "PriorityClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
)
# ... these last, every other kind in between; ties broken by group_version_kind, then name.
ORDER_LAST = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


class KustomizeError(ValueError):
    """A kustomization this renderer cannot render, or one kustomize itself would refuse."""


@dataclass
class Item:
    """One resource, and for a generated ConfigMap the name its hash suffix is added to."""

    obj: Resource
    generated: bool = False
    hashed: bool = True
    """For a generated ConfigMap: whether its name gets the content-hash suffix."""


@dataclass
class Build:
    items: list[Item] = field(default_factory=list)

    def find(self, kind: str, name: str, namespace: str | None) -> list[Item]:
        return [
            item
            for item in self.items
            if item.obj.get("kind") == kind
            and _name(item.obj) == name
            and (namespace is None or _namespace(item.obj) == namespace)
        ]


def build(directory: str | Path) -> list[Resource]:
    """The resources ``kubectl kustomize DIRECTORY`` prints, in its order."""
    result = _build(Path(directory))
    _apply_hash_suffixes(result)
    return sorted((item.obj for item in result.items), key=_sort_key)


def dump(resources: Iterable[Resource]) -> str:
    return yaml.safe_dump_all(list(resources), sort_keys=True, default_flow_style=False)


# --- one kustomization ---------------------------------------------------------------------------


def _build(directory: Path) -> Build:
    kustomization = _read_kustomization(directory)
    result = Build()
    for entry in kustomization.get("resources") or []:
        path = directory / str(entry)
        if path.is_dir():
            result.items.extend(_build(path).items)
        elif path.is_file():
            result.items.extend(Item(obj) for obj in _load_documents(path))
        else:
            raise KustomizeError(f"{directory}: resource {entry!r} not found")
    for generator in kustomization.get("configMapGenerator") or []:
        _generate_config_map(result, directory, generator)
    for patch in kustomization.get("patches") or []:
        _apply_patch(result, directory, patch)
    for image in kustomization.get("images") or []:
        _set_image(result, image)
    _check_unique(result, directory)
    return result


def _read_kustomization(directory: Path) -> dict[str, Any]:
    for name in KUSTOMIZATION_FILES:
        path = directory / name
        if path.is_file():
            data = yaml.safe_load(path.read_text())
            if not isinstance(data, dict):
                raise KustomizeError(f"{path}: expected a mapping")
            unknown = sorted(set(data) - KNOWN_FIELDS)
            if unknown:
                raise KustomizeError(f"{path}: {', '.join(unknown)}: not implemented here")
            return data
    raise KustomizeError(f"{directory}: no kustomization file")


def _load_documents(path: Path) -> list[Resource]:
    documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    for doc in documents:
        if not isinstance(doc, dict) or "kind" not in doc or not _name(doc):
            raise KustomizeError(f"{path}: every document must be an object with kind and name")
    return documents


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _namespace(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def _group(obj: Mapping[str, Any]) -> str:
    api_version = str(obj.get("apiVersion", ""))
    return api_version.rpartition("/")[0]


def _version(obj: Mapping[str, Any]) -> str:
    return str(obj.get("apiVersion", "")).rpartition("/")[2]


def _check_unique(result: Build, directory: Path) -> None:
    seen: set[tuple[str, str, str, str]] = set()
    for item in result.items:
        key = (_group(item.obj), item.obj["kind"], _namespace(item.obj), _name(item.obj))
        if key in seen:
            raise KustomizeError(f"{directory}: {key} is defined twice")
        seen.add(key)


# --- configMapGenerator --------------------------------------------------------------------------


def _generate_config_map(result: Build, directory: Path, generator: Mapping[str, Any]) -> None:
    unknown = sorted(
        set(generator) - {"name", "namespace", "behavior", "files", "literals", "options"}
    )
    if unknown:
        raise KustomizeError(f"{directory}: configMapGenerator {', '.join(unknown)}: unsupported")
    options = generator.get("options") or {}
    unknown = sorted(set(options) - {"labels", "annotations", "disableNameSuffixHash"})
    if unknown:
        raise KustomizeError(f"{directory}: generator options {', '.join(unknown)}: unsupported")
    name = str(generator["name"])
    namespace = str(generator.get("namespace") or "")
    data: dict[str, str] = {}
    for entry in generator.get("files") or []:
        key, _, source = str(entry).rpartition("=")
        path = directory / source
        data[key or path.name] = path.read_text()
    for literal in generator.get("literals") or []:
        key, sep, value = str(literal).partition("=")
        if not sep:
            raise KustomizeError(f"{directory}: literal {literal!r} has no '='")
        data[key] = value
    behavior = generator.get("behavior", "create")
    existing = [item for item in result.find("ConfigMap", name, namespace) if item.generated]
    if options and behavior != "create":
        raise KustomizeError(f"{directory}: generator options with behavior {behavior!r}")
    if behavior == "create":
        if existing:
            raise KustomizeError(f"{directory}: ConfigMap {name} already generated")
        metadata: dict[str, Any] = {"name": name}
        if namespace:
            metadata["namespace"] = namespace
        for field_name in ("labels", "annotations"):
            if options.get(field_name):
                metadata[field_name] = {str(k): str(v) for k, v in options[field_name].items()}
        obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}
        hashed = not options.get("disableNameSuffixHash", False)
        result.items.append(Item(obj, generated=True, hashed=hashed))
    elif behavior in ("replace", "merge"):
        if len(existing) != 1:
            raise KustomizeError(f"{directory}: no generated ConfigMap {name} to {behavior}")
        target = existing[0].obj
        target["data"] = data if behavior == "replace" else {**target.get("data", {}), **data}
    else:
        raise KustomizeError(f"{directory}: configMapGenerator behavior {behavior!r}")


def config_map_hash(config_map: Mapping[str, Any]) -> str:
    """kustomize's name suffix (api/hasher): sha256 over Go's JSON of kind, name and data."""
    encoded: dict[str, Any] = {
        "kind": "ConfigMap",
        # kustomize v5 hashes an empty name (checked against kubectl kustomize v5.5.0).
        "name": "",
        "data": config_map.get("data") or {},
    }
    if config_map.get("binaryData"):
        encoded["binaryData"] = config_map["binaryData"]
    text = json.dumps(encoded, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # Go's encoding/json escapes these for embedding in HTML; the hash is over its bytes.
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escaped)
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return digest.translate(str.maketrans("013ae", "ghkmt"))


def _apply_hash_suffixes(result: Build) -> None:
    renamed: dict[tuple[str, str], str] = {}
    for item in result.items:
        if item.generated and item.hashed:
            old = _name(item.obj)
            new = f"{old}-{config_map_hash(item.obj)}"
            item.obj["metadata"]["name"] = new
            renamed[(_namespace(item.obj), old)] = new
    for item in result.items:
        spec = _pod_spec(item.obj)
        if spec is None:
            continue
        namespace = _namespace(item.obj)
        for volume in spec.get("volumes") or []:
            sources = [volume.get("configMap")]
            sources += [
                s.get("configMap") for s in (volume.get("projected") or {}).get("sources", [])
            ]
            for source in sources:
                if source and (namespace, source.get("name")) in renamed:
                    source["name"] = renamed[(namespace, source["name"])]


def _pod_spec(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    if obj.get("kind") == "Pod":
        spec: dict[str, Any] | None = obj.get("spec")
        return spec
    if obj.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        spec = ((obj.get("spec") or {}).get("template") or {}).get("spec")
        return spec
    return None


# --- patches -------------------------------------------------------------------------------------


def _apply_patch(result: Build, directory: Path, entry: Mapping[str, Any]) -> None:
    unknown = sorted(set(entry) - {"path", "patch", "target"})
    if unknown:
        raise KustomizeError(f"{directory}: patch field {', '.join(unknown)}: unsupported")
    if "path" in entry:
        where = str(directory / str(entry["path"]))
        text = Path(where).read_text()
    else:
        where, text = f"{directory}: inline patch", str(entry["patch"])
    body = yaml.safe_load(text)
    target = entry.get("target")
    if isinstance(body, list):
        if not isinstance(target, Mapping):
            raise KustomizeError(f"{where}: a JSON6902 patch needs a target")
        for item in _select(result, target, where):
            for op in body:
                _json6902(item.obj, op, where)
    elif isinstance(body, dict):
        if target is not None:
            raise KustomizeError(f"{where}: strategic-merge patch with a target: unsupported")
        _strategic_merge(result, body, where)
    else:
        raise KustomizeError(f"{where}: not a patch")


def _select(result: Build, target: Mapping[str, Any], where: str) -> list[Item]:
    unknown = sorted(set(target) - {"group", "version", "kind", "name", "namespace"})
    if unknown:
        raise KustomizeError(f"{where}: target {', '.join(unknown)}: unsupported")
    getters = {
        "group": _group,
        "version": _version,
        "kind": lambda o: str(o.get("kind", "")),
        "name": _name,
        "namespace": _namespace,
    }
    chosen = [
        item
        for item in result.items
        if all(getters[key](item.obj) == str(value) for key, value in target.items())
    ]
    if not chosen:
        raise KustomizeError(f"{where}: the target matches no resource")
    return chosen


def _strategic_merge(result: Build, patch: dict[str, Any], where: str) -> None:
    patch = copy.deepcopy(patch)
    kind, name = str(patch.get("kind", "")), _name(patch)
    namespace = _namespace(patch) or None
    matches = result.find(kind, name, namespace)
    if len(matches) != 1:
        raise KustomizeError(f"{where}: {kind} {name} matches {len(matches)} resources")
    if patch.pop("$patch", None) == "delete":
        result.items.remove(matches[0])
        return
    _merge_maps(matches[0].obj, patch, where)


def _merge_maps(target: dict[str, Any], patch: Mapping[str, Any], where: str) -> None:
    for key, value in patch.items():
        if _has_list(value):
            raise KustomizeError(f"{where}: {key}: lists in strategic-merge patches: use JSON6902")
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge_maps(target[key], value, where)
        else:
            target[key] = copy.deepcopy(value)


def _has_list(value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(_has_list(v) for v in value.values())
    return isinstance(value, list)


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise KustomizeError(f"JSON pointer {path!r} must start with /")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _json6902(obj: Resource, op: Mapping[str, Any], where: str) -> None:
    kind = op.get("op")
    *parents, last = _pointer(str(op.get("path", "")))
    container: Any = obj
    try:
        for part in parents:
            container = container[int(part)] if isinstance(container, list) else container[part]
        if kind == "test":
            current = container[int(last)] if isinstance(container, list) else container[last]
            if current != op.get("value"):
                raise KustomizeError(f"{where}: test {op['path']}: {current!r} != {op['value']!r}")
        elif kind == "remove":
            del container[int(last) if isinstance(container, list) else last]
        elif kind in ("add", "replace"):
            value = copy.deepcopy(op.get("value"))
            if isinstance(container, list):
                index = len(container) if last == "-" else int(last)
                if kind == "add":
                    container.insert(index, value)
                else:
                    container[index] = value
            else:
                if kind == "replace" and last not in container:
                    raise KustomizeError(f"{where}: replace {op['path']}: no such member")
                container[last] = value
        else:
            raise KustomizeError(f"{where}: JSON6902 op {kind!r} not implemented here")
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise KustomizeError(f"{where}: {kind} {op.get('path')}: {exc!r}") from None


# --- images --------------------------------------------------------------------------------------


def split_image(image: str) -> tuple[str, str, str]:
    """(name, tag, digest) of a container image reference."""
    rest, _, digest = image.partition("@")
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        return rest[:colon], rest[colon + 1 :], digest
    return rest, "", digest


def _set_image(result: Build, image: Mapping[str, Any]) -> None:
    unknown = sorted(set(image) - {"name", "newName", "newTag", "digest"})
    if unknown:
        raise KustomizeError(f"images: {', '.join(unknown)}: unsupported")
    for item in result.items:
        spec = _pod_spec(item.obj)
        if spec is None:
            continue
        for container in [*spec.get("containers", []), *spec.get("initContainers", [])]:
            name, tag, digest = split_image(str(container.get("image", "")))
            if name != image["name"]:
                continue
            name = str(image.get("newName", name))
            if "digest" in image:
                container["image"] = f"{name}@{image['digest']}"
            elif "newTag" in image:
                container["image"] = f"{name}:{image['newTag']}"
            else:
                suffix = f":{tag}" if tag else ""
                container["image"] = name + suffix + (f"@{digest}" if digest else "")


# --- output order --------------------------------------------------------------------------------


def _sort_key(obj: Mapping[str, Any]) -> tuple[int, str, str, str]:
    kind = str(obj.get("kind", ""))
    if kind in ORDER_FIRST:
        rank = ORDER_FIRST.index(kind) - len(ORDER_FIRST)
    elif kind in ORDER_LAST:
        rank = 1 + ORDER_LAST.index(kind)
    else:
        rank = 0
    gvk = "_".join([_group(obj) or "~G", _version(obj) or "~V", kind or "~K"])
    return rank, gvk, _namespace(obj), _name(obj)


if __name__ == "__main__":
    for directory in sys.argv[1:]:
        sys.stdout.write(dump(build(directory)))

"""Typed readers of JSON fields: every projection reads an object through them, so a field of the
wrong shape raises ``ObjectError`` naming its dotted path, whatever the kind.

Apart from the projections (``policies.cluster``) because every projection module, and the CEL
functions (quantities), use the same readers; they know JSON and Kubernetes quantities and
times, nothing of any kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from policies.vocabulary.requests import AdmissionRequest, JSONObject


class ObjectError(ValueError):
    """A field of an object has the wrong shape; ``path`` is its dotted location."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def _type_name(value: object) -> str:
    return {dict: "mapping", list: "list", str: "string", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


def get_map(obj: JSONObject, key: str, path: str) -> JSONObject:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ObjectError(
            f"{path}.{key}".lstrip("."), f"expected a mapping, got {_type_name(value)}"
        )
    return value


def get_list(obj: JSONObject, key: str, path: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ObjectError(f"{path}.{key}".lstrip("."), f"expected a list, got {_type_name(value)}")
    return value


def get_str(obj: JSONObject, key: str, path: str, default: str = "") -> str:
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ObjectError(
            f"{path}.{key}".lstrip("."), f"expected a string, got {_type_name(value)}"
        )
    return value


def get_bool(obj: JSONObject, key: str, path: str, default: bool = False) -> bool:
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ObjectError(
            f"{path}.{key}".lstrip("."), f"expected a boolean, got {_type_name(value)}"
        )
    return value


def as_maps(items: list[Any], path: str) -> list[tuple[str, JSONObject]]:
    out = []
    for i, item in enumerate(items):
        where = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            raise ObjectError(where, f"expected a mapping, got {_type_name(item)}")
        out.append((where, item))
    return out


def get_maps(obj: JSONObject, key: str, path: str) -> list[tuple[str, JSONObject]]:
    """``obj[key]`` as a list of mappings, each with the path it stands at."""
    return as_maps(get_list(obj, key, path), f"{path}.{key}".lstrip("."))


def get_strings(obj: JSONObject, key: str, path: str) -> tuple[str, ...]:
    """``obj[key]`` as a list of strings."""
    values = get_list(obj, key, path)
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise ObjectError(
                f"{path}.{key}[{i}]".lstrip("."), f"expected a string, got {_type_name(value)}"
            )
    return tuple(values)


def get_int(obj: JSONObject, key: str, path: str, default: int) -> int:
    """``obj[key]`` as an integer (a boolean is none), ``default`` when absent."""
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise ObjectError(
            f"{path}.{key}".lstrip("."), f"expected an integer, got {_type_name(value)}"
        )
    return value


def get_string_map(obj: JSONObject, key: str, path: str) -> dict[str, str]:
    where = f"{path}.{key}".lstrip(".")
    out = {}
    for k, v in get_map(obj, key, path).items():
        if not isinstance(v, str):
            raise ObjectError(f"{where}.{k}", f"expected a string, got {_type_name(v)}")
        out[str(k)] = v
    return out


def parse_time(text: str, path: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ObjectError(path, f"not an RFC 3339 time: {text!r}") from None
    if value.tzinfo is None:
        raise ObjectError(path, f"time without a zone: {text!r}")
    return value


def labels_of(obj: JSONObject | None) -> dict[str, str]:
    """metadata.labels of an object (empty for None): what node-label policies compare."""
    if obj is None:
        return {}
    return get_string_map(get_map(obj, "metadata", ""), "labels", "metadata")


def request_labels(request: AdmissionRequest, old: bool = False) -> Mapping[str, str]:
    """labels_of the request's object (or oldObject), read once for every policy that asks."""
    return request.once(("labels", old), lambda: labels_of(request.old if old else request.obj))


def get_time(obj: JSONObject, key: str, path: str) -> datetime | None:
    text = get_str(obj, key, path)
    return parse_time(text, f"{path}.{key}".lstrip(".")) if text else None


_SUFFIXES = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


MAX_QUANTITY_DIGITS = 30


def parse_count(value: object, path: str) -> int:
    """A Kubernetes quantity as a whole count (extended resources are integers)."""
    return int(parse_quantity(value, path))


def parse_quantity(value: object, path: str) -> Decimal:
    """A Kubernetes quantity exactly ("32607Mi", "1.5", "500m"): DRA capacities compare as such."""
    if isinstance(value, bool):
        raise ObjectError(path, "expected a quantity, got boolean")
    if isinstance(value, int):
        return Decimal(value)
    if not isinstance(value, str):
        raise ObjectError(path, f"expected a quantity, got {_type_name(value)}")
    text = value.strip()
    number, suffix = text, ""
    for candidate in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E", "m"):
        if text.endswith(candidate) and len(text) > len(candidate):
            number, suffix = text[: -len(candidate)], candidate
            break
    try:
        amount = Decimal(number)
    except (InvalidOperation, ArithmeticError):
        raise ObjectError(path, f"not a quantity: {value!r}") from None
    if not amount.is_finite():
        raise ObjectError(path, f"not a quantity: {value!r}")
    if amount.adjusted() > MAX_QUANTITY_DIGITS:
        # Kubernetes caps quantities far below this; refuse before building a huge int.
        raise ObjectError(path, f"quantity out of range: {value!r}")
    if suffix == "m":
        return amount / 1000
    return amount * _SUFFIXES[suffix]


def get_counts(obj: JSONObject, key: str, path: str, keep: Any) -> dict[str, int]:
    where = f"{path}.{key}".lstrip(".")
    return {
        str(name): parse_count(qty, f"{where}.{name}")
        for name, qty in get_map(obj, key, path).items()
        if keep(str(name))
    }

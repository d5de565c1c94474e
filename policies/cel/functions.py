"""The functions Kubernetes adds to CEL for DRA selectors, on cel-python's value types.

Kubernetes compiles selectors with its base CEL environment (the standard library, the strings
extension, regex ``matches``, quantities) plus the semver library (k8s.io/apiserver/pkg/cel/
library). Here: the strings extension (``lowerAscii``, ``upperAscii``, ``trim``, ``replace``,
``split``, ``substring``, ``indexOf``, ``lastIndexOf``, ``charAt``, ``join``); ``quantity``,
``isQuantity`` and the quantity methods (``isGreaterThan``, ``isLessThan``, ``compareTo``,
``add``, ``sub``, ``sign``, ``isInteger``, ``asInteger``, ``asApproximateFloat``); ``semver``,
``isSemver`` and the version methods (``major``, ``minor``, ``patch``, the same comparisons);
``includes``, which KEP-5491 adds for list-typed attributes.
A function given the wrong types raises TypeError, which cel-python turns into an evaluation
error, as "no such overload" is.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from celpy import celtypes

from policies.vocabulary.fields import ObjectError, parse_quantity
from policies.vocabulary.semver import Version, normalize_version, parse_version


class Quantity:
    """A Kubernetes quantity in CEL: compared by value with the methods, never with < or >."""

    __slots__ = ("value",)

    def __init__(self, value: Decimal) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            raise TypeError("no such overload: quantity == non-quantity")
        return self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"quantity({self.value})"


class Semver:
    __slots__ = ("version",)

    def __init__(self, version: Version) -> None:
        self.version = version

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            raise TypeError("no such overload: semver == non-semver")
        return self.version == other.version

    def __hash__(self) -> int:
        return hash(self.version)

    def __repr__(self) -> str:
        return f"semver({self.version})"


#: How CEL, and so the API server's messages, name cel-python's value types and ours.
_CEL_TYPES = {
    "BoolType": "bool", "IntType": "int", "UintType": "uint", "DoubleType": "double",
    "StringType": "string", "BytesType": "bytes", "ListType": "list", "MapType": "map",
    "NullType": "null_type", "TypeType": "type", "TimestampType": "google.protobuf.Timestamp",
    "DurationType": "google.protobuf.Duration", "Quantity": "kubernetes.Quantity",
    "Semver": "kubernetes.Semver",
}  # fmt: skip


def cel_type_named(class_name: str) -> str:
    """The CEL name of a value class named ``class_name`` (qualified or not), else that name."""
    name = class_name.rpartition(".")[2]
    return _CEL_TYPES.get(name, name)


def cel_type(value: object) -> str:
    """The CEL name of ``value``'s type (the device's maps are maps), for messages."""
    for klass in type(value).__mro__:
        if klass.__name__ in _CEL_TYPES:
            return _CEL_TYPES[klass.__name__]
    return type(value).__name__


def to_cel(value: object) -> Any:
    if isinstance(value, tuple):  # a list-typed attribute (KEP-5491): a CEL list
        return celtypes.ListType([to_cel(item) for item in value])
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, Version):
        return Semver(value)
    if isinstance(value, Decimal):
        return Quantity(value)
    raise TypeError(f"no CEL value for {type(value).__name__}")


def _quantity(text: object) -> Quantity:
    if not isinstance(text, str):
        raise TypeError("quantity() takes a string")
    try:
        return Quantity(parse_quantity(str(text), "quantity"))
    except ObjectError as exc:
        raise ValueError(exc.problem) from None


def _is_quantity(text: object) -> Any:
    try:
        _quantity(text)
    except (TypeError, ValueError):
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _semver(text: object, normalize: object = False) -> Semver:
    if not isinstance(text, str):
        raise TypeError("semver() takes a string")
    version = normalize_version(text) if normalize else parse_version(text)
    if version is None:
        raise ValueError(f"not a semantic version: {str(text)!r}")
    return Semver(version)


def _is_semver(text: object, normalize: object = False) -> Any:
    try:
        _semver(text, normalize)
    except (TypeError, ValueError):
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _compare(a: object, b: object) -> int:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return (a.value > b.value) - (a.value < b.value)
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a.version.compare(b.version)
    raise TypeError(f"no such overload for {cel_type(a)} and {cel_type(b)}")


def _amount(q: object) -> Decimal:
    if isinstance(q, Quantity):
        return q.value
    if isinstance(q, int) and not isinstance(q, bool):
        return Decimal(q)
    raise TypeError("no such overload: quantity arithmetic")


def _as_integer(q: Quantity) -> Any:
    if q.value != q.value.to_integral_value() or abs(q.value) >= 2**63:
        raise ValueError("cannot convert quantity to integer")
    return celtypes.IntType(int(q.value))


def _version_part(index: int) -> Any:
    def part(v: Semver) -> Any:
        return celtypes.IntType((v.version.major, v.version.minor, v.version.patch)[index])

    return part


def _string(s: object) -> str:
    if not isinstance(s, str):
        raise TypeError("no such overload: string function on a non-string")
    return s


def _lower_ascii(s: object) -> Any:
    return celtypes.StringType("".join(c.lower() if c.isascii() else c for c in _string(s)))


def _upper_ascii(s: object) -> Any:
    return celtypes.StringType("".join(c.upper() if c.isascii() else c for c in _string(s)))


def _replace(s: object, old: object, new: object, n: object = -1) -> Any:
    count = int(n)  # type: ignore[call-overload]
    return celtypes.StringType(_string(s).replace(_string(old), _string(new), count))


def _split_string(s: object, sep: object, n: object = -1) -> Any:
    limit = int(n)  # type: ignore[call-overload]
    if limit == 0:
        return celtypes.ListType([])
    parts = _string(s).split(_string(sep), limit - 1 if limit > 0 else -1)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def _substring(s: object, start: object, end: object = None) -> Any:
    text = _string(s)
    stop = len(text) if end is None else int(end)  # type: ignore[call-overload]
    begin = int(start)  # type: ignore[call-overload]
    if not 0 <= begin <= stop <= len(text):
        raise ValueError("substring out of range")
    return celtypes.StringType(text[begin:stop])


def _index_of(s: object, sub: object, start: object = 0) -> Any:
    return celtypes.IntType(_string(s).find(_string(sub), int(start)))  # type: ignore[call-overload]


def _last_index_of(s: object, sub: object) -> Any:
    return celtypes.IntType(_string(s).rfind(_string(sub)))


def _char_at(s: object, i: object) -> Any:
    text, index = _string(s), int(i)  # type: ignore[call-overload]
    if not 0 <= index <= len(text):
        raise ValueError("charAt out of range")
    return celtypes.StringType(text[index : index + 1])


def _join(items: object, sep: object = "") -> Any:
    if not isinstance(items, list):
        raise TypeError("no such overload: join on a non-list")
    return celtypes.StringType(_string(sep).join(_string(i) for i in items))


#: resourceapi.ResourceSliceMaxAttributeValuesPerDevice: ``includes`` refuses longer lists.
MAX_ATTRIBUTE_VALUES = 48


def _equal(a: object, b: object) -> bool:
    """CEL's heterogeneous equality: values of different types are unequal, not an error
    (numbers compare by value across int, uint and double)."""
    numbers = ("int", "uint", "double")
    if cel_type(a) != cel_type(b) and not (cel_type(a) in numbers and cel_type(b) in numbers):
        return False
    return bool(a == b)


def _includes(target: object, arg: object) -> Any:
    """``<attribute>.includes(<value>)``, the one function KEP-5491 adds (Kubernetes 1.36, gate
    DRAListTypeAttributes; k8s.io/dynamic-resource-allocation/cel ``includesFunc``): a list
    includes a value equal to one of its items (at most 48 of them are looked at, else an
    error), a scalar one equal to itself; so a selector reads the same before and after a
    driver turns the attribute into a list."""
    if isinstance(target, list):
        if len(target) > MAX_ATTRIBUTE_VALUES:
            raise ValueError(
                f"'includes' function cannot be applied to lists longer than "
                f"{MAX_ATTRIBUTE_VALUES} values"
            )
        return celtypes.BoolType(any(_equal(item, arg) for item in target))
    return celtypes.BoolType(_equal(target, arg))


FUNCTIONS: Mapping[str, Any] = {
    "includes": _includes,
    "lowerAscii": _lower_ascii,
    "upperAscii": _upper_ascii,
    "trim": lambda s: celtypes.StringType(_string(s).strip()),
    "replace": _replace,
    "split": _split_string,
    "substring": _substring,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "charAt": _char_at,
    "join": _join,
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": _is_semver,
    "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
    "compareTo": lambda a, b: celtypes.IntType(_compare(a, b)),
    "add": lambda a, b: Quantity(_amount(a) + _amount(b)),
    "sub": lambda a, b: Quantity(_amount(a) - _amount(b)),
    "sign": lambda q: celtypes.IntType((q.value > 0) - (q.value < 0)),
    "isInteger": lambda q: celtypes.BoolType(q.value == q.value.to_integral_value()),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda q: celtypes.DoubleType(float(q.value)),
    "major": _version_part(0),
    "minor": _version_part(1),
    "patch": _version_part(2),
}

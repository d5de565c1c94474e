"""The pieces of an object a generator draws from its kind's random stream: ids, instants,
addresses, names, and the bookkeeping every object carries (owner references, managedFields)."""

from __future__ import annotations

import hashlib
import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

Obj = dict[str, Any]

#: Everything happened before this instant; timestamps are offsets back from it.
EPOCH = datetime(2026, 7, 1, 12, 0, 0, tzinfo=UTC)


def uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def name_uid(seed: int, *identity: str) -> str:
    """A uid fixed by an object's identity rather than drawn from a stream: for objects others
    name by uid (a claim's ``reservedFor`` pods), whichever generator runs first."""
    digest = hashlib.sha256(":".join((str(seed), *identity)).encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def hexdigits(rng: random.Random, digits: int) -> str:
    return f"{rng.getrandbits(digits * 4):0{digits}x}"


def stamp(rng: random.Random, max_days: float, min_days: float = 0.0) -> str:
    """An RFC 3339 instant between ``max_days`` and ``min_days`` before EPOCH."""
    back = timedelta(seconds=rng.uniform(min_days * 86400, max_days * 86400))
    return (EPOCH - back).strftime("%Y-%m-%dT%H:%M:%SZ")


_ALNUM = "bcdfghjklmnpqrstvwxz2456789"


def suffix(rng: random.Random, n: int = 5) -> str:
    """A controller's random name suffix."""
    return "".join(rng.choice(_ALNUM) for _ in range(n))


def unique_name(
    rng: random.Random, taken: set[tuple[str, str]], namespace: str, prefix: str
) -> str:
    """``prefix-xxxxx`` as controllers name what they make, never taken twice in a namespace."""
    while True:
        name = f"{prefix}-{suffix(rng)}"
        if (namespace, name) not in taken:
            taken.add((namespace, name))
            return name


def ip(rng: random.Random, prefix: str = "10") -> str:
    return f"{prefix}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"


def resource_version(rng: random.Random) -> str:
    return str(rng.randrange(10**6, 10**8))


def controller_ref(rng: random.Random, api_version: str, kind: str, name: str) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid(rng),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def managed_fields(manager: str, at: str, fields: Obj, subresource: str = "") -> Obj:
    """One managedFields entry: ``manager`` updated ``fields`` ``at`` that instant."""
    entry: Obj = {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": at,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def fields_of(keys: list[str]) -> Obj:
    return {f"f:{k}": {} for k in keys}


class ClaimEntry(NamedTuple):
    """One ``spec.resourceClaims[]`` entry of a pod, VM or VMI: a claim named outright, or one
    made from a template (then ``made``: the claim's generated name, known once it exists)."""

    name: str
    claim: str = ""
    template: str = ""
    made: str = ""

    def entry(self) -> Obj:
        source = (
            {"resourceClaimTemplateName": self.template}
            if self.template
            else {"resourceClaimName": self.claim}
        )
        return {"name": self.name, **source}

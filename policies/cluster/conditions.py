"""status.conditions[] as nodes, VMs and VMIs report them: one projection for every kind that has
them, apart so that each kind family's module reads them the same way.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime

from policies.vocabulary.fields import as_maps, get_list, get_str, get_time
from policies.vocabulary.requests import JSONObject


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    last_transition: datetime | None


def conditions_of(status: JSONObject, path: str) -> tuple[Condition, ...]:
    out = []
    for where, c in as_maps(get_list(status, "conditions", path), f"{path}.conditions"):
        out.append(
            Condition(  # a handful of types, statuses and reasons across every object
                type=sys.intern(get_str(c, "type", where)),
                status=sys.intern(get_str(c, "status", where)),
                reason=sys.intern(get_str(c, "reason", where)),
                message=get_str(c, "message", where),
                last_transition=get_time(c, "lastTransitionTime", where),
            )
        )
    return tuple(out)


def find_condition(conditions: tuple[Condition, ...], type_: str) -> Condition | None:
    for condition in conditions:
        if condition.type == type_:
            return condition
    return None

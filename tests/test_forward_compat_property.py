"""Arbitrary JSON added at paths this code does not know, in the objects a real API server
stored (tests/fixtures/dra): no state is refused, and every verdict, of the audit and of each
recorded AdmissionReview, stays as it was or moves towards "cannot tell" (issue 34)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.state.cluster import ClusterState
from policies.vocabulary.verdicts import Verdict
from tests.dra_builders import DRA_FIXTURES, needs_fixtures, recorded_object
from webhook.admission.review import parse_review
from webhook.engine import Engine

pytestmark = needs_fixtures
NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
#: Maps whose keys are names, not fields: a key added there is a new label or quantity, not a
#: field of a newer version (their values are checked as such, and may be refused).
FREE_FORM = frozenset(
    {"labels", "annotations", "allocatable", "capacity", "limits", "requests", "matchLabels",
     "nodeSelector", "attributes", "data", "counters"}
)  # fmt: skip
CANNOT_TELL = ("cannot be judged", "cannot tell", "could not", "cannot be read", "not model")

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
NEW_KEY = st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8).map(lambda s: f"zz{s}")


def recorded() -> list[dict[str, Any]]:
    """The fixture's objects and its two Nodes, as the API server stored them."""
    objects: list[dict[str, Any]] = yaml.safe_load((DRA_FIXTURES / "objects.yaml").read_text())[
        "items"
    ]
    return [recorded_object("019"), recorded_object("003"), *objects]


def field_maps(value: Any, parent: str = "") -> list[dict[str, Any]]:
    """Every mapping of ``value`` whose keys are fields (not FREE_FORM), depth first."""
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        if parent not in FREE_FORM:
            found.append(value)
        for key, item in value.items():
            found.extend(field_maps(item, key))
    elif isinstance(value, list):
        for item in value:
            found.extend(field_maps(item, parent))
    return found


def state_of(objects: list[dict[str, Any]]) -> ClusterState:
    state = ClusterState()
    for obj in objects:
        state.upsert(obj)
    return state


Seen = set[tuple[str, str, str, str]]


def verdicts_of(state: ClusterState) -> list[Seen]:
    """The audit's verdicts, then each recorded review's."""
    engine = Engine()
    out = [{_key(f.verdict) for f in engine.audit(state, NOW).findings}]
    for path in sorted((DRA_FIXTURES / "admission-reviews").glob("*.json")):
        decision = engine.evaluate(parse_review(path.read_bytes()), state)
        out.append({_key(v) for v in decision.verdicts})
    return out


def _key(v: Verdict) -> tuple[str, str, str, str]:
    return (v.policy, str(v.resource), v.action.label, v.message)


BASE = recorded() if DRA_FIXTURES.is_dir() else []
BASE_VERDICTS = verdicts_of(state_of(BASE)) if BASE else []


def moved_only_towards_cannot_tell(before: Seen, after: Seen) -> bool:
    """No verdict (policy, resource, action) is lost; one that appears or changes its action
    says it cannot tell. A message may lose detail (a PCI id it could not read) and stand."""

    def by_subject(seen: Seen) -> dict[tuple[str, str], set[str]]:
        out: dict[tuple[str, str], set[str]] = {}
        for policy, resource, action, _ in seen:
            out.setdefault((policy, resource), set()).add(action)
        return out

    was, now = by_subject(before), by_subject(after)
    if any(subject not in now for subject in was):
        return False
    return all(
        action in was.get((policy, resource), set()) or any(word in message for word in CANNOT_TELL)
        for policy, resource, action, message in after
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_unknown_fields_anywhere_refuse_nothing_and_move_verdicts_only_to_cannot_tell(
    data: st.DataObject,
) -> None:
    objects = copy.deepcopy(BASE)
    targets = field_maps(objects)
    # Where a newer field changes an answer: a typed attribute value, a device; drawn as often
    # as every other place together.
    slices = [o for o in objects if o["kind"] == "ResourceSlice"]
    devices = [d for o in slices for d in o["spec"]["devices"]]
    values = [v for d in devices for v in d["attributes"].values()]
    where = st.sampled_from(values) | st.sampled_from(devices) | st.sampled_from(targets)
    for _ in range(data.draw(st.integers(1, 4))):
        target = data.draw(where)
        target[data.draw(NEW_KEY)] = data.draw(JSON)
    mutated = verdicts_of(state_of(objects))  # no ObjectError: nothing refused
    for before, after in zip(BASE_VERDICTS, mutated, strict=True):
        assert moved_only_towards_cannot_tell(before, after), before ^ after

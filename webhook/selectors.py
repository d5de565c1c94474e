"""Kubernetes label selectors (matchLabels, matchExpressions), for exemptions by label."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.vocabulary.text import printable

OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        present = self.key in labels and labels[self.key] in self.values
        return present if self.operator == "In" else not present


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        """All requirements hold; an empty selector matches everything, as in Kubernetes."""
        return all(r.matches(labels) for r in self.requirements)


def parse_selector(data: Any, where: str) -> LabelSelector:
    """Raises ValueError naming the field (``where.matchExpressions[0].operator``) on bad input."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected a mapping with matchLabels and/or matchExpressions")
    unknown = sorted(printable(k) for k in data if k not in ("matchLabels", "matchExpressions"))
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown field")
    requirements = []
    match_labels = data.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise ValueError(f"{where}.matchLabels: expected a mapping of label to value")
    for key, value in match_labels.items():
        if not isinstance(value, str):
            raise ValueError(f"{where}.matchLabels.{printable(key)}: expected a string")
        requirements.append(Requirement(str(key), "In", frozenset({value})))
    expressions = data.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise ValueError(f"{where}.matchExpressions: expected a list")
    for i, expr in enumerate(expressions):
        at = f"{where}.matchExpressions[{i}]"
        if not isinstance(expr, Mapping) or not isinstance(expr.get("key"), str):
            raise ValueError(f"{at}: expected {{key, operator, values}}")
        operator = expr.get("operator")
        if not isinstance(operator, str) or operator not in OPERATORS:
            raise ValueError(f"{at}.operator: expected one of {', '.join(sorted(OPERATORS))}")
        values = expr.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ValueError(f"{at}.values: expected a list of strings")
        if operator in ("In", "NotIn") and not values:
            raise ValueError(f"{at}.values: {operator} needs at least one value")
        requirements.append(Requirement(expr["key"], operator, frozenset(values)))
    return LabelSelector(tuple(requirements))

"""core/v1 NodeSelector as DRA uses it: where a slice's devices can be reached, where an allocated
claim's devices are (``status.allocation.nodeSelector``), per-device node selection.

Terms are ORed, a term's requirements ANDed; an empty term selects nothing (as in node affinity).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from policies.cluster.nodes import NodeInfo
from policies.vocabulary.fields import ObjectError, get_maps, get_str, get_strings
from policies.vocabulary.requests import JSONObject

NODE_NAME_FIELD = "metadata.name"


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]
    field: bool
    """A matchFields requirement (only metadata.name exists), else a label requirement."""

    def matches(self, node: NodeInfo) -> bool:
        value = node.name if self.field and self.key == NODE_NAME_FIELD else None
        if not self.field:
            value = node.labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        if self.operator == "DoesNotExist":
            return value is None
        if self.operator in ("Gt", "Lt") and value is not None and len(self.values) == 1:
            try:
                have, bound = int(value), int(self.values[0])
            except ValueError:
                return False
            return have > bound if self.operator == "Gt" else have < bound
        return False


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """core/v1 NodeSelector: the terms are ORed, each term's requirements ANDed."""

    terms: tuple[tuple[Requirement, ...], ...]

    def matches(self, node: NodeInfo) -> bool:
        return any(term and all(r.matches(node) for r in term) for term in self.terms)

    def pinned_nodes(self) -> tuple[str, ...]:
        """The node names it allows when every term names them (``metadata.name In [...]``, as
        the scheduler writes an allocation's selector); () when it selects by labels."""
        names: list[str] = []
        for term in self.terms:
            pins = [r for r in term if r.field and r.key == NODE_NAME_FIELD and r.operator == "In"]
            if not pins:
                return ()
            names.extend(n for n in pins[0].values if n not in names)
        return tuple(names)


def project_node_selector(obj: JSONObject, key: str, path: str) -> NodeSelector | None:
    selector = obj.get(key)
    if selector is None:
        return None
    where = f"{path}.{key}".lstrip(".")
    if not isinstance(selector, Mapping):
        raise ObjectError(where, "expected a mapping")
    terms = []
    for term_path, term in get_maps(selector, "nodeSelectorTerms", where):
        requirements = []
        for field, list_key in ((False, "matchExpressions"), (True, "matchFields")):
            for w, req in get_maps(term, list_key, term_path):
                requirements.append(
                    Requirement(
                        get_str(req, "key", w),
                        get_str(req, "operator", w),
                        get_strings(req, "values", w),
                        field,
                    )
                )
        terms.append(tuple(requirements))
    return NodeSelector(tuple(terms))

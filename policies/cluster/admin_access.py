"""DRA admin access (KEP-5018, GA in 1.36; docs/dra.md, [admin]): a claim request with
``adminAccess: true`` is allocated devices already in use by other claims (monitoring,
diagnostics), and the API server admits such a claim only in a namespace labelled
``resource.kubernetes.io/admin-access: "true"``. So the label, not the claim, is what opens every
in-use device of the cluster to that namespace: Namespaces are read for their labels only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from policies.vocabulary.fields import get_map, get_str, labels_of
from policies.vocabulary.requests import JSONObject

ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"


@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    name: str
    labels: Mapping[str, str]

    @property
    def admin_access(self) -> bool:
        return self.labels.get(ADMIN_ACCESS_LABEL) == "true"


def project_namespace(obj: JSONObject) -> NamespaceInfo:
    meta = get_map(obj, "metadata", "")
    return NamespaceInfo(get_str(meta, "name", "metadata"), labels_of(obj))

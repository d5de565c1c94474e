"""Which validating webhook the API server sends a request to, decided as the API server does:
rules, namespaceSelector and CEL matchConditions.

Shared by the tests of manifests/ (tests/test_manifests.py) and by tools/generate.py, which
names beside each webhook of manifests/base/webhooks.yaml the policies whose samples it sends.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from policies.cluster.kinds import RESOURCE_OF, UPDATED_THROUGH
from policies.vocabulary.requests import UPDATE, AdmissionRequest

Resource = dict[str, Any]


SA_USER, SA_GROUP = "system:serviceaccount:", "system:serviceaccounts"


def review(
    resource: str,
    operation: str,
    new: Resource | None,
    old: Resource | None = None,
    *,
    group: str = "",
    namespace: str = "",
    user: str = "admin",
    groups: tuple[str, ...] | None = None,
    sub_resource: str = "",
    name: str | None = None,
) -> dict[str, Any]:
    """An AdmissionRequest as the API server builds it, reduced to what routing reads. The
    groups default to what the authenticator gives ``user`` (a kubelet's certificate: system:nodes;
    a ServiceAccount token: its namespace's group); the name to the object's."""
    if groups is None:
        namespace_of_account = user.split(":")[2] if user.startswith(SA_USER) else ""
        groups = (
            ("system:nodes",)
            if user.startswith("system:node:")
            else (SA_GROUP, f"{SA_GROUP}:{namespace_of_account}")
            if namespace_of_account
            else ()
        )
    if name is None:
        name = ((new if new is not None else old) or {}).get("metadata", {}).get("name", "")
    built: dict[str, Any] = {
        "resource": {"group": group, "version": "v1", "resource": resource},
        "operation": operation,
        "namespace": namespace,
        "name": name,
        "userInfo": {"username": user, "groups": [*groups, "system:authenticated"]},
        "object": new,
        "oldObject": old,
    }
    if sub_resource:
        built["subResource"] = sub_resource
    return built


def as_sent(request: AdmissionRequest) -> dict[str, Any]:
    """What the API server would send for ``request``, in the shape ``routed`` reads: an update
    of a kind whose judged fields move only through a subresource (a pod's phase) goes there."""
    through = UPDATED_THROUGH.get(request.group_kind, "") if request.operation == UPDATE else ""
    sent = review(
        RESOURCE_OF[request.group_kind].plural,
        request.operation,
        dict(request.obj) if request.obj is not None else None,
        dict(request.old) if request.old is not None else None,
        group=request.group,
        namespace=request.namespace,
        user=request.user.username,
        sub_resource=request.sub_resource or through,
    )
    sent["resource"]["version"] = request.version
    return sent


def excluded_namespaces(hook: Mapping[str, Any]) -> set[str]:
    selector = hook.get("namespaceSelector") or {}
    return {
        value
        for expression in selector.get("matchExpressions", [])
        if expression["key"] == "kubernetes.io/metadata.name" and expression["operator"] == "NotIn"
        for value in expression["values"]
    }


@functools.cache
def compiled(expression: str) -> Any:
    import celpy

    environment = celpy.Environment()
    return environment.program(environment.compile(expression))


def cel_true(expression: str, request: Mapping[str, Any]) -> bool:
    """What the API server's matchCondition makes of one AdmissionRequest."""
    from celpy import celtypes
    from celpy.adapter import json_to_cel

    activation = {
        "object": json_to_cel(request.get("object")),
        "oldObject": json_to_cel(request.get("oldObject")),
        "request": json_to_cel(dict(request)),
    }
    result = compiled(expression).evaluate(activation)
    if not isinstance(result, celtypes.BoolType):
        raise ValueError(f"{expression!r} gave {result!r}, not a bool")
    return bool(result)


def rule_matches(rule: Mapping[str, Any], request: Mapping[str, Any]) -> bool:
    resource = request["resource"]
    plural = resource["resource"] + (
        f"/{request['subResource']}" if "subResource" in request else ""
    )
    scope = rule.get("scope", "*")
    in_namespace = bool(request.get("namespace"))
    return (
        resource["group"] in rule["apiGroups"]
        and resource["version"] in rule["apiVersions"]
        and plural in rule["resources"]
        and request["operation"] in rule["operations"]
        and (scope == "*" or (scope == "Namespaced") == in_namespace)
    )


def routed(hooks: list[Resource], request: Mapping[str, Any]) -> set[str]:
    """The first part of the name of each webhook of ``hooks`` the request is sent to."""
    return {
        hook["name"].split(".")[0]
        for hook in hooks
        if any(rule_matches(rule, request) for rule in hook["rules"])
        and request.get("namespace", "") not in excluded_namespaces(hook)
        and all(cel_true(c["expression"], request) for c in hook.get("matchConditions", []))
    }

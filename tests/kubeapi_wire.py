"""What kube-apiserver v1.36 says on the wire, for the test double in tests/kubeapi.py.

Why a module of its own: every message, Status body, selector rule and continue token here was
read off the real API server (tests/e2e/test_double_contract.py holds the double to it), and
keeping them apart from the double's server logic keeps both readable.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

JsonObj = dict[str, Any]

_METADATA_FIELDS: Final = frozenset({"metadata.name", "metadata.namespace"})


def built_in(group: str) -> bool:
    """Groups kube-apiserver serves itself (a CRD may not take *.k8s.io unapproved)."""
    return group in ("", "k8s.io") or group.endswith(".k8s.io")


@dataclass(frozen=True)
class Resource:
    """One served resource type; the URL shape, list kind and write rules follow from it.

    The write rules are the real registry's for the kind: a custom resource (a CRD) and a Lease
    refuse an update without a resourceVersion (422); a Lease is created by a PUT to a missing
    name; a delete answers a Status for Nodes, Leases and custom resources, the object for Pods
    and the DRA kinds; a Pod is deleted gracefully (its deletionTimestamp set first)."""

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool
    fields: frozenset[str] = frozenset()  # field selectors beyond metadata.name/namespace
    strict_updates: bool = False
    create_on_update: bool = False
    deleted_as_status: bool = False
    graceful_delete: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def field_labels(self) -> frozenset[str]:
        return _METADATA_FIELDS | self.fields

    @property
    def custom(self) -> bool:
        """Served from a CustomResourceDefinition."""
        return not built_in(self.group)

    @property
    def unconditional_updates(self) -> bool:
        """A PUT without metadata.resourceVersion is accepted (last writer wins)."""
        return not (self.custom or self.strict_updates)

    @property
    def delete_answers_status(self) -> bool:
        return self.custom or self.deleted_as_status

    @property
    def resource_name(self) -> str:
        """``pods``, ``leases.coordination.k8s.io``: how messages name the resource."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def kind_name(self) -> str:
        """``Pod``, ``Lease.coordination.k8s.io``: how a create's validation names the kind."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def unsupported_field(self, label: str) -> str:
        """The three wordings of kube-apiserver v1.36 for a field label a kind does not index."""
        if self.custom or (not self.group and self.fields):
            return f"field label not supported: {label}"
        if self.fields:
            return f"field label not supported for {self.api_version}, Kind={self.kind}: {label}"
        return (
            f'"{label}" is not a known field selector: only "metadata.name", "metadata.namespace"'
        )


RESOURCES: Final[tuple[Resource, ...]] = (
    Resource(
        "Node", "", "v1", "nodes", False, frozenset({"spec.unschedulable"}), deleted_as_status=True
    ),
    Resource(
        "Pod",
        "",
        "v1",
        "pods",
        True,
        frozenset(
            {
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            }
        ),
        graceful_delete=True,
    ),
    Resource("VirtualMachine", "kubevirt.io", "v1", "virtualmachines", True),
    Resource("VirtualMachineInstance", "kubevirt.io", "v1", "virtualmachineinstances", True),
    Resource("KubeVirt", "kubevirt.io", "v1", "kubevirts", True),
    Resource("ClusterPolicy", "nvidia.com", "v1", "clusterpolicies", False),
    Resource("NodeFeature", "nfd.k8s-sigs.io", "v1alpha1", "nodefeatures", True),
)
#: Dynamic Resource Allocation, served too (bench/ generates only RESOURCES so far).
DRA_RESOURCES: Final[tuple[Resource, ...]] = (
    Resource("DeviceClass", "resource.k8s.io", "v1", "deviceclasses", False),
    Resource(
        "ResourceSlice",
        "resource.k8s.io",
        "v1",
        "resourceslices",
        False,
        frozenset({"spec.nodeName", "spec.driver"}),
    ),
    Resource("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims", True),
    Resource("ResourceClaimTemplate", "resource.k8s.io", "v1", "resourceclaimtemplates", True),
    # 1.36 serves it only with --runtime-config=resource.k8s.io/v1beta2=true.
    Resource("DeviceTaintRule", "resource.k8s.io", "v1beta2", "devicetaintrules", False),
)
#: Namespaces, read for their labels (DRA admin access).
NAMESPACE_RESOURCES: Final[tuple[Resource, ...]] = (
    Resource("Namespace", "", "v1", "namespaces", False, deleted_as_status=True),
)
#: GPU Operator 26.7's GPUCluster, served too (bench/ does not generate it).
GPU_CLUSTER_RESOURCES: Final[tuple[Resource, ...]] = (
    Resource("GPUCluster", "nvidia.com", "v1alpha1", "gpuclusters", False),
)
#: OpenShift Virtualization's HyperConverged (v1, the storage and preferred version).
HCO_RESOURCES: Final[tuple[Resource, ...]] = (
    Resource("HyperConverged", "hco.kubevirt.io", "v1", "hyperconvergeds", True),
)
SERVED: Final[tuple[Resource, ...]] = (
    RESOURCES + DRA_RESOURCES + HCO_RESOURCES + GPU_CLUSTER_RESOURCES + NAMESPACE_RESOURCES
)
#: What the server writes: the leader-election Lease and the PolicyReports the leader publishes.
#: Not served unless asked for (``resources=SERVED + WRITTEN``), so other tests see no new groups.
LEASE: Final = Resource(
    "Lease",
    "coordination.k8s.io",
    "v1",
    "leases",
    True,
    strict_updates=True,
    create_on_update=True,
    deleted_as_status=True,
)
WRITTEN: Final[tuple[Resource, ...]] = (
    LEASE,
    Resource("ClusterPolicyReport", "wgpolicyk8s.io", "v1alpha2", "clusterpolicyreports", False),
    Resource("PolicyReport", "wgpolicyk8s.io", "v1alpha2", "policyreports", True),
)
#: OpenReports, served beside WRITTEN when a test asks for it
#: (``resources=SERVED + WRITTEN + OPENREPORTS``).
OPENREPORTS: Final[tuple[Resource, ...]] = (
    Resource("ClusterReport", "openreports.io", "v1alpha1", "clusterreports", False),
    Resource("Report", "openreports.io", "v1alpha1", "reports", True),
)


# --- errors as Status bodies ---------------------------------------------------------------------


def status_body(code: int, reason: str, message: str, **details: Any) -> JsonObj:
    """A metav1.Status as the apiserver returns it for failures (no reason when it gives none)."""
    body: JsonObj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
    }
    if reason:
        body["reason"] = reason
    if details:
        body["details"] = details
    body["code"] = code
    return body


def details(res: Resource, name: str | None = None, *, kind: str | None = None) -> JsonObj:
    """A Status's details: the name when there is one, the group unless it is core (omitted, as
    Go's omitempty does), the kind (the plural, unless told)."""
    out: JsonObj = {} if name is None else {"name": name}
    if res.group:
        out["group"] = res.group
    out["kind"] = kind or res.plural
    return out


class ApiError(Exception):
    """An answer other than success, as the apiserver words it."""

    def __init__(self, code: int, reason: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.body = status_body(code, reason, message, **extra)
        self.code = code


class BadRequest(ApiError):
    """A request the real apiserver refuses with 400."""

    def __init__(self, message: str) -> None:
        super().__init__(400, "BadRequest", message)


def not_found(res: Resource, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{res.resource_name} "{name}" not found', **details(res, name)
    )


def conflict(res: Resource, name: str, reason: Literal["AlreadyExists", "Conflict"]) -> ApiError:
    """409, as the apiserver words it for a taken name or a stale resourceVersion."""
    what = f'{res.resource_name} "{name}"'
    message = (
        f"{what} already exists"
        if reason == "AlreadyExists"
        else f"Operation cannot be fulfilled on {what}: the object has been modified; please "
        "apply your changes to the latest version and try again"
    )
    return ApiError(409, reason, message, **details(res, name))


def method_not_allowed() -> ApiError:
    error = ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )
    error.body["details"] = {}
    return error


_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_RULE: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def _invalid(what: str, field: str, cause: str, detail: str, **named: Any) -> ApiError:
    causes = [{"reason": cause, "message": detail, "field": field}]
    return ApiError(422, "Invalid", f"{what} is invalid: {field}: {detail}", **named, causes=causes)


def invalid_name(res: Resource, name: str) -> ApiError | None:
    """422 for a create whose name is missing or not a DNS subdomain; None when it is fine."""
    what = f'{res.kind_name} "{name}"'
    if not name:
        detail = "Required value: name or generateName is required"
        return _invalid(
            what, "metadata.name", "FieldValueRequired", detail, **details(res, kind=res.kind)
        )
    if _NAME.match(name) is None:
        detail = f'Invalid value: "{name}": {_NAME_RULE}'
        return _invalid(
            what, "metadata.name", "FieldValueInvalid", detail, **details(res, name, kind=res.kind)
        )
    return None


def unversioned_update(res: Resource, name: str) -> ApiError:
    """422 for an update without a resourceVersion of a kind that needs one."""
    return _invalid(
        f'{res.resource_name} "{name}"',
        "metadata.resourceVersion",
        "FieldValueInvalid",
        "Invalid value: 0: must be specified for an update",
        **details(res, name),
    )


def forbidden(
    res: Resource, verb: str, user: str, namespace: str | None, name: str | None
) -> ApiError:
    """403 as RBAC words a refusal."""
    what = res.resource_name + (f' "{name}"' if name else "")
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    message = (
        f'{what} is forbidden: User "{user}" cannot {verb} resource "{res.plural}" in API group '
        f'"{res.group}" {scope}'
    )
    return ApiError(403, "Forbidden", message, **details(res, name))


def deleted(res: Resource, name: str, uid: str) -> JsonObj:
    """The Status a delete answers for kinds that do not return the deleted object."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details(res, name) | {"uid": uid},
    }


TOO_OLD_LIST: Final = "The resourceVersion for the provided list is too old."
INCONSISTENT_CONTINUE: Final = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this response "
    "to retrieve the remainder of the results. Continuing with the provided token results in an "
    "inconsistent list - objects that were created, modified, or deleted between the time the "
    "first chunk was returned and now may show up in the list."
)


def too_old_resource_version(since: int, oldest: int) -> JsonObj:
    """The ERROR event's Status of a watch from a version the watch cache no longer holds."""
    return status_body(410, "Expired", f"too old resource version: {since} ({oldest})")


def expired_continue(start: str) -> ApiError:
    """410 for a continue token whose revision etcd compacted away; its metadata carries a token
    that lists the rest at the latest revision (rv -1), as the real one does."""
    error = ApiError(410, "Expired", INCONSISTENT_CONTINUE)
    error.body["metadata"] = {"continue": encode_continue(-1, start)}
    return error


# --- continue tokens -----------------------------------------------------------------------------


def encode_continue(rv: int, start: str) -> str:
    """The token kube-apiserver hands out: unpadded URL-safe base64 of {"v","rv","start"}, where
    start is the key after the page's last (its key with a NUL appended)."""
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        rv, start = raw["rv"], raw["start"]
        if raw.get("v") != "meta.k8s.io/v1" or not isinstance(rv, int):
            raise ValueError("not a meta.k8s.io/v1 token")
        return rv, str(start)
    except (ValueError, KeyError, TypeError, binascii.Error) as err:
        raise BadRequest(f"invalid continue token: continue key is not valid: {err}") from err


# --- query parameters ----------------------------------------------------------------------------


def query_bool(query: Mapping[str, str], name: str) -> bool:
    """A boolean parameter as the apiserver converts it: absent is false; present, only "0" and
    "false" (any case) are, so ``?watch=`` and ``?watch=no`` both mean a watch."""
    if name not in query:
        return False
    value = query[name]
    return value != "0" and value.lower() != "false"


_INT: Final = re.compile(r"^[+-]?[0-9]+$")
_UINT: Final = re.compile(r"^[0-9]+$")


def query_int(query: Mapping[str, str], name: str) -> int:
    """An integer parameter (limit, timeoutSeconds) as Go's ParseInt reads it; "" is unset (0)."""
    text = query.get(name, "")
    if not text:
        return 0
    if _INT.match(text) is None:
        raise BadRequest(f'strconv.ParseInt: parsing "{text}": invalid syntax')
    return int(text)


def watch_version(text: str) -> int:
    """A watch's resourceVersion; the apiserver answers a malformed one 500, without a reason."""
    if not _UINT.match(text):
        parsing = f'strconv.ParseUint: parsing "{text}": invalid syntax'
        raise ApiError(500, "", f'resourceVersion: Invalid value: "{text}": {parsing}')
    return int(text)


# --- selectors -----------------------------------------------------------------------------------

_Op = Literal["=", "!=", "in", "notin", "exists", "!exists"]


@dataclass(frozen=True)
class Requirement:
    key: str
    op: _Op
    values: frozenset[str]

    def matches(self, value: str | None) -> bool:
        if self.op == "exists":
            return value is not None
        if self.op == "!exists":
            return value is None
        if self.op in ("=", "in"):
            return value is not None and value in self.values
        return value is None or value not in self.values  # "!=" and "notin"


@dataclass(frozen=True)
class Selector:
    """fieldSelector + labelSelector; the apiserver ANDs every term."""

    fields: tuple[Requirement, ...] = ()
    labels: tuple[Requirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(r.matches(_field_value(obj, r.key)) for r in self.fields) and all(
            r.matches(labels.get(r.key)) for r in self.labels
        )

    @property
    def empty(self) -> bool:
        return not self.fields and not self.labels


# The apiserver formats these Go bools even when unset, so "=false" matches a missing field.
_FIELD_DEFAULTS: Final = {"spec.unschedulable": "false", "spec.hostNetwork": "false"}


def _field_value(obj: Mapping[str, Any], dotted: str) -> str:
    """Field selectors compare strings; a missing field reads as "" (or Go's zero)."""
    cur: Any = obj
    for part in dotted.split("."):
        cur = cur.get(part) if isinstance(cur, Mapping) else None
    if cur is None:
        return _FIELD_DEFAULTS.get(dotted, "")
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(text: str, resource: Resource) -> tuple[Requirement, ...]:
    reqs: list[Requirement] = []
    for term in (t.strip() for t in text.split(",")):
        if not term:
            continue
        token = next((t for t in ("!=", "==", "=") if t in term), None)
        if token is None:
            raise BadRequest(f"invalid selector: '{text}'; can't understand '{term}'")
        key, value = (part.strip() for part in term.split(token, 1))
        if key not in resource.field_labels:
            raise BadRequest(resource.unsupported_field(key))
        reqs.append(Requirement(key, "!=" if token == "!=" else "=", frozenset({value})))
    return tuple(reqs)


_LABEL_KEY = r"[A-Za-z0-9_./-]+"
_SET_TERM = re.compile(rf"^({_LABEL_KEY})\s+(in|notin)\s+\(([^)]*)\)$")
_EQ_TERM = re.compile(rf"^({_LABEL_KEY})\s*(==|=|!=)\s*([A-Za-z0-9_.-]*)$")
_NOT_TERM = re.compile(rf"^!\s*({_LABEL_KEY})$")
_HAS_TERM = re.compile(rf"^({_LABEL_KEY})$")


def _split_outside_parens(text: str) -> list[str]:
    terms: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur))
    return [t.strip() for t in terms if t.strip()]


def parse_label_selector(text: str) -> tuple[Requirement, ...]:
    reqs: list[Requirement] = []
    for term in _split_outside_parens(text):
        if m := _SET_TERM.match(term):
            values = frozenset(v.strip() for v in m[3].split(",") if v.strip())
            reqs.append(Requirement(m[1], "in" if m[2] == "in" else "notin", values))
        elif m := _EQ_TERM.match(term):
            op: _Op = "!=" if m[2] == "!=" else "="
            reqs.append(Requirement(m[1], op, frozenset({m[3]})))
        elif m := _NOT_TERM.match(term):
            reqs.append(Requirement(m[1], "!exists", frozenset()))
        elif m := _HAS_TERM.match(term):
            reqs.append(Requirement(m[1], "exists", frozenset()))
        else:
            raise BadRequest(f'unable to parse requirement: "{term}"')
    return tuple(reqs)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what `kubectl patch --type merge` sends)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: JsonObj = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result

"""The pod template of a workload controller, judged as the pods it will make.

A Deployment, StatefulSet, DaemonSet, ReplicaSet or Job makes its pods from ``spec.template``, a
CronJob from ``spec.jobTemplate.spec.template``. A template a pod policy would warn about makes
pods it warns about, but those pods are created by a controller and nobody reads the warning; so
the verdict is given where a person applies the controller (Kyverno's "rules for pod
controllers" do the same). The template becomes a Pod in the controller's namespace and goes
through ``project_pod``: a pod policy reads a template exactly as it reads a pod, with its own
logic, and only the message says whose template it was.

Judged on CREATE, and on an UPDATE only when the template changed: scaling, a rollout's revision
annotation or a label on the controller make no new kind of pod. A ReplicaSet a Deployment owns,
or a Job a CronJob owns, was judged as its owner's template already and is not said again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, TypeVar

from policies.cluster.kinds import (
    CRON_JOB,
    DAEMON_SET,
    DEPLOYMENT,
    JOB,
    POD,
    REPLICA_SET,
    RESOURCE_OF,
    STATEFUL_SET,
    split_api_version,
)
from policies.cluster.pods import PodInfo, project_pod
from policies.vocabulary.fields import ObjectError, get_bool, get_map, get_maps, get_str
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest, GroupKind, JSONObject
from policies.vocabulary.verdicts import Finding

T = TypeVar("T")

#: Where each controller keeps the template of its pods.
TEMPLATE_PATH: Mapping[GroupKind, tuple[str, ...]] = MappingProxyType(
    {
        DEPLOYMENT: ("spec", "template"),
        STATEFUL_SET: ("spec", "template"),
        DAEMON_SET: ("spec", "template"),
        REPLICA_SET: ("spec", "template"),
        JOB: ("spec", "template"),
        CRON_JOB: ("spec", "jobTemplate", "spec", "template"),
    }
)

#: The requests that set a pod template: what a pod policy's scope adds to judge controllers.
POD_TEMPLATE_REQUESTS: Mapping[GroupKind, frozenset[str]] = MappingProxyType(
    {kind: frozenset({CREATE, UPDATE}) for kind in TEMPLATE_PATH}
)


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """A controller's pod template, as the Pod it makes."""

    owner: str
    """How messages name the controller: "Deployment ml/trainer"."""
    path: str
    """Where the template is in the controller: "spec.template"."""
    obj: JSONObject
    """The template as a Pod object, in the controller's namespace."""
    pod: PodInfo


def _template(obj: JSONObject, kind: GroupKind) -> JSONObject:
    """The raw template mapping ({} when absent), read with the controller's field paths."""
    where = ""
    for key in TEMPLATE_PATH[kind]:
        obj = get_map(obj, key, where)
        where = f"{where}.{key}".lstrip(".")
    return obj


def _owned_by_a_judged_controller(meta: JSONObject) -> bool:
    """A controller of a kind judged here made this object from its own template."""
    for where, ref in get_maps(meta, "ownerReferences", "metadata"):
        group, _ = split_api_version(get_str(ref, "apiVersion", where))
        kind = GroupKind(group, get_str(ref, "kind", where))
        if get_bool(ref, "controller", where) and kind in TEMPLATE_PATH:
            return True
    return False


def _as_pod(request: AdmissionRequest, obj: JSONObject) -> PodTemplate | None:
    kind = request.group_kind
    template = _template(obj, kind)
    old = request.old
    if request.operation == UPDATE and old is not None and template == _template(old, kind):
        return None
    meta = get_map(obj, "metadata", "")
    if _owned_by_a_judged_controller(meta):
        return None
    namespace = request.namespace or get_str(meta, "namespace", "metadata")
    name = (
        request.name
        or get_str(meta, "name", "metadata")
        or get_str(meta, "generateName", "metadata")
    )
    path = ".".join(TEMPLATE_PATH[kind])
    pod_meta = {**get_map(template, "metadata", path), "namespace": namespace, "name": name}
    pod: dict[str, Any] = {
        "apiVersion": RESOURCE_OF[POD].api_version,
        "kind": POD.kind,
        "metadata": pod_meta,
        "spec": get_map(template, "spec", path),
    }
    info = _in_template(path, lambda: project_pod(pod))
    return PodTemplate(f"{kind.kind} {namespace}/{name}", path, pod, info)


def _in_template(path: str, read: Callable[[], T]) -> T:
    """``read()``, with a malformed field named where it is in the controller."""
    try:
        return read()
    except ObjectError as exc:
        raise ObjectError(f"{path}.{exc.path}", exc.problem) from None


def pod_template(request: AdmissionRequest) -> PodTemplate | None:
    """The template of the controller under review, if it is to be judged (see the module);
    read once for every policy that asks."""
    if request.obj is None or request.group_kind not in TEMPLATE_PATH:
        return None
    obj = request.obj
    return request.once(("pod-template",), lambda: _as_pod(request, obj))


def judge_template(
    request: AdmissionRequest, judge: Callable[[JSONObject, PodInfo], Sequence[Finding]]
) -> tuple[Finding, ...]:
    """What ``judge`` says of a pod made from the controller's template, said of the controller:
    "Deployment ml/trainer's pod template: <what it says of the pod>"."""
    template = pod_template(request)
    if template is None:
        return ()
    said = _in_template(template.path, lambda: judge(template.obj, template.pod))
    return tuple(
        replace(finding, message=f"{template.owner}'s pod template: {finding.message}")
        for finding in said
    )

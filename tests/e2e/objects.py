"""Loading objects into a bare API server as a full cluster would hold them.

What the absent controllers would have made is made here: each namespace (with its ``default``
ServiceAccount), the ServiceAccounts and RuntimeClasses pods name, each owner reference and each
pod a ResourceClaim is reserved for (``status.reservedFor``, as the scheduler writes it) pointed
at the uid that object got in this run (owners, and the pods a claim is reserved for, are created
first). Status goes through the status subresource and a Node keeps only its own taints
(``ControlPlane.create``); an object with a deletionTimestamp is created with a finalizer
(``HOLD``) and deleted, so it stays Terminating (since now, not since when it was recorded).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tests.e2e.controlplane import ControlPlane

Obj = dict[str, Any]
HOLD = "e2e.gpu-guard.io/hold"
"""The finalizer that keeps a loaded Terminating object Terminating (no kubelet finishes it)."""
SERVER_SET = frozenset(
    {"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink"}
    | {"deletionTimestamp", "deletionGracePeriodSeconds"}
)


def load(plane: ControlPlane, objects: Iterable[Obj]) -> list[Obj]:
    """Creates ``objects`` (dicts as a state file holds them) and returns what the server holds,
    in the order given. A namespace that does not exist is created."""
    items = list(objects)
    for namespace in sorted({(o["metadata"].get("namespace") or "") for o in items} - {""}):
        _ensure_namespace(plane, namespace)
    for pod in (o for o in items if o["kind"] == "Pod" and o["apiVersion"] == "v1"):
        _ensure_pod_dependencies(plane, pod)
    uids: dict[tuple[str, str, str], str] = {}
    created: dict[int, Obj] = {}
    for obj in _owners_first(items):
        meta = obj["metadata"]
        body = {**obj, "metadata": _fresh_metadata(meta, uids)}
        if _reserved_for(obj):
            body["status"] = _fresh_reservations(obj, uids)
        terminating = bool(meta.get("deletionTimestamp"))
        if terminating:  # kept Terminating by a finalizer of ours, as a stuck kubelet keeps it
            finalizers = [*body["metadata"].get("finalizers", []), HOLD]
            body["metadata"] = {**body["metadata"], "finalizers": finalizers}
        result = plane.create(body)
        if terminating:
            plane.call("DELETE", plane.path_of(result | {"apiVersion": obj["apiVersion"]}))
            result = plane.call("GET", plane.path_of(result | {"apiVersion": obj["apiVersion"]}))
        created[id(obj)] = result
        uids[_key(obj)] = result["metadata"]["uid"]
    return [created[id(o)] for o in items]


def _key(obj: Obj) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace") or "", obj["metadata"]["name"]


def _owners_first(items: list[Obj]) -> list[Obj]:
    """``items`` with every owner before what it owns, and the pods a claim is reserved for
    before the claim (among ``items``), else in order."""
    ordered: list[Obj] = []
    pending = list(items)
    while pending:
        waiting = {_key(o) for o in pending}
        ready = [o for o in pending if not waiting & {*_owner_keys(o), *_reserved_for(o)}]
        if not ready:  # a cycle: no order can satisfy it; create the rest as given
            ready = pending
        ordered += ready
        pending = [o for o in pending if all(o is not r for r in ready)]
    return ordered


def _owner_keys(obj: Obj) -> list[tuple[str, str, str]]:
    namespace = obj["metadata"].get("namespace") or ""
    refs = obj["metadata"].get("ownerReferences") or []
    return [
        k
        for ref in refs
        for k in ((ref["kind"], namespace, ref["name"]), (ref["kind"], "", ref["name"]))
    ]


def _reserved_for(obj: Obj) -> list[tuple[str, str, str]]:
    """The pods a ResourceClaim's ``status.reservedFor`` names (the scheduler writes their uids)."""
    if obj["kind"] != "ResourceClaim" or not obj["apiVersion"].startswith("resource.k8s.io/"):
        return []
    namespace = obj["metadata"].get("namespace") or ""
    consumers = (obj.get("status") or {}).get("reservedFor") or []
    return [("Pod", namespace, c["name"]) for c in consumers if _is_pod(c)]


def _is_pod(consumer: Obj) -> bool:
    return consumer.get("resource") == "pods" and not consumer.get("apiGroup")


def _fresh_reservations(obj: Obj, uids: dict[tuple[str, str, str], str]) -> Obj:
    """``obj``'s status with each reserved-for pod at the uid it got in this run (a pod not
    loaded keeps the uid written)."""
    namespace = obj["metadata"].get("namespace") or ""
    status = obj["status"]
    consumers = [
        {**c, "uid": uids.get(("Pod", namespace, c["name"]), c.get("uid", ""))} if _is_pod(c) else c
        for c in status["reservedFor"]
    ]
    return {**status, "reservedFor": consumers}


def _fresh_metadata(meta: Obj, uids: dict[tuple[str, str, str], str]) -> Obj:
    """``meta`` without what the server sets, its owner references at their owners' new uids
    (a reference to an owner not loaded keeps its uid: nothing here deletes by it)."""
    fresh = {key: value for key, value in meta.items() if key not in SERVER_SET}
    if "ownerReferences" in fresh:
        namespace = meta.get("namespace") or ""
        fresh["ownerReferences"] = [
            {**ref, "uid": uids.get((ref["kind"], namespace, ref["name"]), ref.get("uid", ""))}
            for ref in fresh["ownerReferences"]
        ]
    return fresh


def _ensure_namespace(plane: ControlPlane, name: str) -> None:
    status, _ = plane.request("GET", f"/api/v1/namespaces/{name}")
    if status == 404:
        plane.create_namespace(name)


def _ensure_pod_dependencies(plane: ControlPlane, pod: Obj) -> None:
    """The ServiceAccount and RuntimeClass a pod names: without them the API server refuses it."""
    spec = pod.get("spec") or {}
    account = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if account:
        plane.ensure_service_account(pod["metadata"]["namespace"], account)
    runtime = spec.get("runtimeClassName")
    if runtime:
        path = f"/apis/node.k8s.io/v1/runtimeclasses/{runtime}"
        if plane.request("GET", path)[0] == 404:
            plane.call(
                "POST",
                "/apis/node.k8s.io/v1/runtimeclasses",
                {
                    "apiVersion": "node.k8s.io/v1",
                    "kind": "RuntimeClass",
                    "metadata": {"name": runtime},
                    "handler": runtime,
                },
            )


def as_a_kubelet_writes_them(objects: list[Obj]) -> list[Obj]:
    """``objects`` with no node reporting a swap capacity of 0: the API server refuses that on
    create and on every update of the Node but its status (a kubelet that wrote it could not
    register; test_examples_loaded.py), so no ``kubectl label`` of such a node would reach a
    webhook."""
    out = []
    for obj in objects:
        info = (obj.get("status") or {}).get("nodeInfo") or {}
        if obj["kind"] == "Node" and (info.get("swap") or {}).get("capacity") == 0:
            info = {key: value for key, value in info.items() if key != "swap"}
            obj = {**obj, "status": {**obj["status"], "nodeInfo": info}}
        out.append(obj)
    return out

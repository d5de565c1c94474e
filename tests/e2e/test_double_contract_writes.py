"""The double held to the real API server: the Status bodies of refused requests (404, 405, 409,
422, 400, 403) and what each kind's writes answer, body for body."""

from __future__ import annotations

from typing import Any

from tests.e2e import contract
from tests.e2e.contract import STRANGER, Backend, Obj, lease, pod, vm

backend = contract.backend

LEASES = {"group": "coordination.k8s.io", "kind": "leases"}
NAME_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def failure(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


def invalid(what: str, field: str, cause: str, detail: str, details: Obj) -> Obj:
    causes = [{"reason": cause, "message": detail, "field": field}]
    return failure(
        422, "Invalid", f"{what} is invalid: {field}: {detail}", details | {"causes": causes}
    )


def without_version(obj: Obj) -> Obj:
    meta = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
    return obj | {"metadata": meta}


async def test_a_leases_writes_are_answered_as_leader_election_meets_them(
    backend: Backend,
) -> None:
    api = backend
    status, held = await api.request("POST", api.leases(), lease("guard"))
    assert status == 201 and held["spec"]["holderIdentity"] == "replica-a"
    assert await api.request("POST", api.leases(), lease("guard")) == (
        409,
        failure(409, "AlreadyExists", 'leases.coordination.k8s.io "guard" already exists',
                {"name": "guard"} | LEASES),
    )  # fmt: skip
    taken = held | {"spec": held["spec"] | {"holderIdentity": "replica-b"}}
    renewed = await api.call("PUT", api.leases("/guard"), taken)
    assert int(renewed["metadata"]["resourceVersion"]) > int(held["metadata"]["resourceVersion"])
    unchanged = await api.call("PUT", api.leases("/guard"), renewed)  # no write, no new version
    assert unchanged["metadata"]["resourceVersion"] == renewed["metadata"]["resourceVersion"]
    assert await api.request("PUT", api.leases("/guard"), held) == (  # held's version is stale now
        409,
        failure(
            409,
            "Conflict",
            'Operation cannot be fulfilled on leases.coordination.k8s.io "guard": the object has '
            "been modified; please apply your changes to the latest version and try again",
            {"name": "guard"} | LEASES,
        ),
    )
    assert await api.request("PUT", api.leases("/guard"), without_version(renewed)) == (
        422,
        invalid(
            'leases.coordination.k8s.io "guard"',
            "metadata.resourceVersion",
            "FieldValueInvalid",
            "Invalid value: 0: must be specified for an update",
            {"name": "guard"} | LEASES,
        ),
    )
    assert await api.request("PUT", api.leases("/other"), renewed) == (
        400,
        failure(400, "BadRequest", "the name of the object (guard) does not match the name on "
                "the URL (other)"),
    )  # fmt: skip
    status, made = await api.request("PUT", api.leases("/made-by-put"), lease("made-by-put"))
    assert status == 201 and made["metadata"]["name"] == "made-by-put"  # a Lease: created
    assert await api.request("DELETE", api.leases("/guard")) == (
        200,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": "guard"} | LEASES | {"uid": held["metadata"]["uid"]},
        },
    )
    assert await api.request("GET", api.leases("/guard")) == (
        404,
        failure(404, "NotFound", 'leases.coordination.k8s.io "guard" not found',
                {"name": "guard"} | LEASES),
    )  # fmt: skip


async def test_a_create_without_a_valid_name_is_invalid(backend: Backend) -> None:
    api = backend
    nameless = lease("x") | {"metadata": {}}
    assert await api.request("POST", api.leases(), nameless) == (
        422,
        invalid(
            'Lease.coordination.k8s.io ""',
            "metadata.name",
            "FieldValueRequired",
            "Required value: name or generateName is required",
            {"group": "coordination.k8s.io", "kind": "Lease"},
        ),
    )
    assert await api.request("POST", api.pods(), pod("Bad_Name")) == (
        422,
        invalid(
            'Pod "Bad_Name"',
            "metadata.name",
            "FieldValueInvalid",
            f'Invalid value: "Bad_Name": {NAME_RULE}',
            {"name": "Bad_Name", "kind": "Pod"},
        ),
    )
    elsewhere = lease("x") | {"metadata": {"name": "x", "namespace": "elsewhere"}}
    assert await api.request("POST", api.leases(), elsewhere) == (
        400,
        failure(400, "BadRequest", "the namespace of the provided object does not match the "
                "namespace sent on the request"),
    )  # fmt: skip


async def test_pods_and_custom_resources_answer_missing_updates_and_deletes_as_their_kinds(
    backend: Backend,
) -> None:
    api = backend
    assert await api.request("GET", api.pods("/absent")) == (
        404,
        failure(404, "NotFound", 'pods "absent" not found', {"name": "absent", "kind": "pods"}),
    )
    created = await api.call("POST", api.pods(), pod("p"))
    unconditional = await api.call("PUT", api.pods("/p"), without_version(created))
    assert unconditional["metadata"]["name"] == "p"  # a pod takes an update without a version
    status, gone = await api.request("DELETE", api.pods("/p?gracePeriodSeconds=0"))
    assert (status, gone["kind"], gone["metadata"]["name"]) == (200, "Pod", "p")  # the object

    vms = {"group": "kubevirt.io", "kind": "virtualmachines"}
    machine = await api.call("POST", api.vms(), vm("m"))
    assert await api.request("PUT", api.vms("/m"), without_version(machine)) == (
        422,
        invalid(
            'virtualmachines.kubevirt.io "m"',
            "metadata.resourceVersion",
            "FieldValueInvalid",
            "Invalid value: 0: must be specified for an update",
            {"name": "m"} | vms,
        ),
    )
    assert await api.request("PUT", api.vms("/absent"), vm("absent")) == (
        404,
        failure(404, "NotFound", 'virtualmachines.kubevirt.io "absent" not found',
                {"name": "absent"} | vms),
    )  # fmt: skip
    status, answer = await api.request("DELETE", api.vms("/m"))
    assert (status, answer["status"], answer["details"]) == (
        200,
        "Success",
        {"name": "m"} | vms | {"uid": machine["metadata"]["uid"]},
    )


async def test_a_method_a_path_does_not_take_is_405(backend: Backend) -> None:
    refused = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server does not allow this method on the requested resource",
        "reason": "MethodNotAllowed",
        "details": {},
        "code": 405,
    }
    assert await backend.request("PUT", backend.pods(), pod("p")) == (405, refused)
    assert await backend.request("POST", backend.pods("/p"), pod("p")) == (405, refused)


async def test_what_is_not_served_is_a_plain_text_404(backend: Backend) -> None:
    for path in (
        "/apis/nothing.example.com/v1/things",
        "/apis/nothing.example.com/v1/namespaces/ns/things/one",
        "/apis/kubevirt.io/v1/nothings",
        "/apis/kubevirt.io/v9/virtualmachines",
    ):
        assert await backend.request("GET", path) == (404, "404 page not found\n"), path


async def test_a_groups_discovery_names_its_resources_as_the_api_server_does(
    backend: Backend,
) -> None:
    groups = await backend.call("GET", "/apis")
    (kubevirt,) = [g for g in groups["groups"] if g["name"] == "kubevirt.io"]
    assert groups["kind"] == "APIGroupList"
    assert kubevirt["preferredVersion"] == {"groupVersion": "kubevirt.io/v1", "version": "v1"}
    served = await backend.call("GET", "/apis/kubevirt.io/v1")
    assert (served["kind"], served["groupVersion"]) == ("APIResourceList", "kubevirt.io/v1")
    (vms,) = [r for r in served["resources"] if r["name"] == "virtualmachines"]
    assert (vms["namespaced"], vms["kind"], vms["singularName"]) == (
        True,
        "VirtualMachine",
        "virtualmachine",
    )
    # What the double serves, the real server serves too (it serves more: patch, ...).
    assert {"create", "delete", "get", "list", "update", "watch"} <= set(vms["verbs"])


def refused(verb: str, resource: str, plural: str, group: str, namespace: str, **named: Any) -> Obj:
    name = named.get("name")
    what = resource + (f' "{name}"' if name else "")
    message = (
        f'{what} is forbidden: User "{STRANGER}" cannot {verb} resource "{plural}" in API group '
        f'"{group}" in the namespace "{namespace}"'
    )
    details = named | ({"group": group} if group else {}) | {"kind": plural}
    return failure(403, "Forbidden", message, details)


async def test_a_stranger_is_refused_403_in_rbacs_words(backend: Backend) -> None:
    api, who = backend, backend.stranger
    ns = api.namespace
    await api.call("POST", api.leases(), lease("guard"))
    assert await api.request("GET", api.pods(), headers=who) == (
        403,
        refused("list", "pods", "pods", "", ns),
    )
    assert await api.watch(api.pods("?watch=1&resourceVersion=0"), headers=who) == (
        403,
        [refused("watch", "pods", "pods", "", ns)],
    )
    lease_resource = "leases.coordination.k8s.io"
    assert await api.request("GET", api.leases("/guard"), headers=who) == (
        403,
        refused("get", lease_resource, "leases", "coordination.k8s.io", ns, name="guard"),
    )
    assert await api.request("POST", api.leases(), lease("mine"), headers=who) == (
        403,
        refused("create", lease_resource, "leases", "coordination.k8s.io", ns),
    )

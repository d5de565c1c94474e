"""The guard cannot be switched off through its own rights, on a real kube-apiserver v1.36.2 with
the enforce overlay's RBAC and ValidatingAdmissionPolicy applied as rendered: impersonating the
guard's ServiceAccount, every change to its two webhook configurations but caBundle is refused;
caBundle (what ``serve --manage-certs`` writes, by GET and PUT) goes through; an admin is not held
to it. ``test_rbac.py`` runs the real ``serve --manage-certs`` under the same policy.

The harness enables MutatingAdmissionWebhook and ValidatingAdmissionWebhook on top of the API
server's default plugins, which include ValidatingAdmissionPolicy from 1.30: the policy is
enforced as on a real cluster (``enforced`` fails, naming it, if it never is).
"""

from __future__ import annotations

import base64
import copy
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import _started
from tests.e2e.controlplane import ControlPlane
from tests.e2e.guard import WEBHOOK_KINDS, by_url, render

GUARD = "system:serviceaccount:gpu-guard:gpu-guard"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/gpu-guard"
MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpu-guard"
NODES_ENTRY = "nodes.validate.gpu-guard.io"
CLUSTER_POLICY_ENTRY = "clusterpolicy.validate.gpu-guard.io"
VMS_ENTRY = "vms.validate.gpu-guard.io"
OTHER_CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nrenewed\n").decode()
Obj = dict[str, Any]
Edit = Callable[[Obj], None]


def entry(configuration: Obj, name: str) -> Obj:
    found: Obj = next(w for w in configuration["webhooks"] if w["name"] == name)
    return found


def first(configuration: Obj) -> Obj:
    hook: Obj = configuration["webhooks"][0]
    return hook


def ca_bundles(configuration: Obj) -> None:
    for hook in configuration["webhooks"]:
        hook["clientConfig"]["caBundle"] = OTHER_CA


#: (what the guard's token tries, the configuration, the edit); each is refused.
REFUSED: list[tuple[str, str, Edit]] = [
    (
        "failurePolicy Ignore on the ClusterPolicy entry",
        VALIDATING,
        lambda c: entry(c, CLUSTER_POLICY_ENTRY).update(failurePolicy="Ignore"),
    ),
    (
        "a matchCondition that is always false",
        VALIDATING,
        lambda c: entry(c, NODES_ENTRY)["matchConditions"].append(
            {"name": "never", "expression": "false"}
        ),
    ),
    (
        "the node-label entry's rules narrowed to DELETE",
        VALIDATING,
        lambda c: entry(c, NODES_ENTRY)["rules"][0].update(operations=["DELETE"]),
    ),
    ("a shorter timeout", VALIDATING, lambda c: entry(c, NODES_ENTRY).update(timeoutSeconds=1)),
    (
        "an objectSelector nothing matches",
        VALIDATING,
        lambda c: entry(c, NODES_ENTRY).update(objectSelector={"matchLabels": {"never": "true"}}),
    ),
    (
        "a namespaceSelector nothing matches",
        VALIDATING,
        lambda c: entry(c, VMS_ENTRY).update(namespaceSelector={"matchLabels": {"never": "x"}}),
    ),
    (
        "clientConfig pointed elsewhere",
        VALIDATING,
        lambda c: entry(c, NODES_ENTRY)["clientConfig"].update(url="https://127.0.0.1:1/x"),
    ),
    (
        "an entry removed",
        VALIDATING,
        lambda c: c["webhooks"].remove(entry(c, NODES_ENTRY)),
    ),
    ("a label", VALIDATING, lambda c: c["metadata"]["labels"].update(stolen="yes")),
    (
        "cert-manager's inject-ca-from annotation",
        VALIDATING,
        lambda c: (
            c["metadata"]
            .setdefault("annotations", {})
            .update({"cert-manager.io/inject-ca-from": "gpu-guard/elsewhere"})
        ),
    ),
    ("the mutation's failurePolicy", MUTATING, lambda c: first(c).update(failurePolicy="Fail")),
    (
        "the mutation's reinvocationPolicy",
        MUTATING,
        lambda c: first(c).update(reinvocationPolicy="IfNeeded"),
    ),
]


def refused_by_the_policy(status: int, answer: Any) -> bool:
    """403 (the policy's reason: Forbidden) with the policy named, not RBAC's 403."""
    message = answer.get("message", "") if isinstance(answer, dict) else ""
    return status == 403 and "ValidatingAdmissionPolicy 'gpu-guard-own-webhooks'" in message


def enforced(plane: ControlPlane) -> None:
    """Until the API server's policy informer has the policy (a second or so after it is made):
    a dry-run of a refused change is the probe."""
    probe = copy.deepcopy(plane.call("GET", VALIDATING, as_user=GUARD))
    entry(probe, CLUSTER_POLICY_ENTRY)["failurePolicy"] = "Ignore"
    deadline = time.monotonic() + 30
    while not refused_by_the_policy(
        *plane.request("PUT", f"{VALIDATING}?dryRun=All", probe, as_user=GUARD)
    ):
        assert time.monotonic() < deadline, "the ValidatingAdmissionPolicy was never enforced"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """One API server for the module (no CRDs): the checks here only read and update two
    objects, and each refused one leaves them as they were."""
    plane = _started(tmp_path_factory.mktemp("own-rights"), with_crds=False)
    try:
        rendered = render("enforce")
        installed = [o for o in rendered if o["kind"] not in (*WEBHOOK_KINDS, "Deployment")]
        plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(installed))
        # By url on a loopback port nothing listens on: no request here is sent to a webhook
        # (webhook configurations are never sent to webhooks).
        for configuration in by_url(rendered, "https://127.0.0.1:9", plane.pki.ca.cert_pem):
            plane.create(configuration)
        enforced(plane)
        yield plane
    finally:
        plane.stop()


def put_as_guard(plane: ControlPlane, path: str, edit: Edit) -> tuple[int, Any]:
    """GET then PUT as the guard's ServiceAccount (how ``serve --manage-certs`` writes)."""
    configuration = plane.call("GET", path, as_user=GUARD)
    edit(configuration)
    return plane.request("PUT", path, configuration, as_user=GUARD)


@pytest.mark.parametrize(("change", "path", "edit"), REFUSED, ids=[r[0] for r in REFUSED])
def test_the_guards_service_account_cannot_change_its_webhooks_beyond_ca_bundle(
    plane: ControlPlane, change: str, path: str, edit: Edit
) -> None:
    before = plane.call("GET", path)
    status, answer = put_as_guard(plane, path, edit)
    assert refused_by_the_policy(status, answer), (change, status, answer)
    after = plane.call("GET", path)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


@pytest.mark.parametrize("path", [VALIDATING, MUTATING])
def test_the_guards_service_account_may_still_renew_every_ca_bundle(
    plane: ControlPlane, path: str
) -> None:
    status, answer = put_as_guard(plane, path, ca_bundles)
    assert status == 200, answer
    assert {w["clientConfig"]["caBundle"] for w in plane.call("GET", path)["webhooks"]} == {
        OTHER_CA
    }


def test_the_guards_service_account_may_neither_patch_nor_delete_them(
    plane: ControlPlane,
) -> None:
    failure_policy = [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]
    patched, _ = plane.request(
        "PATCH",
        VALIDATING,
        failure_policy,
        content_type="application/json-patch+json",
        as_user=GUARD,
    )
    deleted, _ = plane.request("DELETE", MUTATING, as_user=GUARD)
    assert (patched, deleted) == (403, 403)


def test_an_admin_is_not_held_to_ca_bundle(plane: ControlPlane) -> None:
    before = plane.call("GET", MUTATING)
    status, answer = plane.request(
        "PUT", f"{MUTATING}?dryRun=All", {**before, "webhooks": before["webhooks"][:0]}
    )
    assert status == 200, answer

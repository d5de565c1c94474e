"""``serve`` as the Deployment runs it, on a token of its own ServiceAccount, with the RBAC of the
rendered manifests and nothing else: it syncs, audits, elects, manages its certificates and
publishes its PolicyReports, and the API server refuses it nothing (its audit log says so)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from policies.cluster.kinds import WATCHED
from tests.e2e.conftest import ServeGuard
from tests.e2e.controlplane import ControlPlane
from tests.e2e.guard import WEBHOOK_KINDS, by_url, deployment_args, guard_configuration, render
from tests.e2e.objects import load
from tests.test_cli import STATE
from tests.test_serve_live import free_port
from tests.tls import Bundle
from tests.waits import until

NAMESPACE = ACCOUNT = "gpu-guard"
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
POD = "gpu-guard-5f7d9c4b8-x2k4q"
REPORTS = "/apis/wgpolicyk8s.io/v1alpha2"
#: What serve must have done, each (API group, resource, verb) at least once.
EXPECTED = {
    *((r.kind.group, r.plural, verb) for r in WATCHED for verb in ("list", "watch")),
    ("", "secrets", "create"),
    ("", "secrets", "get"),
    *(
        ("admissionregistration.k8s.io", f"{kind.lower()}s", verb)
        for kind in WEBHOOK_KINDS
        for verb in ("get", "update")
    ),
    ("coordination.k8s.io", "leases", "create"),
    ("coordination.k8s.io", "leases", "get"),
    ("coordination.k8s.io", "leases", "update"),
    ("wgpolicyk8s.io", "policyreports", "create"),
    ("wgpolicyk8s.io", "policyreports", "update"),
    ("wgpolicyk8s.io", "policyreports", "list"),
    ("wgpolicyk8s.io", "policyreports", "delete"),
    ("wgpolicyk8s.io", "clusterpolicyreports", "create"),
    ("wgpolicyk8s.io", "clusterpolicyreports", "update"),
}


def stale_report(namespace: str) -> dict[str, Any]:
    """A report of ours left in a namespace where nothing is audited any more."""
    return {
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": "PolicyReport",
        "metadata": {
            "name": "gpu-guard",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "gpu-guard"},
        },
        "results": [],
    }


async def test_serve_on_its_own_service_account_is_refused_nothing_the_manifests_grant(
    every_kind_control_plane: ControlPlane, serve: ServeGuard, tmp_path: Path
) -> None:
    plane = every_kind_control_plane
    rendered = render("enforce")
    load(plane, [*yaml.safe_load(Path(STATE).read_text())["items"], stale_report("retired")])
    # Installed as `kubectl apply -k` would, but the webhook configurations by a url on a
    # loopback port nothing listens on: no request here is sent to them, and serve must find
    # both to inject its CA (the Service's address would be a ClusterIP, not loopback).
    installed = [obj for obj in rendered if obj["kind"] not in WEBHOOK_KINDS]
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(installed))
    for configuration in by_url(
        rendered, f"https://127.0.0.1:{free_port()}", plane.pki.ca.cert_pem
    ):
        plane.create(configuration)

    config = tmp_path / "guard.yaml"
    config.write_text(guard_configuration(rendered))
    token = plane.kubeconfig_for(
        plane.token(NAMESPACE, ACCOUNT), tmp_path / "token-kubeconfig", NAMESPACE
    )
    guard = await serve(
        plane,
        *deployment_args(rendered, config),
        "--audit-interval",
        "0.5",
        kubeconfig=token,
        env={"POD_NAME": POD, "POD_NAMESPACE": NAMESPACE},
    )

    secret_path = f"/api/v1/namespaces/{NAMESPACE}/secrets/gpu-guard-tls"
    await until(lambda: plane.request("GET", secret_path)[0] == 200, timeout=60, every=0.1)
    ca = base64.b64decode(plane.call("GET", secret_path)["data"]["ca.crt"])
    (tmp_path / "secret-ca.crt").write_bytes(ca)
    guard.tls = Bundle(tmp_path, tmp_path / "secret-ca.crt", guard.tls.cert, guard.tls.key)
    guard.server_name = "gpu-guard.gpu-guard.svc"  # what the Secret's certificate names
    await guard.wait_ready()

    def holder() -> str | None:
        lease = plane.request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/gpu-guard-audit"
        )[1]
        return (lease.get("spec") or {}).get("holderIdentity") if isinstance(lease, dict) else None

    def published() -> bool:
        namespaced = plane.call("GET", f"{REPORTS}/policyreports")["items"]
        cluster = plane.request("GET", f"{REPORTS}/clusterpolicyreports/gpu-guard")[0]
        return cluster == 200 and "vms" in {r["metadata"]["namespace"] for r in namespaced}

    def updated() -> bool:
        events = [e for e in plane.audit_events(USER) if "objectRef" in e]  # not discovery
        verbs = {(e["objectRef"]["resource"], e["verb"]) for e in events}
        return {("policyreports", "update"), ("clusterpolicyreports", "update")} <= verbs

    await until(lambda: holder() == POD, timeout=60, every=0.1)
    await until(published, timeout=60, every=0.1)
    await until(updated, timeout=60, every=0.1)
    namespaces = {
        r["metadata"]["namespace"] for r in plane.call("GET", f"{REPORTS}/policyreports")["items"]
    }
    assert "retired" not in namespaces
    bundle = base64.b64encode(ca).decode()
    for kind in WEBHOOK_KINDS:
        hooks = plane.call(
            "GET", f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s/gpu-guard"
        )
        assert {h["clientConfig"]["caBundle"] for h in hooks["webhooks"]} == {bundle}, kind

    assert await guard.stop() == 0  # the Lease released on the way out: one more update
    log = guard.log_text()
    assert "403" not in log and "forbidden" not in log.lower(), log
    assert "Traceback" not in log, log

    def used() -> set[tuple[str, str, str]]:
        return {
            (e["objectRef"].get("apiGroup", ""), e["objectRef"]["resource"], e["verb"])
            for e in plane.audit_events(USER)
            if "objectRef" in e  # a discovery read (which report format is served) has none
        }

    await until(lambda: used() >= EXPECTED, every=0.1)  # watches are logged as they end
    refused = [
        (e["verb"], e["requestURI"], e["responseStatus"]["code"])
        for e in plane.audit_events(USER)
        if e["responseStatus"]["code"] in (401, 403)
    ]
    assert refused == []

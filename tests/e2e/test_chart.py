"""The Helm chart installed for real (issue 26): onto a cluster without any CRD, upgraded across a
values change while the guard's CA, serving Secret and both caBundles stay valid, and
uninstalled without a webhook configuration left behind. Each install in a namespace of its own.

No pod runs on a bare control plane, so the test plays the pod: ``gpu-guard serve`` with the
release's ServiceAccount token and the Deployment's own arguments, before and after the upgrade.
The chart's webhooks call a Service no one serves; nothing here is sent to them.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.conftest import ServeGuard
from tests.e2e.controlplane import ControlPlane
from tests.e2e.guard import WEBHOOK_KINDS, Guard, deployment_args, guard_configuration
from tests.e2e.rest import MERGE_PATCH
from tests.tls import Bundle
from tests.waits import until
from tools.chart import CHART

RELEASE = "gpu-guard"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def installed(plane: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    """The objects of the release, as helm recorded them."""
    manifest = plane.helm("get", "manifest", RELEASE, "-n", namespace).stdout
    return [doc for doc in yaml.safe_load_all(manifest) if doc]


def configurations(plane: ControlPlane) -> dict[str, dict[str, Any]]:
    """The webhook configurations named gpu-guard that exist, by kind."""
    found = {}
    for kind in WEBHOOK_KINDS:
        status, body = plane.request("GET", f"{ADMISSION}/{kind.lower()}s/gpu-guard")
        if status == 200:
            found[kind] = body
    return found


def bundles(plane: ControlPlane) -> set[str]:
    """Every caBundle of every entry of both configurations."""
    return {
        hook["clientConfig"].get("caBundle", "")
        for configuration in configurations(plane).values()
        for hook in configuration["webhooks"]
    }


def test_the_chart_installs_where_no_crd_is_and_uninstalls_leaving_no_webhook(
    bare_control_plane: ControlPlane,
) -> None:
    plane = bare_control_plane
    chart = str(CHART)
    for needs, crd in (
        ("monitoring.serviceMonitor.enabled=true", "servicemonitors.monitoring.coreos.com"),
        ("monitoring.prometheusRule.enabled=true", "prometheusrules.monitoring.coreos.com"),
        ("certificates.mode=certManager", "certificates.cert-manager.io"),
    ):
        refused = plane.helm(
            "install",
            RELEASE,
            chart,
            "-n",
            "refused",
            "--create-namespace",
            "--set",
            needs,
            check=False,
        )
        assert refused.returncode != 0 and crd in refused.stderr, refused.stderr

    dry = plane.helm(
        "install", RELEASE, chart, "-n", "dry-run", "--create-namespace", "--dry-run=server"
    )
    assert "pending-install" in dry.stdout
    assert not configurations(plane), "a dry run registers nothing"

    plane.helm("install", RELEASE, chart, "-n", "installed", "--create-namespace")
    for obj in installed(plane, "installed"):
        assert plane.request("GET", plane.path_of(obj))[0] == 200, obj["metadata"]["name"]
    registered = configurations(plane)
    assert set(registered) == set(WEBHOOK_KINDS)
    services = {
        (h["clientConfig"]["service"]["name"], h["clientConfig"]["service"]["namespace"])
        for configuration in registered.values()
        for h in configuration["webhooks"]
    }
    assert services == {("gpu-guard", "installed")}

    plane.helm("uninstall", RELEASE, "-n", "installed", "--wait")
    assert not configurations(plane), "a webhook whose Service is gone blocks the cluster"
    status, _ = plane.request(
        "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/gpu-guard-read"
    )
    assert status == 404
    for left in (  # the record and its policy: declared by the chart, so uninstall removes them
        "/api/v1/namespaces/installed/configmaps/gpu-guard-record",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/gpu-guard-record",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/gpu-guard-record",
    ):
        assert plane.request("GET", left)[0] == 404, left


async def play_the_pod(
    plane: ControlPlane, serve: ServeGuard, namespace: str, tmp_path: Path, name: str
) -> Guard:
    """``serve`` as the release's Deployment runs it (its arguments, its configuration, its
    ServiceAccount's token, POD_NAMESPACE), ready, serving the certificate of its Secret."""
    rendered = installed(plane, namespace)
    config = tmp_path / f"{name}-guard.yaml"
    config.write_text(guard_configuration(rendered))
    token = plane.kubeconfig_for(
        plane.token(namespace, "gpu-guard"), tmp_path / f"{name}-kubeconfig", namespace
    )
    guard = await serve(
        plane,
        *deployment_args(rendered, config),
        kubeconfig=token,
        env={"POD_NAME": f"gpu-guard-{name}", "POD_NAMESPACE": namespace},
        name=name,
    )
    secret = f"/api/v1/namespaces/{namespace}/secrets/gpu-guard-tls"
    await until(lambda: plane.request("GET", secret)[0] == 200, timeout=60, every=0.1)
    ca = tmp_path / f"{name}-secret-ca.crt"
    ca.write_bytes(base64.b64decode(plane.call("GET", secret)["data"]["ca.crt"]))
    guard.tls = Bundle(tmp_path, ca, guard.tls.cert, guard.tls.key)
    guard.server_name = f"gpu-guard.{namespace}.svc"  # the name the API server would call
    await guard.wait_ready()
    return guard


async def test_an_upgrade_keeps_the_ca_the_serving_secret_and_both_ca_bundles(
    own_control_plane: ControlPlane, serve: ServeGuard, tmp_path: Path
) -> None:
    plane, namespace = own_control_plane, "gpu-system"
    plane.helm("install", RELEASE, str(CHART), "-n", namespace, "--create-namespace")
    before = await play_the_pod(plane, serve, namespace, tmp_path, "before")
    secret_path = f"/api/v1/namespaces/{namespace}/secrets/gpu-guard-tls"
    secret = plane.call("GET", secret_path)["data"]
    await until(lambda: bundles(plane) == {secret["ca.crt"]}, timeout=30, every=0.1)
    assert await before.stop() == 0

    nodes = f"{ADMISSION}/validatingwebhookconfigurations/gpu-guard"
    enforce = ("upgrade", RELEASE, str(CHART), "-n", namespace, "--reuse-values")
    refused = plane.helm(*enforce, "--set", "mode=enforce", check=False)
    assert refused.returncode != 0, "enforce with no ready replica to answer the webhooks"
    assert f"deployment/gpu-guard in {namespace} has 0 ready replicas of 2" in refused.stderr
    assert "rollout status deployment/gpu-guard" in refused.stderr
    # No controller runs on a bare control plane: the test writes what one would, ready pods.
    deployment = f"/apis/apps/v1/namespaces/{namespace}/deployments/gpu-guard"
    status = {"status": {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2}}
    plane.call("PATCH", f"{deployment}/status", status, MERGE_PATCH)
    upgrades: list[tuple[str, ...]] = [("--set", "mode=enforce", "--set", "replicas=3")]
    if plane.helm("version", "--short").stdout.startswith("v4"):
        # Helm 4 applies server-side; the three-way merge of Helm 3 is still one flag away.
        upgrades.append(
            ("--set", "webhooks.validating.pods.failurePolicy=Fail", "--server-side=false")
        )
    for settings in upgrades:
        plane.helm("upgrade", RELEASE, str(CHART), "-n", namespace, "--reuse-values", *settings)
        assert plane.call("GET", secret_path)["data"] == secret
        assert bundles(plane) == {secret["ca.crt"]}, "the upgrade reset a caBundle"
    # A repair in enforce (no replica ready, say a bad image) is never refused: only the way in.
    unready = {"status": {"readyReplicas": 0, "availableReplicas": 0}}
    plane.call("PATCH", f"{deployment}/status", unready, MERGE_PATCH)
    plane.helm(*enforce, "--set", "image.pullPolicy=Always")
    policies = {h["name"]: h["failurePolicy"] for h in plane.call("GET", nodes)["webhooks"]}
    assert policies["clusterpolicy.validate.gpu-guard.io"] == "Fail", "the upgrade took effect"
    assert policies["pods.validate.gpu-guard.io"] == "Fail"

    after = await play_the_pod(plane, serve, namespace, tmp_path, "after")  # trusts the old CA
    served = yaml.safe_load(guard_configuration(installed(plane, namespace)))
    assert served["policies"]["workload-switch-with-gpu-pods"] == {"action": "deny"}, "enforce"
    assert plane.call("GET", secret_path)["data"] == secret, "nothing to renew"
    assert bundles(plane) == {secret["ca.crt"]}
    assert await after.stop() == 0

    plane.helm("uninstall", RELEASE, "-n", namespace, "--wait")
    assert not configurations(plane)
    # What NOTES.txt says stays: the CA the guard made, and the Lease.
    assert plane.request("GET", secret_path)[0] == 200
    lease = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/gpu-guard-audit"
    assert plane.request("GET", lease)[0] == 200

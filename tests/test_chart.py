"""charts/gpu-guard against the kustomize overlays and against Helm: the chart with each
overlay's values (ci/<overlay>-values.yaml) makes the overlay's objects, field for field; it lints
strictly, packages, refuses what it cannot install and says what it leaves behind.

What may differ, and nothing else: kustomize's content-hashed ConfigMap name (the chart rolls the
pods by a checksum annotation instead), Helm's own labels, the guard configuration's comments and
key order (compared parsed), and the overlays' Namespace object (a chart's namespace is the
release's). Every other test of the rendered objects is in tests/test_manifests.py, over both.
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart_cases import CASES, OTHER_NAMESPACE, OVERLAYS
from tests.helm import MONITORING_KINDS, Render, run_helm, values_file
from tests.test_manifests import Resource, container, guard_config, of_kind, one, rendered
from tools import chart as chart_tool
from tools.chart import CHART

HELM_LABELS = (
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)
CHECKSUM = "checksum/config"
CONFIG = "gpu-guard-config"


def key(obj: Resource) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def parsed_config(objects: list[Resource]) -> None:
    """The guard's configuration compared as YAML: comments and key order are not content."""
    for config_map in of_kind(objects, "ConfigMap"):
        if "guard.yaml" in config_map.get("data", {}):
            config_map["data"]["guard.yaml"] = yaml.safe_load(config_map["data"]["guard.yaml"])


def from_kustomize(overlay: str) -> dict[tuple[str, str, str], Resource]:
    objects = [o for o in rendered(f"overlays/{overlay}") if o["kind"] != "Namespace"]
    for obj in objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"].startswith(f"{CONFIG}-"):
            obj["metadata"]["name"] = CONFIG
    for volume in one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]:
        if volume.get("configMap", {}).get("name", "").startswith(f"{CONFIG}-"):
            volume["configMap"]["name"] = CONFIG
    parsed_config(objects)
    return {key(o): o for o in objects}


def from_helm(objects: list[Resource], release: str = "gpu-guard") -> dict[Any, Resource]:
    """The chart's objects, Helm's labels and the checksum taken off once they are checked."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    expected = {
        "app.kubernetes.io/instance": release,
        "app.kubernetes.io/version": chart["appVersion"],
        "app.kubernetes.io/managed-by": "Helm",
        "helm.sh/chart": f"gpu-guard-{chart['version']}",
    }
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert {k: labels.pop(k, None) for k in HELM_LABELS} == expected, key(obj)
    deployment = one(objects, "Deployment")["metadata"]
    mode = deployment["annotations"].pop("gpu-guard.io/mode")  # the chart's enforce gate reads it
    assert mode in ("audit", "enforce") and not deployment.pop("annotations")
    template = one(objects, "Deployment")["spec"]["template"]["metadata"]
    checksum = template["annotations"].pop(CHECKSUM)
    assert not template.pop("annotations")
    config = one(objects, "ConfigMap", CONFIG)["data"]["guard.yaml"]
    assert checksum == hashlib.sha256(config.encode()).hexdigest()
    parsed_config(objects)
    return {key(o): o for o in objects}


def differences(left: Any, right: Any, path: str = "") -> Iterator[str]:
    """Where two objects differ, as field paths, to name in a failure."""
    if isinstance(left, dict) and isinstance(right, dict):
        for field in sorted(set(left) | set(right), key=str):
            if field not in left or field not in right:
                yield f"{path}.{field}: only in {'kustomize' if field in left else 'the chart'}"
            else:
                yield from differences(left[field], right[field], f"{path}.{field}")
    elif isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        for index, (a, b) in enumerate(zip(left, right, strict=True)):
            yield from differences(a, b, f"{path}[{index}]")
    elif left != right:
        yield f"{path}: kustomize {left!r}, the chart {right!r}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_chart_with_an_overlays_values_makes_the_overlays_objects(overlay: str) -> None:
    kustomized = from_kustomize(overlay)
    charted = from_helm(Render(values_file(overlay)).objects())
    assert sorted(charted) == sorted(kustomized), "the two make different objects"
    found = [f"{k}{d}" for k in kustomized for d in differences(kustomized[k], charted[k])]
    assert not found, "\n".join(found)


def test_the_files_the_chart_shares_with_the_manifests_and_its_version_are_up_to_date() -> None:
    assert not chart_tool.stale(), "run make generate"


def test_the_chart_version_is_the_packages_and_artifact_hub_reads_its_image_and_license() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = chart_tool.version()
    assert (chart["apiVersion"], chart["version"], chart["appVersion"]) == ("v2", version, version)
    annotations = chart["annotations"]
    images = yaml.safe_load(annotations["artifacthub.io/images"])
    assert images == [{"name": "gpu-guard", "image": f"gpu-guard:{version}"}]
    assert annotations["artifacthub.io/license"] == "Apache-2.0"
    changes = yaml.safe_load(annotations["artifacthub.io/changes"])
    assert changes and all({"kind", "description"} <= set(change) for change in changes)
    assert chart["kubeVersion"] == ">=1.28.0-0", "matchConditions, as manifests/README.md says"


@pytest.mark.parametrize("values", ["", *(f"ci/{name}-values.yaml" for name in OVERLAYS)])
def test_the_chart_lints_strictly(values: str) -> None:
    # helm lint takes no --api-versions: the CRDs the overlays' features need are not checked.
    given = ["-f", str(CHART / values), "--set", "checkCRDs=false"] if values else []
    done = run_helm("lint", "--strict", str(CHART), *given)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_packaged_chart_holds_its_files_and_renders_as_the_directory_does(
    tmp_path: Path,
) -> None:
    packaged = chart_tool.package(tmp_path, helm=run_helm)
    assert packaged.name == f"gpu-guard-{chart_tool.version()}.tgz"
    with tarfile.open(packaged) as archive:
        names = set(archive.getnames())
    for shared in chart_tool.COPIES:
        assert f"gpu-guard/{shared}" in names
    assert {"gpu-guard/values.schema.json", "gpu-guard/README.md"} <= names
    done = run_helm("template", "gpu-guard", str(packaged), "-n", "gpu-guard")
    directory = run_helm("template", "gpu-guard", str(CHART), "-n", "gpu-guard")
    assert done.returncode == 0 and done.stdout == directory.stdout


def test_the_pods_roll_when_the_configuration_changes_and_only_then() -> None:
    def checksum(render: Render) -> str:
        template = one(render.objects(), "Deployment")["spec"]["template"]
        value: str = template["metadata"]["annotations"][CHECKSUM]
        return value

    base = checksum(Render())
    assert checksum(Render({"replicas": 3})) == base
    assert checksum(Render({"mode": "enforce"})) != base
    assert checksum(Render({"policies": {"cordon-sole-provider": {"action": "off"}}})) != base


# --- any namespace -------------------------------------------------------------------------------


def namespaces_named(obj: Any) -> Iterator[str]:
    """Every namespace an object names: its own, subjects, Service references, selectors."""
    if isinstance(obj, dict):
        for field, value in obj.items():
            if field == "namespace" and isinstance(value, str):
                yield value
            elif field == "matchNames":
                yield from value
            else:
                yield from namespaces_named(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from namespaces_named(item)


def test_in_another_namespace_every_reference_is_to_that_namespace() -> None:
    render = CASES["everything-in-another-namespace"].render
    assert render.namespace == OTHER_NAMESPACE
    objects = render.objects()
    for obj in objects:
        assert set(namespaces_named(obj)) <= {OTHER_NAMESPACE}, obj["metadata"]["name"]
    service = f"gpu-guard.{OTHER_NAMESPACE}.svc"
    assert one(objects, "Certificate", "gpu-guard")["spec"]["dnsNames"] == [
        "gpu-guard",
        f"gpu-guard.{OTHER_NAMESPACE}",
        service,
    ]
    monitor = one(objects, "ServiceMonitor")["spec"]["endpoints"][0]["tlsConfig"]
    assert monitor["serverName"] == service
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        annotations = one(objects, kind)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == f"{OTHER_NAMESPACE}/gpu-guard"
    assert "gpu-guard" not in guard_config(objects)["exemptions"]["namespaces"]


def test_in_another_namespace_the_guard_certifies_and_elects_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--manage-certs names its certificate, and --leader-elect places its Lease, after
    POD_NAMESPACE, which the pod gets from the downward API."""
    from webhook.audit.election import own_namespace
    from webhook.cli import build_parser
    from webhook.commands.certs import cert_hosts

    objects = Render(namespace=OTHER_NAMESPACE).objects()
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container(objects)["env"]}
    assert env["POD_NAMESPACE"] == "metadata.namespace"
    monkeypatch.setenv("POD_NAMESPACE", OTHER_NAMESPACE)
    args = build_parser().parse_args(container(objects)["args"])
    assert f"gpu-guard.{OTHER_NAMESPACE}.svc" in cert_hosts(args)
    assert own_namespace(args.namespace) == OTHER_NAMESPACE


# --- what it refuses, and what it says ------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "api_versions", "said"),
    [
        (
            {"monitoring": {"serviceMonitor": {"enabled": True}}},
            (),
            "servicemonitors.monitoring.coreos.com",
        ),
        (
            {"monitoring": {"prometheusRule": {"enabled": True}}},
            (),
            "prometheusrules.monitoring.coreos.com",
        ),
        (
            {"certificates": {"mode": "certManager"}},
            MONITORING_KINDS,
            "certificates.cert-manager.io",
        ),
        ({"replicas": 2, "leaderElection": {"enabled": False}}, (), "leaderElection.enabled=true"),
    ],
)
def test_what_the_schema_cannot_say_fails_the_render_naming_the_value_and_the_crd(
    values: dict[str, Any], api_versions: tuple[str, ...], said: str
) -> None:
    assert said in Render(values, api_versions=api_versions).error()


def notes(tmp_path: Path, namespace: str, *settings: str, kube_version: str = "") -> str:
    """NOTES.txt as helm install prints it, rendered with helm template (no cluster, any Helm):
    a copy of the chart with a template that passes the notes through tpl."""
    copy = tmp_path / "gpu-guard"
    shutil.copytree(CHART, copy, dirs_exist_ok=True)
    shutil.copy(copy / "templates" / "NOTES.txt", copy / "files" / "notes.txt")
    (copy / "templates" / "notes.yaml").write_text(
        'notes: {{ tpl (.Files.Get "files/notes.txt") . | toJson }}\n'
    )
    done = run_helm(
        "template",
        "gpu-guard",
        str(copy),
        "-n",
        namespace,
        "--show-only",
        "templates/notes.yaml",
        *(arg for setting in settings for arg in ("--set", setting)),
        *(("--kube-version", kube_version) if kube_version else ()),
    )
    assert done.returncode == 0, done.stderr
    rendered: str = yaml.safe_load(done.stdout)["notes"]
    return rendered


def test_the_notes_say_what_stays_how_to_read_the_first_audit_and_how_to_enforce(
    tmp_path: Path,
) -> None:
    said_here = notes(tmp_path, OTHER_NAMESPACE)
    for said in (
        "policyreports",  # the first audit, and what stays
        "gpu-guard audit",
        "--set mode=enforce",
        f"the Lease gpu-guard-audit in {OTHER_NAMESPACE}",
        f"the Secret gpu-guard-tls in {OTHER_NAMESPACE}",
        "kubectl delete validatingwebhookconfiguration gpu-guard",
    ):
        assert said in said_here, said
    namespace = yaml.safe_load((Path(chart_tool.MANIFESTS) / "base" / "namespace.yaml").read_text())
    pod_security = sorted(
        f"{k}={v}" for k, v in namespace["metadata"]["labels"].items() if k.startswith("pod-")
    )
    assert f"kubectl label namespace {OTHER_NAMESPACE} {' '.join(pod_security)}" in said_here
    enforcing = notes(
        tmp_path,
        OTHER_NAMESPACE,
        "mode=enforce",
        "certificates.mode=certManager",
        "checkCRDs=false",
    )
    assert "--set mode=enforce" not in enforcing
    assert "the Secrets gpu-guard-tls and gpu-guard-ca cert-manager wrote" in enforcing


OWN_RIGHTS_POLICY = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


@pytest.mark.parametrize(
    ("kube_version", "served"), [("1.30.0", True), ("1.36.2", True), ("1.29.9", False)]
)
def test_the_policy_holding_the_guards_own_rights_to_ca_bundle_comes_with_kubernetes_1_30(
    kube_version: str, served: bool
) -> None:
    kinds = {obj["kind"] for obj in Render(kube_version=kube_version).objects()}
    assert (kinds >= OWN_RIGHTS_POLICY) is served
    assert (OWN_RIGHTS_POLICY & kinds != set()) is served


@pytest.mark.parametrize(
    ("kube_version", "served"), [("1.30.0", True), ("1.36.2", True), ("1.29.9", False)]
)
def test_the_record_policy_comes_with_kubernetes_1_30_and_before_it_the_nodes_entry_fails_closed(
    kube_version: str, served: bool
) -> None:
    objects = Render(
        {"mode": "enforce", "checkCRDs": False},
        namespace=OTHER_NAMESPACE,
        kube_version=kube_version,
    ).objects()
    record = {
        (o["kind"], o["metadata"]["name"])
        for o in objects
        if o["metadata"]["name"] == "gpu-guard-record"
    }
    assert bool(record) is served
    if served:
        binding = next(
            o
            for o in objects
            if o["kind"] == "ValidatingAdmissionPolicyBinding"
            and o["metadata"]["name"] == "gpu-guard-record"
        )
        assert binding["spec"]["paramRef"]["namespace"] == OTHER_NAMESPACE
    (validating,) = [o for o in objects if o["kind"] == "ValidatingWebhookConfiguration"]
    nodes = next(w for w in validating["webhooks"] if w["name"] == "nodes.validate.gpu-guard.io")
    base = yaml.safe_load_all((Path(chart_tool.MANIFESTS) / "base" / "webhooks.yaml").read_text())
    (base_nodes,) = [
        w
        for d in base
        if d["kind"] == "ValidatingWebhookConfiguration"
        for w in d["webhooks"]
        if w["name"] == "nodes.validate.gpu-guard.io"
    ]
    assert nodes["failurePolicy"] == (base_nodes["failurePolicy"] if served else "Fail")


def test_before_kubernetes_1_30_the_notes_warn_that_the_guards_own_rights_are_not_held(
    tmp_path: Path,
) -> None:
    warning = "nothing holds the guard's ServiceAccount to the caBundle"
    assert warning in notes(tmp_path, OTHER_NAMESPACE, kube_version="1.29.9")
    assert warning not in notes(tmp_path, OTHER_NAMESPACE, kube_version="1.30.0")
    # With cert-manager the guard has no rights on its webhook configurations: nothing to hold.
    assert warning not in notes(
        tmp_path,
        OTHER_NAMESPACE,
        "certificates.mode=certManager",
        "checkCRDs=false",
        kube_version="1.29.9",
    )

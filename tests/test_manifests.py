"""The deployment manifests, checked against the code they deploy.

Every kustomization under ``manifests/`` is rendered with the pure-Python renderer in
``tests/kustomize.py`` (and compared with ``kubectl kustomize`` where kubectl exists), and the
Helm chart by the real ``helm template`` once for each overlay's values and each documented value
(tests/chart_cases.py); every rendering is then held against the code: the webhook rules against
the policies' scopes, the RBAC against the kinds the live state watches, the probes and client
paths against the server's routes, the container arguments against the real CLI parser, the
policy configuration against the policy registry. A change on either side without the other
fails here.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.cluster.kinds import JUDGED_SUBRESOURCES, RESOURCE_OF, REVIEWED, UPDATED_THROUGH
from policies.registry import ALL_MUTATIONS, ALL_POLICIES, POLICIES_BY_ID
from policies.state.cluster import ClusterState
from policies.vocabulary.requests import GroupKind
from policies.vocabulary.verdicts import Action
from tests import FIXTURES
from tests.chart_cases import CASES
from tests.conftest import fixtures_missing
from tests.helm import Render
from tests.kustomize import KustomizeError, build, config_map_hash, split_image
from tests.samples import DISALLOWED, Sample, all_samples
from tools.routes import as_sent, compiled, excluded_namespaces, review, routed
from webhook.admission.pipeline import Admission
from webhook.admission.review import parse_review
from webhook.admission.server import (
    HEALTHZ_PATH,
    MUTATE_PATH,
    READYZ_PATH,
    VALIDATE_PATH,
    make_app,
)
from webhook.cli import build_parser
from webhook.config import parse_config
from webhook.engine import Engine
from webhook.state.files import load_state
from webhook.state.live import RESOURCES

Resource = dict[str, Any]

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "manifests"
OVERLAYS = sorted(p.name for p in (MANIFESTS / "overlays").iterdir() if p.is_dir())
KUSTOMIZATIONS = ["base", *(f"overlays/{name}" for name in OVERLAYS)]
ENFORCING = [k for k in KUSTOMIZATIONS if k != "overlays/audit"]

NAMESPACE = "gpu-guard"
SERVICE_ACCOUNT = "gpu-guard"
IMAGE = "gpu-guard"
TLS_SECRET = "gpu-guard-tls"
WEBHOOK_CONFIGURATION = "gpu-guard"
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
OWN_RIGHTS_POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")

#: (group, plural) -> namespaced, for every kind the live state lists and watches.
WATCHED = {(r.kind.group, r.plural): r.namespaced for r in RESOURCES}
#: The same for every kind a webhook may send: the watched ones and those only reviewed.
SENDABLE = {**WATCHED, **{(r.kind.group, r.plural): r.namespaced for r in REVIEWED}}


# --- rendering -----------------------------------------------------------------------------------


@functools.cache
def _rendered(kustomization: str) -> tuple[Resource, ...]:
    return tuple(build(MANIFESTS / kustomization))


def rendered(kustomization: str) -> list[Resource]:
    """A private copy: a test may not change what the next one sees."""
    return copy.deepcopy(list(_rendered(kustomization)))


def of_kind(objects: list[Resource], kind: str) -> list[Resource]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: list[Resource], kind: str, name: str | None = None) -> Resource:
    found = [o for o in of_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def webhooks(objects: list[Resource], *kinds: str) -> list[Resource]:
    return [hook for obj in objects if obj["kind"] in kinds for hook in obj["webhooks"]]


def all_webhooks(objects: list[Resource]) -> list[Resource]:
    return webhooks(objects, *WEBHOOK_KINDS)


def pod_spec(objects: list[Resource]) -> Resource:
    spec: Resource = one(objects, "Deployment", "gpu-guard")["spec"]["template"]["spec"]
    return spec


def container(objects: list[Resource]) -> Resource:
    containers = pod_spec(objects)["containers"]
    assert [c["name"] for c in containers] == ["gpu-guard"]
    found: Resource = containers[0]
    return found


def guard_config(objects: list[Resource]) -> Any:
    """The configuration in the ConfigMap the pod mounts at /config."""
    volumes = {v["name"]: v for v in pod_spec(objects)["volumes"]}
    config_map = one(objects, "ConfigMap", volumes["config"]["configMap"]["name"])
    return yaml.safe_load(config_map["data"]["guard.yaml"])


@dataclass(frozen=True)
class Source:
    """Where a rendering comes from, a kustomization or the chart with some values, and what its
    values ask for where they may differ from the overlays' (namespace, replicas, image)."""

    name: str
    chart: Render | None = None

    def objects(self) -> list[Resource]:
        return rendered(self.name) if self.chart is None else self.chart.objects()

    def value(self, *path: str, default: Any = None) -> Any:
        found: Any = self.chart.values if self.chart is not None else {}
        for key in path:
            found = found.get(key, {}) if isinstance(found, Mapping) else {}
        return default if found in ({}, None) else found

    @property
    def namespace(self) -> str:
        return NAMESPACE if self.chart is None else self.chart.namespace

    @property
    def exempt(self) -> set[str]:
        """kube-system and the guard's own namespace, and the chart's excludedNamespaces."""
        return {"kube-system", self.namespace, *self.value("excludedNamespaces", default=[])}

    @property
    def replicas(self) -> int:
        replicas: int = self.value("replicas", default=2)
        return replicas


SOURCES = {
    **{name: Source(name) for name in KUSTOMIZATIONS},
    **{f"chart/{name}": Source(f"chart/{name}", case.render) for name, case in CASES.items()},
}


@pytest.fixture(params=KUSTOMIZATIONS)
def kustomization(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(params=list(SOURCES))
def source(request: pytest.FixtureRequest) -> Source:
    return SOURCES[request.param]


@pytest.fixture
def objects(source: Source) -> list[Resource]:
    return source.objects()


def test_every_rendering_makes_named_objects_in_the_guards_namespace(
    source: Source, objects: list[Resource]
) -> None:
    cluster_scoped = {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        *WEBHOOK_KINDS,
        *OWN_RIGHTS_POLICY_KINDS,
    }
    for obj in objects:
        assert obj.get("apiVersion") and obj.get("kind") and obj["metadata"].get("name")
        expected = None if obj["kind"] in cluster_scoped else source.namespace
        assert obj["metadata"].get("namespace") == expected, (obj["kind"], obj["metadata"])
    for kind in ("ServiceAccount", "Service", "Deployment"):
        one(objects, kind)
    # The chart's namespace is the release's, the user's (helm install -n NS --create-namespace).
    assert len(of_kind(objects, "Namespace")) == (1 if source.chart is None else 0)
    one(objects, "ValidatingWebhookConfiguration", WEBHOOK_CONFIGURATION)
    one(objects, "MutatingWebhookConfiguration", WEBHOOK_CONFIGURATION)


def test_the_python_renderer_prints_what_kubectl_kustomize_prints(kustomization: str) -> None:
    # kubectl on PATH, or the e2e tier's (CI sets KUBEBUILDER_ASSETS, so this runs there).
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    kubectl = shutil.which("kubectl") or (assets and shutil.which("kubectl", path=assets))
    if not kubectl:
        pytest.skip("kubectl is not installed here; the other tests use the Python renderer")
    printed = subprocess.run(
        [kubectl, "kustomize", str(MANIFESTS / kustomization)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    expected = [doc for doc in yaml.safe_load_all(printed) if doc is not None]
    assert rendered(kustomization) == expected


@pytest.mark.parametrize(
    ("data", "suffix"),
    [
        # Known answers from kubectl kustomize v5.5.0, so CI without kubectl checks the hash too.
        ({"a": "b"}, "4h2mbtbbt6"),
        ({"a": "<b&c>", "é": "ü"}, "t27c7kf46c"),  # Go's JSON escapes <, > and &; UTF-8 stays
    ],
)
def test_the_renderer_names_generated_config_maps_as_kustomize_does(
    data: dict[str, str], suffix: str
) -> None:
    assert config_map_hash({"metadata": {"name": "x"}, "data": data}) == suffix


@pytest.mark.parametrize(
    ("what", "kustomization", "files"),
    [
        (
            "a strategic-merge patch with a list (its merge key is in OpenAPI, not here)",
            "resources: [cm.yaml]\npatches:\n  - patch: |-\n      kind: ConfigMap\n"
            "      metadata: {name: x}\n      data: {a: [1]}\n",
            {"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"},
        ),
        (
            "a JSON6902 patch without a target",
            "resources: [cm.yaml]\npatches:\n  - patch: '[{op: remove, path: /data}]'\n",
            {"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {}\n"},
        ),
        (
            "a JSON6902 test that does not hold",
            "resources: [cm.yaml]\npatches:\n  - target: {kind: ConfigMap}\n"
            "    patch: '[{op: test, path: /data/a, value: c}]'\n",
            {"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n"},
        ),
        ("a kustomize feature it does not implement", "namePrefix: x-\n", {}),
    ],
)
def test_the_renderer_refuses_what_it_cannot_render_faithfully(
    tmp_path: Path, what: str, kustomization: str, files: dict[str, str]
) -> None:
    (tmp_path / "kustomization.yaml").write_text(kustomization)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(KustomizeError):
        build(tmp_path)


# --- webhooks: what the API server sends ---------------------------------------------------------


def operations_of(
    scopes: list[Mapping[GroupKind, frozenset[str]]], subresources: bool = True
) -> set[tuple[str, str, str]]:
    """(group, plural, operation) for every operation in these policy or mutation scopes, and
    with ``subresources`` the updates of the subresources judged like their kind
    (``plural/status``; a mutation never patches through one: ``Engine.mutations_for``), less
    the updates of a kind the policies judge only through its subresource (``UPDATED_THROUGH``)."""
    handled = {
        (kind.group, RESOURCE_OF[kind].plural, operation)
        for scope in scopes
        for kind, operations in scope.items()
        for operation in operations
    }
    through = {
        (kind.group, f"{RESOURCE_OF[kind].plural}/{sub}", "UPDATE")
        for kind, sub in JUDGED_SUBRESOURCES
        if subresources and (kind.group, RESOURCE_OF[kind].plural, "UPDATE") in handled
    }
    only_through = {(k.group, RESOURCE_OF[k].plural, "UPDATE") for k in UPDATED_THROUGH}
    return (handled - only_through) | through


def sent_operations(hooks: list[Resource]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, operation)
        for hook in hooks
        for rule in hook["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for operation in rule["operations"]
    }


@pytest.mark.parametrize(
    ("configuration", "judges", "scopes", "subresources"),
    [
        ("ValidatingWebhookConfiguration", "policy", [p.scope for p in ALL_POLICIES], True),
        ("MutatingWebhookConfiguration", "mutation", [m.scope for m in ALL_MUTATIONS], False),
    ],
)
def test_webhooks_send_exactly_the_operations_the_code_handles(
    objects: list[Resource],
    configuration: str,
    judges: str,
    scopes: list[Mapping[GroupKind, frozenset[str]]],
    subresources: bool,
) -> None:
    sent = sent_operations(webhooks(objects, configuration))
    handled = operations_of(scopes, subresources)
    assert not handled - sent, f"a {judges} handles these, no webhook sends them: {handled - sent}"
    assert not sent - handled, f"webhooks send these, no {judges} handles them: {sent - handled}"


def test_no_webhook_rule_names_a_wildcard_a_kind_no_policy_may_judge_or_an_unjudged_subresource(
    objects: list[Resource],
) -> None:
    judged = {f"{RESOURCE_OF[kind].plural}/{sub}" for kind, sub in JUDGED_SUBRESOURCES}
    for hook in all_webhooks(objects):
        for rule in hook["rules"]:
            for field in ("apiGroups", "apiVersions", "resources", "operations"):
                assert "*" not in rule[field], (hook["name"], field)
            for group in rule["apiGroups"]:
                for name in rule["resources"]:
                    assert "/" not in name or name in judged, f"{hook['name']}: subresource {name}"
                    resource = name.partition("/")[0]
                    assert (group, resource) in SENDABLE, f"{hook['name']}: {group}/{resource}"
                    expected_scope = "Namespaced" if SENDABLE[(group, resource)] else "Cluster"
                    assert rule.get("scope") == expected_scope, (hook["name"], resource)


@pytest.mark.parametrize(
    ("setting", "check"),
    [
        ("timeoutSeconds at most 3", lambda h: 1 <= h["timeoutSeconds"] <= 3),
        ("sideEffects None (dry-run safe)", lambda h: h["sideEffects"] == "None"),
        ("admissionReviewVersions v1", lambda h: h["admissionReviewVersions"] == ["v1"]),
        ("an explicit failurePolicy", lambda h: h["failurePolicy"] in ("Fail", "Ignore")),
        ("a fully qualified name", lambda h: h["name"].endswith(".gpu-guard.io")),
        ("no url, only the in-cluster Service", lambda h: "url" not in h["clientConfig"]),
        ("a caBundle left to injection", lambda h: not h["clientConfig"].get("caBundle")),
    ],
)
def test_every_webhook_has(objects: list[Resource], setting: str, check: Any) -> None:
    for hook in all_webhooks(objects):
        assert check(hook), f"{hook['name']} lacks {setting}"


def test_webhook_names_are_unique_within_each_configuration(objects: list[Resource]) -> None:
    for kind in WEBHOOK_KINDS:
        names = [hook["name"] for hook in webhooks(objects, kind)]
        assert len(names) == len(set(names)), names


def test_every_webhook_calls_the_gpu_guard_service_on_its_serving_port(
    source: Source, objects: list[Resource]
) -> None:
    service = one(objects, "Service", "gpu-guard")
    ports = {port["port"]: port["targetPort"] for port in service["spec"]["ports"]}
    container_ports = {p["name"]: p["containerPort"] for p in container(objects)["ports"]}
    for hook in all_webhooks(objects):
        target = hook["clientConfig"]["service"]
        assert (target["name"], target["namespace"]) == ("gpu-guard", source.namespace)
        assert target["port"] in ports, f"{hook['name']}: the Service has no port {target['port']}"
        target_port = ports[target["port"]]
        assert container_ports.get(target_port, target_port) == 8443


def served_routes() -> set[tuple[str, str]]:
    app = make_app(Admission(engine=Engine(), view=ClusterState()))
    return {
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.resource is not None
    }


CLIENT_PATHS = sorted(
    {hook["clientConfig"]["service"]["path"] for hook in all_webhooks(rendered("base"))}
)


def test_the_server_path_constants_are_what_the_manifests_use() -> None:
    assert set(CLIENT_PATHS) == {VALIDATE_PATH, MUTATE_PATH}
    assert (HEALTHZ_PATH, READYZ_PATH) == ("/healthz", "/readyz")


@pytest.mark.parametrize("path", CLIENT_PATHS)
def test_every_webhook_path_is_a_route_the_server_serves(path: str) -> None:
    assert ("POST", path) in served_routes()


def namespaced(hook: Mapping[str, Any]) -> bool:
    return any(
        SENDABLE[(group, resource.partition("/")[0])]
        for rule in hook["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    )


def test_namespaced_webhooks_skip_kube_system_and_the_guards_own_namespace(
    source: Source, objects: list[Resource]
) -> None:
    exempt = set(parse_config(guard_config(objects), "guard.yaml").exempt_namespaces)
    assert exempt == source.exempt
    for hook in all_webhooks(objects):
        if namespaced(hook):
            # The same namespaces as the configuration: the API server does not even call.
            assert excluded_namespaces(hook) == exempt, hook["name"]
        else:
            assert "namespaceSelector" not in hook, f"{hook['name']}: ignored on cluster kinds"


def node_webhooks(objects: list[Resource]) -> list[Resource]:
    return [
        hook
        for hook in all_webhooks(objects)
        if any("nodes" in rule["resources"] for rule in hook["rules"])
    ]


def test_node_webhooks_never_see_a_nodes_own_kubelet_and_only_it(objects: list[Resource]) -> None:
    """One condition, the same on every node webhook: the kubelet of the node the request names,
    in group system:nodes (the routing cases show what it lets through)."""
    assert node_webhooks(objects)
    for hook in node_webhooks(objects):
        named = {c["name"]: c["expression"] for c in hook.get("matchConditions", [])}
        assert "not-its-own-kubelet" in named, hook["name"]
        assert "'system:node:' + request.name" in named["not-its-own-kubelet"], hook["name"]
        assert "'system:nodes' in request.userInfo.groups" in named["not-its-own-kubelet"]


# --- webhooks: CEL matchConditions ---------------------------------------------------------------

CEL_VARIABLES = {"object", "oldObject", "request"}
CEL_KEYWORDS = {"true", "false", "null", "in"}
CEL_FUNCTIONS = {"has", "size", "int", "uint", "double", "string", "bool", "type", "dyn"}
CEL_MACROS = ("all", "exists", "exists_one", "map", "filter")
CEL_STRING = re.compile(r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"")
PAIRS = {")": "(", "]": "[", "}": "{"}


def conditions(objects: list[Resource]) -> Iterator[tuple[str, str, str]]:
    for hook in all_webhooks(objects):
        for condition in hook.get("matchConditions", []):
            yield hook["name"], condition["name"], condition["expression"]


def cel_roots(expression: str) -> set[str]:
    """The free identifiers of a CEL expression: what it reads from its environment."""
    text = CEL_STRING.sub("''", expression)
    bound = set(re.findall(rf"\.\s*(?:{'|'.join(CEL_MACROS)})\(\s*([A-Za-z_]\w*)\s*,", text))
    roots = set()
    for match in re.finditer(r"(?<![.\w])([A-Za-z_]\w*)", text):
        name = match.group(1)
        if name in CEL_KEYWORDS or name in bound:
            continue
        if text[match.end() :].lstrip().startswith("("):
            assert name in CEL_FUNCTIONS, f"unknown CEL function {name}()"
            continue
        roots.add(name)
    return roots


def balanced(expression: str) -> bool:
    stack: list[str] = []
    for char in CEL_STRING.sub("''", expression):
        if char in "([{":
            stack.append(char)
        elif char in PAIRS and (not stack or stack.pop() != PAIRS[char]):
            return False
    return not stack


def test_every_match_condition_is_balanced_and_reads_only_the_admission_variables(
    objects: list[Resource],
) -> None:
    found = list(conditions(objects))
    assert found
    for hook, name, expression in found:
        assert balanced(expression), f"{hook} {name}: unbalanced brackets"
        assert cel_roots(expression) <= CEL_VARIABLES, f"{hook} {name}: {cel_roots(expression)}"
        # Quoted label keys with dots only: an unquoted `object.metadata.labels.nvidia.com` would
        # be a field path, and a typo there silently matches nothing.
        assert "labels." not in CEL_STRING.sub("''", expression), f"{hook} {name}"


def test_match_condition_names_are_unique_within_each_webhook(objects: list[Resource]) -> None:
    for hook in all_webhooks(objects):
        names = [c["name"] for c in hook.get("matchConditions", [])]
        assert len(names) == len(set(names)) <= 64, hook["name"]


def cel_program(expression: str) -> Any:
    pytest.importorskip("celpy", reason="cel-python is not installed")
    return compiled(expression)


def test_every_match_condition_compiles_as_cel(objects: list[Resource]) -> None:
    for _, _, expression in conditions(objects):
        cel_program(expression)


def node(labels: Mapping[str, str] | None = None, **spec: Any) -> Resource:
    metadata: Resource = {"name": "gpu-1"}
    if labels is not None:
        metadata["labels"] = dict(labels)
    return {"metadata": metadata, "spec": spec} if spec else {"metadata": metadata}


def pod(**containers: Mapping[str, str]) -> Resource:
    """A pod whose containers (``init_`` for init containers) have these limits."""
    spec: Resource = {"containers": [{"name": "app"}]}
    for name, limits in containers.items():
        where = "initContainers" if name.startswith("init_") else "containers"
        spec.setdefault(where, []).append({"name": name, "resources": {"limits": dict(limits)}})
    return {"metadata": {"name": "p"}, "spec": spec}


WORKLOAD = "nvidia.com/gpu.workload.config"
GPU_NODE = {WORKLOAD: "container", "nvidia.com/gpu.present": "true"}
RESOURCE = "resource.k8s.io"


def claim_pod(*claims: str) -> Resource:
    """A pod without GPU limits whose spec.resourceClaims names these claims."""
    obj = pod()
    obj["spec"]["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
    return obj


def deployment(
    image: str = "cuda:12", replicas: int = 1, annotations: Mapping[str, str] | None = None
) -> Resource:
    """A Deployment whose pod template runs ``image``."""
    template = {"spec": {"containers": [{"name": "app", "image": image}]}}
    return {
        "metadata": {"name": "d", "namespace": "ml", "annotations": dict(annotations or {})},
        "spec": {"replicas": replicas, "template": template},
    }


def cron_job(image: str = "cuda:12", schedule: str = "@daily") -> Resource:
    """A CronJob whose jobs' pod template runs ``image``."""
    template = {"spec": {"containers": [{"name": "app", "image": image}]}}
    return {
        "metadata": {"name": "c", "namespace": "ml"},
        "spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": template}}},
    }


def resource_claim(allocated: bool = False) -> Resource:
    status: Resource = {"allocation": {"devices": {"results": []}}} if allocated else {}
    return {"metadata": {"name": "c", "namespace": "ml"}, "spec": {"devices": {}}, "status": status}


def device_class(*expressions: str, extended: str = "") -> Resource:
    spec: Resource = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"metadata": {"name": "gpu.nvidia.com"}, "spec": spec}


def vm_object(*actions: str, printable: str = "Stopped") -> Resource:
    """A VirtualMachine whose status.stateChangeRequests holds entries with these actions."""
    status: Resource = {"printableStatus": printable}
    if actions:
        status["stateChangeRequests"] = [{"action": a} for a in actions]
    return {"metadata": {"name": "v", "namespace": "vms"}, "status": status}


def bound_pod(phase: str = "Running") -> Resource:
    """A pod bound to gpu-1 in this phase."""
    spec = {"nodeName": "gpu-1", "containers": [{"name": "app"}]}
    return {"metadata": {"name": "p", "namespace": "ml"}, "spec": spec, "status": {"phase": phase}}


def vmi_object(phase: str = "Running") -> Resource:
    return {"metadata": {"name": "v", "namespace": "vms"}, "status": {"phase": phase}}


KUBELET = "system:node:gpu-1"
POD_GC = "system:serviceaccount:kube-system:pod-garbage-collector"
POD_STATUS: dict[str, Any] = {"namespace": "ml", "sub_resource": "status"}
VMS: dict[str, Any] = {"group": "kubevirt.io", "namespace": "vms"}
VM_STATUS: dict[str, Any] = {**VMS, "sub_resource": "status"}
NO_STATUS_VM: Resource = {"metadata": {"name": "v", "namespace": "vms"}}


GPU_SELECTOR = "device.driver == 'gpu.nvidia.com'"
HCO_KUBEVIRT = "kubevirt-kubevirt-hyperconverged"
A_SLICE = {"metadata": {"name": "omen2-gpu"}, "spec": {"driver": "gpu.nvidia.com"}}


def nvidia_driver_review(new: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    """An NVIDIADriver (nvidia.com/v1alpha1) create or update, as the API server sends it."""
    named = [{"metadata": {"name": "default"}, **o} if o is not None else None for o in (new, old)]
    sent = review(
        "nvidiadrivers", "CREATE" if old is None else "UPDATE", *named, group="nvidia.com"
    )
    sent["resource"]["version"] = "v1alpha1"
    return sent


@pytest.mark.parametrize(
    ("change", "request_", "hooks"),
    [
        # nodes: GPU mode labels and scheduling changes are sent, the rest is not
        ("node without labels or spec", review("nodes", "UPDATE", node(), node()), set()),
        (
            "an unrelated node label",
            review("nodes", "UPDATE", node({"team": "a"}), node({"team": "b"})),
            set(),
        ),
        (
            "the workload label set",
            review("nodes", "UPDATE", node({WORKLOAD: "vm-passthrough"}), node()),
            {"nodes"},
        ),
        (
            "the workload label removed (the ClusterPolicy default applies)",
            review("nodes", "UPDATE", node({}), node(GPU_NODE)),
            {"nodes"},
        ),
        (
            "the workload label emptied",
            review("nodes", "UPDATE", node({WORKLOAD: ""}), node(GPU_NODE)),
            {"nodes"},
        ),
        (
            "the workload label set by the node's own kubelet",
            review(
                "nodes", "UPDATE", node({WORKLOAD: "vm-vgpu"}), node(), user="system:node:gpu-1"
            ),
            set(),
        ),
        (
            "the workload label set by another node's kubelet",
            review(
                "nodes", "UPDATE", node({WORKLOAD: "vm-vgpu"}), node(), user="system:node:gpu-2"
            ),
            {"nodes"},
        ),
        (
            "the workload label set as the node's kubelet name without the group system:nodes",
            review(
                "nodes",
                "UPDATE",
                node({WORKLOAD: "vm-vgpu"}),
                node(),
                user="system:node:gpu-1",
                groups=("system:masters",),
            ),
            {"nodes"},
        ),
        (
            "the workload label set through nodes/status",
            review(
                "nodes", "UPDATE", node({WORKLOAD: "vm-passthrough"}), node(), sub_resource="status"
            ),
            {"nodes"},
        ),
        (
            "the workload label removed through nodes/status",
            review("nodes", "UPDATE", node({}), node(GPU_NODE), sub_resource="status"),
            {"nodes"},
        ),
        (
            "a kubelet heartbeat through nodes/status",
            review(
                "nodes",
                "UPDATE",
                node(GPU_NODE),
                node(GPU_NODE),
                user="system:node:gpu-1",
                sub_resource="status",
            ),
            set(),
        ),
        (
            "a status write by an admin that leaves the GPU labels alone",
            review("nodes", "UPDATE", node(GPU_NODE), node(GPU_NODE), sub_resource="status"),
            set(),
        ),
        (
            "a node created with a GPU-mode label",
            review("nodes", "CREATE", node({WORKLOAD: "vm-passthrough"})),
            {"node-scheduling"},
        ),
        (
            "a node created unlabelled (it takes the ClusterPolicy's default mode)",
            review("nodes", "CREATE", node()),
            {"node-scheduling"},
        ),
        (
            "a node registered by its own kubelet",
            review("nodes", "CREATE", node(GPU_NODE), user="system:node:gpu-1"),
            set(),
        ),
        (
            "a node deleted",
            review("nodes", "DELETE", None, node(GPU_NODE)),
            {"node-scheduling"},
        ),
        (
            "the ClusterPolicy created",
            review("clusterpolicies", "CREATE", {"metadata": {"name": "c"}}, group="nvidia.com"),
            {"clusterpolicy-lifecycle"},
        ),
        (
            "the ClusterPolicy deleted",
            review(
                "clusterpolicies", "DELETE", None, {"metadata": {"name": "c"}}, group="nvidia.com"
            ),
            {"clusterpolicy-lifecycle"},
        ),
        (
            "the MIG configuration changed",
            review(
                "nodes",
                "UPDATE",
                node({"nvidia.com/mig.config": "all-1g.10gb"}),
                node({"nvidia.com/mig.config": "all-disabled"}),
            ),
            {"nodes"},
        ),
        (
            "the MIG manager's own state label",
            review(
                "nodes",
                "UPDATE",
                node({"nvidia.com/mig.config.state": "success"}),
                node({"nvidia.com/mig.config.state": "pending"}),
            ),
            set(),
        ),
        (
            "the vGPU profile changed",
            review(
                "nodes",
                "UPDATE",
                node({"nvidia.com/vgpu.config": "A10-4Q"}),
                node({"nvidia.com/vgpu.config": "A10-12Q"}),
            ),
            {"nodes"},
        ),
        (
            "the vGPU profile removed",
            review("nodes", "UPDATE", node({}), node({"nvidia.com/vgpu.config": "A10-12Q"})),
            {"nodes"},
        ),
        (
            "the vGPU Device Manager's own state label",
            review(
                "nodes",
                "UPDATE",
                node({"nvidia.com/vgpu.config.state": "success"}),
                node({"nvidia.com/vgpu.config.state": "pending"}),
            ),
            set(),
        ),
        (
            "the confidential computing mode changed",
            review(
                "nodes",
                "UPDATE",
                node({"nvidia.com/cc.mode": "off"}),
                node({"nvidia.com/cc.mode": "on"}),
            ),
            {"nodes"},
        ),
        (
            "the confidential computing mode removed (the ClusterPolicy default applies)",
            review("nodes", "UPDATE", node({}), node({"nvidia.com/cc.mode": "ppcie"})),
            {"nodes"},
        ),
        (
            "the CC manager's own state labels",
            review(
                "nodes",
                "UPDATE",
                node({"nvidia.com/cc.mode.state": "on", "nvidia.com/cc.ready.state": "true"}),
                node({"nvidia.com/cc.mode.state": "off", "nvidia.com/cc.ready.state": "false"}),
            ),
            set(),
        ),
        (
            "a label that only starts like the vGPU profile's",
            review(
                "nodes",
                "UPDATE",
                node({"nvidia.com/vgpu.config-backup": "A10-4Q"}),
                node({"nvidia.com/vgpu.config-backup": "A10-12Q"}),
            ),
            set(),
        ),
        (
            "an operand deploy label removed",
            review("nodes", "UPDATE", node({}), node({"nvidia.com/gpu.deploy.operands": "true"})),
            {"nodes"},
        ),
        (
            "unschedulable: false written out",
            review("nodes", "UPDATE", node(unschedulable=False), node()),
            set(),
        ),
        (
            "a cordon",
            review("nodes", "UPDATE", node(unschedulable=True), node()),
            {"node-scheduling"},
        ),
        (
            "a NoExecute taint from the node lifecycle controller",
            review("nodes", "UPDATE", node(taints=[{"key": "x", "effect": "NoExecute"}]), node()),
            {"node-scheduling"},
        ),
        ("a node deleted", review("nodes", "DELETE", None, node(GPU_NODE)), {"node-scheduling"}),
        # pods: only those that ask for NVIDIA resources
        ("a pod without GPUs", review("pods", "CREATE", pod(), namespace="ml"), set()),
        (
            "a pod with a GPU",
            review("pods", "CREATE", pod(cuda={"nvidia.com/gpu": "1"}), namespace="ml"),
            {"pods"},
        ),
        (
            "a pod with a MIG slice in an init container",
            review("pods", "CREATE", pod(init_x={"nvidia.com/mig-1g.10gb": "1"}), namespace="ml"),
            {"pods"},
        ),
        (
            "a GPU pod in kube-system",
            review("pods", "CREATE", pod(c={"nvidia.com/gpu": "1"}), namespace="kube-system"),
            set(),
        ),
        (
            "a GPU pod in the guard's own namespace",
            review("pods", "CREATE", pod(c={"nvidia.com/gpu": "1"}), namespace=NAMESPACE),
            set(),
        ),
        # pods with DRA claims: judged whether or not they ask for NVIDIA resources too
        ("a pod with a claim", review("pods", "CREATE", claim_pod("c"), namespace="ml"), {"pods"}),
        (
            "a pod with an empty resourceClaims list",
            review("pods", "CREATE", claim_pod(), namespace="ml"),
            set(),
        ),
        (
            "a pod with a claim in kube-system",
            review("pods", "CREATE", claim_pod("c"), namespace="kube-system"),
            set(),
        ),
        # claims and templates: an update only while the claim is unallocated
        (
            "a claim created",
            review("resourceclaims", "CREATE", resource_claim(), group=RESOURCE, namespace="ml"),
            {"claims"},
        ),
        (
            "a claim created by a kubelet",
            review(
                "resourceclaims",
                "CREATE",
                resource_claim(),
                group=RESOURCE,
                namespace="ml",
                user="system:node:omen2",
            ),
            set(),
        ),
        (
            "a claim created as a kubelet's name without the group system:nodes",
            review(
                "resourceclaims",
                "CREATE",
                resource_claim(),
                group=RESOURCE,
                namespace="ml",
                user="system:node:omen2",
                groups=("system:masters",),
            ),
            {"claims"},
        ),
        (
            "an unallocated claim updated",
            review(
                "resourceclaims",
                "UPDATE",
                resource_claim(),
                resource_claim(),
                group=RESOURCE,
                namespace="ml",
            ),
            {"claims"},
        ),
        (
            "an allocated claim's metadata updated (a controller's finalizer)",
            review(
                "resourceclaims",
                "UPDATE",
                resource_claim(allocated=True),
                resource_claim(allocated=True),
                group=RESOURCE,
                namespace="ml",
            ),
            set(),
        ),
        (
            "a namespace labelled for DRA admin access",
            review(
                "namespaces",
                "UPDATE",
                {
                    "metadata": {
                        "name": "m",
                        "labels": {"resource.kubernetes.io/admin-access": "true"},
                    }
                },
                {"metadata": {"name": "m"}},
            ),
            {"namespaces"},
        ),
        (
            "a namespace relabelled, admin access as it was",
            review(
                "namespaces",
                "UPDATE",
                {
                    "metadata": {
                        "name": "m",
                        "labels": {"resource.kubernetes.io/admin-access": "true", "a": "b"},
                    }
                },
                {
                    "metadata": {
                        "name": "m",
                        "labels": {"resource.kubernetes.io/admin-access": "true"},
                    }
                },
            ),
            set(),
        ),
        (
            "a NoExecute DeviceTaintRule created",
            review(
                "devicetaintrules",
                "CREATE",
                {"metadata": {"name": "r"}, "spec": {}},
                group=RESOURCE,
            ),
            {"devicetaintrules"},
        ),
        (
            "a DeviceTaintRule's labels changed, its spec as it was",
            review(
                "devicetaintrules",
                "UPDATE",
                {"metadata": {"name": "r", "labels": {"a": "b"}}, "spec": {"taint": {}}},
                {"metadata": {"name": "r"}, "spec": {"taint": {}}},
                group=RESOURCE,
            ),
            set(),
        ),
        (
            "a claim template updated",
            review(
                "resourceclaimtemplates",
                "UPDATE",
                {"metadata": {"name": "t"}, "spec": {"spec": {}}},
                {"metadata": {"name": "t"}, "spec": {"spec": {}}},
                group=RESOURCE,
                namespace="vms",
            ),
            {"claims"},
        ),
        (
            "a claim in the guard's own namespace",
            review(
                "resourceclaims", "CREATE", resource_claim(), group=RESOURCE, namespace=NAMESPACE
            ),
            set(),
        ),
        # device classes: created, or their selectors changed
        (
            "a device class created",
            review("deviceclasses", "CREATE", device_class(GPU_SELECTOR), group=RESOURCE),
            {"deviceclasses"},
        ),
        (
            "a device class's selectors changed",
            review(
                "deviceclasses",
                "UPDATE",
                device_class(GPU_SELECTOR, "device.attributes['gpu.nvidia.com'].type == 'gpu'"),
                device_class(GPU_SELECTOR),
                group=RESOURCE,
            ),
            {"deviceclasses"},
        ),
        (
            "a device class's extendedResourceName changed",
            review(
                "deviceclasses",
                "UPDATE",
                device_class(GPU_SELECTOR, extended="nvidia.com/gpu"),
                device_class(GPU_SELECTOR),
                group=RESOURCE,
            ),
            set(),
        ),
        # ResourceSlices: never, whoever writes them
        (
            "a kubelet plugin publishing its node's devices",
            review("resourceslices", "CREATE", A_SLICE, group=RESOURCE, user="system:node:omen2"),
            set(),
        ),
        (
            "a kubelet plugin republishing a pool",
            review(
                "resourceslices",
                "UPDATE",
                A_SLICE,
                A_SLICE,
                group=RESOURCE,
                user="system:node:omen2",
            ),
            set(),
        ),
        (
            "an admin deleting a slice",
            review("resourceslices", "DELETE", None, A_SLICE, group=RESOURCE),
            set(),
        ),
        # workload controllers: created, or their pod template changed
        (
            "a deployment created",
            review("deployments", "CREATE", deployment(), group="apps", namespace="ml"),
            {"workloads"},
        ),
        (
            "a deployment whose pod template changed",
            review(
                "deployments",
                "UPDATE",
                deployment("cuda:13"),
                deployment(),
                group="apps",
                namespace="ml",
            ),
            {"workloads"},
        ),
        (
            "a deployment scaled",
            review(
                "deployments",
                "UPDATE",
                deployment(replicas=3),
                deployment(),
                group="apps",
                namespace="ml",
            ),
            set(),
        ),
        (
            "the deployment controller's revision annotation",
            review(
                "deployments",
                "UPDATE",
                deployment(annotations={"deployment.kubernetes.io/revision": "2"}),
                deployment(),
                group="apps",
                namespace="ml",
            ),
            set(),
        ),
        (
            "a deployment in kube-system",
            review("deployments", "CREATE", deployment(), group="apps", namespace="kube-system"),
            set(),
        ),
        (
            "a cron job whose jobs' pod template changed",
            review(
                "cronjobs", "UPDATE", cron_job("cuda:13"), cron_job(), group="batch", namespace="ml"
            ),
            {"workloads"},
        ),
        (
            "a cron job rescheduled",
            review(
                "cronjobs",
                "UPDATE",
                cron_job(schedule="@hourly"),
                cron_job(),
                group="batch",
                namespace="ml",
            ),
            set(),
        ),
        # the ClusterPolicy: only sandboxWorkloads and ccManager
        (
            "sandbox workloads switched off",
            review(
                "clusterpolicies",
                "UPDATE",
                {"spec": {"sandboxWorkloads": {"enabled": False}}},
                {"spec": {"sandboxWorkloads": {"enabled": True}}},
                group="nvidia.com",
            ),
            {"clusterpolicy"},
        ),
        (
            "the sandbox workloads mode switched to kata",
            review(
                "clusterpolicies",
                "UPDATE",
                {"spec": {"sandboxWorkloads": {"enabled": True, "mode": "kata"}}},
                {"spec": {"sandboxWorkloads": {"enabled": True}}},
                group="nvidia.com",
            ),
            {"clusterpolicy"},
        ),
        (
            "the CC manager's default mode changed",
            review(
                "clusterpolicies",
                "UPDATE",
                {"spec": {"ccManager": {"enabled": True, "defaultMode": "off"}}},
                {"spec": {"ccManager": {"enabled": True, "defaultMode": "on"}}},
                group="nvidia.com",
            ),
            {"clusterpolicy"},
        ),
        (
            "the CC manager enabled",
            review(
                "clusterpolicies",
                "UPDATE",
                {"spec": {"ccManager": {"enabled": True}}},
                {"spec": {}},
                group="nvidia.com",
            ),
            {"clusterpolicy"},
        ),
        (
            "a new driver version: the Ignore entry of the upgrade's warning, never the Fail one",
            review(
                "clusterpolicies",
                "UPDATE",
                {"spec": {"driver": {"version": "2"}}},
                {"spec": {"driver": {"version": "1"}}},
                group="nvidia.com",
            ),
            {"clusterpolicy-driver"},
        ),
        *(
            (f"an NVIDIADriver {change}", nvidia_driver_review(new, old), hooks)
            for change, new, old, hooks in (
                ("created", {"spec": {"version": "1"}}, None, {"nvidiadriver"}),
                (
                    "version",
                    {"spec": {"version": "2"}},
                    {"spec": {"version": "1"}},
                    {"nvidiadriver"},
                ),
                ("image", {"spec": {"image": "b"}}, {"spec": {"image": "a"}}, {"nvidiadriver"}),
                (
                    "repository",
                    {"spec": {"repository": "b"}},
                    {"spec": {"repository": "a"}},
                    {"nvidiadriver"},
                ),
                (
                    "nodeSelector",
                    {"spec": {"nodeSelector": {"pool": "b"}}},
                    {"spec": {"nodeSelector": {"pool": "a"}}},
                    {"nvidiadriver"},
                ),
                (
                    "nodeSelector added",
                    {"spec": {"nodeSelector": {"p": "b"}}},
                    {"spec": {}},
                    {"nvidiadriver"},
                ),
                ("made the default", {"spec": {"default": True}}, {"spec": {}}, {"nvidiadriver"}),
                (
                    "upgradePolicy alone",
                    {"spec": {"version": "1", "upgradePolicy": {"maxParallelUpgrades": 2}}},
                    {"spec": {"version": "1"}},
                    set(),
                ),
                ("default false spelled out", {"spec": {"default": False}}, {"spec": {}}, set()),
                ("env alone", {"spec": {"env": [{"name": "A"}]}}, {"spec": {}}, set()),
            )
        ),
        (
            "the CC manager's image: not a mode",
            review(
                "clusterpolicies",
                "UPDATE",
                {"spec": {"ccManager": {"enabled": True, "version": "v0.2.0"}}},
                {"spec": {"ccManager": {"enabled": True, "version": "v0.1.0"}}},
                group="nvidia.com",
            ),
            set(),
        ),
        (
            "the driver's upgrade policy alone: no upgrade starts",
            review(
                "clusterpolicies",
                "UPDATE",
                {"spec": {"driver": {"version": "1", "upgradePolicy": {"maxParallelUpgrades": 2}}}},
                {"spec": {"driver": {"version": "1"}}},
                group="nvidia.com",
            ),
            set(),
        ),
        (
            "another ClusterPolicy setting",
            review(
                "clusterpolicies",
                "UPDATE",
                {"spec": {"dcgmExporter": {"version": "2"}}},
                {"spec": {"dcgmExporter": {"version": "1"}}},
                group="nvidia.com",
            ),
            set(),
        ),
        # the KubeVirt CR: only its configuration
        (
            "a KubeVirt CR whose configuration changed",
            review(
                "kubevirts",
                "UPDATE",
                {"spec": {"configuration": {"permittedHostDevices": {}}}},
                {"spec": {"configuration": {}}},
                group="kubevirt.io",
                namespace="kubevirt",
            ),
            {"kubevirt"},
        ),
        (
            "virt-operator touching the KubeVirt CR's metadata",
            review(
                "kubevirts",
                "UPDATE",
                {"metadata": {"finalizers": ["x"]}, "spec": {}},
                {"metadata": {}, "spec": {}},
                group="kubevirt.io",
                namespace="kubevirt",
            ),
            set(),
        ),
        # VirtualMachines: every create and update; through virtualmachines/status only a write
        # that adds a Start entry (virtctl start through virt-api)
        (
            "a VM updated",
            review("virtualmachines", "UPDATE", vm_object(), vm_object(), **VMS),
            {"vms"},
        ),
        (
            "virtctl start of a Manual VM (virt-api adds a Start entry)",
            review("virtualmachines", "UPDATE", vm_object("Start"), vm_object(), **VM_STATUS),
            {"vms"},
        ),
        (
            "virtctl start of a Manual VM whose VMI finished (Stop, then Start)",
            review(
                "virtualmachines", "UPDATE", vm_object("Stop", "Start"), vm_object(), **VM_STATUS
            ),
            {"vms"},
        ),
        (
            "virtctl start of a VM that never had a status (the whole status added)",
            review("virtualmachines", "UPDATE", vm_object("Start"), NO_STATUS_VM, **VM_STATUS),
            {"vms"},
        ),
        (
            "virt-controller removing the Start entry it acted on",
            review("virtualmachines", "UPDATE", vm_object(), vm_object("Start"), **VM_STATUS),
            set(),
        ),
        (
            "virt-controller writing printableStatus with a Start entry still pending",
            review(
                "virtualmachines",
                "UPDATE",
                vm_object("Start", printable="Starting"),
                vm_object("Start"),
                **VM_STATUS,
            ),
            set(),
        ),
        (
            "virtctl stop (a Stop entry)",
            review("virtualmachines", "UPDATE", vm_object("Stop"), vm_object(), **VM_STATUS),
            set(),
        ),
        # A GPU user's phase moved to Succeeded or Failed: sent unless what runs it writes it
        (
            "a pod marked Succeeded through pods/status by an admin",
            review("pods", "UPDATE", bound_pod("Succeeded"), bound_pod(), **POD_STATUS),
            {"gpu-users-finished"},
        ),
        (
            "a pod ended by its own kubelet",
            review("pods", "UPDATE", bound_pod("Failed"), bound_pod(), **POD_STATUS, user=KUBELET),
            set(),
        ),
        (
            "a pod ended by another node's kubelet",
            review(
                "pods",
                "UPDATE",
                bound_pod("Failed"),
                bound_pod(),
                **POD_STATUS,
                user="system:node:gpu-2",
            ),
            {"gpu-users-finished"},
        ),
        (
            "a pod failed by the pod garbage collector",
            review("pods", "UPDATE", bound_pod("Failed"), bound_pod(), **POD_STATUS, user=POD_GC),
            set(),
        ),
        (
            "the pod garbage collector's name without its group",
            review(
                "pods",
                "UPDATE",
                bound_pod("Failed"),
                bound_pod(),
                **POD_STATUS,
                user=POD_GC,
                groups=("system:masters",),
            ),
            {"gpu-users-finished"},
        ),
        (
            "a pod failed by kube-controller-manager",
            review(
                "pods",
                "UPDATE",
                bound_pod("Failed"),
                bound_pod(),
                **POD_STATUS,
                user="system:kube-controller-manager",
            ),
            set(),
        ),
        (
            "a kubelet's status write that leaves the phase alone (an admin's too)",
            review("pods", "UPDATE", bound_pod(), bound_pod("Pending"), **POD_STATUS),
            set(),
        ),
        (
            "a finished pod's status written again",
            review("pods", "UPDATE", bound_pod("Failed"), bound_pod("Succeeded"), **POD_STATUS),
            set(),
        ),
        (
            "a VMI marked Succeeded by a namespace editor",
            review(
                "virtualmachineinstances",
                "UPDATE",
                vmi_object("Succeeded"),
                vmi_object(),
                **VMS,
                user="dev",
            ),
            {"gpu-users-finished"},
        ),
        (
            "a VMI ended by virt-handler",
            review(
                "virtualmachineinstances",
                "UPDATE",
                vmi_object("Succeeded"),
                vmi_object(),
                **VMS,
                user="system:serviceaccount:kubevirt:kubevirt-handler",
            ),
            set(),
        ),
        (
            "a VMI ended by virt-controller on OpenShift",
            review(
                "virtualmachineinstances",
                "UPDATE",
                vmi_object("Failed"),
                vmi_object(),
                **VMS,
                user="system:serviceaccount:openshift-cnv:kubevirt-controller",
            ),
            set(),
        ),
        (
            "a ServiceAccount named kubevirt-handler in a namespace KubeVirt does not run in",
            review(
                "virtualmachineinstances",
                "UPDATE",
                vmi_object("Failed"),
                vmi_object(),
                **VMS,
                user="system:serviceaccount:vms:kubevirt-handler",
            ),
            {"gpu-users-finished"},
        ),
        (
            "virt-handler's status traffic on a running VMI",
            review(
                "virtualmachineinstances",
                "UPDATE",
                vmi_object(),
                vmi_object("Scheduled"),
                **VMS,
                user="system:serviceaccount:kubevirt:kubevirt-handler",
            ),
            set(),
        ),
        # OpenShift Virtualization: the HyperConverged whole; HCO's own KubeVirt writes never
        (
            "a HyperConverged updated (its translation reads spec and an annotation)",
            review(
                "hyperconvergeds",
                "UPDATE",
                {"metadata": {"annotations": {"kubevirt.kubevirt.io/jsonpatch": "[]"}}},
                {"metadata": {}},
                group="hco.kubevirt.io",
                namespace="openshift-cnv",
            ),
            {"kubevirt"},
        ),
        (
            "HCO's ServiceAccount writing the KubeVirt CR's configuration",
            review(
                "kubevirts",
                "UPDATE",
                {"spec": {"configuration": {"permittedHostDevices": {}}}},
                {"spec": {"configuration": {}}},
                group="kubevirt.io",
                namespace="openshift-cnv",
                user="system:serviceaccount:openshift-cnv:hyperconverged-cluster-operator",
                name=HCO_KUBEVIRT,
            ),
            set(),
        ),
        (
            "HCO's ServiceAccount writing another KubeVirt CR",
            review(
                "kubevirts",
                "UPDATE",
                {"spec": {"configuration": {"permittedHostDevices": {}}}},
                {"spec": {"configuration": {}}},
                group="kubevirt.io",
                namespace="openshift-cnv",
                user="system:serviceaccount:openshift-cnv:hyperconverged-cluster-operator",
                name="kubevirt",
            ),
            {"kubevirt"},
        ),
        (
            "HCO's username without its ServiceAccount group",
            review(
                "kubevirts",
                "UPDATE",
                {"spec": {"configuration": {"permittedHostDevices": {}}}},
                {"spec": {"configuration": {}}},
                group="kubevirt.io",
                namespace="openshift-cnv",
                user="system:serviceaccount:openshift-cnv:hyperconverged-cluster-operator",
                groups=("system:masters",),
                name=HCO_KUBEVIRT,
            ),
            {"kubevirt"},
        ),
        (
            "HCO's ServiceAccount creating the KubeVirt CR upstream",
            review(
                "kubevirts",
                "CREATE",
                {"spec": {"configuration": {}}},
                group="kubevirt.io",
                namespace="kubevirt-hyperconverged",
                user="system:serviceaccount:kubevirt-hyperconverged:hyperconverged-cluster-operator",
                name=HCO_KUBEVIRT,
            ),
            set(),
        ),
        (
            "an admin editing HCO's KubeVirt CR directly",
            review(
                "kubevirts",
                "UPDATE",
                {"spec": {"configuration": {"evictionStrategy": "LiveMigrate"}}},
                {"spec": {"configuration": {}}},
                group="kubevirt.io",
                namespace="openshift-cnv",
            ),
            {"kubevirt"},
        ),
        (
            "a ServiceAccount of the same name in another namespace",
            review(
                "kubevirts",
                "UPDATE",
                {"spec": {"configuration": {"permittedHostDevices": {}}}},
                {"spec": {"configuration": {}}},
                group="kubevirt.io",
                namespace="openshift-cnv",
                user="system:serviceaccount:default:hyperconverged-cluster-operator",
            ),
            {"kubevirt"},
        ),
    ],
)
def test_match_conditions_send_only_the_changes_a_policy_looks_at(
    change: str, request_: dict[str, Any], hooks: set[str]
) -> None:
    validating = webhooks(rendered("base"), "ValidatingWebhookConfiguration")
    assert routed(validating, request_) == hooks, change


# The API server's routing of every recorded review (tests/fixtures): which webhooks it would
# call with these manifests. A new fixture, rule or condition must say where its requests go.
VALIDATE_ROUTES = {
    "002": {"node-scheduling"},  # an admin creates a node: judged against pods bound to its name
    "004": set(),  # nodes/status patched by an admin: no GPU-mode label changes
    "006": set(),  # its own kubelet's status traffic
    "008": {"pods"},  # a pod with limits nvidia.com/gpu: 1
    "010": {"nodes"},  # kubectl label ... vm-passthrough --dry-run=server
    "012": {"nodes"},  # the same, for real
    "014": {"nodes"},  # the GPU Operator sets gpu.deploy.vfio-manager (the recovery trap)
    "016": {"node-scheduling"},  # drain: the cordon
    "018": set(),  # drain: pods/eviction
    "020": {"node-scheduling"},  # uncordon
    "022": {"node-scheduling"},  # cordon
    "024": {"node-scheduling"},  # taint
    "026": {"nodes"},  # the workload label removed
    "028": {"kubevirt"},
    "030": {"kubevirt"},
    "032": {"vms"},
    "034": {"vms"},
    "036": {"vms"},
    "038": {"vms"},
    "040": {"clusterpolicy-lifecycle"},  # ClusterPolicy create
    "042": {"clusterpolicy"},  # a patch turning sandboxWorkloads off
    "044": {"vms"},
    "046": {"vms"},
    "048": {"nodes"},
    **{f"{n:03d}": set() for n in range(50, 65, 2)},  # deletes ...
    "056": {"node-scheduling"},  # ... but of a node (it may be a sole provider) ...
    "064": {"clusterpolicy-lifecycle"},  # ... or of the ClusterPolicy
}
MUTATE_ROUTES = {
    f"{n:03d}": {"vms"} if n in (31, 33, 35, 37, 43, 45) else set() for n in range(1, 65, 2)
}


def test_the_api_server_sends_each_recorded_review_to_the_expected_webhooks() -> None:
    cel_program("true")  # skips without cel-python
    directory = FIXTURES / "admission-reviews"
    files = sorted(directory.glob("*.json"))
    if not files:
        fixtures_missing(str(directory))
    objects = rendered("base")
    seen = set()
    for path in files:
        number, endpoint = path.name.split("-")[:2]
        kind, routes = {
            "validate": ("ValidatingWebhookConfiguration", VALIDATE_ROUTES),
            "mutate": ("MutatingWebhookConfiguration", MUTATE_ROUTES),
        }[endpoint]
        assert number in routes, f"{path.name}: say which webhooks it reaches"
        request = json.loads(path.read_bytes())["request"]
        assert routed(webhooks(objects, kind), request) == routes[number], path.name
        seen.add(number)
    assert seen == set(VALIDATE_ROUTES) | set(MUTATE_ROUTES)


# The DRA recordings (tests/fixtures/dra): what reaches the guard of a cluster using DRA.
DRA_VALIDATE_ROUTES = {
    "001": {"node-scheduling"},  # omen2 joins, created by an admin
    "002": {"node-scheduling"},  # tower1 joins, likewise
    "003": {"nodes"},  # tower1 labelled vm-passthrough
    "004": {"deviceclasses"},
    "005": {"deviceclasses"},
    "006": {"deviceclasses"},
    "007": set(),  # ResourceSlices: no policy judges them
    "008": set(),
    "009": {"claims"},
    "010": {"claims"},  # a template
    "011": {"claims"},  # a template with firstAvailable
    "012": {"pods"},  # a pod using a claim, no GPU limits
    "013": {"pods"},  # a pod asking nvidia.com/gpu, which a DeviceClass may serve
    "014": {"claims"},
    "015": set(),  # the allocation, written through resourceclaims/status
    "016": {"kubevirt"},
    "017": {"vms"},  # a VM whose GPU comes from a template
    "018": {"vms"},  # a VMI whose host device comes from a claim
    "019": {"nodes"},  # omen2 relabelled vm-passthrough under the pod's claim
    "020": set(),  # the driver republishing omen2's pool
    "021": set(),  # a slice deleted
}


def test_the_api_server_sends_each_recorded_dra_review_to_the_expected_webhooks() -> None:
    cel_program("true")  # skips without cel-python
    directory = FIXTURES / "dra" / "admission-reviews"
    files = sorted(directory.glob("*-validate-*.json"))
    if not files:
        fixtures_missing(str(directory))
    validating = webhooks(rendered("base"), "ValidatingWebhookConfiguration")
    seen = set()
    for path in files:
        number = path.name.split("-")[0]
        assert number in DRA_VALIDATE_ROUTES, f"{path.name}: say which webhooks it reaches"
        request = json.loads(path.read_bytes())["request"]
        assert routed(validating, request) == DRA_VALIDATE_ROUTES[number], path.name
        seen.add(number)
    assert seen == set(DRA_VALIDATE_ROUTES)


def test_no_webhook_is_sent_resource_slices() -> None:
    """The DRA drivers' kubelet plugins write them all the time, and no policy judges them."""
    sent = sent_operations(all_webhooks(rendered("base")))
    assert not {(g, r) for g, r, _ in sent if r == "resourceslices"}


# --- webhooks: each policy's samples reach it, and the comments name who judges ----------------

#: A word shaped like a policy, diagnosis or mutation id: three or more kebab-case parts.
ID_SHAPED = re.compile(r"(?<![\w./-])[a-z0-9]+(?:-[a-z0-9]+){2,}(?![\w/-])")
KNOWN_IDS = {p.id for p in ALL_POLICIES} | {m.id for m in ALL_MUTATIONS}


def webhook_comments() -> dict[str, str]:
    """The comment block directly above each webhook entry of base/webhooks.yaml, by name."""
    comments: dict[str, str] = {}
    block: list[str] = []
    for line in (MANIFESTS / "base" / "webhooks.yaml").read_text().splitlines():
        text = line.strip()
        if text.startswith("#"):
            block.append(text.lstrip("#").strip())
            continue
        name = text.removeprefix("- name:").strip()
        if text.startswith("- name:") and name.endswith(".gpu-guard.io"):
            comments[name] = " ".join(block)
        block = []
    return comments


def named_policies(comment: str) -> set[str]:
    return {word for word in ID_SHAPED.findall(comment) if word in KNOWN_IDS}


def test_each_validating_webhooks_comment_names_only_ids_that_exist_and_policies_it_feeds() -> None:
    comments = webhook_comments()
    hooks = webhooks(rendered("base"), "ValidatingWebhookConfiguration")
    assert set(comments) == {hook["name"] for hook in all_webhooks(rendered("base"))}
    for hook in hooks:
        comment = comments[hook["name"]]
        unknown = set(ID_SHAPED.findall(comment)) - KNOWN_IDS
        assert not unknown, f"{hook['name']}: its comment names unknown ids {sorted(unknown)}"
        sent = sent_operations([hook])
        fed = {p.id for p in ALL_POLICIES if operations_of([p.scope]) & sent}
        named = named_policies(comment)
        assert named, f"{hook['name']}: say beside it which policies judge what it sends"
        assert named <= fed, f"{hook['name']} sends nothing {sorted(named - fed)} judge"


def test_every_policy_named_with_an_action_beside_a_webhook_has_that_default_action() -> None:
    policies = {p.id: p for p in ALL_POLICIES}
    pairs = [
        pair
        for comment in webhook_comments().values()
        for pair in re.findall(r"([a-z0-9-]+) \((deny|warn|audit|off)\)", comment)
    ]
    assert pairs
    for policy_id, action in pairs:
        assert policy_id in policies, f"webhooks.yaml names {policy_id}, which is not registered"
        assert policies[policy_id].default_action.label == action, policy_id


@pytest.mark.parametrize("sample", all_samples(DISALLOWED), ids=lambda s: s.name)
def test_the_api_server_sends_each_disallowed_sample_to_a_webhook_that_names_its_policy(
    sample: Sample,
) -> None:
    """Rules, namespaceSelector and CEL matchConditions together let through what each policy
    catches: a condition that filtered out a policy's hazard would fail here."""
    cel_program("true")  # skips without cel-python
    comments = webhook_comments()
    validating = webhooks(rendered("base"), "ValidatingWebhookConfiguration")
    for request in sample.requests():
        reached = {
            hook["name"]
            for hook in validating
            if hook["name"].split(".")[0] in routed([hook], as_sent(request))
        }
        assert reached, f"{sample.name}: no webhook sends it"
        naming = {name for name in reached if sample.policy_id in named_policies(comments[name])}
        assert naming, f"{sample.name} reaches {sorted(reached)}, whose comments omit its policy"


AUDIT_NOW = datetime(2026, 10, 30, 12, 0, tzinfo=UTC)


def test_audit_mode_keeps_its_promise_on_every_sample_and_recorded_review() -> None:
    """The audit overlay promises that nothing is denied or warned about: run the engine with
    its configuration on every change the policies flag, not only read the file."""
    engine = Engine(parse_config(guard_config(rendered("overlays/audit")), "guard.yaml"))
    judged = 0
    for sample in all_samples(DISALLOWED):
        view = load_state(sample.state_args)
        for request in sample.requests():
            decision = engine.evaluate(request, view)
            assert decision.allowed and not decision.warnings, sample.name
            assert {v.action for v in decision.verdicts} == {Action.AUDIT}, sample.name
            judged += 1
        audited = engine.audit(view, AUDIT_NOW).findings  # the policies' verdicts among them
        actions = {f.verdict.action for f in audited if f.verdict.policy in POLICIES_BY_ID}
        assert actions <= {Action.AUDIT}, sample.name
    directory = FIXTURES / "admission-reviews"
    recorded = sorted(directory.glob("*-validate-*.json"))
    if not recorded:
        fixtures_missing(str(directory))
    homelab = load_state([str(ROOT / "examples" / "homelab" / "cluster.yaml")])
    for path in recorded:
        decision = engine.evaluate(parse_review(path.read_bytes()), homelab)
        assert decision.allowed and not decision.warnings, path.name
    assert judged >= len(ALL_POLICIES)


# --- webhooks: failure policies ------------------------------------------------------------------

#: The decision per webhook (the reasons sit beside each failurePolicy in webhooks.yaml).
FAILURE_POLICIES = {
    "nodes.validate.gpu-guard.io": "Ignore",  # the record policy holds with the guard down
    "node-scheduling.validate.gpu-guard.io": "Ignore",
    "vms.validate.gpu-guard.io": "Ignore",
    "kubevirt.validate.gpu-guard.io": "Ignore",
    "clusterpolicy.validate.gpu-guard.io": "Fail",
    "pods.validate.gpu-guard.io": "Ignore",
    "workloads.validate.gpu-guard.io": "Ignore",
    "claims.validate.gpu-guard.io": "Ignore",
    "deviceclasses.validate.gpu-guard.io": "Ignore",
    "clusterpolicy-driver.validate.gpu-guard.io": "Ignore",
    "nvidiadriver.validate.gpu-guard.io": "Ignore",
    "gpucluster.validate.gpu-guard.io": "Ignore",
    "devicetaintrules.validate.gpu-guard.io": "Ignore",
    "namespaces.validate.gpu-guard.io": "Ignore",
    "clusterpolicy-lifecycle.validate.gpu-guard.io": "Ignore",
    "gpu-users-finished.validate.gpu-guard.io": "Ignore",  # as the GPU-mode denies it protects
    "vms.mutate.gpu-guard.io": "Ignore",
}


@pytest.mark.parametrize("kustomization", ENFORCING)
def test_enforcing_installs_keep_the_decided_failure_policy_per_webhook(
    kustomization: str,
) -> None:
    hooks = all_webhooks(rendered(kustomization))
    assert {hook["name"]: hook["failurePolicy"] for hook in hooks} == FAILURE_POLICIES


def test_every_failure_policy_states_its_reason_beside_it() -> None:
    lines = (MANIFESTS / "base" / "webhooks.yaml").read_text().splitlines()
    decided = [line for line in lines if line.strip().startswith("failurePolicy:")]
    assert len(decided) == len(FAILURE_POLICIES)
    for line in decided:
        _, _, reason = line.partition("#")
        assert len(reason.split()) >= 8, f"say why, beside it: {line.strip()}"


def test_a_fail_closed_webhook_judges_only_what_a_deny_policy_guards() -> None:
    deny_scopes = operations_of([p.scope for p in ALL_POLICIES if p.default_action is Action.DENY])
    fail_closed = [h for h in all_webhooks(rendered("base")) if h["failurePolicy"] == "Fail"]
    for hook in fail_closed:
        assert sent_operations([hook]) <= deny_scopes, hook["name"]


def test_overlays_change_webhooks_only_in_failure_policy_and_annotations() -> None:
    def shape(kustomization: str) -> list[Resource]:
        configurations = [o for o in rendered(kustomization) if o["kind"] in WEBHOOK_KINDS]
        for configuration in configurations:
            configuration["metadata"].pop("annotations", None)
            for hook in configuration["webhooks"]:
                hook.pop("failurePolicy")
        return configurations

    for overlay in KUSTOMIZATIONS:
        assert shape(overlay) == shape("base"), overlay


# --- RBAC ----------------------------------------------------------------------------------------

ROLE_KINDS = ("ClusterRole", "Role")


def guard_namespace(objects: list[Resource]) -> str:
    """The namespace of the guard's ServiceAccount (each rendering's own is checked above)."""
    namespace: str = one(objects, "ServiceAccount", SERVICE_ACCOUNT)["metadata"]["namespace"]
    return namespace


def bound_roles(objects: list[Resource]) -> list[Resource]:
    """Every Role and ClusterRole, each checked to be bound to the guard and nothing else."""
    roles = [o for o in objects if o["kind"] in ROLE_KINDS]
    bindings = [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    namespace = guard_namespace(objects)
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}
        ], binding["metadata"]["name"]
    bound = {
        (b["roleRef"]["kind"], b["roleRef"]["name"], b["metadata"].get("namespace"))
        for b in bindings
    }
    for role in roles:
        key = (role["kind"], role["metadata"]["name"], role["metadata"].get("namespace"))
        assert key in bound, f"{key}: not bound to the guard's service account"
    assert len(bindings) == len(roles)
    return roles


def grants(objects: list[Resource]) -> list[tuple[str, str, str, str, tuple[str, ...]]]:
    """(role kind, verb, group, resource, resourceNames) for every permission granted."""
    return [
        (role["kind"], verb, group, resource, tuple(rule.get("resourceNames", ())))
        for role in bound_roles(objects)
        for rule in role["rules"]
        for verb in rule["verbs"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    ]


def test_the_guard_reads_exactly_the_kinds_its_live_state_watches(
    objects: list[Resource],
) -> None:
    granted = grants(objects)
    for group, resource in WATCHED:
        verbs = {verb for _, verb, g, r, _ in granted if (g, r) == (group, resource)}
        assert verbs == {"get", "list", "watch"}, f"{group}/{resource}: {sorted(verbs)}"
    watched_anywhere = {(g, r) for _, verb, g, r, _ in granted if verb == "watch"}
    assert watched_anywhere == set(WATCHED), "RBAC and policies/cluster/kinds.py WATCHED disagree"
    for kind, verb, group, resource, names in granted:
        if (group, resource) in WATCHED:
            # Cluster-wide and unnamed: the watches cover every namespace and every object.
            assert kind == "ClusterRole" and not names, (verb, group, resource)


def test_no_permission_uses_a_wildcard(objects: list[Resource]) -> None:
    for role in bound_roles(objects):
        for rule in role["rules"]:
            for field in ("verbs", "apiGroups", "resources", "resourceNames"):
                assert not any("*" in value for value in rule.get(field, [])), (role, field)
            assert "nonResourceURLs" not in rule


#: Every permission outside the watched kinds, and why it is there.
PURPOSES: dict[tuple[str, str], set[str]] = {
    # the audit reports feature: OpenReports or Policy WG reports (--report-format), updated in
    # place; the background audit deletes its own namespaced report where nothing is audited any
    # more, and all of its reports in the format it does not write (audit/publish.py)
    ("wgpolicyk8s.io", "policyreports"): {"create", "get", "update", "patch", "list", "delete"},
    ("wgpolicyk8s.io", "clusterpolicyreports"): {
        "create",
        "get",
        "update",
        "patch",
        "list",
        "delete",
    },
    ("openreports.io", "reports"): {"create", "get", "update", "patch", "list", "delete"},
    ("openreports.io", "clusterreports"): {"create", "get", "update", "patch", "list", "delete"},
    # --manage-certs: the caBundle of the guard's own two configurations
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): {"get", "update", "patch"},
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): {"get", "update", "patch"},
    # --manage-certs: the TLS Secret
    ("", "secrets"): {"create", "get", "update", "patch"},
    # --leader-elect: the one Lease that picks the replica that audits and writes reports
    ("coordination.k8s.io", "leases"): {"create", "get", "update"},
    # the audit leader: the record the API server's own policy reads (manifests/base/record.yaml)
    ("", "configmaps"): {"get", "update"},
}


def test_every_other_permission_has_a_stated_purpose(objects: list[Resource]) -> None:
    for _, verb, group, resource, _ in grants(objects):
        if (group, resource) not in WATCHED:
            assert verb in PURPOSES.get((group, resource), set()), (verb, group, resource)


def test_secrets_are_reachable_only_by_name_in_the_guards_namespace(
    objects: list[Resource],
) -> None:
    for kind, verb, group, resource, names in grants(objects):
        if (group, resource) != ("", "secrets"):
            continue
        assert kind == "Role", "no Secret access cluster-wide"
        if verb == "create":
            # Kubernetes cannot limit create by name; the Role confines it to gpu-guard.
            assert names == ()
        else:
            assert names == (TLS_SECRET,), verb
    for role in of_kind(objects, "Role"):
        assert role["metadata"]["namespace"] == guard_namespace(objects)


def test_configmaps_are_writable_only_by_name_the_record_in_the_guards_namespace(
    objects: list[Resource],
) -> None:
    from policies.cluster.record import RECORD_NAME

    granted = [g for g in grants(objects) if (g[2], g[3]) == ("", "configmaps")]
    for kind, verb, _, _, names in granted:
        assert (kind, names) == ("Role", (RECORD_NAME,)), verb
    records = [c for c in of_kind(objects, "ConfigMap") if c["metadata"]["name"] == RECORD_NAME]
    if granted:  # declared beside its right, and without data a re-apply would reset
        assert len(records) == 1 and "data" not in records[0]


def test_webhook_configuration_rights_cover_only_the_guards_own(objects: list[Resource]) -> None:
    for _, verb, group, resource, names in grants(objects):
        if group == "admissionregistration.k8s.io":
            assert names == (WEBHOOK_CONFIGURATION,), (verb, resource)


def test_the_lease_is_reachable_only_by_name_in_the_guards_namespace(
    objects: list[Resource],
) -> None:
    lease = parsed_args(objects).leader_election_lease_name
    granted = [g for g in grants(objects) if g[2:4] == ("coordination.k8s.io", "leases")]
    if not parsed_args(objects).leader_elect:
        assert not granted, "no election, no Lease rights"
        return
    assert {verb for _, verb, _, _, _ in granted} == {"create", "get", "update"}
    for kind, verb, _, _, names in granted:
        assert kind == "Role", "no Lease access cluster-wide"
        # Kubernetes cannot limit create by name; the Role confines it to gpu-guard.
        assert names == (() if verb == "create" else (lease,)), verb


def test_the_replicas_elect_one_audit_writer_named_after_their_pods(
    source: Source, objects: list[Resource]
) -> None:
    args = parsed_args(objects)
    assert one(objects, "Deployment")["spec"]["replicas"] == source.replicas
    if source.replicas > 1:
        assert args.leader_elect, "two replicas would both audit and both write the reports"
    assert args.leader_election_namespace is None, "the Lease lives in the pod's own namespace"
    assert args.leader_election_identity is None, "the identity is the pod's name"
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container(objects)["env"]}
    assert env["POD_NAME"] == "metadata.name"
    assert env["POD_NAMESPACE"] == "metadata.namespace"


# --- the Deployment ------------------------------------------------------------------------------


def parsed_args(objects: list[Resource]) -> Any:
    try:
        return build_parser().parse_args(container(objects)["args"])
    except SystemExit:
        pytest.fail(f"gpu-guard rejects the container args: {container(objects)['args']}")


def test_the_container_args_parse_with_the_real_command_line(objects: list[Resource]) -> None:
    args = parsed_args(objects)
    assert args.command == "serve"
    assert args.state is None, "in the cluster the guard reads the live state"
    assert args.port == container(objects)["ports"][0]["containerPort"] == 8443
    mounts = {m["name"]: m["mountPath"] for m in container(objects)["volumeMounts"]}
    assert args.config == f"{mounts['config']}/guard.yaml"
    assert (args.tls_cert, args.tls_key) == (f"{mounts['tls']}/tls.crt", f"{mounts['tls']}/tls.key")


def test_certificates_come_from_exactly_one_source(objects: list[Resource]) -> None:
    """Either the guard manages them (--manage-certs, an emptyDir, its RBAC) or cert-manager
    does (its Certificate, the Secret mounted read-only, no certificate RBAC at all)."""
    args = parsed_args(objects)
    volumes = {v["name"]: v for v in pod_spec(objects)["volumes"]}
    mounts = {m["name"]: m for m in container(objects)["volumeMounts"]}
    certificate_rbac = any(
        resource == "secrets" or group == "admissionregistration.k8s.io"
        for _, _, group, resource, _ in grants(objects)
    )
    certificates = of_kind(objects, "Certificate")
    if args.manage_certs:
        assert "emptyDir" in volumes["tls"] and not certificates and certificate_rbac
        assert (args.tls_secret, args.webhook_configuration) == (TLS_SECRET, WEBHOOK_CONFIGURATION)
        assert args.service == one(objects, "Service")["metadata"]["name"]
    else:
        assert volumes["tls"]["secret"]["secretName"] == TLS_SECRET
        assert mounts["tls"]["readOnly"] is True and not certificate_rbac
        serving = [c for c in certificates if c["spec"]["secretName"] == TLS_SECRET]
        assert len(serving) == 1
        meta = serving[0]["metadata"]
        annotation = f"{meta['namespace']}/{meta['name']}"
        for kind in WEBHOOK_KINDS:
            annotations = one(objects, kind)["metadata"].get("annotations", {})
            assert annotations.get("cert-manager.io/inject-ca-from") == annotation, kind


def test_cert_manager_certifies_every_name_the_service_answers_to() -> None:
    objects = rendered("overlays/cert-manager")
    serving = one(objects, "Certificate", "gpu-guard")
    assert serving["spec"]["dnsNames"] == [
        "gpu-guard",
        "gpu-guard.gpu-guard",
        "gpu-guard.gpu-guard.svc",
    ]
    issuer = one(objects, "Issuer", serving["spec"]["issuerRef"]["name"])
    ca = one(objects, "Certificate", issuer["spec"]["ca"]["secretName"])
    assert ca["spec"]["isCA"] is True
    assert one(objects, "Issuer", ca["spec"]["issuerRef"]["name"])["spec"] == {"selfSigned": {}}


@pytest.mark.parametrize(
    ("where", "path", "expected"),
    [
        ("pod", ("runAsNonRoot",), True),
        ("pod", ("runAsUser",), 65532),
        ("pod", ("seccompProfile", "type"), "RuntimeDefault"),
        ("container", ("runAsNonRoot",), True),
        ("container", ("runAsUser",), 65532),
        ("container", ("readOnlyRootFilesystem",), True),
        ("container", ("allowPrivilegeEscalation",), False),
        ("container", ("capabilities", "drop"), ["ALL"]),
        ("container", ("seccompProfile", "type"), "RuntimeDefault"),
    ],
)
def test_the_pod_runs_restricted(
    objects: list[Resource], where: str, path: tuple[str, ...], expected: Any
) -> None:
    context = (pod_spec(objects) if where == "pod" else container(objects))["securityContext"]
    for key in path:
        context = context[key]
    assert context == expected
    assert "add" not in container(objects)["securityContext"]["capabilities"]
    assert not pod_spec(objects).get("hostNetwork") and not pod_spec(objects).get("hostPID")


@pytest.mark.parametrize(
    ("probe", "path"), [("readinessProbe", READYZ_PATH), ("livenessProbe", HEALTHZ_PATH)]
)
def test_probes_ask_the_server_over_https_on_its_serving_port(
    objects: list[Resource], probe: str, path: str
) -> None:
    get = container(objects)[probe]["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in container(objects)["ports"]}
    assert (get["scheme"], get["path"]) == ("HTTPS", path)
    assert ports.get(get["port"], get["port"]) == parsed_args(objects).port
    assert ("GET", path) in served_routes()


def test_the_replicas_spread_across_nodes_with_a_disruption_budget(
    source: Source, objects: list[Resource]
) -> None:
    deployment = one(objects, "Deployment", "gpu-guard")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["replicas"] == source.replicas
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    service = one(objects, "Service", "gpu-guard")
    assert service["spec"]["selector"].items() <= labels.items()
    if source.replicas == 1:
        # A budget of one available pod out of one would block every node drain.
        assert not of_kind(objects, "PodDisruptionBudget")
        return
    budget = one(objects, "PodDisruptionBudget", "gpu-guard")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    spread = pod_spec(objects).get("affinity", {}).get("podAntiAffinity")
    if spread is None:  # the chart's topologySpreadConstraints instead of the anti-affinity
        (by_node,) = [
            c
            for c in pod_spec(objects)["topologySpreadConstraints"]
            if c["topologyKey"] == "kubernetes.io/hostname"
        ]
        assert by_node["labelSelector"]["matchLabels"].items() <= labels.items()
        return
    (term,) = spread["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()


def test_the_container_requests_and_limits_cpu_and_memory(objects: list[Resource]) -> None:
    resources = container(objects)["resources"]
    for bound in ("requests", "limits"):
        assert set(resources[bound]) == {"cpu", "memory"}, bound


def test_the_config_map_and_the_pod_agree_on_its_generated_name(kustomization: str) -> None:
    """kustomize's way to roll the pods on a new configuration (the chart's: test_chart.py)."""
    objects = rendered(kustomization)
    volumes = {v["name"]: v for v in pod_spec(objects)["volumes"]}
    name = volumes["config"]["configMap"]["name"]
    assert re.fullmatch(r"gpu-guard-config-[a-z0-9]{10}", name)
    one(objects, "ConfigMap", name)


def project_version() -> str:
    version: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return version


def test_the_image_is_the_released_one(source: Source, objects: list[Resource]) -> None:
    name, tag, digest = split_image(container(objects)["image"])
    assert name == source.value("image", "repository", default=IMAGE)
    assert digest == source.value("image", "digest", default="")
    assert tag == source.value("image", "tag", default=project_version()) or digest


# --- the policy configuration --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "ids"),
    [
        ("policies", {policy.id for policy in ALL_POLICIES}),
        ("mutations", {mutation.id for mutation in ALL_MUTATIONS}),
    ],
)
def test_the_configuration_parses_and_names_every_policy_and_mutation(
    objects: list[Resource], section: str, ids: set[str]
) -> None:
    data = guard_config(objects)
    parse_config(data, "guard.yaml")  # raises ConfigError, naming the field
    missing = ids - set(data.get(section) or {})
    assert not missing, f"add {section} {sorted(missing)} to guard.yaml in manifests/ (every one)"


@pytest.mark.parametrize("kustomization", ENFORCING)
def test_enforcing_installs_run_every_policy_at_its_default_action(kustomization: str) -> None:
    config = parse_config(guard_config(rendered(kustomization)), "guard.yaml")
    for policy in ALL_POLICIES:
        assert config.action_for(policy) is policy.default_action, policy.id
    assert not config.mutations, "every mutation is opt-in"


def test_audit_mode_audits_every_policy_and_fails_open_everywhere() -> None:
    objects = rendered("overlays/audit")
    config = parse_config(guard_config(objects), "guard.yaml")
    for policy in ALL_POLICIES:
        assert config.action_for(policy) is Action.AUDIT, policy.id
    # Diagnoses are set in the same section: whatever the overlay sets, it sets to audit.
    for policy_id, setting in guard_config(objects)["policies"].items():
        assert setting == {"action": "audit"}, policy_id
    assert not config.mutations, "audit changes nothing"
    for hook in all_webhooks(objects):
        assert hook["failurePolicy"] == "Ignore", hook["name"]


# --- the image -----------------------------------------------------------------------------------


def dockerfile() -> list[list[str]]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    return [
        line.split(maxsplit=1)
        for line in (raw.strip() for raw in text.splitlines())
        if line and not line.startswith("#")
    ]


def base_images(instructions: list[list[str]]) -> list[str]:
    """Each stage's base, its ``${ARG}`` replaced by the ARG's default."""
    defaults = dict(args.split("=", 1) for op, args in instructions if op == "ARG" and "=" in args)
    stages = [args.split()[0] for op, args in instructions if op.upper() == "FROM"]
    return [re.sub(r"\$\{(\w+)\}", lambda m: defaults[m[1]], s) for s in stages]


def test_every_stage_starts_from_a_base_pinned_by_digest() -> None:
    for image in base_images(dockerfile()):
        assert re.fullmatch(r"[\w.:/-]+@sha256:[0-9a-f]{64}", image), image


def test_the_image_installs_only_what_the_lock_pins_with_hashes() -> None:
    runs = " ".join(args for op, args in dockerfile() if op == "RUN")
    assert "pip wheel --require-hashes --no-deps --wheel-dir /wheels -r requirements.lock" in runs
    assert "--no-build-isolation" in runs, "the build backend comes from the lock too"
    assert "make audit-deps" in (ROOT / "Dockerfile").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert "LOCK       := requirements.lock" in makefile
    assert "-r $(LOCK)" in makefile.split("audit-deps:")[1].split("\n\n")[0]


def test_the_image_runs_as_the_user_the_pod_expects() -> None:
    instructions = dockerfile()
    stages = base_images(instructions)
    assert len(stages) >= 2 and all(s.startswith("python:3.11-slim") for s in stages)
    final = instructions[max(i for i, (op, _) in enumerate(instructions) if op == "FROM") :]
    users = [args for op, args in final if op == "USER"]
    run_as = pod_spec(rendered("base"))["securityContext"]["runAsUser"]
    assert users and users[-1].split(":")[0] == str(run_as)
    assert ["ENTRYPOINT", '["gpu-guard"]'] in final
    assert any(op == "ENV" and "PYTHONDONTWRITEBYTECODE=1" in args for op, args in final)


def test_the_build_context_holds_only_what_the_wheel_needs() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*", "start from nothing: keys and certificates never reach a build"
    included = {p[1:].strip("/") for p in patterns if p.startswith("!")}
    assert included == {"pyproject.toml", "README.md", "requirements.lock", "policies", "webhook"}

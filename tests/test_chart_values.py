"""Each of the chart's values: documented in its README, typed in values.schema.json, present in
values.yaml, rendered by helm (tests/chart_cases.py) and doing there what the README says. The
renders also pass every test of tests/test_manifests.py; here is what each value itself shows.
Bad values are refused by the schema, with the field's path in the message."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jsonschema
import pytest
import yaml

from policies.registry import ALL_POLICIES
from policies.vocabulary.verdicts import Action
from tests.chart_cases import CASES, DIGEST, MIRROR, OTHER_NAMESPACE
from tests.helm import Render
from tests.test_manifests import (
    FAILURE_POLICIES,
    Resource,
    all_webhooks,
    container,
    grants,
    guard_config,
    of_kind,
    one,
    parsed_args,
    pod_spec,
)
from tools.chart import CHART
from tools.routes import excluded_namespaces
from webhook.config import parse_config

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
README = (CHART / "README.md").read_text()


def documented() -> list[str]:
    """The values of the README's table, in its order."""
    return re.findall(r"^\| `([\w.]+)` \|", README, flags=re.MULTILINE)


def leaves(values: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from leaves(value, f"{path}.")
        else:
            yield path


def in_schema(path: str) -> bool:
    node = SCHEMA
    for key in path.split("."):
        node = node.get("properties", {}).get(key)
        if node is None:
            return False
    return True


def test_every_value_is_documented_once_typed_and_in_values_yaml() -> None:
    paths = documented()
    assert len(paths) == len(set(paths)), "a value documented twice"
    for leaf in leaves(VALUES):
        assert any(leaf == p or leaf.startswith(f"{p}.") for p in paths), f"document {leaf}"
    for path in paths:
        assert in_schema(path), f"{path}: not in values.schema.json"
        node: Any = VALUES
        for key in path.split("."):
            assert isinstance(node, Mapping) and key in node, f"{path}: not in values.yaml"
            node = node[key]


def test_every_documented_value_is_rendered_and_checked() -> None:
    covered = {path for case in CASES.values() for path in case.covers}
    assert covered == set(documented())
    assert set(CHECKS) == {name for name, case in CASES.items() if case.covers}


# --- what each value does ------------------------------------------------------------------------


def config(objects: list[Resource]) -> Any:
    return parse_config(guard_config(objects), "guard.yaml")


def failure_policies(objects: list[Resource]) -> dict[str, str]:
    return {hook["name"]: hook["failurePolicy"] for hook in all_webhooks(objects)}


def hook(objects: list[Resource], name: str) -> Resource:
    (found,) = [h for h in all_webhooks(objects) if h["name"] == name]
    return found


def mode_enforce(objects: list[Resource]) -> None:
    assert failure_policies(objects) == FAILURE_POLICIES
    assert all(config(objects).action_for(p) is p.default_action for p in ALL_POLICIES)


def policy_actions_and_exemptions(objects: list[Resource]) -> None:
    settings = guard_config(objects)["policies"]
    assert settings["cordon-sole-provider"] == {"action": "deny"}
    assert settings["gpu-node-not-ready"] == {"action": "off"}, "a diagnosis, set the same way"
    exempt = config(objects).policy_exemptions["workload-switch-with-gpu-pods"]
    assert exempt.users == {"system:serviceaccount:ops:relabeler"}
    assert settings["workload-switch-with-gpu-pods"]["action"] == "deny", "the default kept"


def a_policy_enforced_in_audit_mode(objects: list[Resource]) -> None:
    actions = {p.id: config(objects).action_for(p) for p in ALL_POLICIES}
    assert actions.pop("vfio-rebind-with-gpu-pods") is Action.DENY
    assert set(actions.values()) == {Action.AUDIT}
    assert set(failure_policies(objects).values()) == {"Ignore"}, "the webhooks still by mode"


def mutations(objects: list[Resource]) -> None:
    assert config(objects).mutations == {"set-eviction-none-on-gpu-vms"}


def exemptions(objects: list[Resource]) -> None:
    parsed = config(objects)
    assert parsed.exempt_users == {"system:serviceaccount:ops:relabeler"}
    assert parsed.exempt_groups == {"ops:gpu-admins"}
    assert parsed.exempt_selector is not None
    assert parsed.exempt_selector.matches({"gpu-guard.io/exempt": "true"})


def excluded(objects: list[Resource]) -> None:
    expected = {"kube-system", "gpu-guard", "ci-runners", "sandbox"}
    assert config(objects).exempt_namespaces == expected
    assert excluded_namespaces(hook(objects, "pods.validate.gpu-guard.io")) == expected


def webhook_settings_over_enforce(objects: list[Resource]) -> None:
    nodes = hook(objects, "nodes.validate.gpu-guard.io")
    assert (nodes["failurePolicy"], nodes["timeoutSeconds"]) == ("Fail", 2)
    assert hook(objects, "vms.mutate.gpu-guard.io")["timeoutSeconds"] == 1
    others = {h: p for h, p in FAILURE_POLICIES.items() if h != "nodes.validate.gpu-guard.io"}
    assert failure_policies(objects).items() >= others.items()


def webhook_settings_over_audit(objects: list[Resource]) -> None:
    closed = {h for h, p in failure_policies(objects).items() if p == "Fail"}
    assert closed == {"clusterpolicy.validate.gpu-guard.io"}


def replicas(objects: list[Resource]) -> None:
    count = one(objects, "Deployment")["spec"]["replicas"]
    budgets = of_kind(objects, "PodDisruptionBudget")
    assert len(budgets) == (1 if count > 1 else 0)
    leases = [g for g in grants(objects) if g[3] == "leases"]
    assert bool(leases) == parsed_args(objects).leader_elect


def reports_format(objects: list[Resource]) -> None:
    assert parsed_args(objects).report_format == "openreports"
    written = {(g[2], g[3]) for g in grants(objects) if g[1] == "delete"}
    # Both formats, whichever is written: a switch deletes the other format's reports.
    for group, resource in (
        ("openreports.io", "reports"),
        ("openreports.io", "clusterreports"),
        ("wgpolicyk8s.io", "policyreports"),
        ("wgpolicyk8s.io", "clusterpolicyreports"),
    ):
        assert (group, resource) in written, resource


def image(objects: list[Resource]) -> None:
    assert container(objects)["image"] == f"{MIRROR}:0.1.0-mirrored"
    assert container(objects)["imagePullPolicy"] == "Always"


def image_digest(objects: list[Resource]) -> None:
    assert container(objects)["image"] == f"gpu-guard@{DIGEST}"


def pull_secrets(objects: list[Resource]) -> None:
    assert pod_spec(objects)["imagePullSecrets"] == [{"name": "regcred"}]


def resources(objects: list[Resource]) -> None:
    assert container(objects)["resources"] == {
        "requests": {"cpu": "250m", "memory": "1Gi"},
        "limits": {"cpu": 2, "memory": "2Gi"},
    }


def placement(objects: list[Resource]) -> None:
    spec = pod_spec(objects)
    assert spec["nodeSelector"] == {
        "kubernetes.io/os": "linux",  # merged with the default
        "node-role.kubernetes.io/infra": "",
    }
    assert spec["tolerations"][0]["key"] == "node-role.kubernetes.io/infra"
    assert set(spec["affinity"]) == {"nodeAffinity", "podAntiAffinity"}
    assert spec["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    assert spec["priorityClassName"] == "gpu-guard-critical"


def spread_by_topology(objects: list[Resource]) -> None:
    spec = pod_spec(objects)
    assert "affinity" not in spec
    assert spec["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"


def security_contexts(objects: list[Resource]) -> None:
    assert pod_spec(objects)["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    assert pod_spec(objects)["securityContext"]["runAsUser"] == 65532, "merged with the default"
    assert container(objects)["securityContext"]["privileged"] is False


def cert_manager_chain(objects: list[Resource]) -> None:
    assert {c["metadata"]["name"] for c in of_kind(objects, "Certificate")} == {
        "gpu-guard",
        "gpu-guard-ca",
    }
    assert {i["metadata"]["name"] for i in of_kind(objects, "Issuer")} == {
        "gpu-guard-selfsigned",
        "gpu-guard-ca",
    }
    assert not parsed_args(objects).manage_certs


def cert_manager_issuer(objects: list[Resource]) -> None:
    (serving,) = of_kind(objects, "Certificate")
    assert serving["spec"]["issuerRef"] == {
        "group": "cert-manager.io",
        "kind": "ClusterIssuer",
        "name": "corp-ca",
    }
    assert not of_kind(objects, "Issuer")


def service_monitor(objects: list[Resource]) -> None:
    monitor = one(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("1m", "20s")
    assert not of_kind(objects, "PrometheusRule")


def prometheus_rule(objects: list[Resource]) -> None:
    rule = one(objects, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert "GpuGuardRecoveryTrap" in alerts
    assert not of_kind(objects, "ServiceMonitor")


def dashboard(objects: list[Resource]) -> None:
    board = one(objects, "ConfigMap", "gpu-guard-dashboard")
    assert board["metadata"]["labels"]["grafana_dashboard"] == "gpu"
    assert json.loads(board["data"]["gpu-guard.json"])["panels"]


def without_api_versions(objects: list[Resource]) -> None:
    assert {"ServiceMonitor", "PrometheusRule"} <= {o["kind"] for o in objects}


def gpu_operator_version(objects: list[Resource]) -> None:
    assert config(objects).gpu_operator_version == "v26.7.0"
    assert "gpuOperator" not in guard_config(CASES["mode-enforce"].render.objects())


def device_taint_rules(objects: list[Resource]) -> None:
    assert config(objects).device_taint_rules
    assert not config(CASES["mode-enforce"].render.objects()).device_taint_rules


CHECKS: dict[str, Callable[[list[Resource]], None]] = {
    "mode-enforce": mode_enforce,
    "policy-actions-and-exemptions": policy_actions_and_exemptions,
    "a-policy-enforced-in-audit-mode": a_policy_enforced_in_audit_mode,
    "a-mutation-on": mutations,
    "exemptions": exemptions,
    "excluded-namespaces": excluded,
    "gpu-operator-version": gpu_operator_version,
    "device-taint-rules": device_taint_rules,
    "webhook-settings-over-enforce": webhook_settings_over_enforce,
    "webhook-settings-over-audit": webhook_settings_over_audit,
    "three-replicas": replicas,
    "reports-as-openreports": reports_format,
    "one-replica-without-election": replicas,
    "one-replica-elected": replicas,
    "image-from-a-mirror": image,
    "image-by-digest": image_digest,
    "image-pull-secrets": pull_secrets,
    "resources": resources,
    "placement": placement,
    "spread-by-topology-instead-of-anti-affinity": spread_by_topology,
    "security-contexts": security_contexts,
    "cert-manager-chain": cert_manager_chain,
    "cert-manager-issuer-of-yours": cert_manager_issuer,
    "service-monitor": service_monitor,
    "prometheus-rule": prometheus_rule,
    "dashboard": dashboard,
    "rendered-without-the-clusters-api-versions": without_api_versions,
}


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_each_value_does_what_the_readme_says(name: str) -> None:
    CHECKS[name](CASES[name].render.objects())


def test_the_default_is_audit_mode_as_the_overlay_for_a_first_install() -> None:
    objects = Render().objects()
    assert {a for a in (config(objects).action_for(p) for p in ALL_POLICIES)} == {Action.AUDIT}
    assert set(failure_policies(objects).values()) == {"Ignore"}
    assert OTHER_NAMESPACE not in json.dumps(objects)


# --- the schema ----------------------------------------------------------------------------------


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            yield from refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs(item)


def test_the_schema_is_draft_07_and_self_contained() -> None:
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    assert all(ref.startswith("#/definitions/") for ref in refs(SCHEMA)), "nothing remote"


def validate(values: Any) -> None:
    jsonschema.Draft7Validator(SCHEMA).validate(values)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_schema_accepts_the_defaults_and_every_rendered_value(name: str) -> None:
    validate(VALUES)
    validate(CASES[name].render.values)


BAD_VALUES = [
    ({"mode": "strict"}, "/mode"),
    ({"policies": {"no-such-policy": {"action": "deny"}}}, "/policies"),
    (
        {"policies": {"cordon-sole-provider": {"action": "block"}}},
        "/policies/cordon-sole-provider/action",
    ),
    (
        {"policies": {"cordon-sole-provider": {"exemptions": {"users": "ops"}}}},
        "/policies/cordon-sole-provider/exemptions/users",
    ),
    (
        {"mutations": {"set-eviction-none-on-gpu-vms": {"enabled": "yes"}}},
        "/mutations/set-eviction-none-on-gpu-vms/enabled",
    ),
    ({"excludedNamespaces": ["Not_A_Namespace"]}, "/excludedNamespaces/0"),
    (
        {"webhooks": {"validating": {"nodes": {"failurePolicy": "Maybe"}}}},
        "/webhooks/validating/nodes/failurePolicy",
    ),
    (
        {"webhooks": {"validating": {"nodes": {"timeoutSeconds": 31}}}},
        "/webhooks/validating/nodes/timeoutSeconds",
    ),
    ({"webhooks": {"mutating": {"nodes": {"timeoutSeconds": 2}}}}, "/webhooks/mutating"),
    ({"replicas": 0}, "/replicas"),
    ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"image": {"digest": "sha256:abc"}}, "/image/digest"),
    ({"resources": {"limits": {"memory": "lots"}}}, "/resources/limits/memory"),
    ({"certificates": {"mode": "vault"}}, "/certificates/mode"),
    (
        {"certificates": {"certManager": {"issuerRef": {"kind": "ClusterIssuer"}}}},
        "/certificates/certManager/issuerRef",
    ),
    (
        {"monitoring": {"serviceMonitor": {"interval": "often"}}},
        "/monitoring/serviceMonitor/interval",
    ),
    ({"checkCRDs": "no"}, "/checkCRDs"),
    ({"replica": 3}, "replica"),
]


@pytest.mark.parametrize(("values", "path"), BAD_VALUES, ids=[p for _, p in BAD_VALUES])
def test_the_schema_refuses_a_bad_value(values: dict[str, Any], path: str) -> None:
    with pytest.raises(jsonschema.ValidationError):
        validate(values)


@pytest.mark.parametrize(("values", "path"), BAD_VALUES, ids=[p for _, p in BAD_VALUES])
def test_helm_refuses_a_bad_value_naming_where_it_is(values: dict[str, Any], path: str) -> None:
    error = Render(values).error()
    assert "values don't meet the specifications of the schema" in error
    # Helm 4 (and 3.18 on) names a JSON pointer, earlier Helm 3 a dotted path.
    assert path in error or path.strip("/").replace("/", ".") in error, error

"""manifests/overlays/monitoring held against the code: the alerts under ``promtool``, every
expression against the metrics the server exports, every runbook link against manifests/README.md,
every command an alert names against the real CLI parser, the scrape against the Service and the
certificate."""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from policies.diagnoses.nodes import RECOVERY_TRAP_PASSTHROUGH, RECOVERY_TRAP_VGPU
from policies.registry import DIAGNOSES_BY_ID, POLICIES_BY_ID
from policies.vocabulary.verdicts import Action, Verdict
from tests.builders import node, request
from tests.kustomize import build
from tests.promql import metric_names
from tests.test_cli import STATE
from webhook.admission.server import METRICS_PATH
from webhook.audit.report import run_audit
from webhook.certs.issue import service_dns_names
from webhook.cli import build_parser
from webhook.engine import Engine
from webhook.metrics import Metrics
from webhook.state.files import load_state

ROOT = Path(__file__).resolve().parents[1]
OVERLAY = ROOT / "manifests" / "overlays" / "monitoring"
README = ROOT / "manifests" / "README.md"
PROMTOOL_TESTS = ROOT / "tests" / "data" / "monitoring" / "alerts.test.yaml"
RUNBOOK = "https://github.com/gpu-guard/gpu-guard/blob/main/manifests/README.md#"
COMMAND_ANNOTATION = "gpu_guard_command"
HOMELAB_NOW = datetime(2026, 10, 30, 12, tzinfo=UTC)
"""The instant the promtool home-lab series were taken at (their time 0)."""

Resource = dict[str, Any]


@functools.cache
def _rendered() -> tuple[Resource, ...]:
    return tuple(build(OVERLAY))


def rendered() -> list[Resource]:
    return copy.deepcopy(list(_rendered()))


def one(kind: str) -> Resource:
    found = [obj for obj in rendered() if obj["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = one("PrometheusRule")["spec"]["groups"]
    return groups


def rules() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"]]


def alerts() -> list[dict[str, Any]]:
    return [rule for rule in rules() if "alert" in rule]


def dashboard() -> dict[str, Any]:
    config_map = next(
        obj
        for obj in rendered()
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == "gpu-guard-dashboard"
    )
    board: dict[str, Any] = json.loads(config_map["data"]["gpu-guard.json"])
    return board


def panel_expressions() -> Iterator[tuple[str, str]]:
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


# --- promtool ------------------------------------------------------------------------------------


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing in CI (.ci/run installs Debian's prometheus package)")
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    return found


def run_promtool(*args: str, cwd: Path) -> None:
    done = subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    """The PrometheusRule's groups as a Prometheus rule file, beside the promtool tests."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    shutil.copy(PROMTOOL_TESTS, tmp_path / PROMTOOL_TESTS.name)
    return tmp_path


def test_the_rules_pass_promtool_check(rules_dir: Path) -> None:
    run_promtool("check", "rules", "rules.yaml", cwd=rules_dir)


def test_the_alerts_fire_and_stay_quiet_as_the_promtool_tests_expect(rules_dir: Path) -> None:
    run_promtool("test", "rules", PROMTOOL_TESTS.name, cwd=rules_dir)


def promtool_tests() -> list[dict[str, Any]]:
    tests: list[dict[str, Any]] = yaml.safe_load(PROMTOOL_TESTS.read_text())["tests"]
    return tests


def test_every_alert_is_shown_quiet_on_a_healthy_cluster_and_firing_somewhere() -> None:
    names = {rule["alert"] for rule in alerts()}
    healthy = next(t for t in promtool_tests() if t["name"].startswith("a healthy cluster"))
    assert {case["alertname"] for case in healthy["alert_rule_test"]} == names
    assert all(case["exp_alerts"] == [] for case in healthy["alert_rule_test"])
    fired = {
        case["alertname"]
        for test in promtool_tests()
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert fired == names


def _selector(series: str) -> tuple[str, dict[str, str]]:
    name, _, rest = series.partition("{")
    return name, dict(re.findall(r'(\w+)="([^"]*)"', rest))


def test_the_home_lab_series_are_what_the_guard_exports_for_the_home_lab() -> None:
    """The promtool incident is the real one: the leader's audit series equal the exposition of
    a Metrics that audited examples/homelab (timestamps measured from the audit's now)."""
    audit_derived = {
        "gpu_guard_audit_findings",
        "gpu_guard_audit_node_findings",
        "gpu_guard_gpu_node_not_ready_since_timestamp_seconds",
        "gpu_guard_gpu_operand_pods_unhealthy",
    }
    target = {"job", "namespace", "instance", "pod"}
    homelab = next(t for t in promtool_tests() if t["name"].startswith("the home-lab incident"))
    written = {}
    for entry in homelab["input_series"]:
        name, labels = _selector(entry["series"])
        if name in audit_derived:
            own = tuple(sorted((k, v) for k, v in labels.items() if k not in target))
            written[(name, own)] = float(entry["values"].split("x")[0])
    metrics = Metrics()
    report = run_audit(Engine(), load_state([STATE]), HOMELAB_NOW)
    metrics.record_audit_report(report.findings, report.gpu_nodes, 0.1, report.now)
    exported = {
        (s.name, tuple(sorted(s.labels.items()))): (
            s.value - HOMELAB_NOW.timestamp() if s.name.endswith("_timestamp_seconds") else s.value
        )
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for s in family.samples
        if s.name in audit_derived
    }
    assert written == exported


# --- expressions against the exposition ----------------------------------------------------------


def populated_metrics() -> Metrics:
    """A Metrics with a series in every family it has, as a busy leader would export."""
    metrics = Metrics()
    verdict = Verdict(
        "workload-switch-with-gpu-pods", Action.DENY, request("UPDATE", node("n")).ref, "m"
    )
    metrics.record_review("validate", "Node", "UPDATE", False, 0.002, [verdict])
    metrics.rejected.labels("400").inc()
    metrics.overrides.labels(verdict.policy).inc()
    metrics.mutations.labels("set-eviction-none-on-gpu-vms").inc()
    metrics.config_in_force("0" * 64)
    metrics.overloaded.inc()
    metrics.connections_refused.inc()
    metrics.connections_evicted.inc()
    metrics.connections_open.set(3)
    metrics.watch_state(lambda: {"Node": (True, 1.0)})
    metrics.ready.set(1)
    metrics.certificate_expiry.set(2e9)
    metrics.audit_interval.set(300)
    metrics.audit_failures.inc()
    report = run_audit(Engine(), load_state([STATE]), HOMELAB_NOW)
    metrics.record_audit_report(report.findings, report.gpu_nodes, 0.1, report.now)
    metrics.audit_succeeded(HOMELAB_NOW)
    return metrics


@functools.cache
def exported_names() -> frozenset[str]:
    families = list(text_string_to_metric_families(populated_metrics().exposition().decode()))
    empty = [family.name for family in families if not family.samples]
    assert not empty, f"populate these in populated_metrics(): {empty}"
    return frozenset(sample.name for family in families for sample in family.samples)


def recorded_names() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


def unknown_names(expr: str) -> set[str]:
    known = exported_names() | recorded_names()
    return metric_names(expr) - known


@pytest.mark.parametrize("rule", rules(), ids=lambda r: r.get("alert") or r["record"])
def test_every_rule_reads_only_metrics_the_server_exports(rule: dict[str, Any]) -> None:
    assert metric_names(rule["expr"]), "an expression that reads no metric"
    assert not unknown_names(rule["expr"])


@pytest.mark.parametrize(("title", "expr"), list(panel_expressions()))
def test_every_dashboard_panel_reads_only_metrics_the_server_exports(title: str, expr: str) -> None:
    assert metric_names(expr), title
    assert not unknown_names(expr), title


def test_the_dashboard_variables_read_an_exported_metric() -> None:
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            found = re.fullmatch(r"label_values\((\w+), *(\w+)\)", variable["definition"])
            assert found and found[1] in exported_names(), variable["name"]


# --- the alerts' labels and annotations ----------------------------------------------------------


@pytest.mark.parametrize("alert", alerts(), ids=lambda a: a["alert"])
def test_every_alert_has_a_severity_a_summary_a_description_and_a_runbook(
    alert: dict[str, Any],
) -> None:
    assert alert["labels"]["severity"] in ("warning", "critical")
    annotations = alert["annotations"]
    assert annotations["summary"] and annotations["description"]
    assert annotations["runbook_url"] == RUNBOOK + alert["alert"].lower()


def readme_anchors() -> set[str]:
    """GitHub's anchors of the README's headings: lower case, punctuation dropped, - for space."""
    anchors = set()
    for line in README.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("alert", alerts(), ids=lambda a: a["alert"])
def test_every_runbook_link_is_a_section_of_the_manifests_readme(alert: dict[str, Any]) -> None:
    anchor = alert["annotations"]["runbook_url"].removeprefix(RUNBOOK)
    assert anchor in readme_anchors()


@pytest.mark.parametrize("alert", alerts(), ids=lambda a: a["alert"])
def test_every_command_an_alert_names_parses_with_the_real_command_line(
    alert: dict[str, Any],
) -> None:
    command = alert["annotations"][COMMAND_ANNOTATION]
    program, *argv = re.sub(r"\{\{[^}]*\}\}", "x", command).split()
    assert program == "gpu-guard"
    args = build_parser().parse_args(argv)  # exits (SystemExit) on a flag that does not exist
    assert args.command in ("audit", "inventory", "certs")


@pytest.mark.parametrize("alert", alerts(), ids=lambda a: a["alert"])
def test_every_policy_an_alert_selects_exists(alert: dict[str, Any]) -> None:
    for matched in re.findall(r'policy=~?"([^"]*)"', alert["expr"]):
        for policy in matched.split("|"):
            assert policy in POLICIES_BY_ID or policy in DIAGNOSES_BY_ID, policy


def test_the_trap_alert_selects_every_recovery_trap() -> None:
    trap = next(a for a in alerts() if a["alert"] == "GpuGuardRecoveryTrap")
    (selected,) = re.findall(r'policy=~"([^"]*)"', trap["expr"])
    assert set(selected.split("|")) == {RECOVERY_TRAP_PASSTHROUGH, RECOVERY_TRAP_VGPU}


# --- the scrape and the dashboard's ConfigMap ----------------------------------------------------


def test_the_service_monitor_scrapes_metrics_over_tls_verified_for_the_services_name() -> None:
    monitor = one("ServiceMonitor")
    service = one("Service")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert (endpoint["path"], endpoint["scheme"]) == (METRICS_PATH, "https")
    tls = endpoint["tlsConfig"]
    assert tls["serverName"] in service_dns_names("gpu-guard", "gpu-guard")
    assert tls["ca"]["secret"] == {"name": "gpu-guard-tls", "key": "ca.crt"}
    assert "insecureSkipVerify" not in tls


def test_the_dashboard_is_a_config_map_the_grafana_sidecar_loads() -> None:
    config_map = next(o for o in rendered() if o["metadata"]["name"] == "gpu-guard-dashboard")
    assert config_map["metadata"]["labels"] == {
        "app.kubernetes.io/name": "gpu-guard",  # as every object of the install
        "grafana_dashboard": "1",  # the sidecar's default label
    }
    board = dashboard()
    assert board["uid"] == "gpu-guard"
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))

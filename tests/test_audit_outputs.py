"""``gpu-guard audit`` outputs: merged findings, JSON/YAML contract, PolicyReports, Markdown,
the table, caps, determinism and the progress hook."""

from __future__ import annotations

import copy
import importlib
import io
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from rich.cells import cell_len

from policies.cluster.view import AuditView, ClusterView
from policies.diagnoses.nodes import GPU_NODE_NOT_READY, RECOVERY_TRAP_PASSTHROUGH
from policies.diagnoses.sole_provider import SOLE_PROVIDER
from policies.diagnoses.vms import VM_UNSCHEDULABLE
from policies.registry import ALL_DIAGNOSES, ALL_POLICIES, DIAGNOSES_BY_ID
from policies.rules import passthrough_provider
from policies.rules.passthrough_provider import ID as PASSTHROUGH
from policies.state.cluster import ClusterState
from policies.vocabulary.audit import AuditFinding, DiagnosisFinding, Link, untracked
from policies.vocabulary.requests import ObjectRef
from policies.vocabulary.verdicts import Action, Finding, Severity
from tests import FIXTURES
from tests.builders import Obj, dead_node, node, state_of, vm
from tests.conftest import require_fixture
from webhook.audit.policyreport import policy_reports, render_policy_reports
from webhook.audit.report import AuditReport, exit_code, run_audit
from webhook.cli import main
from webhook.config import GuardConfig
from webhook.engine import DIAGNOSIS_FAILED, Engine
from webhook.render.markdown import mermaid, render_markdown
from webhook.render.progress import progress_bar
from webhook.render.table import render_table
from webhook.render.text import render_text
from webhook.state.files import load_state_objects

HOMELAB = Path(__file__).resolve().parents[1] / "examples" / "homelab" / "cluster.yaml"
CRDS = FIXTURES / "crds"
NOW = datetime(2026, 10, 30, 12, 0, tzinfo=UTC)
NOW_TEXT = "2026-10-30T12:00:00Z"
RTX_5090 = "nvidia.com/GB202_GEFORCE_RTX_5090"
ANSI = re.compile(r"\x1b\[")


def _missing(what: str) -> None:
    """Fail in CI (the dependency or file must be there), skip on a developer's machine."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing")
    pytest.skip(f"{what} is missing")


def _jsonschema() -> Any:
    try:
        return importlib.import_module("jsonschema")
    except ImportError:
        _missing("jsonschema (the test extras)")


@cache
def homelab_state() -> ClusterState:
    state, _ = load_state_objects([str(HOMELAB)])
    return state


@cache
def homelab() -> AuditReport:
    return run_audit(Engine(), homelab_state(), NOW)


def by_policy(report: AuditReport, policy: str) -> dict[str, Any]:
    return {f.verdict.resource.name: f for f in report.findings if f.verdict.policy == policy}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- merging --------------------------------------------------------------------------------------


def test_each_stuck_vm_is_one_finding_with_the_diagnosis_chain() -> None:
    report = homelab()
    stuck = by_policy(report, PASSTHROUGH)
    assert set(stuck) == {"gpu-fedora", "rhel9-gpu-vm"}
    assert by_policy(report, VM_UNSCHEDULABLE) == {}  # merged, not reported twice
    for finding in stuck.values():
        verdict = finding.verdict
        assert verdict.action == Action.WARN and finding.severity == Severity.HIGH
        assert verdict.message.startswith(f"{RTX_5090} (gpus[gpu1]): omen2 advertises it")
        assert any("omen2: NotReady since 2026-07-10" in link for link in verdict.chain)
        assert any("Kubelet stopped posting node status." in link for link in verdict.chain)
        assert (
            "kubectl label node omen2 nvidia.com/gpu.workload.config=container"
            in (verdict.remediation[0])
        )
        assert finding.chain.text.startswith(f"VirtualMachine {verdict.resource}")


def test_the_home_lab_audit_fails_on_the_recovery_trap_alone() -> None:
    report = homelab()
    denied = [f.verdict for f in report.findings if f.verdict.action == Action.DENY]
    assert [(v.policy, v.resource.name) for v in denied] == [(RECOVERY_TRAP_PASSTHROUGH, "omen2")]
    assert exit_code(report.verdicts) == 1
    # omen1 (the pods' nvidia.com/gpu) and tower1 (win11-gaming's RTX 3090): sole providers
    assert report.counts() == {"deny": 1, "warn": 6, "audit": 2}
    assert report.findings[0].verdict.policy == RECOVERY_TRAP_PASSTHROUGH  # worst first


def test_a_diagnosis_stands_alone_when_its_policy_is_off() -> None:
    config = GuardConfig(actions={PASSTHROUGH: Action.OFF})
    report = run_audit(Engine(config), homelab_state(), NOW)
    assert set(by_policy(report, VM_UNSCHEDULABLE)) == {"gpu-fedora", "rhel9-gpu-vm"}
    assert by_policy(report, PASSTHROUGH) == {}


def test_configured_actions_and_exempt_namespaces_apply_to_diagnoses() -> None:
    config = GuardConfig(
        actions={PASSTHROUGH: Action.OFF, RECOVERY_TRAP_PASSTHROUGH: Action.WARN},
        exempt_namespaces=frozenset({"vms"}),
    )
    report = run_audit(Engine(config), homelab_state(), NOW)
    assert by_policy(report, VM_UNSCHEDULABLE) == {}
    assert by_policy(report, RECOVERY_TRAP_PASSTHROUGH)["omen2"].verdict.action == Action.WARN
    assert exit_code(report.verdicts) == 0


@pytest.mark.parametrize(
    ("declared", "value", "applied"),
    [
        pytest.param("default_action", Action.AUDIT, lambda f: f.verdict.action, id="action"),
        pytest.param("default_severity", Severity.LOW, lambda f: f.severity, id="severity"),
    ],
)
def test_what_a_diagnosis_declares_is_what_the_audit_applies(
    declared: str, value: Any, applied: Callable[[AuditFinding], Any]
) -> None:
    assert getattr(DIAGNOSES_BY_ID[GPU_NODE_NOT_READY], declared) != value
    diagnoses = [
        replace(d, **{declared: value}) if d.id == GPU_NODE_NOT_READY else d for d in ALL_DIAGNOSES
    ]
    report = run_audit(Engine(diagnoses=diagnoses), homelab_state(), NOW)
    not_ready = by_policy(report, GPU_NODE_NOT_READY)
    assert len(not_ready) == 4
    assert all(applied(finding) == value for finding in not_ready.values())


def passthrough_audit_with(change: Callable[[Finding], Finding]) -> Engine:
    """An engine whose passthrough policy audits as it does, then ``change``s each finding."""

    def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
        for ref, finding in passthrough_provider.audit(view):
            yield ref, change(finding)

    policies = [replace(p, audit=audit) if p.id == PASSTHROUGH else p for p in ALL_POLICIES]
    return Engine(policies=policies)


def test_a_reworded_policy_message_is_still_explained_by_its_diagnosis() -> None:
    engine = passthrough_audit_with(lambda f: replace(f, message="no GPU for this VM"))
    report = run_audit(engine, homelab_state(), NOW)
    stuck = by_policy(report, PASSTHROUGH)
    assert set(stuck) == {"gpu-fedora", "rhel9-gpu-vm"}
    assert by_policy(report, VM_UNSCHEDULABLE) == {}
    for finding in stuck.values():
        assert finding.verdict.message == "no GPU for this VM"
        assert any("omen2: NotReady since 2026-07-10" in link for link in finding.verdict.chain)


def test_a_diagnosis_explains_only_the_verdict_on_its_own_device() -> None:
    engine = passthrough_audit_with(lambda f: replace(f, device="nvidia.com/another_gpu"))
    report = run_audit(engine, homelab_state(), NOW)
    assert set(by_policy(report, PASSTHROUGH)) == {"gpu-fedora", "rhel9-gpu-vm"}
    assert set(by_policy(report, VM_UNSCHEDULABLE)) == {"gpu-fedora", "rhel9-gpu-vm"}
    for finding in by_policy(report, PASSTHROUGH).values():  # the policy's own chain and steps
        assert finding.verdict.chain[0] == f"needs {RTX_5090}"
        assert finding.verdict.remediation[0].startswith("find why omen2 is not Ready")


def test_a_diagnosis_that_raises_costs_only_its_own_findings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(view: AuditView, now: datetime) -> Iterator[DiagnosisFinding]:
        raise RuntimeError("bug")

    diagnoses = [
        replace(d, diagnose=broken) if d.id == GPU_NODE_NOT_READY else d for d in ALL_DIAGNOSES
    ]
    report = run_audit(Engine(diagnoses=diagnoses), homelab_state(), NOW)
    assert sorted(f.verdict.policy for f in report.findings) == sorted(
        [
            DIAGNOSIS_FAILED,
            PASSTHROUGH,
            PASSTHROUGH,
            RECOVERY_TRAP_PASSTHROUGH,
            SOLE_PROVIDER,
            SOLE_PROVIDER,
        ]
    )
    failed = by_policy(report, DIAGNOSIS_FAILED)["(cluster)"].verdict
    assert failed.message == (
        "gpu-guard could not evaluate this policy: the diagnosis raised, see the log; the "
        "policies' findings are complete"
    )
    assert by_policy(report, PASSTHROUGH)["gpu-fedora"].verdict.remediation  # still explained
    assert f"diagnosis {GPU_NODE_NOT_READY} raised during the audit" in caplog.text
    assert len(report.gpu_nodes) == 6


# --- JSON and YAML --------------------------------------------------------------------------------

STRING = {"type": "string"}
AUDIT_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["now", "summary", "findings", "gpuNodes"],
    "additionalProperties": False,
    "properties": {
        "now": {"type": "string", "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"},
        "summary": {
            "type": "object",
            "required": ["deny", "warn", "audit"],
            "additionalProperties": False,
            "properties": {k: {"type": "integer", "minimum": 0} for k in ("deny", "warn", "audit")},
        },
        "findings": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["policy", "action", "resource", "message", "severity"],
                "additionalProperties": False,
                "properties": {
                    "policy": {"type": "string", "pattern": r"^[a-z0-9]+(-[a-z0-9]+)*$"},
                    "action": {"enum": ["deny", "warn", "audit"]},
                    "severity": {"enum": ["critical", "high", "medium", "low", "info"]},
                    "resource": {
                        "type": "object",
                        "required": ["apiVersion", "kind", "namespace", "name"],
                        "additionalProperties": False,
                        "properties": {
                            k: STRING for k in ("apiVersion", "kind", "namespace", "name")
                        },
                    },
                    "message": {"type": "string", "minLength": 1},
                    "since": {"type": "string", "pattern": r"^\d{4}-\d\d-\d\dT[\d:.]+Z$"},
                    "duration": STRING,
                    "durationSeconds": {"type": "integer", "minimum": 0},
                    "chain": {"type": "array", "items": STRING, "minItems": 1},
                    "remediation": {"type": "array", "items": STRING, "minItems": 1},
                },
                "dependentRequired": {"since": ["duration", "durationSeconds"]},
            },
        },
        "gpuNodes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": [
                    "name",
                    "mode",
                    "health",
                    "gpus",
                    "resources",
                    "operands",
                    "gpuPods",
                    "vmsWaiting",
                    "recoveryTrap",
                ],
                "properties": {
                    "operands": {
                        "type": "object",
                        "additionalProperties": {"type": "integer", "minimum": 0},
                    },
                    "recoveryTrap": {"type": "boolean"},
                },
            },
        },
    },
}


def test_json_output_follows_the_contract(capsys: pytest.CaptureFixture[str]) -> None:
    jsonschema = _jsonschema()
    code, out, _ = run(capsys, "audit", "--state", str(HOMELAB), "--now", NOW_TEXT, "-o", "json")
    assert code == 1
    data = orjson.loads(out)
    jsonschema.Draft202012Validator(AUDIT_JSON_SCHEMA).validate(data)
    stuck = [f for f in data["findings"] if f["policy"] == PASSTHROUGH]
    assert [f["duration"] for f in stuck] == ["112 days", "112 days"]
    trap = data["findings"][0]
    assert (trap["policy"], trap["action"], trap["severity"]) == (
        RECOVERY_TRAP_PASSTHROUGH,
        "deny",
        "high",
    )
    assert trap["resource"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "namespace": "",
        "name": "omen2",
    }


def test_yaml_output_is_the_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    _, as_json, _ = run(capsys, "audit", "--state", str(HOMELAB), "--now", NOW_TEXT, "-o", "json")
    _, as_yaml, _ = run(capsys, "audit", "--state", str(HOMELAB), "--now", NOW_TEXT, "-o", "yaml")
    assert yaml.safe_load(as_yaml) == orjson.loads(as_json)


# --- PolicyReports --------------------------------------------------------------------------------


def _strict(schema: Any) -> Any:
    """The CRD schema with unknown fields refused: the API server would prune them silently."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def crd_schemas() -> dict[str, Any]:
    require_fixture(CRDS)
    schemas = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        kind = crd["spec"]["names"]["kind"]
        (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
        schemas[kind] = {
            "scope": crd["spec"]["scope"],
            "schema": _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"])),
        }
    assert set(schemas) >= {"PolicyReport", "ClusterPolicyReport"}
    return schemas


def validate_reports(docs: Sequence[dict[str, Any]]) -> None:
    jsonschema = _jsonschema()
    schemas = crd_schemas()
    for doc in docs:
        entry = schemas[doc["kind"]]
        jsonschema.Draft7Validator(entry["schema"]).validate(doc)
        assert doc["apiVersion"] == "wgpolicyk8s.io/v1alpha2"
        assert ("namespace" in doc["metadata"]) == (entry["scope"] == "Namespaced")
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", doc["metadata"]["name"])


def test_policyreports_validate_against_the_crds_and_split_by_scope(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(
        capsys, "audit", "--state", str(HOMELAB), "--now", NOW_TEXT, "-o", "policyreport"
    )
    assert code == 1
    docs = list(yaml.safe_load_all(out))
    validate_reports(docs)
    assert [(d["kind"], d["metadata"].get("namespace", "")) for d in docs] == [
        ("ClusterPolicyReport", ""),
        ("PolicyReport", "kubevirt"),
        ("PolicyReport", "vms"),
    ]
    cluster, kubevirt, vms = docs
    assert {d["metadata"]["name"] for d in docs} == {"gpu-guard"}
    assert cluster["summary"] == {"pass": 0, "fail": 1, "warn": 6, "error": 0, "skip": 0}
    trap = cluster["results"][0]
    assert (trap["policy"], trap["result"], trap["severity"], trap["source"]) == (
        RECOVERY_TRAP_PASSTHROUGH,
        "fail",
        "high",
        "gpu-guard",
    )
    assert trap["resources"] == [{"apiVersion": "v1", "kind": "Node", "name": "omen2"}]
    assert trap["timestamp"] == {"seconds": int(NOW.timestamp()), "nanos": 0}
    assert trap["properties"]["duration"] == "112 days"
    assert (
        "(1) before kubelet returns: kubectl label node omen2"
        in (trap["properties"]["remediation"])
    )
    assert kubevirt["results"] == []  # audited and clean: an empty report replaces an old one
    assert [r["resources"][0]["name"] for r in vms["results"]] == ["gpu-fedora", "rhel9-gpu-vm"]
    assert "omen2: NotReady since 2026-07-10" in vms["results"][0]["properties"]["chain"]
    for doc in docs:
        assert doc["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpu-guard"}
        assert doc["metadata"]["annotations"]["gpu-guard.io/results-omitted"] == "0"


def many_findings(count: int) -> ClusterState:
    """``count`` dead GPU nodes (cluster-scoped findings) and ``count`` stuck VMs (namespaced)."""
    objects: list[Obj] = [node("alive")]
    for i in range(count):
        objects.append(dead_node(f"gpu-{i:04d}", allocatable={"nvidia.com/gpu": "1"}))
        objects.append(vm(f"vm-{i:04d}", gpus=["nvidia.com/NOBODY_HAS_IT"]))
    return state_of(*objects)


@pytest.mark.parametrize("cap", [100, 7])
def test_reports_are_capped_and_say_how_many_results_were_left_out(cap: int) -> None:
    report = run_audit(Engine(), many_findings(500), NOW)
    assert len(report.findings) == 1000
    docs = policy_reports(report, max_results=cap)
    validate_reports(docs)
    assert [d["kind"] for d in docs] == ["ClusterPolicyReport", "PolicyReport"]
    for doc in docs:
        assert len(doc["results"]) == cap
        assert doc["summary"]["warn"] == 500  # the summary counts everything
        annotations = doc["metadata"]["annotations"]
        assert annotations["gpu-guard.io/results-total"] == "500"
        assert annotations["gpu-guard.io/results-omitted"] == str(500 - cap)


def test_clean_namespaces_can_be_left_out_for_a_publisher_that_prunes() -> None:
    docs = policy_reports(homelab(), include_clean=False)
    assert [(d["kind"], d["metadata"].get("namespace", "")) for d in docs] == [
        ("ClusterPolicyReport", ""),
        ("PolicyReport", "vms"),
    ]


def test_a_diagnosis_that_raises_is_an_error_result_and_the_policies_still_count() -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("bug")

    diagnoses = [replace(d, diagnose=broken) for d in ALL_DIAGNOSES]
    report = run_audit(Engine(diagnoses=diagnoses), homelab_state(), NOW)
    assert sorted(f.verdict.policy for f in report.findings) == [
        DIAGNOSIS_FAILED,
        PASSTHROUGH,
        PASSTHROUGH,
    ]
    (cluster, *_rest) = policy_reports(report)
    assert [r["result"] for r in cluster["results"]] == ["error"]
    assert "resources" not in cluster["results"][0]


def test_reports_keep_the_most_severe_results_under_the_cap() -> None:
    objects: list[Obj] = [
        dead_node(f"gpu-{i:03d}", allocatable={"nvidia.com/gpu": "1"}) for i in range(20)
    ]
    objects.append(
        dead_node(
            "zz-omen2",
            labels={"nvidia.com/gpu.workload.config": "vm-passthrough"},
            allocatable={RTX_5090: "1"},
        )
    )
    (cluster,) = policy_reports(run_audit(Engine(), state_of(*objects), NOW), max_results=3)
    assert cluster["results"][0]["policy"] == RECOVERY_TRAP_PASSTHROUGH
    assert cluster["summary"]["fail"] == 1 and cluster["summary"]["warn"] == 21


# --- Markdown -------------------------------------------------------------------------------------


def test_markdown_has_a_mermaid_flowchart_per_causal_chain(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(
        capsys, "audit", "--state", str(HOMELAB), "--now", NOW_TEXT, "-o", "markdown"
    )
    assert code == 1
    chains = sum(1 for f in homelab().findings if f.verdict.chain)
    assert chains == 9
    assert out.count("```mermaid\nflowchart TD\n") == chains
    assert out.startswith("# gpu-guard audit, 2026-10-30T12:00:00Z\n")
    assert "| omen2 | vm-passthrough | NotReady (recovery trap) | 112 days |" in out
    assert "### 1. DENY `recovery-trap-vm-passthrough` Node omen2" in out
    assert "1. before kubelet returns: kubectl label node omen2" in out
    for block in re.findall(r"```mermaid\n(.*?)```", out, flags=re.S):
        for line in block.splitlines()[1:]:
            assert re.fullmatch(r'    n\d+(?: --> n\d+)?\["[^"]*"\]', line), line


def test_mermaid_labels_escape_quotes_and_angle_brackets() -> None:
    text = mermaid(Link('a "quoted" <b>', (Link("c # d"),)))
    assert text == (
        'flowchart TD\n    n0["a #quot;quoted#quot; #lt;b#gt;"]\n    n0 --> n1["c #35; d"]'
    )


# --- the table ------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [100, 80, 160])
def test_the_table_fits_its_width_without_colour(width: int) -> None:
    out = render_table(homelab(), width=width)
    assert not ANSI.search(out)
    assert max(cell_len(line) for line in out.splitlines()) <= width
    assert all(line == line.rstrip() for line in out.splitlines())


def test_the_table_reads_as_a_report() -> None:
    out = render_table(homelab())
    assert out.startswith(
        "gpu-guard audit at 2026-10-30T12:00:00Z: 9 findings (1 deny, 6 warn, 2 audit)\n"
    )
    assert "VirtualMachine vms/gpu-fedora  for 112 days (since 2026-07-10)" in out
    assert "1. DENY [high] recovery-trap-vm-passthrough" in out
    assert "NotReady (trap)" in out
    assert "fix, in this order:" in out


def test_the_table_uses_ascii_where_the_output_is_not_utf8() -> None:
    out = render_table(homelab(), encoding="ascii")
    out.encode("ascii")


def test_colour_comes_only_when_asked_for() -> None:
    assert ANSI.search(render_table(homelab(), color=True))


def test_a_clean_state_says_so_in_every_format() -> None:
    report = run_audit(Engine(), state_of(node("alive")), NOW)
    assert "nothing found" in render_table(report)
    assert "nothing found" in render_text(report)
    assert "Nothing found" in render_markdown(report)
    (cluster,) = policy_reports(report)
    assert cluster["results"] == [] and exit_code(report.verdicts) == 0


# --- determinism ----------------------------------------------------------------------------------

RENDERERS: list[tuple[str, Callable[[AuditReport], str]]] = [
    ("table", render_table),
    ("text", render_text),
    ("markdown", render_markdown),
    ("policyreport", render_policy_reports),
    ("json", lambda r: orjson.dumps(r.to_json()).decode()),
]


@pytest.mark.parametrize(("name", "render"), RENDERERS, ids=[n for n, _ in RENDERERS])
def test_the_same_state_renders_the_same_bytes(
    name: str, render: Callable[[AuditReport], str]
) -> None:
    fresh, _ = load_state_objects([str(HOMELAB)])
    assert render(run_audit(Engine(), fresh, NOW)) == render(homelab())


# --- progress -------------------------------------------------------------------------------------


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_silent_when_stderr_is_not_a_terminal() -> None:
    stream = io.StringIO()
    with progress_bar(stream) as track:
        assert track is untracked
        report = run_audit(Engine(), homelab_state(), NOW, track)
    assert stream.getvalue() == ""
    assert report == homelab()


def test_progress_is_off_when_disabled_even_on_a_terminal() -> None:
    stream = FakeTerminal()
    with progress_bar(stream, enabled=False) as track:
        assert track is untracked
    assert stream.getvalue() == ""


def test_progress_draws_on_a_terminal_and_changes_nothing() -> None:
    stream = FakeTerminal()
    with progress_bar(stream) as track:
        report = run_audit(Engine(), homelab_state(), NOW, track)
    assert "auditing" in stream.getvalue()
    assert report == homelab()


def test_the_audit_walks_every_stage_through_the_tracker() -> None:
    stages: list[str] = []

    def track(items: Sequence[Any], description: str) -> Iterator[Any]:
        stages.append(description)
        yield from items

    run_audit(Engine(), homelab_state(), NOW, track)
    assert stages == ["policies", "nodes", "VMs"]


def test_the_audit_cli_prints_no_progress_into_captured_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "audit", "--state", str(HOMELAB), "--now", NOW_TEXT)
    assert code == 1 and err == ""
    assert "recovery-trap-vm-passthrough" in out


def test_the_not_ready_nodes_are_all_in_the_cluster_report() -> None:
    (cluster, *_rest) = policy_reports(homelab())
    names = [
        r["resources"][0]["name"] for r in cluster["results"] if r["policy"] == GPU_NODE_NOT_READY
    ]
    assert names == ["omen2", "omen3", "tower2", "tower3"]

"""Several ClusterPolicies: gpu-guard judges by the one the GPU Operator acts on, and says so."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.cluster.gpu_operator import (
    ClusterPolicyInfo,
    cluster_policies_in_force,
    project_cluster_policy,
)
from policies.state.cluster import ClusterState
from webhook.cli import main
from webhook.commands.common import follow_configuration
from webhook.config import GuardConfig
from webhook.engine import Engine

ROOT = Path(__file__).resolve().parent.parent
HOMELAB = ROOT / "examples" / "homelab"
NOW = "2026-10-30T12:00:00Z"


def policy(name: str, created: str | None, state: str = "", sandbox: bool = True) -> Any:
    meta: dict[str, Any] = {"name": name}
    if created:
        meta["creationTimestamp"] = created
    obj: dict[str, Any] = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": meta,
        "spec": {"sandboxWorkloads": {"enabled": sandbox, "defaultWorkload": "container"}},
    }
    if state:
        obj["status"] = {"state": state}
    return obj


def info(*objs: Any) -> list[ClusterPolicyInfo]:
    return [project_cluster_policy(o) for o in objs]


V26_7, V26_3 = "v26.7.0", "26.3.1"


@pytest.mark.parametrize(
    ("objs", "version", "expected"),
    [
        ([policy("b", "2025-01-01T00:00:00Z")], V26_7, ("b",)),
        ([policy("b", "2025-01-01T00:00:00Z")], "", ("b",)),
        (
            [policy("b", "2025-01-01T00:00:00Z"), policy("a", "2025-06-01T00:00:00Z")],
            V26_7,
            ("b",),
        ),
        (
            [
                policy("old", "2025-01-01T00:00:00Z", state="ignored"),
                policy("new", "2025-06-01T00:00:00Z", state="ready"),
            ],
            V26_7,
            ("old",),
        ),
        ([policy("b", None), policy("a", None)], V26_7, ("a",)),
        ([policy("b", "2025-01-01T00:00:00Z"), policy("a", None)], V26_7, ("b",)),
        (
            [policy("b", "2025-01-01T00:00:00Z"), policy("a", "2025-01-01T00:00:00Z")],
            "26.7",
            ("a",),
        ),
        (
            [policy("b", "2025-01-01T00:00:00Z"), policy("a", "2025-06-01T00:00:00Z")],
            V26_3,
            ("b", "a"),
        ),
        (
            [
                policy("old", "2025-01-01T00:00:00Z", state="ignored"),
                policy("new", "2025-06-01T00:00:00Z", state="ready"),
            ],
            "",
            ("old", "new"),
        ),
        (
            [policy("b", "2025-01-01T00:00:00Z"), policy("a", "2025-06-01T00:00:00Z")],
            "v26.7.0-rc.1",
            ("b", "a"),
        ),
        ([policy("b", "2025-01-01T00:00:00Z"), policy("a", None)], "v27.1.0", ("b",)),
    ],
    ids=[
        "one ClusterPolicy is the one",
        "one ClusterPolicy is the one whatever the version",
        "from 26.7 the oldest wins over a name that sorts first",
        "status.state ignored is never trusted: whoever may write status writes it",
        "without timestamps the name decides",
        "one with a timestamp is older than one without",
        "the same timestamp: the name breaks the tie",
        "26.3 keeps its choice in memory: every one is in force",
        "an unknown version: every one is in force, status or not",
        "a 26.7 prerelease is not 26.7",
        "a later release keeps the 26.7 rule",
    ],
)
def test_the_cluster_policies_in_force_follow_the_operators_rule_for_its_version(
    objs: list[Any], version: str, expected: tuple[str, ...]
) -> None:
    assert tuple(p.name for p in cluster_policies_in_force(info(*objs), version)) == expected


def test_no_cluster_policy_is_none_in_force() -> None:
    assert cluster_policies_in_force([], V26_7) == ()


@pytest.fixture
def homelab_with_a_newer_policy(tmp_path: Path) -> Path:
    """The home lab plus a ClusterPolicy made later, named to sort first, sandbox workloads off."""
    path = tmp_path / "extra.yaml"
    path.write_text(
        yaml.safe_dump(policy("bootstrap-policy", "2026-09-01T00:00:00Z", sandbox=False))
    )
    return path


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    return code, out.getvalue()


def configured(tmp_path: Path, version: str) -> list[str]:
    """``--config`` naming the GPU Operator's version."""
    path = tmp_path / "guard.yaml"
    path.write_text(yaml.safe_dump({"gpuOperator": {"version": version}}))
    return ["--config", str(path)]


def test_a_newer_second_cluster_policy_does_not_hide_the_recovery_trap(
    homelab_with_a_newer_policy: Path, tmp_path: Path
) -> None:
    state = ["--state", str(HOMELAB / "cluster.yaml"), str(homelab_with_a_newer_policy)]
    for config in ([], configured(tmp_path, V26_7)):
        code, out = run(["audit", *state, *config, "--now", NOW, "-o", "json"])
        findings = json.loads(out)["findings"]
        assert code == 1
        assert any(f["policy"] == "recovery-trap-vm-passthrough" for f in findings)
        (several,) = [f for f in findings if f["policy"] == "several-cluster-policies"]
        assert several["resource"]["name"] == "cluster-policy"
    assert "ignores bootstrap-policy" in several["message"]
    assert "have no effect" in several["message"]


def test_an_unknown_operator_version_is_said_with_how_to_tell_the_guard(
    homelab_with_a_newer_policy: Path,
) -> None:
    state = ["--state", str(HOMELAB / "cluster.yaml"), str(homelab_with_a_newer_policy)]
    _, out = run(["audit", *state, "--now", NOW, "-o", "json"])
    (several,) = [
        f for f in json.loads(out)["findings"] if f["policy"] == "several-cluster-policies"
    ]
    assert "known only to it (gpuOperator.version is not configured)" in several["message"]
    assert "their settings differ" in several["message"]
    assert any("gpuOperator.version" in step for step in several["remediation"])


def test_a_newer_second_cluster_policy_does_not_let_the_switch_through(
    homelab_with_a_newer_policy: Path, tmp_path: Path
) -> None:
    change = HOMELAB / "changes" / "01-switch-omen1-to-vm-passthrough.yaml"
    state = ["--state", str(HOMELAB / "cluster.yaml"), str(homelab_with_a_newer_policy)]
    code, out = run(["check", "-f", str(change), *state, *configured(tmp_path, V26_7)])
    assert code == 1
    assert out.splitlines()[0] == (
        "Note: 2 ClusterPolicies: judged by cluster-policy, the one the GPU Operator acts on "
        "(sandbox workloads on, default container); ignored: bootstrap-policy"
    )
    code, out = run(["check", "-f", str(change), *state])
    assert code == 1
    assert out.splitlines()[0] == (
        "Note: 2 ClusterPolicies (cluster-policy and bootstrap-policy): which one the GPU "
        "Operator acts on is known only to it (gpuOperator.version is not configured), so each "
        "change is judged under each of them and denied if any would deny"
    )
    _, out = run(["check", "-f", str(change), *state, "-o", "json"])
    (note,) = json.loads(out)["notes"]
    assert "judged under each of them" in note


@pytest.mark.parametrize("version", ["", V26_3, V26_7])
def test_a_decoy_cluster_policy_and_a_forged_ignored_status_do_not_let_the_switch_through(
    tmp_path: Path, version: str
) -> None:
    """The attack of issue 32: a second ClusterPolicy with sandbox workloads off, and the real
    one's status.state set to ignored through its status subresource."""
    cluster = yaml.safe_load((HOMELAB / "cluster.yaml").read_text())
    for obj in cluster["items"]:
        if obj["kind"] == "ClusterPolicy":
            obj.setdefault("status", {})["state"] = "ignored"
    forged = tmp_path / "cluster.yaml"
    forged.write_text(yaml.safe_dump(cluster))
    decoy = tmp_path / "decoy.yaml"
    decoy.write_text(
        yaml.safe_dump(policy("aaa-decoy", "2026-10-01T00:00:00Z", state="ready", sandbox=False))
    )
    change = HOMELAB / "changes" / "01-switch-omen1-to-vm-passthrough.yaml"
    config = configured(tmp_path, version) if version else []
    code, out = run(
        ["check", "-f", str(change), "--state", str(forged), str(decoy), *config, "-o", "json"]
    )
    assert code == 1
    (denial,) = [v for v in json.loads(out)["results"][0]["verdicts"] if v["action"] == "deny"]
    assert denial["policy"] == "workload-switch-with-gpu-pods"
    if version != V26_7:
        assert "judged under ClusterPolicy cluster-policy" in denial["message"]


def test_with_one_cluster_policy_check_says_nothing_about_it() -> None:
    change = HOMELAB / "changes" / "01-switch-omen1-to-vm-passthrough.yaml"
    _, out = run(["check", "-f", str(change), "--state", str(HOMELAB / "cluster.yaml")])
    assert not out.startswith("Note:")
    _, out = run(
        ["check", "-f", str(change), "--state", str(HOMELAB / "cluster.yaml"), "-o", "json"]
    )
    assert "notes" not in json.loads(out)


def test_the_state_reads_the_operators_version_from_the_configuration_as_it_is_now() -> None:
    """``serve`` reloads its configuration: the rule follows without a restart."""
    engine = Engine(GuardConfig())
    state = ClusterState()
    state.upsert(policy("b", "2025-01-01T00:00:00Z"))
    state.upsert(policy("a", "2025-06-01T00:00:00Z"))
    follow_configuration(state, engine)
    assert [p.name for p in state.cluster_policies_in_force()] == ["b", "a"]
    engine.config = GuardConfig(gpu_operator_version=V26_7)
    assert [p.name for p in state.cluster_policies_in_force()] == ["b"]
    assert state.gpu_operator_version() == V26_7


def test_a_26_3_operator_is_said_to_keep_its_choice_in_memory(
    homelab_with_a_newer_policy: Path, tmp_path: Path
) -> None:
    state = ["--state", str(HOMELAB / "cluster.yaml"), str(homelab_with_a_newer_policy)]
    _, out = run(["audit", *state, *configured(tmp_path, V26_3), "--now", NOW, "-o", "json"])
    (several,) = [
        f for f in json.loads(out)["findings"] if f["policy"] == "several-cluster-policies"
    ]
    assert "known only to it (GPU Operator 26.3.1 keeps its choice in memory)" in several["message"]
    assert several["chain"][0].startswith("GPU Operator 26.3.1: acts on one ClusterPolicy")
    assert several["chain"][1:] == [
        "ClusterPolicy cluster-policy: sandbox workloads on, default container; status.state "
        "ready (not trusted)",
        "ClusterPolicy bootstrap-policy: sandbox workloads off: every GPU node container",
    ]

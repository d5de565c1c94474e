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
    cluster_policy_in_force,
    project_cluster_policy,
)
from webhook.cli import main

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


@pytest.mark.parametrize(
    ("objs", "expected"),
    [
        ([policy("b", "2025-01-01T00:00:00Z")], "b"),
        ([policy("b", "2025-01-01T00:00:00Z"), policy("a", "2025-06-01T00:00:00Z")], "b"),
        (
            [
                policy("old", "2025-01-01T00:00:00Z", state="ignored"),
                policy("new", "2025-06-01T00:00:00Z", state="ready"),
            ],
            "new",
        ),
        ([policy("b", None), policy("a", None)], "a"),
        ([policy("b", "2025-01-01T00:00:00Z"), policy("a", None)], "b"),
        ([policy("x", "2025-01-01T00:00:00Z", state="ignored")], "x"),
    ],
    ids=[
        "one ClusterPolicy is the one",
        "the oldest wins over a name that sorts first",
        "one the operator marked ignored is never the one while another is not",
        "without timestamps the name decides",
        "one with a timestamp is older than one without",
        "all ignored: still the oldest, so the guard judges by something",
    ],
)
def test_the_cluster_policy_in_force_follows_the_operators_rule(
    objs: list[Any], expected: str
) -> None:
    chosen = cluster_policy_in_force(info(*objs))
    assert chosen is not None and chosen.name == expected


def test_no_cluster_policy_is_none() -> None:
    assert cluster_policy_in_force([]) is None


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


def test_a_newer_second_cluster_policy_does_not_hide_the_recovery_trap(
    homelab_with_a_newer_policy: Path,
) -> None:
    state = ["--state", str(HOMELAB / "cluster.yaml"), str(homelab_with_a_newer_policy)]
    code, out = run(["audit", *state, "--now", NOW, "-o", "json"])
    findings = json.loads(out)["findings"]
    assert code == 1
    assert any(f["policy"] == "recovery-trap-vm-passthrough" for f in findings)
    (several,) = [f for f in findings if f["policy"] == "several-cluster-policies"]
    assert several["resource"]["name"] == "cluster-policy"
    assert "ignores bootstrap-policy" in several["message"]
    assert "have no effect" in several["message"]


def test_a_newer_second_cluster_policy_does_not_let_the_switch_through(
    homelab_with_a_newer_policy: Path,
) -> None:
    change = HOMELAB / "changes" / "01-switch-omen1-to-vm-passthrough.yaml"
    state = ["--state", str(HOMELAB / "cluster.yaml"), str(homelab_with_a_newer_policy)]
    code, out = run(["check", "-f", str(change), *state])
    assert code == 1
    assert out.splitlines()[0] == (
        "Note: 2 ClusterPolicies: judged by cluster-policy, the one the GPU Operator acts on "
        "(sandbox workloads on, default container); ignored: bootstrap-policy"
    )
    _, out = run(["check", "-f", str(change), *state, "-o", "json"])
    (note,) = json.loads(out)["notes"]
    assert "judged by cluster-policy" in note


def test_with_one_cluster_policy_check_says_nothing_about_it() -> None:
    change = HOMELAB / "changes" / "01-switch-omen1-to-vm-passthrough.yaml"
    _, out = run(["check", "-f", str(change), "--state", str(HOMELAB / "cluster.yaml")])
    assert not out.startswith("Note:")
    _, out = run(
        ["check", "-f", str(change), "--state", str(HOMELAB / "cluster.yaml"), "-o", "json"]
    )
    assert "notes" not in json.loads(out)

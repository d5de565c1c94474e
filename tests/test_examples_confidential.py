"""examples/confidential/ stays what its README says: Kata and confidential containers on H100s
in kata mode with the CC manager on, an L40S whose GPU users ask for nothing, one failed CC mode
the audit finds, and an inventory that names every user with why it counts."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.test_cli import run
from webhook.state.files import load_state

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "confidential"
STATE = str(EXAMPLE / "cluster.yaml")
NOW = "2026-10-30T12:00:00Z"


def test_the_example_runs_kata_mode_with_the_cc_manager_on() -> None:
    policy = load_state([STATE]).cluster_policy()
    assert policy is not None
    assert (policy.sandbox_mode, policy.cc_enabled, policy.cc_default_mode) == ("kata", True, "on")


def test_the_change_files_are_numbered_01_to_07() -> None:
    names = [p.name[:3] for p in sorted((EXAMPLE / "changes").glob("*.yaml"))]
    assert names == ["01-", "02-", "03-", "04-", "05-", "06-", "07-"]


def test_the_example_runs_its_driver_through_one_default_nvidiadriver_on_every_gpu_node() -> None:
    state = load_state([STATE])
    policy = state.cluster_policy()
    assert policy is not None and policy.use_nvidia_driver_crd
    (driver,) = state.nvidia_drivers()
    assert (driver.name, driver.default, driver.version) == ("default", True, "570.172.08")
    owners = {n.name: n.labels.get("nvidia.com/gpu-operator.driver.owner") for n in state.nodes()}
    assert set(owners.values()) == {"default"}


def test_the_audit_finds_only_the_failed_cc_mode(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "audit", "--state", STATE, "--now", NOW, "-o", "json")
    findings = orjson.loads(out)["findings"]
    assert [(f["policy"], f["action"], f["resource"]["name"]) for f in findings] == [
        ("cc-mode-not-applied", "warn", "h100-cc-2")
    ]
    assert code == 0


def test_the_inventory_names_each_user_with_why_it_counts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "inventory", "--state", STATE, "--now", NOW, "-o", "json")
    rows = {row["node"]: row["inUse"]["pods"] for row in orjson.loads(out)["nodes"]}
    assert code == 0
    assert rows == {
        "h100-cc-1": ["cc/secure-inference (Kata pod: nvidia.com/pgpu: 1)"],
        "h100-cc-2": [],
        "h100-kata-1": ["ml/llm-kata (Kata pod: nvidia.com/pgpu: 1)"],
        "l40s-1": [
            "lab/notebook (privileged, mounts /dev/nvidia0, /dev/nvidiactl from the host)",
            "mon/gpu-agent-4xk2p (env NVIDIA_VISIBLE_DEVICES=all with runtimeClassName nvidia, "
            "DaemonSet: drain leaves it)",
        ],
    }

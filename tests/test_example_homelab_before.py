"""examples/homelab-before/: the home lab green, the day before its incident, and the audit that
predicts the incident through sole-provider."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from policies.cluster.health import node_health
from policies.diagnoses.sole_provider import SOLE_PROVIDER
from tests.test_cli import run
from webhook.state.files import load_state

STATE = str(Path(__file__).resolve().parents[1] / "examples" / "homelab-before" / "cluster.yaml")
NOW = "2026-07-09T12:00:00Z"
INCIDENT = "2026-07-10T03:12:41Z"
"""When omen2 went NotReady in examples/homelab."""
TIMESTAMP = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\b")


def audit_json(capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, Any]]]:
    code, out, _ = run(capsys, "audit", "--state", STATE, "--now", NOW, "-o", "json")
    findings: list[dict[str, Any]] = orjson.loads(out)["findings"]
    return code, findings


def test_every_timestamp_in_the_state_precedes_the_incident() -> None:
    stamps = TIMESTAMP.findall(Path(STATE).read_text())
    assert stamps
    assert max(stamps) < INCIDENT


def test_omen2_is_ready_and_runs_both_vms_before_the_incident() -> None:
    state = load_state([STATE])
    omen2 = state.node("omen2")
    assert omen2 is not None and node_health(omen2).healthy
    running = {
        vmi.name: (vmi.node, vmi.phase)
        for vmi in state.vmis()
        if vmi.name in ("gpu-fedora", "rhel9-gpu-vm")
    }
    assert running == {name: ("omen2", "Running") for name in ("gpu-fedora", "rhel9-gpu-vm")}


def test_the_audit_is_green_but_predicts_that_omen2_failing_strands_both_vms(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, findings = audit_json(capsys)
    assert code == 0
    assert {f["action"] for f in findings} == {"audit"}
    assert not [
        f for f in findings if f["policy"] in ("recovery-trap-vm-passthrough", "gpu-node-not-ready")
    ]
    omen2 = [
        f
        for f in findings
        if f["policy"] == SOLE_PROVIDER
        and (f["resource"]["kind"], f["resource"]["name"]) == ("Node", "omen2")
    ]
    assert len(omen2) == 1
    assert omen2[0]["message"].startswith(
        "if omen2 fails, vms/gpu-fedora and vms/rhel9-gpu-vm stop and cannot start anywhere else"
    )

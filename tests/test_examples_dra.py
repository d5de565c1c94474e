"""examples/dra/ stays usable: the state loads with every DRA kind in it, every change file parses
and ``check`` judges it (allowed or not, never bad input), the audit runs, and the synthetic DRA
cluster the benchmarks use (bench.synthetic --dra) hangs together."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.synthetic import DraLayout, dra_plan, write_list
from policies.cluster.kinds import (
    DEVICE_CLASS,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    RESOURCE_SLICE,
)
from webhook.cli import main
from webhook.commands.common import EXIT_FINDINGS, EXIT_OK
from webhook.state.files import load_state, read_objects

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "dra"
STATE = str(EXAMPLE / "cluster.yaml")
CHANGES = sorted((EXAMPLE / "changes").glob("*.yaml"))
NOW = "2026-10-30T12:00:00Z"


def test_the_dra_example_state_holds_classes_slices_claims_and_templates() -> None:
    counts = load_state([STATE]).counts()
    for kind in (DEVICE_CLASS, RESOURCE_SLICE, RESOURCE_CLAIM, RESOURCE_CLAIM_TEMPLATE):
        assert counts[str(kind)] > 0, kind


def test_the_dra_example_has_seven_change_files_each_with_its_expected_answer() -> None:
    assert len(CHANGES) == 7
    for path in CHANGES:
        assert "Expected answer from gpu-guard:" in path.read_text(), path.name


@pytest.mark.parametrize("change", CHANGES, ids=[path.stem for path in CHANGES])
def test_each_dra_change_file_parses_and_is_judged_against_the_example_state(
    change: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert len(list(read_objects(str(change)))) == 1
    code = main(["check", "-f", str(change), "--state", STATE])
    out, err = capsys.readouterr()
    assert code in (EXIT_OK, EXIT_FINDINGS), err
    assert out.strip(), "check printed no answer"


def test_the_dra_example_audits(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["audit", "--state", STATE, "--now", NOW, "-o", "json"])
    out, err = capsys.readouterr()
    assert code in (EXIT_OK, EXIT_FINDINGS), err
    assert '"findings"' in out


def test_the_synthetic_dra_cluster_loads_as_planned(tmp_path: Path) -> None:
    layout = DraLayout.at(0.004)
    plan = dra_plan(layout)
    path = tmp_path / "dra.json"
    written = write_list(path, "json", scale=0.004, dra=True, compact=True)
    state = load_state([str(path)])
    counts = state.counts()
    assert counts["Node"] == layout.nodes == written["Node"]
    assert counts[str(RESOURCE_SLICE)] == layout.nodes
    assert counts[str(RESOURCE_CLAIM)] == len(plan.claims)
    assert counts[str(RESOURCE_CLAIM_TEMPLATE)] == len(plan.templates)
    assert counts["VirtualMachine.kubevirt.io"] == layout.vms
    for claim in plan.claims:
        info = state.claim(claim.namespace, claim.name)
        assert info is not None and info.allocated == bool(claim.node), claim.name
        pod = state.pod(claim.namespace, claim.consumer)
        assert pod is not None and any(ref.claim == claim.name for ref in pod.claims), claim.name
    held = {claim.node for claim in plan.claims if claim.node}
    assert all(state.claims_allocated_on(node) for node in held)


def test_the_synthetic_dra_cluster_is_the_same_for_the_same_seed(tmp_path: Path) -> None:
    first, second, other = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    write_list(first, "json", scale=0.004, seed=3, dra=True)
    write_list(second, "json", scale=0.004, seed=3, dra=True)
    write_list(other, "json", scale=0.004, seed=4, dra=True)
    assert first.read_bytes() == second.read_bytes() != other.read_bytes()

"""examples/openshift/ stays what its README says: an OpenShift Virtualization cluster whose
HyperConverged HCO has translated onto the KubeVirt CR in force (so the audit has nothing to
say of either), with A10s on vGPU and passthrough, change files numbered 01 to 05, and the
audit, inventory and a what-if all running on it."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from policies.cluster.hyperconverged import is_hco_owned, written_by_hco
from policies.cluster.kinds import CLUSTER_POLICY, HYPERCONVERGED, KUBEVIRT
from policies.cluster.kubevirt_config import translation_of
from tests.test_cli import run
from webhook.state.files import load_state

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "openshift"
STATE = str(EXAMPLE / "cluster.yaml")
CHANGES = sorted((EXAMPLE / "changes").glob("*.yaml"))
NOW = "2026-10-30T12:00:00Z"


def test_the_example_holds_a_v1_hyperconverged_hcos_kubevirt_cr_and_a_cluster_policy() -> None:
    state = load_state([STATE])
    counts = state.counts()
    for kind in (HYPERCONVERGED, KUBEVIRT, CLUSTER_POLICY):
        assert counts[str(kind)] == 1, kind
    hc = state.hyperconverged("openshift-cnv")
    assert hc is not None and hc.layout == "v1"
    written = written_by_hco(hc, state.kubevirts_in("openshift-cnv"))
    assert written is not None and is_hco_owned(written)


def test_the_kubevirt_cr_in_force_is_what_hco_writes_from_the_hyperconverged() -> None:
    state = load_state([STATE])
    hc = state.hyperconverged("openshift-cnv")
    assert hc is not None
    translated = translation_of(hc, state).kubevirt
    (in_force,) = state.kubevirts()
    assert translated.permitted_resource_names == in_force.permitted_resource_names
    assert set(translated.gates.enabled) == set(in_force.gates.enabled)
    assert set(translated.gates.disabled) == set(in_force.gates.disabled)


def test_the_a10_nodes_are_on_vgpu_and_passthrough_with_a_vm_on_each_kind() -> None:
    state = load_state([STATE])
    modes = {n.name: n.labels.get("nvidia.com/gpu.workload.config") for n in state.nodes()}
    assert modes["a10-vgpu-1"] == "vm-vgpu"
    assert {modes["a10-pt-1"], modes["a10-pt-2"]} == {"vm-passthrough"}
    assert [v.key for v in state.vms_using("nvidia.com/NVIDIA_A10-12Q")] == ["vdi/desktop-1"]
    assert [v.key for v in state.vms_using("nvidia.com/GA102GL_A10")] == ["ml/trainer"]


def test_the_change_files_are_numbered_01_to_07() -> None:
    assert [p.name[:3] for p in CHANGES] == ["01-", "02-", "03-", "04-", "05-", "06-", "07-"]


def test_the_audit_finds_only_the_sole_vgpu_provider(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "audit", "--state", STATE, "--now", NOW, "-o", "json")
    findings = orjson.loads(out)["findings"]
    assert [(f["policy"], f["resource"]["name"]) for f in findings] == [
        ("sole-provider", "a10-vgpu-1")
    ]
    assert code == 0


def test_inventory_and_a_what_if_run_on_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inventory", "--state", STATE, "--now", NOW, "-o", "json")
    assert code == 0 and "a10-vgpu-1" in out
    code, out, _ = run(
        capsys, "audit", "--state", STATE, "--now", NOW, "--what-if", "node-down=a10-pt-1"
    )
    assert "ml/trainer" in out

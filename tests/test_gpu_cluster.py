"""GPU Operator 26.7's GPUCluster: read as state, said when a ClusterPolicy stands beside it, and
the workload label it makes the operator ignore (no false deny of a relabel under DRA pods)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.cluster.gpu_operator import project_gpu_cluster
from policies.cluster.kinds import GPU_CLUSTER
from policies.rules import passthrough_to_container, workload_switch
from policies.vocabulary.fields import ObjectError
from tests.builders import Obj, cluster_policy, gpu_pod, node, request, state_of, vmi, with_labels
from webhook.cli import main

ROOT = Path(__file__).resolve().parent.parent
DRA = ROOT / "examples" / "dra"
NOW = "2026-10-30T12:00:00Z"
WORKLOAD = "nvidia.com/gpu.workload.config"


def gpu_cluster(**spec: Any) -> Obj:
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "GPUCluster",
        "metadata": {"name": "gpu-cluster"},
        "spec": {"draDriver": dict(spec)},
        "status": {"state": "ready"},
    }


# --- the projection --------------------------------------------------------------------------


def test_the_example_gpucluster_reads_its_gates_compute_domains_and_state() -> None:
    (obj,) = yaml.safe_load_all((DRA / "gpucluster.yaml").read_text())
    info = project_gpu_cluster(obj)
    assert (info.name, info.state) == ("gpu-cluster", "ready")
    assert info.dra_feature_gates == ("DeviceMetadata", "PassthroughSupport")
    assert info.compute_domains is False


def test_compute_domains_default_on_and_a_gate_set_false_is_off() -> None:
    info = project_gpu_cluster(gpu_cluster(featureGates={"PassthroughSupport": False}))
    assert info.dra_feature_gates == ()
    assert info.compute_domains is True


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        pytest.param({"featureGates": ["PassthroughSupport"]}, "spec.draDriver.featureGates"),
        pytest.param(
            {"featureGates": {"PassthroughSupport": "yes"}},
            "spec.draDriver.featureGates.PassthroughSupport",
        ),
        pytest.param(
            {"computeDomains": {"enabled": "no"}}, "spec.draDriver.computeDomains.enabled"
        ),
    ],
)
def test_a_malformed_field_is_named_by_its_path(spec: dict[str, Any], path: str) -> None:
    with pytest.raises(ObjectError) as raised:
        project_gpu_cluster(gpu_cluster(**spec))
    assert raised.value.path == path


def test_the_state_keeps_and_drops_a_gpucluster() -> None:
    state = state_of(gpu_cluster())
    assert [c.name for c in state.gpu_clusters()] == ["gpu-cluster"]
    assert state.keys(GPU_CLUSTER) == {("", "gpu-cluster")}
    state.delete(GPU_CLUSTER, "", "gpu-cluster")
    assert state.gpu_clusters() == []


# --- the workload label under a GPUCluster ------------------------------------------------------

OMEN1 = node("omen1", labels={WORKLOAD: "container"}, allocatable={"nvidia.com/gpu": "1"})
SWITCH = request("UPDATE", with_labels(OMEN1, {WORKLOAD: "vm-passthrough"}), OMEN1)
TOWER1 = node("tower1", labels={WORKLOAD: "vm-passthrough"})
LEAVE = request("UPDATE", with_labels(TOWER1, {WORKLOAD: "container"}), TOWER1)
WIN11 = vmi("win11", node_name="tower1", gpus=["nvidia.com/GA102_GEFORCE_RTX_3090"])


@pytest.mark.parametrize(
    ("objects", "denied"),
    [
        pytest.param([], True, id="no operator CR known: the label at face value"),
        pytest.param([gpu_cluster()], False, id="a GPUCluster alone: the label is ignored"),
        pytest.param([cluster_policy()], True, id="a ClusterPolicy alone"),
        pytest.param([gpu_cluster(), cluster_policy()], True, id="both: which stays is not known"),
    ],
)
def test_a_relabel_under_gpu_users_is_denied_unless_a_gpucluster_alone_runs(
    objects: list[Obj], denied: bool
) -> None:
    switch_state = state_of(OMEN1, gpu_pod("train", "omen1"), *objects)
    assert bool(workload_switch.check(SWITCH, switch_state)) is denied
    leave_state = state_of(TOWER1, WIN11, *objects)
    assert bool(passthrough_to_container.check(LEAVE, leave_state)) is denied


# --- the examples and the audit ---------------------------------------------------------------


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    return code, out.getvalue()


@pytest.fixture
def leftover_policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(cluster_policy()))
    return path


def test_the_dra_examples_switch_is_allowed_when_a_gpucluster_runs_the_driver() -> None:
    change = DRA / "changes" / "01-switch-omen1-to-vm-passthrough.yaml"
    state = ["--state", str(DRA / "cluster.yaml"), str(DRA / "gpucluster.yaml")]
    code, out = run(["check", "-f", str(change), *state])
    assert (code, out.splitlines()[0]) == (0, "node/omen1 configured (server dry run)")


def test_a_leftover_clusterpolicy_brings_the_deny_back_and_the_audit_says_why(
    leftover_policy: Path,
) -> None:
    change = DRA / "changes" / "01-switch-omen1-to-vm-passthrough.yaml"
    state = ["--state", str(DRA / "cluster.yaml"), str(DRA / "gpucluster.yaml")]
    code, _ = run(["check", "-f", str(change), *state, str(leftover_policy)])
    assert code == 1
    _, out = run(["audit", *state, str(leftover_policy), "--now", NOW, "-o", "json"])
    (both,) = [
        f for f in json.loads(out)["findings"] if f["policy"] == "gpucluster-beside-clusterpolicy"
    ]
    assert both["resource"]["kind"] == "GPUCluster"
    assert both["resource"]["name"] == "gpu-cluster"
    assert both["message"] == (
        "GPUCluster gpu-cluster and ClusterPolicy cluster-policy both exist: the GPU Operator "
        'refuses both ("a ClusterPolicy CR and GPUCluster CR may not exist at the same time", '
        "gpu-operator v26.7.0): each is kept notReady and no node's GPU labels are maintained"
    )
    assert both["severity"] == "high"
    assert "kubectl delete gpuclusters.nvidia.com gpu-cluster" in both["remediation"][0]


def test_a_gpucluster_alone_is_no_finding() -> None:
    state = ["--state", str(DRA / "cluster.yaml"), str(DRA / "gpucluster.yaml")]
    _, out = run(["audit", *state, "--now", NOW, "-o", "json"])
    policies = {f["policy"] for f in json.loads(out)["findings"]}
    assert "gpucluster-beside-clusterpolicy" not in policies


def test_the_dra_checks_answer_alike_when_the_driver_comes_from_a_gpucluster() -> None:
    plain = ["--state", str(DRA / "cluster.yaml")]
    with_cluster = [*plain, str(DRA / "gpucluster.yaml")]
    _, before = run(["audit", *plain, "--now", NOW, "-o", "json"])
    _, after = run(["audit", *with_cluster, "--now", NOW, "-o", "json"])
    assert json.loads(before)["findings"] == json.loads(after)["findings"]
    for change in sorted((DRA / "changes").glob("0[2-6]-*.yaml")):
        assert run(["check", "-f", str(change), *plain]) == run(
            ["check", "-f", str(change), *with_cluster]
        ), change.name

"""The export commands gpu-guard suggests for an empty or a partial state, run as printed against
a real API server without the GPU Operator's, KubeVirt's or HCO's CRDs (issue 34): each one works
and gives a state that answers, where ``kubectl get nodes,pods,...,gpuclusters,...`` failed
whole ("the server doesn't have a resource type") and wrote nothing.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from tests.builders import gpu_pod, node
from tests.e2e.controlplane import ControlPlane
from tests.e2e.objects import load
from webhook.cli import main

WORKLOAD = "nvidia.com/gpu.workload.config"
KUBECTL_HINT = re.compile(r"kubectl get [\w.,-]+(?: -A)? -o yaml")


def gpu(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def kubectl_hint(plane: ControlPlane, text: str, path: Path) -> Path:
    """Runs the kubectl command ``text`` suggests, as printed, into ``path``."""
    command = KUBECTL_HINT.search(text)
    assert command is not None, text
    argv = shlex.split(command.group(0))
    assert argv[0] == "kubectl"
    path.write_text(plane.kubectl(*argv[1:]).stdout)
    return path


def test_the_hints_for_an_empty_and_a_partial_state_work_on_a_cluster_without_the_crds(
    bare_control_plane: ControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plane = bare_control_plane
    omen1 = node("omen1", labels={WORKLOAD: "container"}, allocatable={"nvidia.com/gpu": "1"})
    load(plane, [omen1, gpu_pod("train", "omen1")])
    switch = tmp_path / "switch.yaml"
    switch.write_text(
        yaml.safe_dump(
            {**omen1, "metadata": {"name": "omen1", "labels": {WORKLOAD: "vm-passthrough"}}}
        )
    )
    kubeconfig = str(plane.kubeconfig)

    # An empty state: refused, with commands that work on this cluster.
    empty = tmp_path / "empty.yaml"
    empty.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    code, _, err = gpu(capsys, "check", "--state", str(empty), "-f", str(switch))
    assert code == 2 and "gpu-guard snapshot -o state.json" in err, err
    core = kubectl_hint(plane, err, tmp_path / "core.yaml")
    code, out, _ = gpu(capsys, "check", "--state", str(core), "-f", str(switch))
    assert code == 1 and "ml/train" in out, out  # nodes and pods: the switch is judged

    snapshot = tmp_path / "state.json"
    assert gpu(capsys, "snapshot", "--kubeconfig", kubeconfig, "-o", str(snapshot))[0] == 0
    code, out, _ = gpu(capsys, "check", "--state", str(snapshot), "-f", str(switch))
    assert code == 1 and "ml/train" in out and "not judged" not in out, out
    code, out, _ = gpu(capsys, "audit", "--state", str(snapshot), "-o", "json")
    assert "notJudged" not in out, out  # the CRDs it lacks are recorded as none
    # The record is the List's own metadata, which kubectl apply ignores: the snapshot applies.
    as_yaml = tmp_path / "state.yaml"
    assert gpu(capsys, "snapshot", "--kubeconfig", kubeconfig, "-o", str(as_yaml))[0] == 0
    assert "gpu-guard.io/listed-kinds" in as_yaml.read_text()
    applied = plane.kubectl("apply", "--dry-run=server", "-f", str(as_yaml)).stdout
    assert "node/omen1" in applied and "pod/train" in applied, applied

    # A partial state (nodes alone): not judged, with the export that fills the gap.
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(plane.kubectl("get", "nodes", "-o", "yaml").stdout)
    code, out, _ = gpu(capsys, "check", "--state", str(nodes), "-f", str(switch))
    assert code == 3 and "not judged: the state has no Pods" in out, out
    pods = kubectl_hint(plane, out, tmp_path / "pods.yaml")
    code, out, _ = gpu(capsys, "check", "--state", str(nodes), str(pods), "-f", str(switch))
    assert code == 1 and "ml/train" in out, out

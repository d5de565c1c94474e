"""What admission denies, the audit finds once it exists, whatever door it came through: on a real
kube-apiserver v1.36.2 with no webhook registered, a node under a CUDA pod relabelled
vm-passthrough through the ``nodes/status`` subresource (issue 32's first door; the API server's
node status strategy keeps label changes) is a deny-level ``gpu-mode-kills-users`` finding of
``gpu-guard audit`` read live, naming the pod, with the chain down to the label."""

from __future__ import annotations

import json

import pytest

from tests.builders import gpu_pod, node
from tests.e2e.controlplane import ControlPlane
from tests.e2e.objects import load
from tests.e2e.rest import MERGE_PATCH
from webhook.cli import main

WORKLOAD = "nvidia.com/gpu.workload.config"


def test_a_relabel_through_the_status_subresource_is_found_by_the_audit(
    own_control_plane: ControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    plane = own_control_plane
    load(
        plane,
        [
            node(
                "gpu-1",
                labels={"nvidia.com/gpu.present": "true", WORKLOAD: "container"},
                allocatable={"nvidia.com/gpu": "1"},
            ),
            gpu_pod("train-0", "gpu-1", namespace="ml"),
        ],
    )
    patch = {"metadata": {"labels": {WORKLOAD: "vm-passthrough"}}}
    plane.call("PATCH", "/api/v1/nodes/gpu-1/status", patch, MERGE_PATCH)
    assert plane.call("GET", "/api/v1/nodes/gpu-1")["metadata"]["labels"][WORKLOAD] == (
        "vm-passthrough"
    ), "the status subresource kept the label change"

    capsys.readouterr()
    code = main(["audit", "--kubeconfig", str(plane.kubeconfig), "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 1, err
    (found,) = [f for f in json.loads(out)["findings"] if f["policy"] == "gpu-mode-kills-users"]
    assert (found["action"], found["severity"]) == ("deny", "high")
    assert found["resource"]["name"] == "gpu-1" and "ml/train-0" in found["message"]
    assert found["chain"][0] == f"{WORKLOAD}=vm-passthrough on gpu-1"
    assert found["remediation"][0] == "kubectl cordon gpu-1"

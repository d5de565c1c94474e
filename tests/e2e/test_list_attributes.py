"""A real kube-apiserver v1.36.2 with the alpha gate DRAListTypeAttributes (KEP-5491) stores a
device attribute as a list (``numaNodes: {ints: [0, 1]}``), as NVIDIA's DRA driver publishes
``numaNode`` under its own gate. gpu-guard reads it, from a snapshot and live, and evaluates a
claim's ``includes()`` selector over it as the scheduler would (issue 34: it refused the whole
state, "unknown attribute type 'ints'", and dropped the slice from the live view)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import yaml

from tests.builders import node
from tests.dra_builders import GPU_DEVICE_CLASS, gpu, resource_claim, resource_slice
from tests.e2e.conftest import _why_not_runnable, attach_plane_logs
from tests.e2e.controlplane import HOW_TO_GET, ControlPlane
from tests.e2e.objects import load
from webhook.cli import main

WORKLOAD = "nvidia.com/gpu.workload.config"
INCLUDES = "device.attributes['gpu.nvidia.com'].numaNodes.includes(1)"


@pytest.fixture
def gated_plane(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A control plane of its own, no CRD, with the list-typed attributes' alpha gate on."""
    reason = _why_not_runnable()
    if reason is not None:
        pytest.skip(f"{reason}: {HOW_TO_GET}")
    plane = ControlPlane(tmp_path / "control-plane")
    plane.extra_args = ("--feature-gates=DRAListTypeAttributes=true",)
    plane.start()
    attach_plane_logs(request.node, plane, "gated control plane")
    yield plane
    plane.stop()


def gpu_guard(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return code, out


def test_a_list_typed_attribute_stored_by_the_api_server_is_read_and_selected_on(
    gated_plane: ControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plane = gated_plane
    device = gpu(extra={"numaNodes": {"ints": [0, 1]}})
    load(
        plane,
        [
            node("omen1", labels={WORKLOAD: "container"}),
            GPU_DEVICE_CLASS,
            resource_slice("omen1-gpu", "omen1", [device]),
        ],
    )
    stored = plane.call("GET", "/apis/resource.k8s.io/v1/resourceslices/omen1-gpu")
    assert stored["spec"]["devices"][0]["attributes"]["numaNodes"] == {"ints": [0, 1]}

    claim = tmp_path / "claim.yaml"
    claim.write_text(yaml.safe_dump(resource_claim("near-numa-1", selectors=[INCLUDES])))
    kubeconfig = str(plane.kubeconfig)
    snapshot = tmp_path / "state.json"
    assert gpu_guard(capsys, "snapshot", "--kubeconfig", kubeconfig, "-o", str(snapshot))[0] == 0
    for source in (("--state", str(snapshot)), ("--kubeconfig", kubeconfig)):
        code, out = gpu_guard(capsys, "check", *source, "-f", str(claim), "-o", "json")
        (result,) = orjson.loads(out)["results"]
        assert (code, result["verdicts"]) == (0, []), out  # one Ready node's device includes 1
        assert "claim-without-ready-device" in result["judgedBy"]
    far = tmp_path / "far.yaml"
    far.write_text(
        yaml.safe_dump(resource_claim("near-numa-2", selectors=[INCLUDES.replace("(1)", "(2)")]))
    )
    code, out = gpu_guard(capsys, "check", "--state", str(snapshot), "-f", str(far))
    assert "claim-without-ready-device" in out and "selectors reject every device" in out, out

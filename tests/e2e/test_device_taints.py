"""Device taints on a real kube-apiserver v1.36.2 with DRADeviceTaints and DRADeviceTaintRules on
and resource.k8s.io/v1beta2 served (KEP-5055): what the server stores of a tainted slice, a
tolerating claim and a DeviceTaintRule (tests/fixtures/device-taints holds a recording), what
gpu-guard reads of them live, and the NoExecute rule warned, and the rule over every device
denied, through kubectl. No controller runs: nothing is evicted, EvictionInProgress is never set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.builders import node
from tests.dra_builders import GPU_DEVICE_CLASS, claim_pod, gpu, resource_claim, resource_slice
from tests.e2e.conftest import ServeGuard
from tests.e2e.controlplane import ControlPlane
from tests.e2e.objects import load
from tests.e2e.test_dra import guarded
from tests.test_device_taints import rule

Obj = dict[str, Any]
RULES = "/apis/resource.k8s.io/v1beta2/devicetaintrules"
LOST = {"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"}
TOLERATES_LOST = {"key": "gpu.nvidia.com/gpu-lost", "operator": "Exists", "effect": "NoSchedule"}


def cluster() -> list[Obj]:
    """dgx-1 with two GPUs, gpu-1 tainted gpu-lost by the driver; ml/train-0 holds gpu-0 through
    claim ml/train-gpu, whose request tolerates gpu-lost."""
    tainted = {**gpu("gpu-1"), "taints": [LOST]}
    claim = resource_claim(
        "train-gpu", allocated=("dgx-1", "dgx-1", "gpu-0"), reserved_for=["train-0"]
    )
    claim["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [TOLERATES_LOST]
    return [
        node("dgx-1", labels={"nvidia.com/gpu.present": "true"}),
        GPU_DEVICE_CLASS,
        resource_slice("dgx-1-gpu.nvidia.com", "dgx-1", [gpu("gpu-0"), tainted]),
        claim,
        claim_pod("train-0", "dgx-1", claim="train-gpu"),
    ]


async def test_a_noexecute_rule_is_warned_with_what_it_evicts_and_one_over_everything_denied(
    every_kind_control_plane: ControlPlane, serve: ServeGuard, tmp_path: Path
) -> None:
    plane = every_kind_control_plane
    load(plane, cluster())
    stored = plane.call("GET", "/apis/resource.k8s.io/v1/resourceslices/dgx-1-gpu.nvidia.com")
    (taint,) = stored["spec"]["devices"][1]["taints"]
    assert taint["key"] == LOST["key"] and taint["timeAdded"]  # the server stamps timeAdded
    preview = plane.create(rule("preview", effect="None"))
    assert preview["spec"]["taint"]["effect"] == "None"
    assert "status" not in preview or not preview["status"].get("conditions")  # no controller

    await guarded(plane, serve, tmp_path)
    done = plane.kubectl(
        "apply", "-f", "-", stdin=yaml.safe_dump(rule("drain-dgx-1", pool="dgx-1"))
    )
    said = done.stdout + done.stderr
    assert "Warning: [device-taint-rule-blast-radius]" in said, said
    assert "evicts ml: pod train-0 (claim ml/train-gpu)" in said, said
    assert plane.call("GET", f"{RULES}/drain-dgx-1")["spec"]["taint"]["effect"] == "NoExecute"

    everything = plane.kubectl(
        "apply", "-f", "-", stdin=yaml.safe_dump(rule("drain-all")), check=False
    )
    said = everything.stdout + everything.stderr
    assert everything.returncode == 1, said
    assert "[device-taint-rule-blast-radius] DeviceTaintRule drain-all taints every device" in said
    assert "Preview with effect None first" in said, said
    names = plane.kubectl("get", "devicetaintrules", "-o", "name").stdout.split()
    assert sorted(names) == [
        "devicetaintrule.resource.k8s.io/drain-dgx-1",
        "devicetaintrule.resource.k8s.io/preview",
    ]

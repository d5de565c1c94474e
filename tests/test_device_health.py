"""workload-on-unhealthy-device: allocated devices a kubelet reports Unhealthy or Unknown in the
pod's status (KEP-4680), under running pods and VMs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import yaml

from policies.cluster.pods import project_pod
from policies.diagnoses.device_health import WORKLOAD_ON_UNHEALTHY_DEVICE
from policies.registry import diagnose_all
from tests import FIXTURES
from tests.builders import Obj, node, state_of, vmi
from tests.dra_builders import claim_pod

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
DEVICE = "gpu.nvidia.com/dgx-1/gpu-0"
SAYS = "which its kubelet reports "


def reporting(pod: Obj, *healths: str, source: str = "claim:gpu") -> Obj:
    """``pod`` whose first container's kubelet reports one device per entry of ``healths``
    ('' leaves health out, as a kubelet that knows nothing may)."""
    resources = [
        {"resourceID": DEVICE.replace("gpu-0", f"gpu-{i}"), **({"health": h} if h else {})}
        for i, h in enumerate(healths)
    ]
    name = pod["spec"]["containers"][0]["name"]
    pod["status"]["containerStatuses"] = [
        {"name": name, "allocatedResourcesStatus": [{"name": source, "resources": resources}]}
    ]
    return pod


def found(*objects: Obj) -> list[str]:
    return [f.message for f in diagnose_all(state_of(*objects), NOW)[WORKLOAD_ON_UNHEALTHY_DEVICE]]


@pytest.mark.parametrize(
    ("healths", "reported"),
    [
        pytest.param(("Healthy",), [], id="healthy: nothing"),
        pytest.param(
            ("Unhealthy",), ["gpu-0 on dgx-1, which its kubelet reports Unhealthy"], id="unhealthy"
        ),
        pytest.param(
            ("Healthy", "Unknown"),
            ["gpu-1 on dgx-1, which its kubelet reports Unknown"],
            id="one of two unknown",
        ),
        pytest.param(
            ("",),
            ["gpu-0 on dgx-1, which its kubelet reports Unknown"],
            id="health absent reads Unknown",
        ),
    ],
)
def test_a_running_pod_on_a_device_not_reported_healthy_is_a_finding(
    healths: tuple[str, ...], reported: list[str]
) -> None:
    messages = found(node("dgx-1"), reporting(claim_pod("train-0", "dgx-1", claim="c"), *healths))
    assert len(messages) == len(reported)
    for message, part in zip(messages, reported, strict=True):
        assert message.startswith("Pod ml/train-0 runs on device gpu.nvidia.com/dgx-1/")
        assert part in message and "(claim entry gpu, container" in message


def test_a_finished_pod_is_not_reported() -> None:
    pod = reporting(claim_pod("train-0", "dgx-1", claim="c", phase="Succeeded"), "Unhealthy")
    assert found(node("dgx-1"), pod) == []


def test_a_virt_launcher_is_reported_as_its_vm() -> None:
    launcher = claim_pod("virt-launcher-win11-x7k2p", "dgx-1", claim="c", namespace="vms")
    messages = found(
        node("dgx-1"),
        vmi("win11", node_name="dgx-1", owner="win11"),
        reporting(launcher, "Unhealthy"),
    )
    assert [m.split(" runs on")[0] for m in messages] == ["VirtualMachine vms/win11"]


def test_the_recorded_pod_status_is_read_as_the_api_server_stored_it() -> None:
    objects = yaml.safe_load((FIXTURES / "device-taints" / "objects.yaml").read_text())["items"]
    pod = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "infer-0")
    (bad,) = project_pod(pod).unhealthy_devices
    assert (bad.source, bad.claim_entry, bad.device, bad.health) == (
        "claim:gpu",
        "gpu",
        "gpu.nvidia.com/dgx-2/gpu-0",
        "Unhealthy",
    )
    assert len(found(node("dgx-2"), *objects)) == 1

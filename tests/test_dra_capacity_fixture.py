"""What gpu-guard makes of the objects a real kube-apiserver v1.36.2 stored with the
DRAPartitionableDevices, DRAConsumableCapacity and DRAExtendedResource gates on
(tests/fixtures/dra-capacity/, recorded by tests/e2e/record_dra_capacity.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from policies.cluster.claim_fit import claim_fit
from policies.cluster.dra_claims import project_resource_claim
from policies.cluster.gpu_users import gpu_users_on
from policies.prediction.inventory import inventory
from policies.rules import claim_without_ready_device, extended_claim_forged
from policies.rules.extended_claim_forged import SCHEDULER
from policies.state.cluster import ClusterState
from tests.builders import request
from webhook.state.files import load_state

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "dra-capacity"
OBJECTS = FIXTURE / "objects.yaml"
NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
EXTENDED_CLAIM = "train-extended-extended-resources-x7k2p"


def state() -> ClusterState:
    return load_state([str(OBJECTS)])


def stored(kind: str, name: str) -> dict[str, Any]:
    items = yaml.safe_load(OBJECTS.read_text())["items"]
    found: dict[str, Any] = next(
        o for o in items if o["kind"] == kind and o["metadata"]["name"] == name
    )
    return found


def test_the_server_kept_counters_shared_devices_and_the_schedulers_fields() -> None:
    view = state()
    whole = next(
        d for d in view.published_devices() if d.device.name == "gpu-0" and d.pool == "dgx-1"
    )
    assert whole.device.consumes[0].counter_set == "gpu-0-counter-set"
    assert view.pool_counter_sets("gpu.nvidia.com", "dgx-1")["gpu-0-counter-set"]
    shared = next(d for d in view.published_devices() if d.pool == "dgx-2")
    assert shared.device.multiple and shared.device.request_policies
    share = view.claim("ml", "share-a")
    assert share is not None and share.results[0].share_id and share.results[0].consumed


def test_a_whole_gpu_claim_waits_for_the_partition_a_claim_holds() -> None:
    findings = claim_without_ready_device.check(
        request("CREATE", stored("ResourceClaim", "whole")), state()
    )
    (finding,) = findings
    assert "fits dgx-1 only once gpu-0-mig-1g10gb-3 (claim ml/small) release" in finding.message


def test_a_share_fits_only_in_what_the_shared_gpus_allocations_leave() -> None:
    claim = stored("ResourceClaim", "share-a")
    claim["metadata"]["name"] = "share-c"
    requests = claim["spec"]["devices"]["requests"]
    a100 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100 80GB PCIe'"
    requests[0]["exactly"]["selectors"] = [{"cel": {"expression": a100}}]
    view = state()
    requests[0]["exactly"]["capacity"]["requests"]["memory"] = "10Gi"
    assert claim_fit(project_resource_claim(claim).requests, view).fits
    requests[0]["exactly"]["capacity"]["requests"]["memory"] = "20Gi"
    (unmet,) = claim_fit(project_resource_claim(claim).requests, view).unmet
    assert "claim ml/share-a" in unmet.describe()


def test_every_pod_on_the_shared_gpu_is_its_user() -> None:
    users = [u.pod.key for u in gpu_users_on("dgx-2", state())]
    assert users == ["ml/share-a-0", "ml/share-b-0", "ml/train-extended"]


def test_the_implicit_extended_resource_name_has_providers() -> None:
    view = state()
    assert view.providers_of("deviceclass.resource.kubernetes.io/gpu.nvidia.com") == [
        "dgx-1",
        "dgx-2",
    ]


def test_the_inventory_shows_what_the_partition_draws() -> None:
    rows = {r.node: r for r in inventory(state(), NOW).nodes}
    assert rows["dgx-1"].counters == (
        "gpu-0-counter-set: 12% of memory drawn by gpu-0-mig-1g10gb-3 (claim ml/small)",
    )


def test_the_schedulers_annotation_is_warned_only_from_someone_else() -> None:
    claim = stored("ResourceClaim", EXTENDED_CLAIM)
    assert extended_claim_forged.check(request("CREATE", claim), state())
    assert not extended_claim_forged.check(request("CREATE", claim, user=SCHEDULER), state())


def test_a_slice_with_counters_and_devices_is_refused_by_the_server() -> None:
    said = (FIXTURE / "kubectl-output" / "mixed-slice-refused.txt").read_text()
    assert "only one of `sharedCounters` or `devices` is allowed" in said

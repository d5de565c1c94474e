"""Issue 32's decoy, on a real kube-apiserver v1.36.2 with the enforce overlay's webhooks and a
live ``gpu-guard serve``: a second ClusterPolicy with sandbox workloads off, and the real one's
``status.state`` set to ``ignored`` through its status subresource by an account holding only
that, no longer let a node under a CUDA pod be relabelled vm-passthrough. With the GPU
Operator's version not configured the guard cannot know which ClusterPolicy the operator acts on,
judges under each, and says which it assumed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.conftest import ServeGuard
from tests.e2e.controlplane import ControlPlane
from tests.e2e.guard import render
from tests.e2e.objects import load
from tests.e2e.rest import MERGE_PATCH
from tests.e2e.test_webhooks import installed, register, relabel
from tests.waits import until

STATUS_WRITER = "system:serviceaccount:ops:status-writer"
DENIED = 'admission webhook "nodes.validate.gpu-guard.io" denied the request'
ASSUMED = "judged under ClusterPolicy cluster-policy: the GPU Operator may act on any of 2"
CLUSTER_POLICIES = "/apis/nvidia.com/v1/clusterpolicies"
HOMELAB = Path(__file__).resolve().parents[2] / "examples" / "homelab" / "cluster.yaml"


def homelab_cluster_policy() -> dict[str, Any]:
    """The home lab's ClusterPolicy (cluster-policy: sandbox workloads on, default container),
    complete as the real CRD requires."""
    items = yaml.safe_load(HOMELAB.read_text())["items"]
    found: dict[str, Any] = next(o for o in items if o["kind"] == "ClusterPolicy")
    return found


def decoy_of(real: dict[str, Any]) -> dict[str, Any]:
    """The same, named to sort first, with sandbox workloads off: every node container."""
    decoy = copy.deepcopy(real)
    decoy["metadata"] = {"name": "bootstrap-policy"}
    decoy.pop("status", None)
    decoy["spec"]["sandboxWorkloads"]["enabled"] = False
    return decoy


def rights_to_write_status_and_create(plane: ControlPlane) -> None:
    """What the attacker holds: create ClusterPolicies, patch their status; nothing on nodes."""
    plane.kubectl(
        "create",
        "clusterrole",
        "clusterpolicy-status-writer",
        "--verb=create,patch",
        "--resource=clusterpolicies.nvidia.com,clusterpolicies.nvidia.com/status",
    )
    plane.kubectl(
        "create",
        "clusterrolebinding",
        "clusterpolicy-status-writer",
        "--clusterrole=clusterpolicy-status-writer",
        f"--user={STATUS_WRITER}",
    )


async def test_a_decoy_cluster_policy_and_a_forged_ignored_status_do_not_let_a_relabel_through(
    own_control_plane: ControlPlane, serve: ServeGuard, tmp_path: Path
) -> None:
    plane = own_control_plane
    rendered = render("enforce")
    config = installed(plane, rendered, tmp_path)  # a container node under a CUDA pod
    real = homelab_cluster_policy()
    load(plane, [real])
    guard = await serve(plane, "--config", str(config), "--audit-interval", "0")
    await guard.wait_ready()
    await register(plane, guard, rendered)

    rights_to_write_status_and_create(plane)
    plane.call("POST", CLUSTER_POLICIES, decoy_of(real), as_user=STATUS_WRITER)
    plane.call(
        "PATCH",
        f"{CLUSTER_POLICIES}/cluster-policy/status",
        {"status": {"state": "ignored"}},
        MERGE_PATCH,
        as_user=STATUS_WRITER,
    )

    # Until the guard has seen the decoy (the note names both), as a server-side dry run.
    said = ""

    def judged_under_both() -> bool:
        nonlocal said
        _, said = relabel(plane, "vm-passthrough", "--dry-run=server")
        return ASSUMED in said

    await until(judged_under_both, timeout=30, every=0.2)
    code, said = relabel(plane, "vm-passthrough")
    assert code == 1 and DENIED in said and "[workload-switch-with-gpu-pods]" in said, said
    assert ASSUMED in said
    labels = plane.call("GET", "/api/v1/nodes/gpu-1")["metadata"]["labels"]
    assert labels["nvidia.com/gpu.workload.config"] == "container"

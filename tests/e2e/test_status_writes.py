"""Status writes that change what the guard judges, replayed on a real kube-apiserver (issue 33).

A bare API server has no virt-api, virt-controller, kubelet or pod GC: the test writes what each
of them writes, as each of them (impersonated), with the enforce overlay's webhook
configurations registered as rendered (only ``clientConfig`` becomes a url).

- ``virtctl start`` of a Manual VM: virt-api's JSON patch of ``virtualmachines/status`` adding a
  Start entry (kubevirt pkg/virt-api/rest/lifecycle.go, ``getChangeRequestJson``) is judged like
  a VM asked to run (warned, and refused once guard.yaml sets the policy to deny);
  virt-controller's own status traffic never reaches the guard.
- A GPU user marked finished: a pod's phase through ``pods/status`` by an agent holding that
  right, a VMI's by a namespace editor, are denied (gpu-user-marked-finished), and the switch
  they would have opened stays denied; kubelets ending and reporting their own pods, the pod
  garbage collector and virt-handler are never sent (docs/security.md, "Threat model").
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.builders import gpu_pod, node, vm, vmi
from tests.e2e.conftest import ServeGuard
from tests.e2e.controlplane import ControlPlane
from tests.e2e.guard import Guard, by_url, guard_configuration, render
from tests.e2e.objects import load
from tests.e2e.rest import MERGE_PATCH, STRATEGIC_MERGE_PATCH

Obj = dict[str, Any]
JSON_PATCH = "application/json-patch+json"
A10 = "nvidia.com/GA102GL_A10"
NAMESPACE = "vms"
VIRT_API = "system:serviceaccount:kubevirt:kubevirt-apiserver"
VIRT_CONTROLLER = "system:serviceaccount:kubevirt:kubevirt-controller"
KUBEVIRT_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:kubevirt")
NO_PROVIDER_ID = "passthrough-without-ready-provider"
NO_PROVIDER = f"Warning: [{NO_PROVIDER_ID}]"
#: virt-controller's status writes over a VM's life, each as a merge patch of status.
CONTROLLER_WRITES = (
    {"printableStatus": "Starting", "stateChangeRequests": None},
    {"printableStatus": "Running", "ready": True, "created": True},
    {"conditions": [{"type": "Ready", "status": "True"}]},
    {"printableStatus": "Stopping"},
    {"printableStatus": "Stopped", "ready": False, "created": False, "conditions": []},
)


def status_path(name: str) -> str:
    return f"/apis/kubevirt.io/v1/namespaces/{NAMESPACE}/virtualmachines/{name}/status"


def virt_api_start(plane: ControlPlane, name: str, *, dry_run: bool = False) -> str:
    """What virt-api writes for ``virtctl start`` of a Manual VM with a status: a test of the
    current (empty) requests, then the Start entry; returns what kubectl printed."""
    start = json.dumps([
        {"op": "test", "path": "/status/stateChangeRequests", "value": None},
        {"op": "add", "path": "/status/stateChangeRequests", "value": [{"action": "Start"}]},
    ])  # fmt: skip
    done = plane.kubectl(
        "patch", "virtualmachine", name, "-n", NAMESPACE, "--subresource=status",
        "--type=json", "-p", start, *(["--dry-run=server"] if dry_run else []),
        as_user=VIRT_API, as_groups=KUBEVIRT_GROUPS, check=False,
    )  # fmt: skip
    return done.stdout + done.stderr


def grant_kubevirt(plane: ControlPlane) -> None:
    """virt-api's and virt-controller's rights on VMs and their status (kubevirt's RBAC)."""
    plane.create_namespace("kubevirt")
    resources = "virtualmachines.kubevirt.io,virtualmachines.kubevirt.io/status"
    plane.kubectl("create", "clusterrole", "kubevirt-vm-status",
                  "--verb=get,list,watch,update,patch", f"--resource={resources}")  # fmt: skip
    for account in ("kubevirt-apiserver", "kubevirt-controller"):
        plane.ensure_service_account("kubevirt", account)
        plane.kubectl("create", "clusterrolebinding", account, "--clusterrole=kubevirt-vm-status",
                      f"--serviceaccount=kubevirt:{account}")  # fmt: skip


async def enforcing(
    plane: ControlPlane, serve: ServeGuard, tmp_path: Path, judged: Callable[[], bool]
) -> Guard:
    """The enforce overlay registered by url against a running guard, once ``judged()`` says
    the guard's live state holds what the test needs (a server-side dry run it answers)."""
    rendered = render("enforce")
    config = tmp_path / "guard.yaml"
    config.write_text(guard_configuration(rendered))
    guard = await serve(plane, "--config", str(config), "--audit-interval", "0")
    await guard.wait_ready()
    for configuration in by_url(rendered, guard.base, guard.ca_pem):
        plane.create(configuration)
    for _ in range(300):
        if judged():
            return guard
        await asyncio.sleep(0.05)
    raise AssertionError("the API server never had the guard judge the probe")


async def test_virtctl_start_of_a_manual_vm_is_judged_and_virt_controller_status_is_not_sent(
    own_control_plane: ControlPlane, serve: ServeGuard, tmp_path: Path
) -> None:
    plane = own_control_plane
    grant_kubevirt(plane)
    # No node provides the A10 the VMs ask for: a start is warned by
    # passthrough-without-ready-provider.
    load(plane, [node("gpu-1"),
                 vm("manual", gpus=[A10], run_strategy="Manual", namespace=NAMESPACE),
                 vm("probe", gpus=[A10], run_strategy="Manual", namespace=NAMESPACE)])  # fmt: skip
    for name in ("manual", "probe"):  # virt-controller's first status
        plane.call("PATCH", status_path(name), {"status": {"printableStatus": "Stopped"}},
                   MERGE_PATCH, as_user=VIRT_CONTROLLER, as_groups=KUBEVIRT_GROUPS)  # fmt: skip
    guard = await enforcing(
        plane, serve, tmp_path, lambda: NO_PROVIDER in virt_api_start(plane, "probe", dry_run=True)
    )

    # virt-controller's status traffic over a start and a stop: none of it is sent.
    sent = await guard.reviews()
    for status in CONTROLLER_WRITES:
        plane.call("PATCH", status_path("manual"), {"status": status}, MERGE_PATCH,
                   as_user=VIRT_CONTROLLER, as_groups=KUBEVIRT_GROUPS)  # fmt: skip
    assert await guard.reviews() == sent

    # virtctl start: virt-api's write is sent once and warned; the Start entry is written
    # (the warnings only warn).
    said = virt_api_start(plane, "manual")
    assert f"{NO_PROVIDER} {A10}" in said, said
    assert await guard.reviews(kind="VirtualMachine") == sent + 1
    requests = plane.call("GET", status_path("manual"))["status"]["stateChangeRequests"]
    assert requests == [{"action": "Start"}]

    # virt-controller acting on it (the entry removed) is not sent.
    plane.call("PATCH", status_path("manual"), {"status": {"stateChangeRequests": None}},
               MERGE_PATCH, as_user=VIRT_CONTROLLER, as_groups=KUBEVIRT_GROUPS)  # fmt: skip
    assert await guard.reviews() == sent + 1

    # With the policy set to deny (guard.yaml reloaded), virt-api's write is refused (virt-api
    # answers virtctl with a 500 carrying this message) and the Start entry is not written.
    config = tmp_path / "guard.yaml"
    settings = yaml.safe_load(config.read_text())
    settings["policies"][NO_PROVIDER_ID] = {"action": "deny"}
    config.write_text(yaml.safe_dump(settings))
    denied = 'admission webhook "vms.validate.gpu-guard.io" denied the request'
    for _ in range(300):  # the guard polls its configuration every 5 s
        if denied in virt_api_start(plane, "probe", dry_run=True):
            break
        await asyncio.sleep(0.05)
    said = virt_api_start(plane, "probe")
    assert denied in said and f"[{NO_PROVIDER_ID}]" in said, said
    assert "stateChangeRequests" not in plane.call("GET", status_path("probe"))["status"]
    assert await guard.stop() == 0


# --- GPU users marked finished -------------------------------------------------------------------

WORKLOAD = "nvidia.com/gpu.workload.config"
FINISHED_HOOK = 'admission webhook "gpu-users-finished.validate.gpu-guard.io" denied the request'
AGENT = "system:serviceaccount:ops:status-writer"
EDITOR = "system:serviceaccount:vms:dev"
HANDLER = "system:serviceaccount:kubevirt:kubevirt-handler"
POD_GC = "system:serviceaccount:kube-system:pod-garbage-collector"
KUBELET_PODS = 10
KUBELET_WRITES = 5


def sa_groups(user: str) -> tuple[str, ...]:
    return ("system:serviceaccounts", f"system:serviceaccounts:{user.split(':')[2]}")


def set_phase(
    plane: ControlPlane,
    path: str,
    phase: str,
    user: str,
    groups: tuple[str, ...] | None = None,
    *,
    dry_run: bool = False,
) -> tuple[bool, str]:
    """A merge patch of status.phase as ``user``: (refused, what the API server said)."""
    groups = sa_groups(user) if groups is None else groups
    status, answer = plane.request("PATCH", path + ("?dryRun=All" if dry_run else ""),
                                   {"status": {"phase": phase}}, content_type=MERGE_PATCH,
                                   as_user=user, as_groups=groups)  # fmt: skip
    return status >= 400, answer.get("message", "") if isinstance(answer, dict) else str(answer)


def pod_status(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}/status"


def grant_status_writers(plane: ControlPlane) -> None:
    """An agent with patch on pods/status (node-problem-detector's kind of right), a namespace
    editor with update on its VMIs (kubevirt.io:edit), virt-handler and the pod GC."""
    for namespace in ("ops", "kubevirt"):
        plane.create_namespace(namespace)
    for user, verbs, resource in (
        (AGENT, "patch", "pods/status"),
        (POD_GC, "patch", "pods/status"),
        (EDITOR, "update,patch", "virtualmachineinstances.kubevirt.io"),
        (HANDLER, "update,patch", "virtualmachineinstances.kubevirt.io"),
    ):
        _, _, namespace, name = user.split(":")
        plane.ensure_service_account(namespace, name)
        plane.kubectl("create", "clusterrole", f"e2e-{name}", f"--verb={verbs}",
                      f"--resource={resource}")  # fmt: skip
        plane.kubectl("create", "clusterrolebinding", f"e2e-{name}", f"--clusterrole=e2e-{name}",
                      f"--serviceaccount={namespace}:{name}")  # fmt: skip


async def test_a_gpu_users_forged_finish_is_denied_and_what_runs_it_is_never_sent(
    node_authorized_control_plane: ControlPlane, serve: ServeGuard, tmp_path: Path
) -> None:
    plane = node_authorized_control_plane
    kubelet_nodes = [f"k-{i:02d}" for i in range(KUBELET_PODS)]
    load(plane, [
        node("gpu-1", labels={WORKLOAD: "container"}, allocatable={"nvidia.com/gpu": "1"}),
        gpu_pod("train-0", "gpu-1", namespace="ml"),
        node("pt-1", labels={WORKLOAD: "vm-passthrough"}, allocatable={A10: "1"}),
        vmi("render-0", node_name="pt-1", gpus=[A10], namespace=NAMESPACE),
        gpu_pod("orphan-0", "gone-1", namespace="ml"),  # bound to a node that is gone
        *(node(n, labels={WORKLOAD: "container"}, allocatable={"nvidia.com/gpu": "1"})
          for n in kubelet_nodes),
        *(gpu_pod(f"job-{n}", n, namespace="ml") for n in kubelet_nodes),
    ])  # fmt: skip
    grant_status_writers(plane)
    train = pod_status("ml", "train-0")
    guard = await enforcing(
        plane, serve, tmp_path,
        lambda: FINISHED_HOOK in set_phase(plane, train, "Succeeded", AGENT, dry_run=True)[1],
    )  # fmt: skip

    # Status traffic of what runs the users: each kubelet reports its GPU pod 5 times, then
    # ends it; the pod GC fails the pod whose node is gone. None of it reaches the guard.
    sent = await guard.reviews()
    for name in kubelet_nodes:
        kubelet = (f"system:node:{name}", ("system:nodes",))
        for beat in range(KUBELET_WRITES):
            condition = {
                "type": "Ready",
                "status": "True",
                "lastProbeTime": f"2026-12-01T00:00:{beat:02d}Z",
            }
            plane.call("PATCH", pod_status("ml", f"job-{name}"),
                       {"status": {"conditions": [condition]}}, STRATEGIC_MERGE_PATCH,
                       as_user=kubelet[0], as_groups=kubelet[1])  # fmt: skip
        refused, said = set_phase(plane, pod_status("ml", f"job-{name}"), "Succeeded", *kubelet)
        assert not refused, said
    refused, said = set_phase(plane, pod_status("ml", "orphan-0"), "Failed", POD_GC)
    assert not refused, said
    assert await guard.reviews() == sent

    # The forged finish: denied, the pod still Running, and the switch it would have opened
    # (gpu-1 to vm-passthrough under the CUDA job) still denied.
    refused, said = set_phase(plane, train, "Succeeded", AGENT)
    assert refused and FINISHED_HOOK in said and "[gpu-user-marked-finished]" in said, said
    assert "kubectl delete pod train-0 -n ml" in said, said
    assert plane.call("GET", train)["status"]["phase"] == "Running"
    done = plane.kubectl("label", "node", "gpu-1", f"{WORKLOAD}=vm-passthrough", "--overwrite",
                         check=False)  # fmt: skip
    assert done.returncode != 0 and "[workload-switch-with-gpu-pods]" in done.stderr, done.stderr

    # A VMI marked Failed by a namespace editor: denied; virt-handler ending it: not sent.
    vmi_path = f"/apis/kubevirt.io/v1/namespaces/{NAMESPACE}/virtualmachineinstances/render-0"
    refused, said = set_phase(plane, vmi_path, "Failed", EDITOR)
    assert refused and "[gpu-user-marked-finished] VMI vms/render-0" in said, said
    before = await guard.reviews()
    refused, said = set_phase(plane, vmi_path, "Succeeded", HANDLER)
    assert not refused, said
    assert await guard.reviews() == before
    assert await guard.stop() == 0

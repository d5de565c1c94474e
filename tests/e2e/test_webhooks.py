"""The overlays' webhook configurations as a real kube-apiserver applies them.

Each overlay (audit, enforce) is rendered with ``kubectl kustomize`` and registered as rendered,
its entries calling a real ``gpu-guard serve`` on 127.0.0.1 by url instead of the Service. What
a person types is kubectl; what the guard was sent is read from its /metrics and decision log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.cluster.nvidia_driver import OWNER_LABEL
from tests.builders import (
    gpu_pod,
    instancetype,
    kata_pod,
    node,
    nvidia_driver,
    vm,
    vm_pool,
    vm_replica_set,
)
from tests.e2e.conftest import ServeGuard
from tests.e2e.controlplane import ControlPlane
from tests.e2e.guard import Guard, by_url, guard_configuration, render
from tests.e2e.objects import load
from tests.e2e.rest import STRATEGIC_MERGE_PATCH
from tests.waits import until

WORKLOAD = "nvidia.com/gpu.workload.config"
NODE, NAMESPACE = "gpu-1", "ml"
MISSING_GPU = "nvidia.com/GB202_GEFORCE_RTX_5090"  # no node advertises it
KUBELET, NODES = f"system:node:{NODE}", ("system:nodes",)
Obj = dict[str, Any]


@dataclass(frozen=True)
class Overlay:
    name: str
    denies: bool
    """The relabel under a CUDA pod is denied (enforce) or only recorded (audit)."""
    warns: bool


OVERLAYS = [
    Overlay("enforce", denies=True, warns=True),
    Overlay("audit", denies=False, warns=False),
]


def installed(plane: ControlPlane, rendered: list[Obj], tmp_path: Path) -> Path:
    """The cluster of the scenario: a container-mode GPU node under a running CUDA pod, the
    RBAC a kubelet has, and the overlay's configuration file."""
    # What the Node authorizer and this role grant a kubelet in a real cluster; here RBAC only.
    plane.kubectl(
        "create",
        "clusterrolebinding",
        "e2e-nodes",
        "--clusterrole=system:node",
        "--group=system:nodes",
    )
    plane.ensure_service_account("kube-system", "default")
    load(
        plane,
        [
            node(
                NODE,
                labels={"nvidia.com/gpu.present": "true", WORKLOAD: "container"},
                allocatable={"nvidia.com/gpu": "1"},
            ),
            gpu_pod("train-0", NODE, namespace=NAMESPACE),
        ],
    )
    config = tmp_path / "guard.yaml"
    config.write_text(guard_configuration(rendered))
    return config


async def register(plane: ControlPlane, guard: Guard, rendered: list[Obj]) -> None:
    """The overlay's webhook configurations by url, then until the API server calls both (its
    informer takes a moment): a server-side dry run of a VM reaches /mutate and /validate."""
    for configuration in by_url(rendered, guard.base, guard.ca_pem):
        plane.create(configuration)
    canary = yaml.safe_dump(vm("canary", namespace=NAMESPACE))

    for _ in range(200):
        plane.kubectl("apply", "--dry-run=server", "-f", "-", stdin=canary)
        if await guard.reviews(endpoint="validate") and await guard.reviews(endpoint="mutate"):
            return
    raise AssertionError("the API server never called the guard")


def relabel(plane: ControlPlane, value: str, *flags: str, kubelet: bool = False) -> tuple[int, str]:
    """``kubectl label node`` of the workload label, by a person (the admin) or by the node's
    own kubelet; the exit code and everything kubectl printed."""
    done = plane.kubectl(
        "label",
        "node",
        NODE,
        f"{WORKLOAD}={value}",
        "--overwrite",
        *flags,
        check=False,
        as_user=KUBELET if kubelet else None,
        as_groups=NODES if kubelet else (),
    )
    return done.returncode, done.stdout + done.stderr


def heartbeat(plane: ControlPlane) -> None:
    """What kubelet sends every few seconds: a PATCH of its Ready condition, nodes/status."""
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "lastHeartbeatTime": "2026-12-01T00:00:00Z",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    plane.call(
        "PATCH",
        f"/api/v1/nodes/{NODE}/status",
        {"status": {"conditions": [condition]}},
        STRATEGIC_MERGE_PATCH,
        as_user=KUBELET,
        as_groups=NODES,
    )


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda o: o.name)
async def test_the_overlays_webhooks_judge_what_kubectl_sends_and_never_see_kubelets_or_kube_system(
    overlay: Overlay, own_control_plane: ControlPlane, serve: ServeGuard, tmp_path: Path
) -> None:
    plane = own_control_plane
    rendered = render(overlay.name)
    config = installed(plane, rendered, tmp_path)
    guard = await serve(plane, "--config", str(config), "--audit-interval", "0")
    await guard.wait_ready()
    await register(plane, guard, rendered)

    # A person relabels the node under the CUDA pod: first a server-side dry run, then for real.
    for flags in (("--dry-run=server",), ()):
        code, said = relabel(plane, "vm-passthrough", *flags)
        if overlay.denies:
            assert code == 1, said
            assert (
                'admission webhook "nodes.validate.gpu-guard.io" denied the request: '
                "[workload-switch-with-gpu-pods]" in said
            ), said
            assert f"{NAMESPACE}/train-0" in said, said
        else:
            assert code == 0, said
    labels = plane.call("GET", f"/api/v1/nodes/{NODE}")["metadata"]["labels"]
    assert labels[WORKLOAD] == ("container" if overlay.denies else "vm-passthrough")
    await until(lambda: sum("kind=Node" in line for line in guard.decisions()) >= 2)
    node_lines = [line for line in guard.decisions() if "kind=Node" in line]
    assert ["dry_run=True" in line for line in node_lines] == [True, False], node_lines
    action = "deny" if overlay.denies else "audit"
    assert all(f"workload-switch-with-gpu-pods:{action}" in line for line in node_lines)

    # A VM asking for a GPU no Ready node provides is created, with the warning.
    created = plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=yaml.safe_dump(vm("gpu-vm", gpus=[MISSING_GPU], namespace=NAMESPACE)),
    )
    assert "virtualmachine.kubevirt.io/gpu-vm created" in created.stdout
    warned = f"Warning: [passthrough-without-ready-provider] {MISSING_GPU}"
    assert (warned in created.stderr) == overlay.warns, created.stderr

    # The templates VMs are made from are sent and warned alike: a replica set, a pool, a
    # cluster instancetype (a Cluster-scoped rule) and, once the guard's watch has it, a VM
    # naming that instancetype with no device of its own.
    gpu_type = instancetype("gpu-large", gpus=[MISSING_GPU])
    templates = [
        vm_replica_set("farm", gpus=[MISSING_GPU], namespace=NAMESPACE),
        vm_pool("pool", gpus=[MISSING_GPU], namespace=NAMESPACE),
        gpu_type,
    ]
    for template in templates:
        made = plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(template))
        assert (warned in made.stderr) == overlay.warns, (template["kind"], made.stderr)
    if overlay.warns:  # a server-side dry run of it warns once the guard's watch has gpu-large
        named = yaml.safe_dump(
            vm("typed-vm", namespace=NAMESPACE, instancetype={"name": "gpu-large"})
        )

        def warned_of_its_gpu() -> bool:
            tried = plane.kubectl("apply", "--dry-run=server", "-f", "-", stdin=named)
            return warned in tried.stderr

        await until(warned_of_its_gpu, timeout=10, every=0.1)

        # kubectl scale raises the pool's replicas through pool/scale (an autoscaling/v1 Scale):
        # warned as the pool once the guard's watch holds it; a scale down is never sent.
        replicas = iter(range(2, 100))

        def scale_warned() -> bool:
            up = ("scale", "vmpool/pool", f"--replicas={next(replicas)}", "-n", NAMESPACE)
            return warned in plane.kubectl(*up).stderr

        await until(scale_warned, timeout=10, every=0.1)
        before = await guard.reviews()
        plane.kubectl("scale", "vmpool/pool", "--replicas=1", "-n", NAMESPACE)
        assert await guard.reviews() == before

    # Never sent: kubelet status traffic, a kubelet's own relabel (not-a-kubelet), kube-system.
    sent = await guard.reviews()
    heartbeat(plane)
    code, said = relabel(plane, "vm-passthrough" if overlay.denies else "container", kubelet=True)
    assert code == 0, said
    load(plane, [gpu_pod("system-gpu", NODE, namespace="kube-system")])
    plane.kubectl(
        "apply",
        "-f",
        "-",
        stdin=yaml.safe_dump(vm("vm", gpus=[MISSING_GPU], namespace="kube-system")),
    )
    load(plane, [gpu_pod("train-1", "", namespace=NAMESPACE)])  # sent: the count is current
    assert await guard.reviews() == sent + 1
    assert await guard.reviews(kind="Pod", operation="CREATE") == 1
    await until(lambda: any("name=train-1" in line for line in guard.decisions()))
    unsent = ("user=system:node:", "namespace=kube-system")
    assert [line for line in guard.decisions() if any(u in line for u in unsent)] == []

    # The guard down: kubelet status still goes through; the nodes entry fails open in every
    # overlay (with the guard down the API server's record policy holds instead, which is not
    # installed here: tests/e2e/test_guard_down.py); a cordon is never refused.
    assert await guard.stop() == 0
    heartbeat(plane)
    code, said = relabel(plane, "container" if overlay.denies else "vm-passthrough")
    assert code == 0, said
    plane.kubectl("cordon", NODE)


VGPU_NODE = "gpu-a10-1"
VGPU_CONFIG = "nvidia.com/vgpu.config"
A10_12Q = "nvidia.com/NVIDIA_A10-12Q"


async def test_the_enforce_overlay_sends_a_vgpu_profile_change_and_never_the_state_label(
    own_control_plane: ControlPlane, serve: ServeGuard, tmp_path: Path
) -> None:
    """The nodes webhook's matchConditions as the real API server evaluates them: a change of
    nvidia.com/vgpu.config under a running vGPU VM is sent and denied, its removal sent and
    warned, the device manager's own nvidia.com/vgpu.config.state never sent."""
    from tests.builders import vmi

    plane = own_control_plane
    rendered = render("enforce")
    config = installed(plane, rendered, tmp_path)
    vgpu_node = node(
        VGPU_NODE,
        labels={"nvidia.com/gpu.workload.config": "vm-vgpu", VGPU_CONFIG: "A10-12Q"},
        allocatable={A10_12Q: "2"},
    )
    desktop = vmi("desktop-0", node_name=VGPU_NODE, gpus=[A10_12Q], namespace=NAMESPACE)
    load(plane, [vgpu_node, desktop])
    guard = await serve(plane, "--config", str(config), "--audit-interval", "0")
    await guard.wait_ready()
    await register(plane, guard, rendered)
    await until(lambda: len(guard.decisions()) > 0)  # the canary: the live state has synced

    def label(*change: str) -> tuple[int, str]:
        done = plane.kubectl("label", "node", VGPU_NODE, *change, "--overwrite", check=False)
        return done.returncode, done.stdout + done.stderr

    sent = await guard.reviews(kind="Node")
    code, said = label("nvidia.com/vgpu.config.state=pending")
    assert code == 0, said
    assert await guard.reviews(kind="Node") == sent

    code, said = label(f"{VGPU_CONFIG}=A10-4Q")
    assert code == 1, said
    assert (
        'admission webhook "nodes.validate.gpu-guard.io" denied the request: '
        f"[vgpu-reconfig-with-live-vms] {VGPU_CONFIG} A10-12Q -> A10-4Q on {VGPU_NODE} under "
        f"1 live VMI ({NAMESPACE}/desktop-0)"
    ) in said, said
    assert await guard.reviews(kind="Node") == sent + 1

    code, said = label(f"{VGPU_CONFIG}-")
    assert code == 0, said
    assert f"Warning: [vgpu-reconfig-with-live-vms] {VGPU_CONFIG} removed on {VGPU_NODE}" in said
    assert await guard.reviews(kind="Node") == sent + 2
    assert await guard.stop() == 0


CC_NODE = "h100-1"
CC_MODE = "nvidia.com/cc.mode"


async def test_the_enforce_overlay_denies_a_cc_mode_change_under_a_kata_pod(
    own_control_plane: ControlPlane, serve: ServeGuard, tmp_path: Path
) -> None:
    """Confidential computing as the real API server routes it: nvidia.com/cc.mode changed on a
    node whose GPU a Kata pod holds is sent and denied through kubectl, naming the pod; the CC
    manager's own nvidia.com/cc.mode.state is never sent. No ClusterPolicy: the manager is then
    taken to run on a vm-passthrough node (a guard must not assume the operator away)."""

    plane = own_control_plane
    rendered = render("enforce")
    config = installed(plane, rendered, tmp_path)
    labels = {WORKLOAD: "vm-passthrough", CC_MODE: "on", f"{CC_MODE}.state": "on"}
    load(
        plane,
        [
            node(CC_NODE, labels=labels, allocatable={"nvidia.com/pgpu": "1"}),
            kata_pod("inference", CC_NODE, namespace=NAMESPACE),
        ],
    )
    guard = await serve(plane, "--config", str(config), "--audit-interval", "0")
    await guard.wait_ready()
    await register(plane, guard, rendered)
    await until(lambda: len(guard.decisions()) > 0)  # the canary: the live state has synced

    def label(change: str) -> tuple[int, str]:
        done = plane.kubectl("label", "node", CC_NODE, change, "--overwrite", check=False)
        return done.returncode, done.stdout + done.stderr

    sent = await guard.reviews(kind="Node")
    code, said = label(f"{CC_MODE}.state=off")
    assert code == 0, said
    assert await guard.reviews(kind="Node") == sent

    code, said = label(f"{CC_MODE}=off")
    assert code == 1, said
    assert (
        'admission webhook "nodes.validate.gpu-guard.io" denied the request: '
        f"[cc-mode-change-with-gpu-users] {CC_MODE} on -> off on {CC_NODE} while 1 GPU user runs "
        f"there ({NAMESPACE}/inference (Kata pod: nvidia.com/pgpu: 1))"
    ) in " ".join(said.split()), said
    assert await guard.reviews(kind="Node") == sent + 1
    assert await guard.stop() == 0


async def test_a_driver_upgrade_is_warned_with_its_waves_and_never_waits_for_a_guard_that_is_down(
    own_control_plane: ControlPlane, serve: ServeGuard, tmp_path: Path
) -> None:
    """The ClusterPolicy's driver version goes to its own failurePolicy Ignore entry: with the
    guard up, kubectl prints the upgrade's waves; with it down, the change still goes through
    (the Fail entry of the ClusterPolicy never sees a driver change). The same for an
    NVIDIADriver's version once NVIDIADriver CRs run the driver (its matchCondition compiled and
    evaluated by the real API server)."""
    plane = own_control_plane
    rendered = render("enforce")
    config = installed(plane, rendered, tmp_path)
    crd_required = {
        key: {"enabled": True}
        for key in ("toolkit", "devicePlugin", "dcgm", "dcgmExporter", "gfd", "nodeStatusExporter")
    }
    policy = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {
            "operator": {"defaultRuntime": "containerd"},
            "daemonsets": {},
            "driver": {"enabled": True, "version": "570.172.08"},
            "sandboxWorkloads": {"enabled": False},
            **crd_required,
        },
    }
    load(plane, [policy])
    guard = await serve(plane, "--config", str(config), "--audit-interval", "0")
    await guard.wait_ready()
    await register(plane, guard, rendered)
    await until(lambda: len(guard.decisions()) > 0)  # the canary: the live state has synced

    def new_driver(version: str) -> tuple[int, str]:
        patch = json.dumps({"spec": {"driver": {"version": version}}})
        done = plane.kubectl(
            "patch", "clusterpolicy", "cluster-policy", "--type", "merge", "-p", patch, check=False
        )
        return done.returncode, done.stdout + done.stderr

    code, said = new_driver("580.95.05")
    assert code == 0, said
    assert (
        "Warning: [driver-upgrade-waves] driver.version 570.172.08 -> 580.95.05 upgrades 1 node, "
        f"up to 1 at a time in no order: {NODE} (deletes {NAMESPACE}/train-0)"
    ) in said, said

    # NVIDIADriver CRs take the driver over: an NVIDIADriver's version goes to its own Ignore
    # entry, and the ClusterPolicy's version is said to upgrade nothing.
    delegate = json.dumps({"spec": {"driver": {"useNvidiaDriverCRD": True}}})
    plane.kubectl("patch", "clusterpolicy", "cluster-policy", "--type", "merge", "-p", delegate)
    plane.kubectl("label", "node", NODE, f"{OWNER_LABEL}=default")
    load(plane, [nvidia_driver("default", default=True)])

    def new_nvidia_driver(version: str, *flags: str) -> tuple[int, str]:
        patch = json.dumps({"spec": {"version": version}})
        done = plane.kubectl(
            "patch", "nvidiadriver", "default", "--type", "merge", "-p", patch, *flags, check=False
        )
        return done.returncode, done.stdout + done.stderr

    waves = (
        "NVIDIADriver default version 570.172.08 -> 580.95.05 upgrades 1 node, up to 1 at a "
        f"time in no order: {NODE} (deletes {NAMESPACE}/train-0)"
    )
    # The live state has the owner label and the delegation once a dry run says the waves.
    await until(lambda: waves in new_nvidia_driver("580.95.05", "--dry-run=server")[1], 30, 0.2)
    code, said = new_nvidia_driver("580.95.05")
    assert code == 0 and waves in said, said
    code, said = new_driver("585.0.0")
    assert code == 0 and "upgrades nothing: NVIDIADriver CRs (default)" in said, said

    assert await guard.stop() == 0
    code, said = new_driver("590.10.01")
    assert code == 0, said
    assert "Warning" not in said
    code, said = new_nvidia_driver("590.10.01")
    assert code == 0, said
    assert "Warning" not in said

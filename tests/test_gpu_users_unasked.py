"""Users no resource request shows: pods handed the node's GPUs by their environment and runtime
class or by a privileged host mount, Kata pods (VM-like users), DaemonSet pods (drain leaves
them), and the GPU Operator's own operands, which are never users (docs/gpu-users.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from policies.cluster.gpu_users import gpu_users_on, vm_users_noun, vm_users_on
from policies.state.pod_filter import _may_be_kept
from tests.builders import (
    Obj,
    cluster_policy,
    dev_mount_pod,
    env_pod,
    gpu_pod,
    kata_pod,
    node,
    owned_by_daemonset,
    pod,
    state_of,
    vmi,
)

NODE = "l40s-1"


def users(*objects: Obj) -> list[str]:
    return [u.describe() for u in gpu_users_on(NODE, state_of(node(NODE), *objects))]


def runtime_class_pod(name: str, node_name: str, runtime_class: str = "nvidia", **kw: Any) -> Obj:
    obj = pod(name, node_name, **kw)
    obj["spec"]["runtimeClassName"] = runtime_class
    return obj


def sidecar_opts_out(obj: Obj) -> Obj:
    """A first container that opts out (void) before the one that names devices."""
    opted_out = {
        "name": "log",
        "image": "busybox",
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
    }
    obj["spec"]["containers"].insert(0, opted_out)
    return obj


def with_app(obj: Obj, app: str) -> Obj:
    obj["metadata"]["labels"] = {"app": app}
    return obj


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        pytest.param(
            [env_pod("notebook", NODE)],
            ["ml/notebook (env NVIDIA_VISIBLE_DEVICES=all with runtimeClassName nvidia)"],
            id="NVIDIA_VISIBLE_DEVICES=all under the nvidia runtime class is a user",
        ),
        pytest.param(
            [env_pod("notebook", NODE, value="0,1", runtime_class="nvidia-cdi")],
            ["ml/notebook (env NVIDIA_VISIBLE_DEVICES=0,1 with runtimeClassName nvidia-cdi)"],
            id="so are chosen devices under the operator's CDI runtime class",
        ),
        pytest.param(
            [env_pod("legacy", NODE, runtime_class="")],
            ["ml/legacy (env NVIDIA_VISIBLE_DEVICES=all (no runtimeClassName))"],
            id="without a runtime class it counts: nvidia may be the default runtime",
        ),
        pytest.param(
            [env_pod("sandboxed", NODE, runtime_class="gvisor")],
            [],
            id="another runtime class gets no GPU from the environment",
        ),
        pytest.param(
            [env_pod("opted-out", NODE, value="void"), env_pod("none", NODE, value="None")],
            [],
            id="void and none name no device",
        ),
        pytest.param(
            [runtime_class_pod("cuda", NODE)],
            ["ml/cuda (runtimeClassName nvidia, its image's NVIDIA_VISIBLE_DEVICES)"],
            id="the nvidia runtime class alone: a CUDA image sets the variable itself",
        ),
        pytest.param(
            [runtime_class_pod("train", NODE, limits={"nvidia.com/gpu": "1"})],
            ["ml/train (nvidia.com/gpu: 1)"],
            id="a pod asking nvidia.com/gpu under the runtime class holds what it asked",
        ),
        pytest.param(
            [runtime_class_pod("web", NODE, runtime_class="gvisor")],
            [],
            id="another runtime class alone is nothing",
        ),
        pytest.param(
            [sidecar_opts_out(env_pod("two", NODE))],
            ["ml/two (env NVIDIA_VISIBLE_DEVICES=all with runtimeClassName nvidia)"],
            id="a container naming devices wins over another that opts out",
        ),
        pytest.param(
            [env_pod("done", NODE, phase="Succeeded")],
            [],
            id="a finished pod holds nothing",
        ),
        pytest.param(
            [dev_mount_pod("exporter", NODE)],
            ["ml/exporter (privileged, mounts /dev/nvidia0 from the host)"],
            id="a privileged container mounting /dev/nvidia0 from the host is a user",
        ),
        pytest.param(
            [dev_mount_pod("exporter", NODE, privileged=False)],
            [],
            id="without privileges the device node gives it no access",
        ),
        pytest.param(
            [dev_mount_pod("csi", NODE, path="/dev")],
            [],
            id="mounting all of /dev is not taken for GPU use",
        ),
        pytest.param(
            [owned_by_daemonset(env_pod("agent", NODE))],
            [
                "ml/agent (env NVIDIA_VISIBLE_DEVICES=all with runtimeClassName nvidia, "
                "DaemonSet: drain leaves it)"
            ],
            id="a DaemonSet's pod is named as one drain leaves",
        ),
        pytest.param(
            [with_app(env_pod("nvidia-dcgm-exporter-x2x7q", NODE), "nvidia-dcgm-exporter")],
            [],
            id="the GPU Operator's own operand is no user: the operator moves it itself",
        ),
        pytest.param(
            [with_app(gpu_pod("nvidia-dcgm-exporter-x2x7q", NODE), "nvidia-dcgm-exporter")],
            ["ml/nvidia-dcgm-exporter-x2x7q (nvidia.com/gpu: 1)"],
            id="a pod asking nvidia.com/gpu counts whatever its app label says",
        ),
        pytest.param(
            [kata_pod("cc-job", NODE)],
            [],
            id="a Kata pod is no container user: it is VM-like",
        ),
    ],
)
def test_pods_reaching_gpus_unasked(objects: Sequence[Obj], expected: list[str]) -> None:
    assert users(*objects) == expected


def test_the_clusterpolicys_own_runtime_class_counts_too() -> None:
    policy = cluster_policy()
    policy["spec"]["operator"] = {"runtimeClass": "nvidia-gpu"}
    state = state_of(node(NODE), policy, env_pod("job", NODE, runtime_class="nvidia-gpu"))
    assert [u.label for u in gpu_users_on(NODE, state)] == [
        "ml/job (env NVIDIA_VISIBLE_DEVICES=all with runtimeClassName nvidia-gpu)"
    ]


def test_a_value_from_elsewhere_counts_as_devices() -> None:
    obj = env_pod("job", NODE)
    obj["spec"]["containers"][0]["env"] = [
        {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": "gpus"}}}
    ]
    assert users(obj) == [
        "ml/job (env NVIDIA_VISIBLE_DEVICES=(valueFrom) with runtimeClassName nvidia)"
    ]


@pytest.mark.parametrize(
    ("objects", "expected", "noun"),
    [
        pytest.param(
            [kata_pod("cc-job", NODE, namespace="cc")],
            ["cc/cc-job (Kata pod: nvidia.com/pgpu: 1)"],
            "Kata pods",
            id="a pod with nvidia.com/pgpu is a Kata user",
        ),
        pytest.param(
            [kata_pod("ppcie", NODE, {"nvidia.com/pgpu": "8", "nvidia.com/nvswitch": "4"})],
            ["ml/ppcie (Kata pod: nvidia.com/nvswitch: 4, nvidia.com/pgpu: 8)"],
            "Kata pods",
            id="NVSwitches count with the GPUs",
        ),
        pytest.param(
            [kata_pod("h200", NODE, {"nvidia.com/GH100_H200_141GB": "1"})],
            ["ml/h200 (Kata pod: nvidia.com/GH100_H200_141GB: 1)"],
            "Kata pods",
            id="a model-specific resource under a kata runtime class is one",
        ),
        pytest.param(
            [kata_pod("plain", NODE, {"example.com/fpga": "1"})],
            [],
            "",
            id="a Kata pod without an NVIDIA device is none",
        ),
        pytest.param(
            [vmi("win11", node_name=NODE, gpus=["nvidia.com/AD102GL_L40S"]), kata_pod("k", NODE)],
            ["vms/win11 (nvidia.com/AD102GL_L40S)", "ml/k (Kata pod: nvidia.com/pgpu: 1)"],
            "live GPU VMs and Kata pods",
            id="VMIs come first, then Kata pods",
        ),
    ],
)
def test_vm_like_users(objects: Sequence[Obj], expected: list[str], noun: str) -> None:
    found = vm_users_on(NODE, state_of(node(NODE), *objects))
    assert [u.describe() for u in found] == expected
    assert vm_users_noun(found) == noun


def test_a_kata_pod_is_stopped_by_deleting_it() -> None:
    (user,) = vm_users_on(NODE, state_of(node(NODE), kata_pod("cc-job", NODE, namespace="cc")))
    assert user.stop == "kubectl delete pod cc-job -n cc" and user.kata


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(env_pod("a", NODE), id="an environment naming devices"),
        pytest.param(env_pod("b", NODE, runtime_class=""), id="the same without a runtime class"),
        pytest.param(dev_mount_pod("c", NODE), id="a /dev/nvidia host path"),
        pytest.param(kata_pod("d", NODE, {"example.com/x": "1"}), id="a runtime class"),
    ],
)
def test_the_prefilter_keeps_pods_that_may_reach_gpus(obj: Obj) -> None:
    assert _may_be_kept(obj)


def test_the_prefilter_still_skips_plain_pods_with_env_and_host_paths() -> None:
    obj = dev_mount_pod("logs", NODE, path="/var/log")
    obj["spec"]["containers"][0]["env"] = [{"name": "LOG_LEVEL", "value": "debug"}]
    assert not _may_be_kept(obj) and not _may_be_kept(pod("web", NODE))

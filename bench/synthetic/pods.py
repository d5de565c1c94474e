"""Which pods the cluster runs, and where: daemonsets on every node, GPU Operator operands, GPU
jobs, one virt-launcher per VMI, and deployments filling the rest of ``layout.pods``."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from bench.synthetic import draw
from bench.synthetic.draw import Obj
from bench.synthetic.layout import (
    MIG_RESOURCE,
    SERVICES,
    TEAMS,
    Image,
    Layout,
    Placement,
    words,
)
from bench.synthetic.pod_maker import DEFAULT_TOLERATIONS, PodMaker, PodShape
from bench.synthetic.vms import vmi_plan

DAEMONSETS = ("kube-proxy", "calico-node", "node-exporter", "fluent-bit")
#: The daemonset's image, by the last part of its repository.
_DAEMONSET_IMAGES = {
    "kube-proxy": "kube-proxy",
    "calico-node": "node",
    "node-exporter": "node-exporter",
    "fluent-bit": "fluent-bit",
}
_HOST_NETWORK = frozenset({"kube-proxy", "calico-node", "node-exporter"})
FULL_OPERANDS = words(
    "nvidia-driver-daemonset gpu-feature-discovery nvidia-container-toolkit-daemonset"
    " nvidia-device-plugin-daemonset nvidia-dcgm-exporter nvidia-operator-validator"
)
MIG_OPERANDS = (*FULL_OPERANDS, "nvidia-mig-manager")
VFIO_OPERANDS = words(
    "nvidia-sandbox-device-plugin-daemonset nvidia-vfio-manager nvidia-sandbox-validator"
)
#: The operand's image, by the last part of its repository.
OPERAND_IMAGES = {
    "nvidia-driver-daemonset": "driver",
    "gpu-feature-discovery": "k8s-device-plugin",
    "nvidia-container-toolkit-daemonset": "container-toolkit",
    "nvidia-device-plugin-daemonset": "k8s-device-plugin",
    "nvidia-dcgm-exporter": "dcgm-exporter",
    "nvidia-operator-validator": "gpu-operator-validator",
    "nvidia-mig-manager": "k8s-mig-manager",
    "nvidia-sandbox-device-plugin-daemonset": "kubevirt-gpu-device-plugin",
    "nvidia-vfio-manager": "cuda",
    "nvidia-sandbox-validator": "gpu-operator-validator",
}
_ML_NAMESPACES = tuple(
    f"ml-{team}"
    for team in words("research training inference vision speech llm recsys robotics eval platform")
)
ML_IMAGES = ("pytorch", "tritonserver", "nemo", "cuda")

#: Running GPU pods per node: leave headroom below 8 GPUs / 56 MIG slices, like a busy cluster.
GPU_PODS_PER_FULL_NODE = 7
GPU_PODS_PER_MIG_NODE = 40

DAEMON_TOLERATIONS = [
    {"operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Exists", "effect": "NoExecute"},
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
]
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def pods(layout: Layout) -> Iterator[Obj]:
    """Daemonset, GPU Operator operand, GPU, virt-launcher and deployment pods, ``layout.pods``
    in all (the deployment pods fill whatever the others leave)."""
    maker = PodMaker(layout)
    shapes = itertools.chain(
        daemonset_pods(layout, maker),
        _operand_pods(layout, maker),
        _gpu_pods(layout, maker),
        _virt_launcher_pods(layout, maker),
        deployment_pods(layout, maker),
    )
    # Each shape is drawn just before its pod, so the stream is the same wherever the cut falls.
    for shape in itertools.islice(shapes, layout.pods):
        yield maker.pod(shape)


def by_name(images: list[Image]) -> dict[str, Image]:
    return {image.name: image for image in images}


def daemon_pod(
    maker: PodMaker,
    namespace: str,
    app: str,
    node: str,
    image: Image,
    env: int,
    tolerations: list[Obj] = DAEMON_TOLERATIONS,
    problem: str = "",
    host_network: bool = False,
) -> PodShape:
    """A daemonset's pod on ``node``: node-critical, tolerating every taint."""
    return PodShape(
        namespace=namespace,
        name=maker.unique(namespace, app),
        node=node,
        app=app,
        image=image,
        owner_kind="DaemonSet",
        owner_name=app,
        env=env,
        tolerations=tolerations,
        problem=problem,
        host_network=host_network,
        priority_class="system-node-critical",
    )


def daemonset_pods(layout: Placement, maker: PodMaker) -> Iterator[PodShape]:
    system = by_name(maker.images.system)
    for app in DAEMONSETS:
        namespace = "kube-system" if app in ("kube-proxy", "calico-node") else "monitoring"
        for node in layout.node_names():
            image = system[_DAEMONSET_IMAGES[app]]
            yield daemon_pod(
                maker, namespace, app, node, image, env=5, host_network=app in _HOST_NETWORK
            )


def _operand_pods(layout: Layout, maker: PodMaker) -> Iterator[PodShape]:
    """The GPU Operator's daemonsets on each GPU node; one in ~300 crash-looping, every one on
    a NotReady node."""
    nvidia = by_name(maker.images.nvidia)
    placements = (
        [(n, FULL_OPERANDS) for n, _ in layout.full_gpu_nodes()]
        + [(n, MIG_OPERANDS) for n in layout.mig_nodes()]
        + [(n, VFIO_OPERANDS) for n, _ in layout.vfio_nodes()]
    )
    for node, operands in placements:
        for app in operands:
            sick = node in layout.not_ready or maker.rng.random() < 0.003
            yield daemon_pod(
                maker,
                "gpu-operator",
                app,
                node,
                nvidia[OPERAND_IMAGES[app]],
                env=6,
                tolerations=[*DAEMON_TOLERATIONS, GPU_TOLERATION],
                problem="CrashLoopBackOff" if sick else "",
            )


def _gpu_pods(layout: Layout, maker: PodMaker) -> Iterator[PodShape]:
    """Jobs' pods holding a GPU or a MIG slice: running within each Ready node's capacity, the
    rest Succeeded or Failed."""
    rng = maker.rng
    nvidia = by_name(maker.images.nvidia)
    images = [nvidia[name] for name in ML_IMAGES]
    full = [n for n, _ in layout.full_gpu_nodes() if n not in layout.not_ready]
    mig = [n for n in layout.mig_nodes() if n not in layout.not_ready]
    total = layout.gpu_pods
    run_full = min(round(total * 0.3), len(full) * GPU_PODS_PER_FULL_NODE)
    run_mig = min(round(total * 0.4), len(mig) * GPU_PODS_PER_MIG_NODE)

    def job_pod(node: str, resource: str, phase: str, problem: str = "") -> PodShape:
        namespace = rng.choice(_ML_NAMESPACES)
        job = (
            f"{namespace.removeprefix('ml-')}-{rng.choice(('train', 'finetune', 'serve', 'eval'))}"
        )
        run = draw.hexdigits(rng, 6)
        return PodShape(
            namespace=namespace,
            name=maker.unique(namespace, f"{job}-{run}-worker-{rng.randrange(64)}"),
            node=node,
            app=job,
            image=rng.choice(images),
            owner_kind="Job",
            owner_name=f"{job}-{run}",
            phase=phase,
            problem=problem,
            resources={
                "requests": {"cpu": "8", "memory": "64Gi", resource: "1"},
                "limits": {"memory": "64Gi", resource: "1"},
            },
            env=10,
            tolerations=[*DEFAULT_TOLERATIONS, GPU_TOLERATION],
            extra_labels={"batch.kubernetes.io/job-name": f"{job}-{run}", "team": namespace},
        )

    for i in range(run_full):
        yield job_pod(full[i % len(full)], "nvidia.com/gpu", "Running")
    for i in range(run_mig):
        yield job_pod(mig[i % len(mig)], MIG_RESOURCE, "Running")
    all_full = [n for n, _ in layout.full_gpu_nodes()]
    all_mig = layout.mig_nodes()
    for _ in range(total - run_full - run_mig):
        on_mig = rng.random() < 0.3
        node = rng.choice(all_mig if on_mig else all_full)
        failed = rng.random() < 0.15
        yield job_pod(
            node,
            MIG_RESOURCE if on_mig else "nvidia.com/gpu",
            "Failed" if failed else "Succeeded",
            rng.choice(("Error", "OOMKilled")) if failed else "",
        )


def _virt_launcher_pods(layout: Layout, maker: PodMaker) -> Iterator[PodShape]:
    """One per VMI, asking for its passthrough device as well as /dev/kvm."""
    launcher = by_name(maker.images.system)["virt-launcher"]
    for v in vmi_plan(layout):
        devices = {"devices.kubevirt.io/kvm": "1", **({v.device: "1"} if v.device else {})}
        yield PodShape(
            namespace=v.namespace,
            name=maker.unique(v.namespace, f"virt-launcher-{v.name}"),
            node=v.node,
            app="virt-launcher",
            image=launcher,
            owner_kind="VirtualMachineInstance",
            owner_name=v.name,
            phase="Running" if v.node else "Pending",
            resources={"requests": {"cpu": "2", "memory": "8Gi", **devices}, "limits": devices},
            env=4,
            extra_labels={"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": v.name},
        )


def deployment_pods(layout: Placement, maker: PodMaker) -> Iterator[PodShape]:
    """Without end, mostly on CPU nodes: 1% Pending, 2% failing to start, 2% Failed."""
    rng = maker.rng
    cpu = layout.cpu_nodes()
    anywhere = layout.node_names()
    fluent_bit = by_name(maker.images.system)["fluent-bit"]
    namespaces = [f"{team}-{env}" for team in TEAMS for env in ("prod", "staging", "dev")]
    while True:
        namespace = rng.choice(namespaces)
        team = namespace.rsplit("-", 1)[0]
        service = rng.choice(SERVICES)
        app = f"{team}-{service}"
        roll = rng.random()
        phase, problem, node = "Running", "", rng.choice(cpu if rng.random() < 0.95 else anywhere)
        if roll < 0.01:
            phase, node = "Pending", ""
        elif roll < 0.03:
            problem = rng.choice(
                ("CrashLoopBackOff", "ImagePullBackOff", "CreateContainerConfigError")
            )
        elif roll < 0.05:
            phase, problem = "Failed", rng.choice(("Error", "OOMKilled", "Evicted"))
        image = maker.images.app(team, service)
        yield PodShape(
            namespace=namespace,
            name=maker.unique(namespace, maker.owner(namespace, app)),
            node=node,
            app=app,
            image=image,
            owner_kind="ReplicaSet",
            owner_name=maker.owner(namespace, app),
            phase=phase,
            problem=problem,
            env=rng.randrange(3, 9),
            sidecar=fluent_bit if rng.random() < 0.1 else None,
            init=image if rng.random() < 0.1 else None,
        )

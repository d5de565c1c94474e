"""The DRA cluster's pods, VMs, VMIs and KubeVirt CR: the device-plugin cluster's makers, with
every GPU taken from a claim (pods: ``spec.resourceClaims``; VMs: KubeVirt's ``GPUsWithDRA`` /
``HostDevicesWithDRA`` shape), the DRA driver's kubelet plugin on every node, and no device
plugin but where it still runs beside the driver."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

from bench.synthetic import draw
from bench.synthetic.dra_layout import DraLayout
from bench.synthetic.dra_plan import PlannedPod, dra_plan
from bench.synthetic.draw import Obj
from bench.synthetic.layout import Image, words
from bench.synthetic.operators import FEATURE_GATES, kubevirt_cr
from bench.synthetic.pod_maker import DEFAULT_TOLERATIONS, PodMaker, PodShape
from bench.synthetic.pods import (
    DAEMON_TOLERATIONS,
    GPU_TOLERATION,
    ML_IMAGES,
    OPERAND_IMAGES,
    by_name,
    daemon_pod,
    daemonset_pods,
    deployment_pods,
)
from bench.synthetic.vms import vm_object, vmi_object

DRA_GATES = ("GPUsWithDRA", "HostDevicesWithDRA")
DRA_PLUGIN_NAMESPACE = "nvidia-dra-driver-gpu"
DRA_PLUGIN_APP = "nvidia-dra-driver-gpu-kubelet-plugin"
#: The GPU Operator's operands when the DRA driver, not the device plugin, hands out GPUs.
CONTAINER_OPERANDS = words(
    "nvidia-driver-daemonset gpu-feature-discovery nvidia-container-toolkit-daemonset"
    " nvidia-dcgm-exporter nvidia-operator-validator"
)
MIG_OPERANDS = (*CONTAINER_OPERANDS, "nvidia-mig-manager")
PASSTHROUGH_OPERANDS = ("nvidia-vfio-manager", "nvidia-sandbox-validator")
DEVICE_PLUGIN = "nvidia-device-plugin-daemonset"


def dra_pods(layout: DraLayout) -> Iterator[Obj]:
    """Daemonset pods, operands and the DRA kubelet plugin on every node, the pods using claims
    (jobs' and virt-launchers'), then deployments up to ``layout.pods``."""
    maker = PodMaker(layout)
    plan = dra_plan(layout)
    maker.used.update((p.namespace, p.name) for p in plan.pods)
    made = 0
    for shape in itertools.chain(daemonset_pods(layout, maker), _operand_pods(layout, maker)):
        made += 1
        yield maker.pod(shape)
    for planned in plan.pods:
        made += 1
        yield _with_claims(layout.seed, maker.pod(_claim_user(maker, planned)), planned)
    for shape in itertools.islice(deployment_pods(layout, maker), max(0, layout.pods - made)):
        yield maker.pod(shape)


def _operand_pods(layout: DraLayout, maker: PodMaker) -> Iterator[PodShape]:
    """The operands of each node's role, the DRA kubelet plugin, and the device plugin where it
    was never turned off; crash-looping on NotReady nodes (and one in ~300 elsewhere)."""
    nvidia = by_name(maker.images.nvidia)
    rng = random.Random(f"{layout.seed}:dra-plugin-image")
    plugin = Image(
        "nvcr.io/nvidia/k8s-dra-driver-gpu", "v25.8.0", draw.hexdigits(rng, 64), 412_000_000
    )
    placements = [
        (n, (*CONTAINER_OPERANDS, *((DEVICE_PLUGIN,) if n in layout.managed_twice else ())))
        for n, _ in layout.gpu_nodes()
    ]
    placements += [(n, MIG_OPERANDS) for n in layout.mig_nodes()]
    placements += [(n, PASSTHROUGH_OPERANDS) for n, _ in layout.passthrough_nodes()]
    tolerations = [*DAEMON_TOLERATIONS, GPU_TOLERATION]
    for node, operands in placements:
        for app in (*operands, DRA_PLUGIN_APP):
            sick = node in layout.not_ready or maker.rng.random() < 0.003
            dra = app == DRA_PLUGIN_APP
            yield daemon_pod(
                maker,
                DRA_PLUGIN_NAMESPACE if dra else "gpu-operator",
                app,
                node,
                plugin if dra else nvidia[OPERAND_IMAGES[app]],
                env=6,
                tolerations=tolerations,
                problem="CrashLoopBackOff" if sick else "",
            )


def _claim_user(maker: PodMaker, planned: PlannedPod) -> PodShape:
    """A job's pod, or a VMI's virt-launcher pod, whose container uses the claim entry."""
    claims = [{"name": planned.claim.name}]
    if planned.vmi is not None:
        kvm = {"devices.kubevirt.io/kvm": "1"}
        launcher = by_name(maker.images.system)["virt-launcher"]
        return PodShape(
            namespace=planned.namespace,
            name=planned.name,
            node=planned.node,
            app=planned.app,
            image=launcher,
            owner_kind="VirtualMachineInstance",
            owner_name=planned.vmi.name,
            phase=planned.phase,
            resources={
                "requests": {"cpu": "2", "memory": "8Gi", **kvm},
                "limits": kvm,
                "claims": claims,
            },
            env=4,
            extra_labels={"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": planned.vmi.name},
        )
    nvidia = by_name(maker.images.nvidia)
    job = planned.name.rsplit("-", 1)[0]
    return PodShape(
        namespace=planned.namespace,
        name=planned.name,
        node=planned.node,
        app=planned.app,
        image=maker.rng.choice([nvidia[name] for name in ML_IMAGES]),
        owner_kind="Job",
        owner_name=job,
        phase=planned.phase,
        resources={
            "requests": {"cpu": "8", "memory": "64Gi"},
            "limits": {"memory": "64Gi"},
            "claims": claims,
        },
        env=10,
        tolerations=[*DEFAULT_TOLERATIONS, GPU_TOLERATION],
        extra_labels={"batch.kubernetes.io/job-name": job, "team": planned.namespace},
    )


def _with_claims(seed: int, pod: Obj, planned: PlannedPod) -> Obj:
    """The pod's claim entry, the claim made for it (status), and the uid its claim's
    ``reservedFor`` names."""
    pod["metadata"]["uid"] = draw.name_uid(seed, planned.namespace, planned.name)
    pod["spec"]["resourceClaims"] = [planned.claim.entry()]
    if planned.claim.template:
        made = {"name": planned.claim.name, "resourceClaimName": planned.claim.made}
        pod["status"]["resourceClaimStatuses"] = [made]
    return pod


def dra_virtual_machines(layout: DraLayout) -> Iterator[Obj]:
    rng = random.Random(f"{layout.seed}:dra-vms")
    total, tainted = layout.nodes, len(layout.not_ready)
    unschedulable = (
        f"0/{total} nodes are available: {tainted} node(s) had untolerated taint "
        f"{{node.kubernetes.io/unreachable: }}, {total - tainted} cannot allocate all claims. "
        f"preemption: 0/{total} nodes are available: {total} Preemption is not helpful for "
        "scheduling."
    )
    for vm in dra_plan(layout).vms:
        yield vm_object(rng, vm, unschedulable)


def dra_virtual_machine_instances(layout: DraLayout) -> Iterator[Obj]:
    rng = random.Random(f"{layout.seed}:dra-vmis")
    for vmi in dra_plan(layout).vmis:
        yield vmi_object(rng, vmi)


def dra_kubevirts(layout: DraLayout) -> Iterator[Obj]:
    """KubeVirt with both DRA gates and no permittedHostDevices (claims do not need them)."""
    yield kubevirt_cr(
        random.Random(f"{layout.seed}:dra-kubevirt"), (*FEATURE_GATES, *DRA_GATES), None
    )

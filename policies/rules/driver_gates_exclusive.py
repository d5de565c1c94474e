"""dra-driver-gates-exclusive: a GPUCluster turning on DRA driver gates that exclude each other.

GPU Operator 26.7 runs NVIDIA's DRA driver from a GPUCluster; ``spec.draDriver.featureGates``
are the driver's gates. The driver documents pairs that cannot be on together (its reference
page, "Constraints"; docs/dra.md [nv-gates]): DynamicMIG with PassthroughSupport,
NVMLDeviceHealthCheck or MPSSupport; PassthroughSupport with NVMLDeviceHealthCheck; MPSSupport
with NVMLDeviceHealthCheck. The driver refuses to start with such a pair, so no node publishes
GPUs and every claim waits (inferred from "mutually exclusive and cannot be enabled together").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from policies.cluster.gpu_operator import GPUClusterInfo
from policies.cluster.kinds import GPU_CLUSTER, object_ref
from policies.cluster.projections import request_projection
from policies.cluster.view import ClusterView
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest, ObjectRef
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "dra-driver-gates-exclusive"
#: The driver's gate pairs that exclude each other (feature-gates.md, "Constraints").
EXCLUSIVE = (
    ("DynamicMIG", "PassthroughSupport"),
    ("DynamicMIG", "NVMLDeviceHealthCheck"),
    ("DynamicMIG", "MPSSupport"),
    ("PassthroughSupport", "NVMLDeviceHealthCheck"),
    ("MPSSupport", "NVMLDeviceHealthCheck"),
)


def clashes(gates: Sequence[str]) -> list[tuple[str, str]]:
    on = set(gates)
    return [pair for pair in EXCLUSIVE if set(pair) <= on]


def judge(cluster: GPUClusterInfo) -> list[Finding]:
    pairs = clashes(cluster.dra_feature_gates)
    if not pairs:
        return []
    named = "; ".join(f"{a} with {b}" for a, b in pairs)
    return [
        Finding(
            f"GPUCluster {cluster.name} turns on DRA driver gates that exclude each other "
            f"({named}): the driver cannot run them together, so no GPU is published and "
            "every claim for one waits",
            chain=(
                f"GPUCluster {cluster.name}: spec.draDriver.featureGates "
                f"{', '.join(cluster.dra_feature_gates)}",
                "NVIDIA DRA driver: these feature gate combinations are mutually exclusive",
            ),
            remediation=tuple(
                f"set spec.draDriver.featureGates.{b} (or {a}) to false: choose one"
                for a, b in pairs
            ),
            device=",".join(f"{a}+{b}" for a, b in pairs),
        )
    ]


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    del view
    if request.obj is None:
        return ()
    cluster: GPUClusterInfo = request_projection(request)
    return judge(cluster)


def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
    for cluster in view.gpu_clusters():
        for finding in judge(cluster):
            yield object_ref(GPU_CLUSTER, "", cluster.name), finding


POLICY = Policy(
    id=ID,
    summary=(
        "A GPUCluster turns on NVIDIA DRA driver feature gates that exclude each other "
        "(DynamicMIG with PassthroughSupport, NVMLDeviceHealthCheck or MPSSupport; "
        "PassthroughSupport or MPSSupport with NVMLDeviceHealthCheck)."
    ),
    scope={GPU_CLUSTER: frozenset({CREATE, UPDATE})},
    default_action=Action.WARN,
    default_reason=(
        "The driver refuses the combination itself; the warning says which gate to drop before "
        "nodes stop publishing GPUs. A guard that is down must not hold up the GPU Operator's "
        "configuration (failurePolicy Ignore)."
    ),
    failure_action=Action.WARN,
    check=check,
    audit=audit,
    reads=frozenset({GPU_CLUSTER}),
)

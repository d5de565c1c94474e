"""admin-access-namespace: a Namespace labelled ``resource.kubernetes.io/admin-access: "true"``.

KEP-5018 (docs/dra.md, [admin]; GA in 1.36): a claim request with ``adminAccess: true`` is
allocated devices regardless of the claims that already hold them, for monitoring and
diagnostics, and the API server admits such a claim only in a namespace carrying the label. So
the label is what gives everyone who may create claims in that namespace access to every GPU in
use in the cluster, whoever's workload holds it. Adding it is warned, naming the devices in use
its claims could now reach; the audit lists every namespace that has it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from policies.cluster.admin_access import ADMIN_ACCESS_LABEL, NamespaceInfo
from policies.cluster.dra import NVIDIA_DRIVER
from policies.cluster.kinds import NAMESPACE, POD, RESOURCE_CLAIM, RESOURCE_SLICE, object_ref
from policies.cluster.projections import request_projection
from policies.cluster.view import ClusterView
from policies.vocabulary.requests import CREATE, UPDATE, AdmissionRequest, ObjectRef
from policies.vocabulary.text import few, plural
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "admin-access-namespace"
SHOWN = 3


def in_use(view: ClusterView) -> list[str]:
    """ "gpu-0 on dgx-1 (claim ml/train-gpu)" for each allocated device of NVIDIA's driver, by
    node (the nodes its slices name, then their allocated claims: index hits per node)."""
    out = []
    for node in view.nodes_with_devices(NVIDIA_DRIVER):
        for held in view.claims_allocated_on(node):
            for result, _ in held.devices:
                out.append(f"{result.device} on {node} (claim {held.claim.key})")
    return out


def finding(name: str, view: ClusterView) -> Finding:
    devices = in_use(view)
    reach = (
        f"{plural(len(devices), 'device')} in use now: {few(devices, SHOWN)}"
        if devices
        else "no device is in use now"
    )
    return Finding(
        message=(
            f"namespace {name} is labelled {ADMIN_ACCESS_LABEL}=true: its claims with adminAccess "
            f"are given devices other workloads hold, in any namespace ({reach}). Keep the label "
            "only on a namespace for monitoring or diagnostics, which few may write to."
        ),
        remediation=(
            f"kubectl label namespace {name} {ADMIN_ACCESS_LABEL}- unless it is meant for "
            "device monitoring or diagnostics",
        ),
    )


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    """When the label is added (or a namespace is created with it)."""
    if request.obj is None:
        return ()
    info: NamespaceInfo = request_projection(request)
    if not info.admin_access:
        return ()
    if request.old is not None and request_projection(request, old=True).admin_access:
        return ()
    return (finding(info.name, view),)


def audit(view: ClusterView) -> Iterator[tuple[ObjectRef, Finding]]:
    for name in view.admin_access_namespaces():
        yield object_ref(NAMESPACE, "", name), finding(name, view)


POLICY = Policy(
    id=ID,
    summary=(
        f"A Namespace gets the label {ADMIN_ACCESS_LABEL}=true: its DRA claims with "
        "adminAccess reach every device in use, whoever holds it."
    ),
    scope={NAMESPACE: frozenset({CREATE, UPDATE})},
    default_action=Action.WARN,
    default_reason=(
        "Admin access is a legitimate tool for monitoring and diagnostics, granted on purpose; "
        "the administrator needs to see what it opens, not be stopped."
    ),
    failure_action=Action.WARN,
    check=check,
    audit=audit,
    reads=frozenset({NAMESPACE, POD, RESOURCE_CLAIM, RESOURCE_SLICE}),
)

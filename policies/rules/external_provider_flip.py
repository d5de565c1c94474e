"""external-provider-flip: KubeVirt told to advertise a GPU the sandbox plugin already serves.

With ``externalResourceProvider: true`` KubeVirt leaves advertising the device to an external
device plugin: on vm-passthrough nodes that is the GPU Operator's sandbox device plugin. Flipped to
``false``, virt-handler advertises the resourceName itself for every matching device bound to
vfio-pci, and vfio-manager binds them all there. (inferred, docs/field-guide.md section 3: reasoned
from code, not observed) The same GPU is then advertised by two plugins, under one name or two, and
the scheduler can hand it to two VMs.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.cluster.kinds import (
    CLUSTER_POLICY,
    DEVICE_CLASS,
    KUBEVIRT,
    NODE,
    NODE_FEATURE,
    RESOURCE_SLICE,
)
from policies.cluster.kubevirt import KubeVirtInfo, PermittedPciDevice
from policies.cluster.kubevirt_config import HCO
from policies.cluster.projections import request_projection
from policies.cluster.view import ClusterView
from policies.cluster.workload import VM_PASSTHROUGH, effective_mode
from policies.vocabulary.requests import UPDATE, AdmissionRequest
from policies.vocabulary.text import few
from policies.vocabulary.verdicts import Action, Finding, Policy

ID = "external-provider-flip"


def served_by_sandbox(entry: PermittedPciDevice, view: ClusterView) -> tuple[list[str], list[str]]:
    """(resource names, nodes): what vm-passthrough nodes already advertise for this entry, under
    its resourceName or the name pci.ids gives its PCI id."""
    names = {entry.resource_name} if entry.resource_name else set()
    if entry.pci is not None:
        names.update(view.advertised_for_pci(entry.pci))
    policy = view.cluster_policy()
    served: set[str] = set()
    nodes: set[str] = set()
    for name in sorted(names):
        for provider in view.providers_of(name):
            node = view.node(provider)
            if node is None or node.allocatable.get(name, 0) <= 0:
                continue  # DRA serves it there: no device plugin to advertise it twice
            if effective_mode(node.labels, policy) == VM_PASSTHROUGH:
                served.add(name)
                nodes.add(provider)
    return sorted(served), sorted(nodes)


def check(request: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
    if request.obj is None or request.old is None:
        return ()
    before: KubeVirtInfo = request_projection(request, old=True)
    after: KubeVirtInfo = request_projection(request)
    was_external = {d.selector.strip().lower() for d in before.pci_devices if d.external}
    findings = []
    for entry in after.pci_devices:
        if entry.external or entry.selector.strip().lower() not in was_external:
            continue
        names, nodes = served_by_sandbox(entry, view)
        if not nodes:
            continue
        message = (
            f"pciHostDevices[{entry.index}] {entry.selector}: externalResourceProvider true -> "
            f"false while the sandbox plugin serves {few(names)} on {few(nodes)} "
            "(vm-passthrough): the GPU would be advertised twice (inferred). Keep it true."
        )
        findings.append(
            Finding(
                message,
                remediation=(
                    f"keep externalResourceProvider: true on pciHostDevices[{entry.index}] while "
                    "the GPU Operator's sandbox device plugin manages these GPUs",
                ),
            )
        )
    return findings


POLICY = Policy(
    id=ID,
    summary=(
        "A KubeVirt CR update flips a pciHostDevices entry's externalResourceProvider true -> "
        "false for a device that nodes in vm-passthrough mode already advertise through the "
        "GPU Operator's sandbox device plugin."
    ),
    scope={KUBEVIRT: frozenset({UPDATE})},
    owners=(HCO,),
    default_action=Action.WARN,
    default_reason=(
        "Inferred, not observed: virt-handler would advertise the GPUs the sandbox plugin already "
        "serves, so one GPU counts twice and two VMs can be handed it. A hypothesis warns, it "
        "does not block."
    ),
    failure_action=Action.WARN,
    check=check,
    reads=frozenset({CLUSTER_POLICY, DEVICE_CLASS, NODE, NODE_FEATURE, RESOURCE_SLICE}),
)

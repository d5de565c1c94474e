"""set-eviction-none-on-gpu-vms: a GPU VM that cannot live-migrate should not say it will.

A VMI with gpus or hostDevices is not live-migratable (HostDeviceNotLiveMigratable). With an
effective evictionStrategy of LiveMigrate, a node drain waits for a migration that never comes:
the drain hangs forever. With None the VM is stopped by the drain and the drain proceeds.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.cluster.kinds import VIRTUAL_MACHINE
from policies.cluster.kubevirt import (
    VM_STARTING_REQUESTS,
    VMIInfo,
    VMInfo,
    effective_eviction_strategy,
)
from policies.cluster.projections import request_projection
from policies.cluster.view import ClusterView
from policies.cluster.vms_to_run import resolved
from policies.vocabulary.fields import get_map
from policies.vocabulary.mutation import Change, Mutation, pointer
from policies.vocabulary.requests import AdmissionRequest

ID = "set-eviction-none-on-gpu-vms"


def mutate(request: AdmissionRequest, view: ClusterView) -> Sequence[Change]:
    obj = request.obj
    if obj is None:
        return ()
    info: VMInfo | VMIInfo = request_projection(request)
    own = info.eviction_strategy
    devices = resolved(info, view).devices if isinstance(info, VMInfo) else info.devices
    if not devices or effective_eviction_strategy(own, view.kubevirt()) != "LiveMigrate":
        return ()
    if request.group_kind == VIRTUAL_MACHINE:
        parent: tuple[str, ...] = ("spec", "template", "spec")
        spec = get_map(get_map(get_map(obj, "spec", ""), "template", "spec"), "spec", "")
    else:
        parent = ("spec",)
        spec = get_map(obj, "spec", "")
    op = "replace" if "evictionStrategy" in spec else "add"
    source = "its own" if own else "the KubeVirt CR's cluster default"
    field = ".".join((*parent, "evictionStrategy"))
    return (
        Change(
            ({"op": op, "path": pointer(*parent, "evictionStrategy"), "value": "None"},),
            f"set {field}: None (was LiveMigrate, {source}): a VM with host devices cannot "
            "live-migrate, so a drain would hang forever; now a drain stops the VM instead",
        ),
    )


MUTATION = Mutation(
    id=ID,
    summary=(
        "Sets evictionStrategy: None on VMs and VMIs with gpus or hostDevices whose effective "
        "strategy is LiveMigrate, so node drains proceed instead of hanging."
    ),
    reason="Opt-in: stopping a VM on drain is a choice an admin makes, not a default.",
    scope=VM_STARTING_REQUESTS,
    mutate=mutate,
)

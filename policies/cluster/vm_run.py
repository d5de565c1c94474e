"""Whether KubeVirt runs a VM: its run strategy (spec.runStrategy, or the deprecated
spec.running) and the state change requests pending in its status (what ``virtctl start`` and
``stop`` have virt-api write). Read by the VM projection (policies.cluster.kubevirt), apart from
what the VM asks for.
"""

from __future__ import annotations

from policies.vocabulary.fields import get_bool, get_maps, get_str
from policies.vocabulary.requests import JSONObject

#: Run strategies under which KubeVirt keeps (or starts) a VMI for the VM.
RUNNING_STRATEGIES = frozenset({"Always", "RerunOnFailure", "Once"})

#: The action of a ``status.stateChangeRequests`` entry that asks virt-controller to start the VM:
#: what ``virtctl start`` of a Manual VM (or ``--paused`` of a Halted one) has virt-api write
#: through ``virtualmachines/status`` (kubevirt/kubevirt pkg/virt-api/rest/lifecycle.go,
#: ``StartVMRequestHandler``; ``StartRequest`` in staging/src/kubevirt.io/api/core/v1/types.go).
START_REQUEST = "Start"


def run_strategy_of(spec: JSONObject, path: str = "spec") -> str:
    """spec.runStrategy, else the deprecated spec.running (true: Always, false: Halted)."""
    strategy = get_str(spec, "runStrategy", path)
    if strategy:
        return strategy
    running = spec.get("running")
    if running is None:
        return "Halted"
    return "Always" if get_bool(spec, "running", path) else "Halted"


def asks_to_start(status: JSONObject) -> bool:
    """Whether any entry of status.stateChangeRequests asks for a start (a restart writes Stop,
    then Start: the VM is asked to run all the same)."""
    return any(
        get_str(entry, "action", where) == START_REQUEST
        for where, entry in get_maps(status, "stateChangeRequests", "status")
    )

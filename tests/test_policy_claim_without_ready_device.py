"""claim-without-ready-device: claims, templates and the pods and VMs that use them, when no Ready
node can satisfy a request (the reasons themselves are tests/test_claim_fit.py's)."""

from __future__ import annotations

from typing import Any

import pytest

from policies.cluster.kinds import VIRTUAL_MACHINE_INSTANCE, object_ref
from policies.rules.claim_without_ready_device import POLICY, audit, check
from policies.state.cluster import ClusterState
from policies.vocabulary.verdicts import Action, Finding
from tests.builders import (
    Obj,
    cluster_policy,
    controller,
    cordoned,
    judged_by,
    node,
    pod,
    request,
    state_of,
    vm,
    vmi,
    with_labels,
)
from tests.dra_builders import (
    GPU_DEVICE_CLASS,
    VFIO_DEVICE_CLASS,
    claim_pod,
    claim_template,
    claim_vm,
    claim_vmi,
    gpu,
    resource_claim,
    resource_slice,
)
from tests.test_state_indexes import scan_free_state
from webhook.engine import Engine

GPU = GPU_DEVICE_CLASS
VFIO = VFIO_DEVICE_CLASS
DOWN = node(
    "node-9",
    ready="Unknown",
    reason="NodeStatusUnknown",
    message="Kubelet stopped posting node status.",
    since="2026-10-14T06:40:00Z",
)
#: dgx-3 is Ready with two GPUs; node-9 is NotReady with the only H100 NVL; no vfio devices.
WORLD = (
    GPU,
    VFIO,
    node("dgx-3"),
    resource_slice("dgx-3", "dgx-3", [gpu("gpu-0"), gpu("gpu-1")]),
    DOWN,
    resource_slice("node-9", "node-9", [gpu("gpu-0", product="NVIDIA H100 NVL")]),
)
NVL = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 NVL'"
NVL_REASON = (
    "only node-9 has a matching device (NVIDIA H100 NVL) and it is NotReady since 2026-10-14 "
    "(Kubelet stopped posting node status.)"
)
FITS = resource_claim("fits")
TOO_MANY = resource_claim("too-many", count=4)
ON_NODE_9 = resource_claim("on-node-9", selectors=[NVL])
NO_VFIO = claim_template("no-vfio", "ml")


def world(*extra: Obj) -> ClusterState:
    return state_of(*WORLD, *extra)


def findings(review: Any, *extra: Obj) -> list[Finding]:
    return list(check(review, world(*extra)))


# --- scope ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("review", "judged"),
    [
        (request("CREATE", TOO_MANY), True),
        (request("UPDATE", TOO_MANY, TOO_MANY), True),
        (request("DELETE", None, TOO_MANY), False),
        (request("UPDATE", TOO_MANY, TOO_MANY, sub_resource="status"), False),
        (request("CREATE", NO_VFIO), True),
        (request("UPDATE", NO_VFIO, NO_VFIO), True),
        (request("CREATE", claim_pod("p", "", claim="too-many")), True),
        (request("UPDATE", claim_pod("p", "", claim="too-many")), False),
        (request("CREATE", claim_vm("v", template="no-vfio")), True),
        (request("UPDATE", claim_vm("v", template="no-vfio")), True),
        (request("CREATE", claim_vmi("v", template="no-vfio")), True),
        (request("CREATE", GPU), False),
        (request("CREATE", resource_slice("s", "n", [gpu()])), False),
    ],
    ids=[
        "claim create",
        "claim update",
        "claim delete",
        "claim status (the scheduler's allocation)",
        "template create",
        "template update",
        "pod create",
        "pod update",
        "VM create",
        "VM update",
        "VMI create",
        "device class",
        "resource slice",
    ],
)
def test_the_scope_is_claims_templates_and_the_workloads_that_use_them(
    review: Any, judged: bool
) -> None:
    assert judged_by(POLICY, review) is judged


# --- claims and templates under review ----------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            TOO_MANY,
            "request gpu: asks 4, at most 2 on one node (dgx-3); pods using it stay Pending",
        ),
        (ON_NODE_9, f"request gpu: {NVL_REASON}; pods using it stay Pending"),
        (
            NO_VFIO,
            "request gpu: class vfio.gpu.nvidia.com matches no published device; pods and VMs "
            "using it stay Pending",
        ),
    ],
    ids=["a claim for too many", "a claim only a dead node can satisfy", "a template"],
)
def test_a_claim_or_template_no_ready_node_can_satisfy_is_warned(obj: Obj, message: str) -> None:
    (finding,) = findings(request("CREATE", obj))
    assert finding.message == message
    assert len(f"[{POLICY.id}] {finding.message}") <= 256
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    assert finding.device == f"{namespace}/{name}:gpu"


@pytest.mark.parametrize(
    "obj",
    [
        FITS,
        resource_claim("c", count=2),
        resource_claim("c", count=4, allocated=("dgx-3", "dgx-3", "gpu-0")),
        claim_template("t", "ml", device_class="gpu.nvidia.com"),
    ],
    ids=["one GPU", "as many as dgx-3 has", "allocated already", "a template that fits"],
)
def test_what_a_ready_node_can_satisfy_or_what_is_allocated_passes(obj: Obj) -> None:
    assert findings(request("CREATE", obj)) == []
    assert findings(request("UPDATE", obj, obj)) == []


def test_the_finding_says_since_when_and_what_to_repair() -> None:
    (finding,) = findings(request("CREATE", ON_NODE_9))
    assert finding.since is not None and finding.since.date().isoformat() == "2026-10-14"
    assert finding.chain == (
        "needs claim ml/on-node-9 request gpu",
        "node-9: NotReady since 2026-10-14 (Kubelet stopped posting node status.)",
    )
    assert finding.remediation == (
        "find why node-9 is not Ready (journalctl -u kubelet there), fix it",
    )


@pytest.mark.parametrize(
    ("obj", "first_step"),
    [
        (
            resource_claim("c", device_class="gpu.nvidia.io"),
            "set deviceClassName to gpu.nvidia.com",
        ),
        (
            resource_claim("c", device_class="tpu.example.com"),
            "create DeviceClass tpu.example.com or use one that exists (kubectl get deviceclasses)",
        ),
        (NO_VFIO, "check that a DRA driver publishes devices of class vfio.gpu.nvidia.com"),
        (
            resource_claim(
                "c",
                selectors=["device.attributes['gpu.nvidia.com'].productName == 'nvidia h100 nvl'"],
            ),
            "change the selector to productName == 'NVIDIA H100 NVL'",
        ),
        (
            resource_claim("c", selectors=["device.attributes['gpu.nvidia.com'].nope == 1"]),
            "compare the selectors with the devices (kubectl get resourceslices -o yaml)",
        ),
        (
            TOO_MANY,
            "ask for at most 2, or add a node with 4 (a claim's devices come from one node)",
        ),
    ],
    ids=["a near class", "no class", "an empty class", "a near value", "undecided", "too many"],
)
def test_the_remediation_starts_with_the_fix_for_the_reason(obj: Obj, first_step: str) -> None:
    (finding,) = findings(request("CREATE", obj))
    assert finding.remediation[0] == first_step


def test_a_cordoned_provider_is_to_be_uncordoned_not_repaired() -> None:
    claim = resource_claim("c", selectors=[NVL])
    (finding,) = findings(request("CREATE", claim), cordoned(node("node-9")))
    assert finding.message.startswith("request gpu: only node-9 has a matching device")
    assert finding.remediation == ("kubectl uncordon node-9, if it is fit to run work again",)


def test_a_claim_whose_requests_fit_only_apart_gets_one_finding_for_the_whole_claim() -> None:
    claim = resource_claim("both")
    claim["spec"]["devices"]["requests"].append(
        {
            "name": "nvl",
            "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "selectors": [{"cel": {"expression": NVL}}],
            },
        }
    )
    (finding,) = findings(request("CREATE", claim), node("node-9"))
    assert finding.device == "ml/both:"
    assert finding.message.startswith("requests gpu and nvl each fit on a Ready node")
    assert finding.chain[0] == "needs claim ml/both"
    assert finding.remediation == (
        "split the requests into claims of separate pods, or add a node with all",
    )


# --- pods and VMs that use claims ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        (
            claim_pod("p", "", claim="on-node-9"),
            f"claim ml/on-node-9 request gpu: {NVL_REASON}; the pod stays Pending",
        ),
        (
            claim_pod("p", "", template="no-vfio"),
            "template ml/no-vfio request gpu: class vfio.gpu.nvidia.com matches no published "
            "device; the pod stays Pending",
        ),
        (
            claim_vm("v", template="no-vfio", namespace="ml"),
            "template ml/no-vfio request gpu: class vfio.gpu.nvidia.com matches no published "
            "device; the VM stays unschedulable",
        ),
        (
            claim_vmi("v", claim="too-many", namespace="ml"),
            "claim ml/too-many request gpu: asks 4, at most 2 on one node (dgx-3); the VM stays "
            "unschedulable",
        ),
        (
            controller("Deployment", claim_pod("p", "", claim="too-many")),
            "Deployment ml/trainer's pod template: claim ml/too-many request gpu: asks 4, at "
            "most 2 on one node (dgx-3); its pods stay Pending",
        ),
    ],
    ids=[
        "a pod's claim",
        "a pod's template",
        "a VM's template",
        "a VMI's claim",
        "a Deployment's pod template",
    ],
)
def test_a_new_workload_is_told_which_of_its_claims_cannot_be_satisfied(
    workload: Obj, message: str
) -> None:
    (finding,) = findings(request("CREATE", workload), ON_NODE_9, NO_VFIO, TOO_MANY)
    assert finding.message == message
    assert len(f"[{POLICY.id}] {finding.message}") <= 256


@pytest.mark.parametrize(
    "workload",
    [
        claim_pod("p", "", claim="fits"),
        claim_pod("p", "", claim="allocated"),
        claim_pod("p", "", claim="not-created-yet"),
        claim_pod("p", "", template="not-created-yet"),
        pod("p", limits={"nvidia.com/gpu": "1"}),
        claim_vm("v", template="no-vfio", namespace="ml", run_strategy="Halted"),
        vm("v", gpus=["nvidia.com/GB202_GEFORCE_RTX_5090"], namespace="ml"),
        claim_vmi("v", template="no-vfio", namespace="ml", phase="Succeeded"),
    ],
    ids=[
        "a claim that fits",
        "an allocated claim",
        "a claim not created yet (apply order)",
        "a template not created yet",
        "a pod without claims",
        "a halted VM",
        "a VM with a device-plugin GPU",
        "a finished VMI",
    ],
)
def test_a_workload_whose_claims_are_fine_allocated_or_unknown_passes(workload: Obj) -> None:
    allocated = resource_claim("allocated", count=4, allocated=("node-9", "node-9", "gpu-0"))
    assert findings(request("CREATE", workload), FITS, allocated, NO_VFIO) == []


def test_a_claim_named_twice_is_judged_once() -> None:
    workload = claim_pod("p", "", claim="too-many")
    workload["spec"]["resourceClaims"].append({"name": "again", "resourceClaimName": "too-many"})
    assert len(findings(request("CREATE", workload), TOO_MANY)) == 1


def test_pods_and_vms_are_judged_from_the_indexes() -> None:
    state = scan_free_state(*WORLD, ON_NODE_9, NO_VFIO)
    for workload in (
        claim_pod("p", "", claim="on-node-9"),
        claim_vm("v", template="no-vfio", namespace="ml"),
    ):
        assert check(request("CREATE", workload), state)


def test_the_default_action_is_warn() -> None:
    decision = Engine().evaluate(request("CREATE", TOO_MANY), world())
    assert decision.allowed
    assert [(v.policy, v.action) for v in decision.verdicts] == [(POLICY.id, Action.WARN)]


# --- the audit ---------------------------------------------------------------------------------


def audited(*objects: Obj) -> list[tuple[str, str, str]]:
    """(kind, namespace/name, device) of each finding."""
    return [(ref.kind, str(ref), f.device) for ref, f in audit(world(*objects))]


def test_the_audit_names_the_workloads_waiting_on_a_claim_no_ready_node_can_satisfy() -> None:
    found = audited(
        ON_NODE_9,
        claim_pod("waiting", "", claim="on-node-9", phase="Pending"),
        claim_pod("bound", "dgx-3", claim="on-node-9"),
        claim_pod("done", "", claim="on-node-9", phase="Succeeded"),
        NO_VFIO,
        claim_pod("from-template", "", template="no-vfio", phase="Pending"),
        claim_vm("vm", template="no-vfio", namespace="ml"),
        claim_vm("placed", template="no-vfio", namespace="ml"),
        vmi("placed", node_name="dgx-3", namespace="ml", owner="placed"),
    )
    assert found == [
        ("Pod", "ml/waiting", "ml/on-node-9:gpu"),
        ("Pod", "ml/from-template", "ml/no-vfio:gpu"),
        ("VirtualMachine", "ml/vm", "ml/no-vfio:gpu"),
    ]


def test_the_audit_says_what_each_waiting_workload_suffers_after_the_claim_it_waits_on() -> None:
    said = {
        str(ref): finding.message
        for ref, finding in audit(
            world(
                ON_NODE_9,
                claim_pod("waiting", "", claim="on-node-9", phase="Pending"),
                NO_VFIO,
                claim_vm("vm", template="no-vfio", namespace="ml"),
            )
        )
    }
    assert said == {
        "ml/waiting": f"claim ml/on-node-9 request gpu: {NVL_REASON}; the pod stays Pending",
        "ml/vm": "template ml/no-vfio request gpu: class vfio.gpu.nvidia.com matches no "
        "published device; the VM stays unschedulable",
    }


def test_a_workload_is_told_about_every_claim_it_uses_after_one_it_names_twice() -> None:
    workload = claim_pod("p", "", claim="too-many")
    claims = workload["spec"]["resourceClaims"]
    claims.append({"name": "again", "resourceClaimName": "too-many"})
    claims.append({"name": "nvl", "resourceClaimName": "on-node-9"})
    told = [f.device for f in findings(request("CREATE", workload), TOO_MANY, ON_NODE_9)]
    assert told == ["ml/too-many:gpu", "ml/on-node-9:gpu"]


def test_the_audit_leaves_claims_nobody_waits_for_and_allocated_ones_alone() -> None:
    allocated = resource_claim("held", count=4, allocated=("node-9", "node-9", "gpu-0"))
    made = resource_claim("p-gpu-x7", allocated=("dgx-3", "dgx-3", "gpu-0"))
    assert (
        audited(
            ON_NODE_9,
            TOO_MANY,
            allocated,
            claim_pod("waiting", "", claim="held", phase="Pending"),
            NO_VFIO,
            made,
            claim_pod("p", "", template="no-vfio", claim="p-gpu-x7", phase="Pending"),
        )
        == []
    )


def test_the_audit_finding_names_the_workload_with_its_kind() -> None:
    refs = [
        ref for ref, _ in audit(world(TOO_MANY, claim_vmi("i", claim="too-many", namespace="ml")))
    ]
    assert refs == [object_ref(VIRTUAL_MACHINE_INSTANCE, "ml", "i")]


def test_a_vms_launcher_pod_is_not_reported_apart_from_the_vm() -> None:
    from pathlib import Path

    from policies.rules.claim_without_ready_device import audit
    from webhook.state.files import load_state

    dra = Path(__file__).resolve().parent.parent / "examples" / "dra" / "cluster.yaml"
    view = load_state([str(dra)])
    launchers = [p.key for p in view.pods() if p.name.startswith("virt-launcher-gpu-fedora-")]
    assert launchers, "the example has gpu-fedora's pending launcher pod"
    reported = {f"{ref.kind} {ref}" for ref, _ in audit(view)}
    assert "VirtualMachine vms/gpu-fedora" in reported
    assert not any(key in r for r in reported for key in launchers), reported


def test_a_claim_whose_only_device_is_on_a_dead_passthrough_node_is_repaired_relabel_first() -> (
    None
):
    import copy
    from pathlib import Path

    from policies.cluster.workload import WORKLOAD_LABEL
    from policies.rules.claim_without_ready_device import audit
    from webhook.state.files import load_state, read_objects

    dra = Path(__file__).resolve().parent.parent / "examples" / "dra" / "cluster.yaml"
    view = load_state([str(dra)])

    def fix_for_gpu_fedora() -> tuple[str, ...]:
        (finding,) = [f for ref, f in audit(view) if ref.name == "gpu-fedora"]
        return finding.remediation

    steps = fix_for_gpu_fedora()
    assert steps[0] == (
        f"before kubelet returns: kubectl label node omen2 {WORKLOAD_LABEL}=container "
        "--overwrite (or keep the mode and block the rebind: kubectl label node omen2 "
        "nvidia.com/gpu.deploy.vfio-manager=false --overwrite)"
    )
    assert steps[1].startswith("find why omen2 is not Ready")
    (omen2,) = [i.obj for i in read_objects(str(dra)) if i.obj["metadata"]["name"] == "omen2"]
    relabelled = copy.deepcopy(dict(omen2))
    relabelled["metadata"]["labels"][WORKLOAD_LABEL] = "container"
    view.upsert(relabelled)
    assert not any(step.startswith("before kubelet returns") for step in fix_for_gpu_fedora())


@pytest.mark.parametrize(
    ("cluster_policy_", "relabel_first"),
    [
        pytest.param([], True, id="the label taken as it is without a ClusterPolicy"),
        pytest.param([cluster_policy(False, "vm-passthrough")], False, id="sandbox workloads off"),
    ],
)
def test_a_dead_provider_is_relabelled_first_only_in_the_mode_the_operator_gives_it(
    cluster_policy_: list[Obj], relabel_first: bool
) -> None:
    from policies.cluster.workload import WORKLOAD_LABEL

    labelled = with_labels(DOWN, {WORKLOAD_LABEL: "vm-passthrough"})
    (finding,) = findings(request("CREATE", ON_NODE_9), labelled, *cluster_policy_)
    assert finding.remediation[0].startswith("before kubelet returns") is relabel_first
    assert finding.remediation[-1] == (
        "find why node-9 is not Ready (journalctl -u kubelet there), fix it"
    )


def test_a_pod_waiting_on_a_template_is_reported_though_another_of_its_claims_exists() -> None:
    waiting = claim_pod("p", "", template="no-vfio", phase="Pending")
    waiting["spec"]["resourceClaims"].append({"name": "other", "resourceClaimName": "fits"})
    assert audited(NO_VFIO, FITS, waiting) == [("Pod", "ml/p", "ml/no-vfio:gpu")]

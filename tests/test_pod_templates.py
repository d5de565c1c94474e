"""Workload controllers are judged by their pod template, as the pods they will make: the verdict
a bare Pod gets from gpu-pod-on-passthrough-node and claim-without-ready-device is said at the
Deployment, StatefulSet, DaemonSet, ReplicaSet, Job or CronJob that makes it."""

from __future__ import annotations

from typing import Any

import pytest

from policies.cluster.pod_templates import TEMPLATE_PATH, pod_template
from policies.cluster.view import ClusterView
from policies.cluster.workload import WORKLOAD_LABEL
from policies.rules import claim_without_ready_device, gpu_pod_placement
from policies.state.cluster import ClusterState
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.verdicts import Action, Policy
from tests.builders import (
    CONTROLLER_API_VERSIONS,
    Obj,
    cluster_policy,
    controller,
    judged_by,
    new_pod,
    node,
    request,
    state_of,
)
from tests.dra_builders import (
    GPU_CLASS,
    claim_pod,
    device_class,
    gpu,
    resource_claim,
    resource_slice,
)
from webhook.engine import Engine

KINDS = list(CONTROLLER_API_VERSIONS)
HOSTNAME = "kubernetes.io/hostname"
GPU = {"nvidia.com/gpu": "1"}
PLACEMENT = gpu_pod_placement.POLICY
CLAIMS = claim_without_ready_device.POLICY
NVL = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 NVL'"

#: tower1 is vm-passthrough, omen1 container; dgx-3 is Ready, node-9 NotReady with the only NVL.
WORLD = state_of(
    cluster_policy(True, "container"),
    node("tower1", labels={WORKLOAD_LABEL: "vm-passthrough"}),
    node("omen1", labels={WORKLOAD_LABEL: "container"}, allocatable={"nvidia.com/gpu": "4"}),
    device_class("gpu.nvidia.com", GPU_CLASS, extended="nvidia.com/gpu"),
    node("dgx-3"),
    resource_slice("dgx-3", "dgx-3", [gpu("gpu-0")]),
    node("node-9", ready="Unknown", reason="NodeStatusUnknown", since="2026-10-14T06:40:00Z"),
    resource_slice("node-9", "node-9", [gpu("gpu-0", product="NVIDIA H100 NVL")]),
    resource_claim("on-node-9", selectors=[NVL]),
    resource_claim("fits"),
)

PINNED_TO_PASSTHROUGH = new_pod("p", limits=GPU, node_selector={HOSTNAME: "tower1"})
PINNED_TO_CONTAINER = new_pod("p", limits=GPU, node_selector={HOSTNAME: "omen1"})
NO_GPU = new_pod("p", node_selector={HOSTNAME: "tower1"})
CLAIM_ON_NOTREADY = claim_pod("p", "", claim="on-node-9")
CLAIM_THAT_FITS = claim_pod("p", "", claim="fits")


def messages(policy: Policy[ClusterView], review: Any, view: ClusterState = WORLD) -> list[str]:
    return [finding.message for finding in policy.check(review, view)]


def as_new_pod(pod_obj: Obj) -> Obj:
    """What a CREATE of the pod itself carries (a claim pod's status dropped)."""
    return {key: value for key, value in pod_obj.items() if key != "status"}


# --- the same verdict as the pod, said of the controller -----------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("policy", "pod_obj"),
    [
        pytest.param(PLACEMENT, PINNED_TO_PASSTHROUGH, id="a GPU pod pinned to a passthrough node"),
        pytest.param(CLAIMS, CLAIM_ON_NOTREADY, id="a pod using a claim only a NotReady node has"),
    ],
)
def test_a_controller_whose_pods_would_be_warned_gets_the_pods_verdict_under_its_own_name(
    kind: str, policy: Policy[ClusterView], pod_obj: Obj
) -> None:
    review = request("CREATE", controller(kind, pod_obj))
    assert judged_by(policy, review)
    said_of_the_pod = messages(policy, request("CREATE", as_new_pod(pod_obj)))
    assert said_of_the_pod, "the bare pod is warned"
    said = messages(policy, review)
    if policy is CLAIMS:  # the controller has pods, plural
        said_of_the_pod = [m.replace("the pod stays", "its pods stay") for m in said_of_the_pod]
    assert said == [f"{kind} ml/trainer's pod template: {m}" for m in said_of_the_pod]


def test_a_deployments_message_names_it_the_node_and_the_consequence_within_a_warning() -> None:
    review = request("CREATE", controller("Deployment", PINNED_TO_PASSTHROUGH))
    (message,) = messages(PLACEMENT, review)
    assert message == (
        "Deployment ml/trainer's pod template: pod asks for nvidia.com/gpu: 1 but can only run on "
        "tower1 (vm-passthrough), where no container GPU device plugin runs: it will never start. "
        "Target a container-mode node."
    )
    assert len(f"[{PLACEMENT.id}] {message}") <= 256


def test_a_cron_jobs_message_names_the_claim_and_says_its_pods_stay_pending() -> None:
    review = request("CREATE", controller("CronJob", CLAIM_ON_NOTREADY, name="nightly"))
    (message,) = messages(CLAIMS, review)
    assert message.startswith("CronJob ml/nightly's pod template: claim ml/on-node-9 request ")
    assert "node-9" in message and message.endswith("; its pods stay Pending")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("policy", "pod_obj"),
    [
        pytest.param(PLACEMENT, PINNED_TO_CONTAINER, id="a GPU pod pinned to a container node"),
        pytest.param(PLACEMENT, NO_GPU, id="a pod without GPUs pinned to a passthrough node"),
        pytest.param(CLAIMS, CLAIM_THAT_FITS, id="a pod using a claim a Ready node can satisfy"),
        pytest.param(CLAIMS, new_pod("p"), id="a pod without claims"),
    ],
)
def test_a_controller_whose_pods_would_pass_passes(
    kind: str, policy: Policy[ClusterView], pod_obj: Obj
) -> None:
    assert messages(policy, request("CREATE", controller(kind, pod_obj))) == []


def test_the_template_is_read_in_the_controllers_namespace() -> None:
    elsewhere = dict(CLAIM_ON_NOTREADY, metadata={"name": "p", "namespace": "other"})
    review = request("CREATE", controller("Deployment", elsewhere))
    template = pod_template(review)
    assert template is not None and template.pod.namespace == "other"
    assert messages(CLAIMS, review) == []  # claim ml/on-node-9 is not other/on-node-9


# --- which requests are judged -------------------------------------------------------------------

DEPLOYMENT = controller("Deployment", PINNED_TO_PASSTHROUGH, replicas=1)
SCALED = controller("Deployment", PINNED_TO_PASSTHROUGH, replicas=3)
RELABELLED = dict(DEPLOYMENT, metadata={**DEPLOYMENT["metadata"], "labels": {"team": "ml"}})
PINNED_TO_OMEN1 = controller(
    "Deployment",
    new_pod("p", limits=GPU, node_selector={HOSTNAME: "omen1"}),
    replicas=1,
)
CRON_JOB = controller("CronJob", PINNED_TO_PASSTHROUGH)
RESCHEDULED = dict(CRON_JOB, spec={**CRON_JOB["spec"], "schedule": "@hourly"})


@pytest.mark.parametrize(
    ("review", "warned"),
    [
        pytest.param(request("CREATE", DEPLOYMENT), True, id="a deployment created"),
        pytest.param(
            request("UPDATE", DEPLOYMENT, PINNED_TO_OMEN1),
            True,
            id="a deployment re-pinned by an update",
        ),
        pytest.param(request("UPDATE", SCALED, DEPLOYMENT), False, id="a deployment scaled"),
        pytest.param(
            request("UPDATE", RELABELLED, DEPLOYMENT), False, id="a deployment relabelled"
        ),
        pytest.param(
            request("UPDATE", SCALED, DEPLOYMENT, sub_resource="scale"),
            False,
            id="the scale subresource",
        ),
        pytest.param(
            request("UPDATE", DEPLOYMENT, DEPLOYMENT, sub_resource="status"),
            False,
            id="the status subresource",
        ),
        pytest.param(request("DELETE", None, DEPLOYMENT), False, id="a deployment deleted"),
        pytest.param(request("UPDATE", RESCHEDULED, CRON_JOB), False, id="a cron job rescheduled"),
    ],
)
def test_a_controller_is_warned_when_created_or_when_its_pod_template_changes(
    review: Any, warned: bool
) -> None:
    verdicts = Engine().evaluate(review, WORLD).verdicts
    assert [v.policy for v in verdicts] == ([PLACEMENT.id] if warned else [])
    assert all(v.action == Action.WARN for v in verdicts)


def owned_by(obj: Obj, api_version: str, kind: str, is_controller: bool = True) -> Obj:
    owner = {"apiVersion": api_version, "kind": kind, "name": "o", "controller": is_controller}
    return dict(obj, metadata={**obj["metadata"], "ownerReferences": [owner]})


REPLICA_SET = controller("ReplicaSet", PINNED_TO_PASSTHROUGH)
JOB = controller("Job", PINNED_TO_PASSTHROUGH)


@pytest.mark.parametrize(
    ("obj", "warned"),
    [
        pytest.param(owned_by(REPLICA_SET, "apps/v1", "Deployment"), False, id="a deployment's RS"),
        pytest.param(owned_by(JOB, "batch/v1", "CronJob"), False, id="a cron job's job"),
        pytest.param(
            owned_by(REPLICA_SET, "argoproj.io/v1alpha1", "Rollout"), True, id="a rollout's RS"
        ),
        pytest.param(
            owned_by(REPLICA_SET, "apps/v1", "Deployment", is_controller=False),
            True,
            id="an RS a deployment owns but does not control",
        ),
    ],
)
def test_what_a_judged_controller_made_from_its_template_is_not_said_again(
    obj: Obj, warned: bool
) -> None:
    assert bool(messages(PLACEMENT, request("CREATE", obj))) == warned


# --- a malformed template ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_malformed_template_is_named_where_it_is_in_the_controller(kind: str) -> None:
    obj = controller(kind, PINNED_TO_PASSTHROUGH)
    spec = obj["spec"]["jobTemplate"]["spec"] if kind == "CronJob" else obj["spec"]
    spec["template"]["spec"]["containers"] = "main"
    where = ".".join(TEMPLATE_PATH[request("CREATE", obj).group_kind])
    for policy in (PLACEMENT, CLAIMS):
        with pytest.raises(ObjectError) as raised:
            policy.check(request("CREATE", obj), WORLD)
        assert raised.value.path == f"{where}.spec.containers"


def test_a_malformed_template_gets_the_policies_failure_action_not_an_error() -> None:
    obj = controller("Deployment", PINNED_TO_PASSTHROUGH)
    obj["spec"]["template"]["spec"]["nodeSelector"] = ["tower1"]
    verdicts = Engine().evaluate(request("CREATE", obj), WORLD).verdicts
    assert {v.action for v in verdicts} == {PLACEMENT.failure_action}
    assert any("spec.template.spec.nodeSelector" in v.message for v in verdicts)


def test_a_template_is_read_once_for_every_policy_that_asks() -> None:
    review = request("CREATE", DEPLOYMENT)
    first = pod_template(review)
    assert first is not None and pod_template(review) is first

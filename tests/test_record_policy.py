"""The API server's own policy (manifests/base/record.yaml) denies what the node-label deny
policies deny, given the record the audit leader writes (policies/cluster/record.py).

On every sample that changes a Node, the record built from the sample's state and the CEL run
as the API server runs it (tests/vap.py) must deny exactly the carried policies the engine
denies: with the record computed from the same state, lag is excluded, so there is no other
difference to allow. The override rules (webhook/overrides.py) hold for both alike.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from policies.cluster.kinds import NODE
from policies.cluster.record import (
    CARRIED,
    RECORD_NAME,
    configured,
    content_changed,
    record_data,
    stamped,
)
from policies.vocabulary.overrides import OVERRIDE_ANNOTATION, OVERRIDE_REASON_ANNOTATION
from policies.vocabulary.requests import AdmissionRequest
from tests.builders import cluster_policy, gpu_pod, node, state_of, vmi, with_labels
from tests.builders import request as builders_request
from tests.samples import Sample, all_samples
from webhook.admission.compose import review_of
from webhook.admission.review import parse_review
from webhook.audit.record import settings
from webhook.config import GuardConfig, parse_config
from webhook.engine import Engine
from webhook.state.files import load_state

pytest.importorskip("celpy", reason="cel-python is not installed")
from tests.vap import run_policy

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD, CC_LABEL, VM_MODE = (
    "nvidia.com/gpu.workload.config",
    "nvidia.com/cc.mode",
    "vm-passthrough",
)
NOW = datetime(2026, 12, 5, 14, 0, tzinfo=UTC)


def _documents() -> list[dict[str, Any]]:
    text = (ROOT / "manifests" / "base" / "record.yaml").read_text()
    return [d for d in yaml.safe_load_all(text) if d]


POLICY = next(d for d in _documents() if d["kind"] == "ValidatingAdmissionPolicy")["spec"]


def node_samples() -> list[tuple[Sample, AdmissionRequest]]:
    return [
        (sample, request)
        for sample in all_samples()
        for request in sample.requests()
        if request.group_kind == NODE and request.operation == "UPDATE"
    ]


SAMPLES = node_samples()


def verdicts(
    request: AdmissionRequest, states: list[str], config: GuardConfig | None = None
) -> tuple[set[str], set[str], list[Any]]:
    """The carried policies the engine denies, those the CEL denies, and the CEL's denials."""
    engine = Engine(config)
    view = load_state(states)
    denied = {v.policy for v in engine.evaluate(request, view).denials if v.policy in CARRIED}
    record = stamped(record_data(view, settings(engine, NOW)), NOW)
    body = review_of(request)["request"]
    denials = run_policy(POLICY, body, {"data": record}) or []
    return denied, {d.policy for d in denials}, denials


def test_there_are_node_label_samples_for_every_carried_policy() -> None:
    assert {s.policy_id for s, _ in SAMPLES} >= set(CARRIED)


@pytest.mark.parametrize(("sample", "request_"), SAMPLES, ids=[s.name for s, _ in SAMPLES])
def test_the_api_servers_policy_and_the_rules_agree_on_the_sample(
    sample: Sample, request_: AdmissionRequest
) -> None:
    engine_denies, cel_denies, denials = verdicts(request_, sample.state_args)
    assert cel_denies == engine_denies, sample.name
    for denial in denials:
        assert denial.reason == "Forbidden"
        assert denial.message.startswith(f"{denial.policy}: ")
        assert "as of 2026-12-05T14:00:00Z" in denial.message


def _denied_sample() -> tuple[Sample, AdmissionRequest]:
    return next(
        (s, r) for s, r in SAMPLES if s.name.endswith("switch-a-node-under-a-cuda-pod.yaml")
    )


def _annotated(request: AdmissionRequest, new: dict[str, str], old: dict[str, str]) -> Any:
    review = copy.deepcopy(review_of(request))
    review["request"]["object"]["metadata"].setdefault("annotations", {}).update(new)
    review["request"]["oldObject"]["metadata"].setdefault("annotations", {}).update(old)
    return parse_review(orjson.dumps(review))


ID = "workload-switch-with-gpu-pods"
OVERRIDE = {OVERRIDE_ANNOTATION: ID, OVERRIDE_REASON_ANNOTATION: "INC-1: jobs checkpointed"}

OVERRIDE_CASES = [
    ("set in this request", OVERRIDE, {}, set()),
    ("left from an earlier request", OVERRIDE, OVERRIDE, {ID}),
    (
        "a new reason in this request",
        OVERRIDE,
        {**OVERRIDE, OVERRIDE_REASON_ANNOTATION: "old"},
        set(),
    ),
    ("without a reason", {OVERRIDE_ANNOTATION: ID}, {}, {ID}),
    ("naming an unknown policy too", {**OVERRIDE, OVERRIDE_ANNOTATION: f"{ID}, nope"}, {}, {ID}),
    (
        "naming another policy",
        {**OVERRIDE, OVERRIDE_ANNOTATION: "mig-reconfig-with-gpu-pods"},
        {},
        {ID},
    ),
]


@pytest.mark.parametrize(
    ("new", "old", "expected"),
    [c[1:] for c in OVERRIDE_CASES],
    ids=[c[0] for c in OVERRIDE_CASES],
)
def test_an_override_counts_for_both_only_in_the_request_that_sets_it(
    new: dict[str, str], old: dict[str, str], expected: set[str]
) -> None:
    sample, request = _denied_sample()
    engine_denies, cel_denies, _ = verdicts(_annotated(request, new, old), sample.state_args)
    assert engine_denies == cel_denies == expected


def test_a_missing_or_empty_record_never_denies() -> None:
    _, request = _denied_sample()
    body = review_of(request)["request"]
    assert run_policy(POLICY, body, None) is None
    assert run_policy(POLICY, body, {}) == []
    assert run_policy(POLICY, body, {"data": {}}) == []


USER, GROUP, LABEL = "gpu-guard-check", "system:authenticated", "nvidia.com/gpu.present"
PAST, FUTURE = "2026-12-01T00:00:00Z", "2099-01-01T00:00:00Z"


def _own(exemptions: dict[str, Any], policy: str = ID) -> dict[str, Any]:
    return {"policies": {policy: {"action": "deny", "exemptions": exemptions}}}


EXEMPTION_CASES = [
    ("the user exempt everywhere", {"exemptions": {"users": [USER]}}, set()),
    ("another user exempt", {"exemptions": {"users": ["admin"]}}, {ID}),
    ("the group exempt everywhere", {"exemptions": {"groups": [GROUP]}}, set()),
    ("another group exempt", {"exemptions": {"groups": ["system:masters"]}}, {ID}),
    (
        "the node's labels matched",
        {"exemptions": {"objectSelector": {"matchLabels": {LABEL: "true"}}}},
        set(),
    ),
    (
        "the node's labels not matched",
        {"exemptions": {"objectSelector": {"matchLabels": {LABEL: "false"}}}},
        {ID},
    ),
    (
        "every kind of requirement met",
        {
            "exemptions": {
                "objectSelector": {
                    "matchExpressions": [
                        {"key": LABEL, "operator": "In", "values": ["yes", "true"]},
                        {"key": LABEL, "operator": "Exists"},
                        {"key": "lab", "operator": "DoesNotExist"},
                        {"key": LABEL, "operator": "NotIn", "values": ["false"]},
                        {"key": "lab", "operator": "NotIn", "values": ["x"]},
                    ]
                }
            }
        },
        set(),
    ),
    (
        "one requirement of several not met",
        {
            "exemptions": {
                "objectSelector": {
                    "matchExpressions": [
                        {"key": LABEL, "operator": "Exists"},
                        {"key": LABEL, "operator": "NotIn", "values": ["true"]},
                    ]
                }
            }
        },
        {ID},
    ),
    ("the policy's own, for the user", _own({"users": [USER]}), set()),
    ("the policy's own, until a later time", _own({"users": [USER], "expires": FUTURE}), set()),
    ("the policy's own, expired", _own({"users": [USER], "expires": PAST}), {ID}),
    ("another policy's own", _own({"users": [USER]}, "mig-reconfig-with-gpu-pods"), {ID}),
]


@pytest.mark.parametrize(
    ("config", "expected"), [c[1:] for c in EXEMPTION_CASES], ids=[c[0] for c in EXEMPTION_CASES]
)
def test_an_exemption_in_guard_yaml_exempts_the_request_from_both_alike(
    config: dict[str, Any], expected: set[str]
) -> None:
    sample, request = _denied_sample()
    engine_denies, cel_denies, _ = verdicts(
        request, sample.state_args, parse_config(config, "guard.yaml")
    )
    assert engine_denies == cel_denies == expected


def test_a_policy_switched_off_is_neither_denied_nor_judged_by_the_record() -> None:
    sample, request = _denied_sample()
    view = load_state(sample.state_args)
    engine = Engine(parse_config({"policies": {ID: {"action": "off"}}}, "guard.yaml"))
    record = record_data(view, settings(engine, NOW))
    assert ID not in record["deny"].split(",") and ID not in record["judged"].split(",")
    assert run_policy(POLICY, review_of(request)["request"], {"data": record}) == []


def test_the_audit_overlay_judges_what_is_not_off_and_only_records() -> None:
    """Under the audit overlay's guard.yaml (every policy audit) the record denies nothing, so
    its copy of the policy judges ``judged`` and its binding records only; the chart's audit
    mode makes the same objects (tests/test_chart.py)."""
    from tests.test_manifests import one, rendered

    objects = rendered("overlays/audit")
    audit = one(objects, "ValidatingAdmissionPolicy", RECORD_NAME)["spec"]
    binding = one(objects, "ValidatingAdmissionPolicyBinding", RECORD_NAME)
    assert binding["spec"]["validationActions"] == ["Audit"]
    config = yaml.safe_load((ROOT / "manifests/overlays/audit/guard.yaml").read_text())
    sample, request = _denied_sample()
    view = load_state(sample.state_args)
    record = stamped(record_data(view, settings(Engine(parse_config(config, "audit")), NOW)), NOW)
    body = review_of(request)["request"]
    assert record["deny"] == "" and run_policy(POLICY, body, {"data": record}) == []
    assert [d.policy for d in run_policy(audit, body, {"data": record}) or []] == [ID]


def test_a_policy_configured_to_warn_is_not_denied_by_the_record() -> None:
    sample, request = _denied_sample()
    view = load_state(sample.state_args)
    record = record_data(view, configured([p for p in CARRIED if p != ID], CARRIED, [ID]))
    assert run_policy(POLICY, review_of(request)["request"], {"data": record}) == []


def test_the_denial_names_the_users_and_the_records_time() -> None:
    sample, request = _denied_sample()
    _, _, denials = verdicts(request, sample.state_args)
    assert len(denials) == 1
    assert "ml/" in denials[0].message or "/" in denials[0].message.split("(")[1]


def test_the_record_is_rewritten_only_when_its_content_changes() -> None:
    data = {"pods.gpu-1": "1: ml/a", "deny": ID}
    assert content_changed(None, data)
    assert not content_changed(stamped(data, NOW), data)
    assert content_changed(stamped(data, NOW), {**data, "pods.gpu-1": "2: ml/a, ml/b"})


def test_the_binding_reads_the_record_and_a_missing_one_allows() -> None:
    binding = next(d for d in _documents() if d["kind"] == "ValidatingAdmissionPolicyBinding")
    ref = binding["spec"]["paramRef"]
    assert ref["name"] == RECORD_NAME and ref["parameterNotFoundAction"] == "Allow"
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert POLICY["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}


def test_the_policy_is_sent_what_the_nodes_webhook_entry_is_sent() -> None:
    """The matchConditions are written twice (a policy cannot name a webhook's): kept equal."""
    text = (ROOT / "manifests" / "base" / "webhooks.yaml").read_text()
    validating = next(d for d in yaml.safe_load_all(text) if d)
    (nodes,) = [w for w in validating["webhooks"] if w["name"] == "nodes.validate.gpu-guard.io"]
    assert POLICY["matchConditions"] == nodes["matchConditions"]


def _cluster_policy(name: str, created: str, sandbox: bool, default: str, **cc: Any) -> Any:
    policy = cluster_policy(sandbox, default)
    policy["metadata"] = {"name": name, "creationTimestamp": created}
    if cc:
        policy["spec"]["ccManager"] = cc
    return policy


OFF_FIRST = (
    _cluster_policy("gpu-cluster-policy", "2026-01-01T00:00:00Z", False, "container"),
    _cluster_policy("cluster-policy", "2026-02-01T00:00:00Z", True, "container"),
)
VM_FIRST = (
    _cluster_policy("gpu-cluster-policy", "2026-01-01T00:00:00Z", True, "vm-passthrough"),
    _cluster_policy("cluster-policy", "2026-02-01T00:00:00Z", True, "container"),
)
CC_SECOND = (
    _cluster_policy("gpu-cluster-policy", "2026-01-01T00:00:00Z", True, "vm-passthrough"),
    _cluster_policy("cluster-policy", "2026-02-01T00:00:00Z", True, "vm-passthrough", enabled=True),
)
A10 = "nvidia.com/GA102GL_A10"
CUDA = gpu_pod("train-0", "gpu-1", namespace="ml")
VM = vmi("win-0", node_name="gpu-1", gpus=[A10])
SWITCH = "workload-switch-with-gpu-pods"
LEAVE = "passthrough-to-container-with-live-vms"
CC = "cc-mode-change-with-gpu-users"

SEVERAL_CASES = [
    (
        "the older has sandboxes off, the newer on",
        OFF_FIRST,
        "",
        CUDA,
        {WORKLOAD: VM_MODE},
        {SWITCH},
    ),
    ("the same on 26.7, the oldest alone", OFF_FIRST, "26.7.0", CUDA, {WORKLOAD: VM_MODE}, set()),
    ("the older defaults to VMs", VM_FIRST, "", CUDA, {WORKLOAD: VM_MODE}, {SWITCH}),
    ("the older defaults to VMs, on 26.7", VM_FIRST, "26.7.0", CUDA, {WORKLOAD: VM_MODE}, set()),
    ("a live VM, the older defaults to VMs", VM_FIRST, "", VM, {WORKLOAD: "container"}, {LEAVE}),
    ("a live VM, the newer runs the CC manager", CC_SECOND, "", VM, {CC_LABEL: "devtools"}, {CC}),
    ("the same on 26.7, the oldest alone", CC_SECOND, "26.7.0", VM, {CC_LABEL: "devtools"}, set()),
]


@pytest.mark.parametrize(
    ("policies", "version", "user", "labels", "expected"),
    [c[1:] for c in SEVERAL_CASES],
    ids=[c[0] for c in SEVERAL_CASES],
)
def test_with_several_cluster_policies_both_deny_if_any_would(
    policies: tuple[Any, ...],
    version: str,
    user: Any,
    labels: dict[str, str],
    expected: set[str],
) -> None:
    before = node("gpu-1", labels={"nvidia.com/gpu.present": "true"})
    view = state_of(before, user, *policies)
    view.follow_gpu_operator_version(lambda: version)
    request_ = builders_request("UPDATE", with_labels(before, labels), before)
    engine = Engine(parse_config({"gpuOperator": {"version": version}} if version else {}, "g"))
    denied = {v.policy for v in engine.evaluate(request_, view).denials if v.policy in CARRIED}
    data = stamped(record_data(view, settings(engine, NOW)), NOW)
    cel = run_policy(POLICY, review_of(request_)["request"], {"data": data}) or []
    assert denied == {d.policy for d in cel} == expected

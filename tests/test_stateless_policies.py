"""The policies that need only the request (manifests/base/stateless.yaml), run as the API server
runs them (tests/vap.py), give the verdict, policy id and message of their Python rules on every
sample of theirs; the reference lists exactly them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.reference import stateless_policies
from policies.vocabulary.requests import AdmissionRequest
from tests.samples import Sample, all_samples
from webhook.admission.compose import review_of
from webhook.engine import Engine
from webhook.state.files import load_state

pytest.importorskip("celpy", reason="cel-python is not installed")
from tests.vap import run_policy

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [
    d for d in yaml.safe_load_all((ROOT / "manifests/base/stateless.yaml").read_text()) if d
]
POLICIES: dict[str, dict[str, Any]] = {
    d["metadata"]["labels"]["gpu-guard.io/policy"]: d
    for d in DOCUMENTS
    if d["kind"] == "ValidatingAdmissionPolicy"
}
CASES = [
    (sample, request)
    for sample in all_samples()
    if sample.policy_id in POLICIES
    for request in sample.requests()
]


def test_every_policy_that_needs_only_the_request_is_carried_and_nothing_else() -> None:
    assert sorted(POLICIES) == sorted(stateless_policies())


def test_each_binding_follows_its_policys_default_action() -> None:
    from policies.registry import POLICIES_BY_ID

    bindings = {d["spec"]["policyName"]: d for d in DOCUMENTS if d["kind"].endswith("Binding")}
    for policy_id, policy in POLICIES.items():
        binding = bindings[policy["metadata"]["name"]]
        assert POLICIES_BY_ID[policy_id].default_action.name == "WARN"
        assert binding["spec"]["validationActions"] == ["Warn"]


@pytest.mark.parametrize(("sample", "request_"), CASES, ids=[s.name for s, _ in CASES])
def test_the_api_servers_policy_and_the_rule_agree_on_the_sample(
    sample: Sample, request_: AdmissionRequest
) -> None:
    view = load_state(sample.state_args)
    said = {
        (v.policy, v.message)
        for v in Engine().evaluate(request_, view).verdicts
        if v.policy == sample.policy_id
    }
    body = review_of(request_)["request"]
    denials = run_policy(POLICIES[sample.policy_id]["spec"], body, None, sample.policy_id) or []
    assert {(d.policy, d.message.removeprefix(f"{d.policy}: ")) for d in denials} == said
    assert bool(said) is (sample.expectation == "disallowed")


def _actions(objects: list[dict[str, Any]]) -> dict[str, list[str]]:
    names = {p["metadata"]["name"] for p in POLICIES.values()}
    return {
        o["metadata"]["name"]: o["spec"]["validationActions"]
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicyBinding" and o["metadata"]["name"] in names
    }


def test_the_audit_installs_record_only_and_before_1_30_the_chart_leaves_them_out() -> None:
    from tests.helm import Render
    from tests.test_manifests import rendered

    count = len(POLICIES)
    assert list(_actions(rendered("overlays/enforce")).values()) == [["Warn"]] * count
    assert list(_actions(rendered("overlays/audit")).values()) == [["Audit"]] * count
    chart = Render({"mode": "audit"}, kube_version="1.36.2").objects()
    assert list(_actions(chart).values()) == [["Audit"]] * count
    assert _actions(Render(kube_version="1.29.9").objects()) == {}

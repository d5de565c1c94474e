"""The engine: configured actions, caps, exemptions, and a policy that raises kept in its box."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from policies.cluster.kinds import NODE, POD
from policies.cluster.view import ClusterView
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.requests import UPDATE, AdmissionRequest
from policies.vocabulary.verdicts import Action, Finding, Policy
from tests.builders import always_deny, gpu_pod, node, request, state_of, with_labels
from webhook.config import ConfigError, GuardConfig, load_config
from webhook.engine import Engine

OMEN1 = node("omen1", labels={"nvidia.com/gpu.workload.config": "container"})
SWITCHED = with_labels(OMEN1, {"nvidia.com/gpu.workload.config": "vm-passthrough"})
STATE = state_of(OMEN1, gpu_pod("train", "omen1"))
SWITCH = request("UPDATE", SWITCHED, OMEN1)


@pytest.mark.parametrize(
    "action, allowed, warnings, audited",
    [
        (Action.DENY, False, 0, 0),
        (Action.WARN, True, 1, 0),
        (Action.AUDIT, True, 0, 1),
        (Action.OFF, True, 0, 0),
    ],
    ids=[
        "deny blocks",
        "warn allows with a warning",
        "audit allows silently but records",
        "off does not run",
    ],
)
def test_the_configured_action_decides_what_a_finding_does(
    action: Action, allowed: bool, warnings: int, audited: int
) -> None:
    engine = Engine(GuardConfig({"workload-switch-with-gpu-pods": action}))
    decision = engine.evaluate(SWITCH, STATE)
    assert decision.allowed is allowed
    assert len(decision.warnings) == warnings
    assert sum(1 for v in decision.verdicts if v.action == Action.AUDIT) == audited


def test_dry_run_gets_the_same_verdicts() -> None:
    engine = Engine()
    real = engine.evaluate(SWITCH, STATE)
    dry = engine.evaluate(request("UPDATE", SWITCHED, OMEN1, dry_run=True), STATE)
    assert [v.to_json() for v in dry.verdicts] == [v.to_json() for v in real.verdicts]


def test_requests_in_exempt_namespaces_are_never_judged() -> None:
    pod = gpu_pod("x", "omen1", namespace="kube-system")
    fake = always_deny(NODE)
    pod_request = request("UPDATE", pod, pod)
    decision = Engine(GuardConfig(), [fake]).evaluate(pod_request, STATE)
    assert decision.verdicts == []


@pytest.mark.parametrize(
    ("user", "groups", "judged"),
    [
        pytest.param("kubernetes-admin", None, True, id="an admin"),
        pytest.param("system:node:omen2", None, True, id="another node's kubelet"),
        pytest.param(
            "system:node:omen1", ("system:masters",), True, id="its kubelet's name, not its group"
        ),
        pytest.param("system:node:omen1", None, False, id="its own kubelet"),
    ],
)
@pytest.mark.parametrize("sub_resource", ["", "status"], ids=["nodes", "nodes/status"])
def test_a_relabel_is_judged_through_nodes_and_nodes_status_unless_by_the_nodes_own_kubelet(
    user: str, groups: tuple[str, ...] | None, judged: bool, sub_resource: str
) -> None:
    relabel = request(
        "UPDATE", SWITCHED, OMEN1, sub_resource=sub_resource, user=user, groups=groups
    )
    decision = Engine().evaluate(relabel, STATE)
    assert decision.allowed is not judged
    assert bool(decision.exempt) is not judged


@pytest.mark.parametrize(
    ("sub_resource", "judged"),
    [
        ("status", True),  # a pod's phase moves only there (gpu-user-marked-finished)
        ("resize", False),
        ("ephemeralcontainers", False),
        ("binding", False),
    ],
)
def test_a_pods_subresource_is_judged_only_where_its_writes_change_what_policies_read(
    sub_resource: str, judged: bool
) -> None:
    pod = gpu_pod("x", "omen1")
    fake = always_deny(POD)
    write = request("UPDATE", pod, pod, sub_resource=sub_resource)
    verdicts = Engine(GuardConfig(), [fake]).evaluate(write, STATE).verdicts
    assert bool(verdicts) is judged


def raising(exc: Exception) -> Policy[ClusterView]:
    def check(req: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
        raise exc

    return Policy("broken", "", {NODE: frozenset({UPDATE})}, Action.DENY, "", Action.WARN, check)


@pytest.mark.parametrize(
    "failure, allowed, text",
    [
        (
            Action.WARN,
            True,
            "could not evaluate this policy: internal error, see the server log; not checked",
        ),
        (Action.DENY, False, "denied: this policy fails closed"),
    ],
    ids=["a fail-open policy allows with a warning", "a fail-closed policy denies"],
)
def test_a_policy_that_raises_is_answered_by_its_failure_mode(
    failure: Action, allowed: bool, text: str
) -> None:
    def boom(req: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
        raise RuntimeError("boom")

    broken = Policy("broken", "", {NODE: frozenset({UPDATE})}, Action.DENY, "", failure, boom)
    healthy: Policy[ClusterView] = Policy(
        "fine",
        "",
        {NODE: frozenset({UPDATE})},
        Action.WARN,
        "",
        Action.WARN,
        lambda r, v: [Finding("still judged")],
    )
    decision = Engine(GuardConfig(), [broken, healthy]).evaluate(SWITCH, STATE)
    assert decision.allowed is allowed
    assert any(text in v.message for v in decision.verdicts if v.policy == "broken")
    assert [v.message for v in decision.verdicts if v.policy == "fine"] == ["still judged"]


def test_a_malformed_field_in_an_open_schema_object_is_named_not_crashed_on() -> None:
    def strict(req: AdmissionRequest, view: ClusterView) -> Sequence[Finding]:
        raise ObjectError("spec.template.spec.domain.devices.gpus", "expected a list, got string")

    policy = Policy("strict", "", {NODE: frozenset({UPDATE})}, Action.WARN, "", Action.WARN, strict)
    decision = Engine(GuardConfig(), [policy]).evaluate(SWITCH, STATE)
    assert decision.allowed
    assert "cannot read Node spec.template.spec.domain.devices.gpus: expected a list" in (
        decision.warnings[0].message
    )


def test_a_finding_may_cap_its_action_below_the_configured_one() -> None:
    capped: Policy[ClusterView] = Policy(
        "capped",
        "",
        {NODE: frozenset({UPDATE})},
        Action.DENY,
        "",
        Action.WARN,
        lambda r, v: [Finding("mention only", max_action=Action.WARN), Finding("block")],
    )
    decision = Engine(GuardConfig(), [capped]).evaluate(SWITCH, STATE)
    assert [(v.message, v.action) for v in decision.verdicts] == [
        ("mention only", Action.WARN),
        ("block", Action.DENY),
    ]


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "guard.yaml"
    path.write_text(text)
    return str(path)


def test_a_good_configuration_sets_actions_and_exemptions(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            (
                "policies:\n"
                "  workload-switch-with-gpu-pods: {action: warn}\n"
                "exemptNamespaces: [kube-system, tenants]\n"
            ),
        )
    )
    assert config.actions == {"workload-switch-with-gpu-pods": Action.WARN}
    assert config.exempt_namespaces == frozenset({"kube-system", "tenants"})


@pytest.mark.parametrize(
    "text, expected",
    [
        ("[1, 2]", "expected a mapping at the top level"),
        ("policy: {}", "policy: unknown setting"),
        (
            "policies: {no-such-policy: {action: deny}}",
            "policies.no-such-policy: unknown policy id",
        ),
        (
            "policies: {workload-switch-with-gpu-pods: deny}",
            "policies.workload-switch-with-gpu-pods: expected a mapping",
        ),
        (
            "policies: {workload-switch-with-gpu-pods: {action: block}}",
            "policies.workload-switch-with-gpu-pods.action: unknown action 'block'",
        ),
        (
            "policies: {workload-switch-with-gpu-pods: {mode: deny}}",
            "policies.workload-switch-with-gpu-pods.mode: unknown setting",
        ),
        ("exemptNamespaces: kube-system", "exemptNamespaces: expected a list"),
        ("policies: [\n", "not valid YAML at line"),
        ("gpuOperator: v26.7.0", "gpuOperator: expected a mapping such as {version: v26.7.0}"),
        ("gpuOperator: {version: latest}", "gpuOperator.version: expected the GPU Operator's"),
        ("gpuOperator: {version: 26.7}", "gpuOperator.version: expected the GPU Operator's"),
        ("gpuOperator: {release: v26.7.0}", "gpuOperator.release: unknown setting"),
    ],
    ids=[
        "not a mapping",
        "a misspelt top-level key",
        "an unknown policy id",
        "settings that are not a mapping",
        "an unknown action",
        "an unknown setting",
        "exemptions that are not a list",
        "broken YAML",
        "a GPU Operator version that is not under gpuOperator.version",
        "a GPU Operator version that is not a release",
        "a GPU Operator version YAML reads as a number",
        "an unknown GPU Operator setting",
    ],
)
def test_a_bad_configuration_names_the_file_and_the_field(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("gpuOperator: {version: v26.7.0}", "v26.7.0"),
        ("gpuOperator: {version: ' 26.3.1'}", "26.3.1"),
        ("gpuOperator: {}", ""),
        ("policies: {}", ""),
    ],
)
def test_the_gpu_operator_version_is_read_as_written(
    tmp_path: Path, text: str, version: str
) -> None:
    assert load_config(write(tmp_path, text)).gpu_operator_version == version

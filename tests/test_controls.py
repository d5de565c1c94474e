"""Admin controls: mutation (opt-in, explained, idempotent), exemptions, overrides, live reload."""

from __future__ import annotations

import asyncio
import base64
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from policies.registry import ALL_POLICIES
from policies.state.cluster import ClusterState
from policies.vocabulary.requests import AdmissionRequest, UserInfo
from policies.vocabulary.verdicts import Action
from tests.builders import (
    Obj,
    gpu_pod,
    kubevirt,
    node,
    request,
    state_of,
    vm,
    vmi,
    with_labels,
)
from webhook.admission.compose import review_of
from webhook.admission.http_input import REVIEW_HEADERS
from webhook.admission.pipeline import Admission
from webhook.admission.server import MUTATE_PATH, make_app
from webhook.config import ConfigError, GuardConfig, load_config, parse_config
from webhook.engine import Engine
from webhook.reload import reload_config

EVICTION = "set-eviction-none-on-gpu-vms"
ON = GuardConfig(mutations=frozenset({EVICTION}))
GPU = "nvidia.com/GA102_GEFORCE_RTX_3090"


def apply(obj: Obj, patch: list[Any]) -> Obj:
    result: Obj = jsonpatch.apply_patch(obj, patch)
    return result


@pytest.mark.parametrize(
    "obj, kubevirt_default, expected",
    [
        (vm("a", gpus=[GPU], eviction_strategy="LiveMigrate"), None, "None"),
        (vm("b", gpus=[GPU]), "LiveMigrate", "None"),
        (vm("c", host_devices=[GPU]), "LiveMigrate", "None"),
        (vmi("d", gpus=[GPU]), "LiveMigrate", "None"),
        (vm("e", gpus=[GPU], eviction_strategy="None"), "LiveMigrate", None),
        (vm("f", gpus=[GPU], eviction_strategy="LiveMigrateIfPossible"), "LiveMigrate", None),
        (vm("g"), "LiveMigrate", None),
        (vm("h", gpus=[GPU]), None, None),
    ],
    ids=[
        "a GPU VM asking to live-migrate is set to None",
        "a GPU VM inheriting LiveMigrate from the KubeVirt CR is set to None",
        "a host-device VM inheriting LiveMigrate is set to None",
        "a GPU VMI inheriting LiveMigrate is set to None",
        "a GPU VM that already says None is left alone",
        "LiveMigrateIfPossible is left alone",
        "a VM without devices is left alone",
        "with no strategy anywhere nothing changes",
    ],
)
def test_the_eviction_mutation_patches_only_gpu_vms_that_would_hang_a_drain(
    obj: Obj, kubevirt_default: str | None, expected: str | None
) -> None:
    state = state_of(kubevirt(eviction_strategy=kubevirt_default))
    engine = Engine(ON)
    result = engine.mutate(request("CREATE", obj), state)
    if expected is None:
        assert result.patch == [] and result.warnings == []
        return
    patched = apply(obj, result.patch)
    spec = (
        patched["spec"]["template"]["spec"] if obj["kind"] == "VirtualMachine" else patched["spec"]
    )
    assert spec["evictionStrategy"] == expected
    assert len(result.warnings) == 1
    assert result.warnings[0].startswith(f"[{EVICTION}] set ")
    assert "cannot live-migrate, so a drain would hang forever" in result.warnings[0]
    # Idempotent: a second pass over the patched object changes nothing.
    again = engine.mutate(request("CREATE", patched), state)
    assert again.patch == [] and again.warnings == []


def test_mutations_are_off_unless_the_configuration_switches_them_on() -> None:
    state = state_of(kubevirt(eviction_strategy="LiveMigrate"))
    result = Engine().mutate(request("CREATE", vm("a", gpus=[GPU])), state)
    assert result.patch == []


@pytest.mark.parametrize(
    "make",
    [
        lambda obj: request("UPDATE", obj, obj, sub_resource="status"),
        lambda obj: request("DELETE", None, obj),
    ],
    ids=["a status update", "a delete"],
)
def test_a_mutation_never_touches_a_subresource_or_a_request_without_an_object(
    make: Any,
) -> None:
    state = state_of(kubevirt(eviction_strategy="LiveMigrate"))
    obj = vm("a", gpus=[GPU], eviction_strategy="LiveMigrate")
    assert Engine(ON).mutate(request("UPDATE", obj, obj), state).patch  # in scope: patched
    assert Engine(ON).mutate(make(obj), state).patch == []


async def test_the_mutate_endpoint_answers_a_base64_jsonpatch_and_a_warning() -> None:
    state = state_of(kubevirt(eviction_strategy="LiveMigrate"))
    obj = vm("a", gpus=[GPU])
    app = make_app(Admission(Engine(ON), state))
    async with TestClient(TestServer(app)) as client:
        body = orjson.dumps(review_of(request("CREATE", obj)))
        answer = (await (await client.post(MUTATE_PATH, data=body, headers=REVIEW_HEADERS)).json())[
            "response"
        ]
    assert answer["allowed"] is True
    assert answer["patchType"] == "JSONPatch"
    patched = apply(obj, orjson.loads(base64.b64decode(answer["patch"])))
    assert patched["spec"]["template"]["spec"]["evictionStrategy"] == "None"
    assert answer["warnings"][0].startswith(f"[{EVICTION}]")


# --- exemptions ----------------------------------------------------------------------------------

OMEN1 = node("omen1", labels={"nvidia.com/gpu.workload.config": "container"})
SWITCHED = with_labels(OMEN1, {"nvidia.com/gpu.workload.config": "vm-passthrough"})
STATE = state_of(OMEN1, gpu_pod("train", "omen1"))


def switch(
    user: str = "kubernetes-admin", groups: tuple[str, ...] = (), new: Obj = SWITCHED
) -> AdmissionRequest:
    """omen1 to vm-passthrough while ml/train uses its GPU, sent by ``user``."""
    return replace(request("UPDATE", new, OMEN1), user=UserInfo(user, groups))


@pytest.mark.parametrize(
    "config_yaml, req, allowed",
    [
        ("exemptions: {users: [ops-bot]}", switch("ops-bot"), True),
        ("exemptions: {groups: [gpu-admins]}", switch("alice", ("gpu-admins",)), True),
        (
            "exemptions: {objectSelector: {matchLabels: {gpu-guard.io/exempt: 'true'}}}",
            switch(new=with_labels(SWITCHED, {"gpu-guard.io/exempt": "true"})),
            True,
        ),
        (
            "exemptions: {objectSelector: {matchExpressions: "
            "[{key: team, operator: In, values: [lab]}]}}",
            switch(new=with_labels(SWITCHED, {"team": "prod"})),
            False,
        ),
        (
            "policies: {workload-switch-with-gpu-pods: {exemptions: {users: [ops-bot]}}}",
            switch("ops-bot"),
            True,
        ),
        (
            "policies: {workload-switch-with-gpu-pods: {exemptions: {users: [ops-bot]}}}",
            switch("alice"),
            False,
        ),
        ("{}", switch("ops-bot"), False),
        (
            "policies: {workload-switch-with-gpu-pods: {exemptions: {users: [ops-bot], "
            "expires: '2999-01-01T00:00:00Z'}}}",
            switch("ops-bot"),
            True,
        ),
        (
            "policies: {workload-switch-with-gpu-pods: {exemptions: {users: [ops-bot], "
            "expires: 2001-01-01T00:00:00Z}}}",
            switch("ops-bot"),
            False,
        ),
    ],
    ids=[
        "an exempt user passes",
        "a member of an exempt group passes",
        "an object matching the exempt selector passes",
        "an object outside the selector is judged",
        "a user exempt from one policy passes it",
        "other users are still judged",
        "without exemptions everyone is judged",
        "an exemption before its expiry applies",
        "an exemption past its expiry no longer applies",
    ],
)
def test_exemptions_by_user_group_and_label_selector(
    config_yaml: str, req: AdmissionRequest, allowed: bool
) -> None:
    config = parse_config(yaml.safe_load(config_yaml), "guard.yaml")
    assert Engine(config).evaluate(req, STATE).allowed is allowed


# --- overrides -----------------------------------------------------------------------------------


def annotated(**annotations: str) -> Obj:
    meta = {**SWITCHED["metadata"], "annotations": dict(annotations)}
    return {**SWITCHED, "metadata": meta}


def test_an_override_with_a_reason_turns_the_deny_into_an_attributed_warning() -> None:
    obj = annotated(
        **{
            "gpu-guard.io/override": "workload-switch-with-gpu-pods",
            "gpu-guard.io/override-reason": "INC-7: jobs checkpointed",
        }
    )
    decision = Engine().evaluate(switch("alice", new=obj), STATE)
    assert decision.allowed
    (verdict,) = decision.verdicts
    assert verdict.action == Action.WARN
    assert verdict.message.startswith("overridden by alice (INC-7: jobs checkpointed): node omen1")
    assert len(verdict.text) > 256  # what the API server cuts is the end, never the attribution
    assert [(o.policy, o.user, o.reason) for o in decision.overrides] == [
        ("workload-switch-with-gpu-pods", "alice", "INC-7: jobs checkpointed")
    ]


@pytest.mark.parametrize(
    "annotations, expected",
    [
        (
            {"gpu-guard.io/override": "workload-switch-with-gpu-pods"},
            "gpu-guard.io/override-reason is empty: an override needs a reason",
        ),
        (
            {
                "gpu-guard.io/override": "workload-switch-with-gpu-pods",
                "gpu-guard.io/override-reason": "   ",
            },
            "an override needs a reason",
        ),
        (
            {"gpu-guard.io/override": "no-such-policy", "gpu-guard.io/override-reason": "x"},
            "names unknown policies: no-such-policy",
        ),
    ],
    ids=[
        "an override without a reason is refused",
        "a blank reason is no reason",
        "an override of an unknown policy is refused",
    ],
)
def test_a_bad_override_is_itself_refused(annotations: dict[str, str], expected: str) -> None:
    decision = Engine().evaluate(switch(new=annotated(**annotations)), STATE)
    assert not decision.allowed
    assert any(
        v.policy == "override-without-reason" and expected in v.message for v in decision.denials
    )


@pytest.mark.parametrize(
    "annotations",
    [
        {"gpu-guard.io/override": "workload-switch-with-gpu-pods"},
        {"gpu-guard.io/override": "no-such-policy", "gpu-guard.io/override-reason": "x"},
    ],
    ids=["without a reason", "of an unknown policy"],
)
def test_a_bad_override_blocks_nothing_when_every_policy_only_audits(
    annotations: dict[str, str],
) -> None:
    config = GuardConfig(actions={p.id: Action.AUDIT for p in ALL_POLICIES})
    decision = Engine(config).evaluate(switch(new=annotated(**annotations)), STATE)
    assert decision.allowed
    assert [v.action for v in decision.verdicts if v.policy == "override-without-reason"] == [
        Action.AUDIT
    ]


def test_an_override_of_one_policy_leaves_the_others_denying() -> None:
    obj = annotated(
        **{
            "gpu-guard.io/override": "passthrough-without-ready-provider",
            "gpu-guard.io/override-reason": "wrong policy",
        }
    )
    assert not Engine().evaluate(switch(new=obj), STATE).allowed


def test_the_server_logs_who_overrode_what_and_why(caplog: pytest.LogCaptureFixture) -> None:
    obj = annotated(
        **{
            "gpu-guard.io/override": "workload-switch-with-gpu-pods",
            "gpu-guard.io/override-reason": "INC-7",
        }
    )

    async def send() -> dict[str, Any]:
        app = make_app(Admission(Engine(), STATE))
        async with TestClient(TestServer(app)) as client:
            body = orjson.dumps(review_of(switch("alice", new=obj)))
            response: dict[str, Any] = await (
                await client.post("/validate", data=body, headers=REVIEW_HEADERS)
            ).json()
            return response

    with caplog.at_level(logging.INFO, logger="gpu-guard.server"):
        answer = asyncio.run(send())["response"]
    assert answer["allowed"] is True
    assert any(
        "override used" in r.message
        and "policy=workload-switch-with-gpu-pods" in r.message
        and "user=alice" in r.message
        and "INC-7" in r.message
        for r in caplog.records
    )


# --- live reload ---------------------------------------------------------------------------------


async def test_a_changed_configuration_applies_without_a_restart_and_a_bad_one_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "guard.yaml"
    path.write_text("policies: {workload-switch-with-gpu-pods: {action: deny}}\n")
    engine = Engine(load_config(str(path)))
    task = asyncio.create_task(reload_config(engine, str(path), 0.01))
    await asyncio.sleep(0.05)  # the watcher has read the file's first version
    try:
        path.write_text("policies: {workload-switch-with-gpu-pods: {action: warn}}\n")
        async with asyncio.timeout(5):
            while engine.evaluate(switch(), STATE).verdicts[0].action != Action.WARN:
                await asyncio.sleep(0.01)
        with caplog.at_level(logging.ERROR, logger="gpu-guard.server"):
            path.write_text("policies: {workload-switch-with-gpu-pods: {action: explode}}\n")
            async with asyncio.timeout(5):
                while not any("configuration refused" in r.message for r in caplog.records):
                    await asyncio.sleep(0.01)
        assert engine.evaluate(switch(), STATE).verdicts[0].action == Action.WARN
    finally:
        task.cancel()


@pytest.mark.parametrize(
    "text, expected",
    [
        ("mutations: {no-such: {enabled: true}}", "mutations.no-such: unknown mutation id"),
        (
            "mutations: {set-eviction-none-on-gpu-vms: {enabled: yes please}}",
            "mutations.set-eviction-none-on-gpu-vms.enabled: expected true or false",
        ),
        ("exemptions: {users: alice}", "exemptions.users: expected a list of strings"),
        (
            "exemptions: {objectSelector: {matchExpressions: [{key: a, operator: Near}]}}",
            "exemptions.objectSelector.matchExpressions[0].operator: expected one of",
        ),
        (
            "policies: {workload-switch-with-gpu-pods: {exemptions: {teams: [x]}}}",
            "policies.workload-switch-with-gpu-pods.exemptions.teams: unknown setting",
        ),
    ],
    ids=[
        "an unknown mutation",
        "enabled that is not a boolean",
        "users that is not a list",
        "a selector operator that does not exist",
        "an unknown exemption setting",
    ],
)
def test_bad_controls_name_the_field(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "guard.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    assert expected in str(caught.value)


def test_dry_run_previews_the_same_denial_with_no_state_change() -> None:
    state: ClusterState = STATE
    before = state.counts()
    dry = request("UPDATE", SWITCHED, OMEN1, dry_run=True)
    decision = Engine().evaluate(dry, state)
    assert not decision.allowed
    assert "ml/train" in decision.deny_message
    assert state.counts() == before


def test_an_audit_diagnosis_takes_its_action_from_the_configuration_too(tmp_path: Path) -> None:
    from webhook.cli import main

    config = tmp_path / "guard.yaml"
    config.write_text("policies: {recovery-trap-vm-passthrough: {action: warn}}\n")
    state = str(Path(__file__).resolve().parents[1] / "examples" / "homelab" / "cluster.yaml")
    base = ["audit", "--state", state, "--now", "2026-10-30T12:00:00Z", "-o", "json"]
    assert main(base) == 1  # the trap is deny-level by default
    assert main([*base, "--config", str(config)]) == 0

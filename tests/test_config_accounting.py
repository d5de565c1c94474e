"""The configuration accounted for: each setting a reload changes logged in one line and the
configuration's hash exposed; each exempt decision logged with who, what and why; an override
counted only in the request that sets it (docs/security.md, "Overrides").
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
import yaml

from policies.vocabulary.requests import UserInfo
from tests.builders import Obj, request
from tests.test_controls import OMEN1, STATE, SWITCHED, annotated, switch
from webhook.admission.compose import review_of
from webhook.admission.pipeline import VALIDATE, Admission
from webhook.config import GuardConfig, load_config, parse_config
from webhook.config_digest import changes, digest
from webhook.engine import Engine
from webhook.metrics import Metrics
from webhook.overrides import LEFT_FROM_EARLIER
from webhook.reload import in_force, reload_config

SWITCH = "workload-switch-with-gpu-pods"


def config(text: str) -> GuardConfig:
    return parse_config(yaml.safe_load(text), "guard.yaml")


# --- what a reload changed --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after", "lines"),
    [
        pytest.param(
            f"policies: {{{SWITCH}: {{action: deny}}}}",
            f"policies: {{{SWITCH}: {{action: 'off'}}}}",
            [f'policies.{SWITCH}.action: "deny" -> "off"'],
            id="a policy switched off",
        ),
        pytest.param(
            f"policies: {{{SWITCH}: {{action: warn}}}}",
            "{}",
            [f'policies.{SWITCH}.action: "warn" -> "deny"'],
            id="a setting removed returns to the policy's default",
        ),
        pytest.param(
            "exemptions: {users: [ops-bot]}",
            "exemptions: {users: [ops-bot, mallory], namespaces: [kube-system]}",
            ['exemptions.namespaces: removed ["gpu-guard"]', 'exemptions.users: added ["mallory"]'],
            id="global exemptions: each list's additions and removals",
        ),
        pytest.param(
            "{}",
            f"policies: {{{SWITCH}: {{exemptions: {{users: [mallory]}}}}}}",
            [f'policies.{SWITCH}.exemptions.users: added ["mallory"]'],
            id="an exemption from one policy",
        ),
        pytest.param(
            "{}",
            "exemptions: {objectSelector: {matchLabels: {team: lab}}}",
            [
                'exemptions.objectSelector: null -> {"requirements":[{"key":"team",'
                '"operator":"In","values":["lab"]}]}'
            ],
            id="an exempting label selector",
        ),
        pytest.param(
            "{}",
            "mutations: {set-eviction-none-on-gpu-vms: {enabled: true}}",
            ["mutations.set-eviction-none-on-gpu-vms.enabled: false -> true"],
            id="a mutation switched on",
        ),
        pytest.param(
            "{}",
            "gpuOperator: {version: v26.7.0}",
            ['gpuOperator.version: "" -> "v26.7.0"'],
            id="the GPU Operator's version, which decides the ClusterPolicy in force",
        ),
        pytest.param(
            f"# a comment\npolicies: {{{SWITCH}: {{action: deny}}}}\nexemptions: {{users: [b, a]}}",
            f"exemptions: {{users: [a, b]}}\npolicies: {{{SWITCH}: {{action: deny}}}}",
            [],
            id="the same settings written otherwise",
        ),
    ],
)
def test_a_reload_names_each_setting_it_changes_in_one_line(
    before: str, after: str, lines: list[str]
) -> None:
    assert changes(config(before), config(after)) == lines
    assert (digest(config(before)) == digest(config(after))) is not bool(lines)


async def test_a_reload_logs_each_change_and_exposes_the_hash_of_what_is_in_force(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "guard.yaml"
    path.write_text(f"policies: {{{SWITCH}: {{action: deny}}}}\n")
    engine, metrics = Engine(load_config(str(path))), Metrics()
    in_force(engine, metrics, str(path))
    first = digest(engine.config)
    assert metrics.registry.get_sample_value("gpu_guard_config_info", {"sha256": first}) == 1
    task = asyncio.create_task(reload_config(engine, str(path), 0.01, metrics))
    await asyncio.sleep(0.05)  # the watcher has read the file's first version
    try:
        with caplog.at_level(logging.INFO, logger="gpu-guard.server"):
            path.write_text(
                f"policies: {{{SWITCH}: {{action: 'off'}}}}\nexemptions: {{users: [mallory]}}\n"
            )
            async with asyncio.timeout(5):
                while not any("sha256=" in r.getMessage() for r in caplog.records):
                    await asyncio.sleep(0.01)
    finally:
        task.cancel()
    said = [r.getMessage() for r in caplog.records]
    assert f'configuration change: policies.{SWITCH}.action: "deny" -> "off"' in said
    assert 'configuration change: exemptions.users: added ["mallory"]' in said
    assert f"configuration reloaded from {path}: 2 settings changed" in said
    now = digest(engine.config)
    assert now != first
    assert metrics.registry.get_sample_value("gpu_guard_config_info", {"sha256": now}) == 1
    assert metrics.registry.get_sample_value("gpu_guard_config_info", {"sha256": first}) is None


# --- exempt decisions are logged --------------------------------------------------------------


@pytest.mark.parametrize(
    ("guard_yaml", "exempt"),
    [
        pytest.param("exemptions: {users: [ops-bot]}", "exempt='user ops-bot'", id="globally"),
        pytest.param(
            f"policies: {{{SWITCH}: {{exemptions: {{users: [ops-bot]}}}}}}",
            f"exempt='{SWITCH}: user ops-bot'",
            id="from one policy",
        ),
    ],
)
async def test_an_exempt_decision_is_logged_with_who_what_and_why(
    guard_yaml: str, exempt: str, caplog: pytest.LogCaptureFixture
) -> None:
    admission = Admission(Engine(config(guard_yaml)), STATE)
    body = orjson.dumps(review_of(switch("ops-bot")))
    with caplog.at_level(logging.INFO, logger="gpu-guard.server"):
        reply = await admission.answer(VALIDATE, body)
    assert orjson.loads(reply.body)["response"]["allowed"] is True
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("decision ")]
    assert "user=ops-bot" in line and "kind=Node" in line and "name=omen1" in line
    assert line.endswith(exempt) or f"{exempt} " in line, line


# --- an override counts only in the request that sets it --------------------------------------

OVERRIDE = {"gpu-guard.io/override": SWITCH, "gpu-guard.io/override-reason": "INC-7"}


def carrying(annotations: dict[str, str]) -> Obj:
    """omen1 before the switch, with ``annotations``."""
    return {**OMEN1, "metadata": {**OMEN1["metadata"], "annotations": dict(annotations)}}


@pytest.mark.parametrize(
    ("old", "new", "overridden"),
    [
        pytest.param({}, OVERRIDE, True, id="added with the change"),
        pytest.param(OVERRIDE, OVERRIDE, False, id="left from an earlier request"),
        pytest.param(
            OVERRIDE,
            {**OVERRIDE, "gpu-guard.io/override-reason": "INC-8"},
            True,
            id="its reason changed",
        ),
        pytest.param(
            {**OVERRIDE, "gpu-guard.io/override": "mig-reconfig-with-gpu-pods"},
            OVERRIDE,
            True,
            id="the policies it names changed",
        ),
    ],
)
def test_an_override_counts_only_in_a_request_that_adds_or_changes_it(
    old: dict[str, str], new: dict[str, str], overridden: bool
) -> None:
    review = replace(request("UPDATE", annotated(**new), carrying(old)), user=UserInfo("alice", ()))
    decision = Engine().evaluate(review, STATE)
    assert decision.allowed is overridden
    assert [u.user for u in decision.overrides] == (["alice"] if overridden else [])
    (verdict,) = decision.verdicts
    if overridden:
        assert verdict.message.startswith("overridden by alice (")
    else:
        assert verdict.message.startswith(LEFT_FROM_EARLIER)


def test_a_bad_override_left_from_earlier_is_not_refused_again() -> None:
    bad = {"gpu-guard.io/override": "no-such-policy", "gpu-guard.io/override-reason": "x"}
    labelled: Obj = {**SWITCHED, "metadata": {**SWITCHED["metadata"], "annotations": bad}}
    decision = Engine().evaluate(request("UPDATE", labelled, carrying(bad)), STATE)
    assert [v.policy for v in decision.verdicts] == [SWITCH]

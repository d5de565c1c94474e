"""Every policy ships samples, run here through ``gpu-guard check`` as a user would run them.

A policy's ``allowed/`` change files must pass with no verdict at all (exit 0); its
``disallowed/`` ones must draw its verdict, and only its, at its default action (exit 1 when
that is deny). The samples are the policy's examples in CONTRIBUTING.md's sense: a reader sees
what it catches and what it lets through, and a change in behaviour fails here by name.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from policies.registry import ALL_POLICIES, POLICIES_BY_ID
from policies.vocabulary.verdicts import Action
from tests.samples import (
    ALLOWED,
    DISALLOWED,
    SAMPLES,
    STATE,
    Sample,
    all_samples,
    judges_only_deletes,
    state_folders,
)
from webhook.cli import main

EXIT_ALLOWED, EXIT_DENIED = 0, 1


def check(sample: Sample, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[Any]]:
    """Exit code and verdicts of ``gpu-guard check -f <sample> --state <its state>``."""
    code = main(["check", "-o", "json", "-f", str(sample.change), "--state", *sample.state_args])
    out, err = capsys.readouterr()
    assert out, err
    results = orjson.loads(out)["results"]
    assert len(results) == 1, f"{sample.name}: one change per sample file"
    verdicts: list[Any] = results[0]["verdicts"]
    return code, verdicts


SAMPLED = [p for p in ALL_POLICIES if not judges_only_deletes(p)]
DELETE_ONLY = [p for p in ALL_POLICIES if judges_only_deletes(p)]


@pytest.mark.parametrize("policy", DELETE_ONLY, ids=[p.id for p in DELETE_ONLY])
def test_a_policy_that_judges_only_deletes_has_no_samples_and_a_test_module_of_its_own(
    policy: Any,
) -> None:
    assert not (SAMPLES / policy.id).exists(), f"{policy.id}: check cannot propose a delete"
    tests = SAMPLES.parent.parent / "tests"
    assert any(policy.id in path.read_text() for path in tests.glob("test_policy_*.py"))


@pytest.mark.parametrize("policy", SAMPLED, ids=[p.id for p in SAMPLED])
def test_every_registered_policy_ships_a_state_and_allowed_and_disallowed_samples(
    policy: Any,
) -> None:
    folder = SAMPLES / policy.id
    assert (folder / STATE).is_file(), f"add {folder.relative_to(SAMPLES.parent.parent)}/{STATE}"
    for expectation in (ALLOWED, DISALLOWED):
        assert sorted((folder / expectation).glob("*.yaml")), f"add {policy.id}/{expectation}/"


def test_every_sample_folder_belongs_to_a_registered_policy_and_holds_only_samples() -> None:
    for folder in sorted(p for p in SAMPLES.iterdir() if p.is_dir()):
        assert folder.name in POLICIES_BY_ID, f"{folder.name}: no policy has this id"
        _, *further = state_folders(folder.name)
        names = {p.name for p in folder.iterdir()}
        assert names == {STATE, ALLOWED, DISALLOWED} | {f.name for f in further}, folder.name
        for state in further:
            inside = {p.name for p in state.iterdir()}
            assert STATE in inside and inside - {STATE} <= {ALLOWED, DISALLOWED}, state
            assert inside - {STATE}, f"{state}: a further state with no sample"


def test_a_further_state_is_read_after_the_policys_own() -> None:
    layered = [s for s in all_samples() if len(s.states) == 2]
    assert layered, "no policy ships samples under a further state"
    for sample in layered:
        own, further = sample.states
        assert own == SAMPLES / sample.policy_id / STATE
        assert further == sample.change.parent.parent / STATE != own
        assert sample.name.startswith(f"{sample.policy_id}/{further.parent.name}/")


@pytest.mark.parametrize("sample", all_samples(), ids=lambda s: s.name)
def test_every_sample_says_what_it_tries_and_why_in_a_leading_comment(sample: Sample) -> None:
    lines = sample.change.read_text().splitlines()
    comment = [line for line in lines if line.startswith("#")]
    assert lines[0].startswith("# ") and len(" ".join(comment).split()) >= 12, sample.name


@pytest.mark.parametrize("sample", all_samples(ALLOWED), ids=lambda s: s.name)
def test_an_allowed_sample_passes_check_without_any_verdict(
    sample: Sample, capsys: pytest.CaptureFixture[str]
) -> None:
    code, verdicts = check(sample, capsys)
    assert verdicts == [], sample.name
    assert code == EXIT_ALLOWED


@pytest.mark.parametrize("sample", all_samples(DISALLOWED), ids=lambda s: s.name)
def test_a_disallowed_sample_draws_only_its_policys_verdict_at_the_default_action(
    sample: Sample, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = POLICIES_BY_ID[sample.policy_id]
    code, verdicts = check(sample, capsys)
    assert verdicts, f"{sample.name}: {policy.id} let it through"
    expected = (policy.id, policy.default_action.label)
    assert {(v["policy"], v["action"]) for v in verdicts} == {expected}, sample.name
    assert code == (EXIT_DENIED if policy.default_action is Action.DENY else EXIT_ALLOWED)

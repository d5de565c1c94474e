"""`make mutate` (tools/mutate.py) runs each rule against its own tests: these hold the selection
to what CONTRIBUTING.md says, without running mutmut (that is by hand, outside the suite)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from policies.registry import ALL_POLICIES, POLICIES_BY_ID
from tests.samples import judges_only_deletes
from tools.mutate import ROOT, Score, Target, modules, policy_id, prepare, targets

RULES = [t for t in targets([]) if t.room == "rules"]


def test_every_rule_module_and_diagnosis_module_is_a_target() -> None:
    assert [t.name for t in RULES] == modules("rules")
    assert [t.name for t in targets(["diagnoses"])] == modules("diagnoses")
    assert len(RULES) == len(ALL_POLICIES)


@pytest.mark.parametrize("target", RULES, ids=lambda t: t.name)
def test_a_rule_is_mutated_against_its_own_test_file_and_its_samples_only(target: Target) -> None:
    own = [t for t in target.tests if "::" not in t]
    samples = [t for t in target.tests if "::" in t]
    assert len(own) == 1 and own[0].startswith("tests/test_policy_"), own
    assert f"policies.rules.{target.name}" in (ROOT / own[0]).read_text()
    assert samples or judges_only_deletes(POLICIES_BY_ID[policy_id(target.name)])
    assert all(t.startswith("tests/test_policy_samples.py::") for t in samples)
    assert "tests/test_behaviour.py" not in target.tests


def test_an_unknown_module_is_refused_by_name() -> None:
    with pytest.raises(SystemExit, match="no module nonesuch"):
        targets(["nonesuch"])


def test_the_work_folder_names_only_the_module_to_mutate_and_its_tests(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import tools.mutate

    monkeypatch.setattr(tools.mutate, "WORK", tmp_path)
    (target,) = targets(["mig_reconfig"])
    folder = prepare(target)
    config = tomllib.loads((folder / "pyproject.toml").read_text())["tool"]["mutmut"]
    assert config["only_mutate"] == ["policies/rules/mig_reconfig.py"]
    assert config["pytest_add_cli_args_test_selection"] == list(target.tests)
    assert (folder / "policies").resolve() == ROOT / "policies"


@pytest.mark.parametrize(
    ("statuses", "percent"),
    [
        pytest.param({"a": "killed", "b": "timeout", "c": "survived", "d": "no tests"}, 50.0),
        pytest.param({"a": "killed"}, 100.0),
    ],
)
def test_a_score_counts_timeouts_as_caught_and_untested_mutants_against_it(
    statuses: dict[str, str], percent: float
) -> None:
    (target,) = targets(["mig_reconfig"])
    assert Score(target, statuses, 1.0).percent == percent

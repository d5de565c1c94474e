"""The policy reference: docs/policies.md is what `gpu-guard policies` prints; it names all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from policies.model import Policy
from policies.reference import REGENERATE, reference_text
from policies.registry import ALL_POLICIES
from webhook.commands.policies import policy_reference

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "policies.md"


def test_docs_policies_md_is_the_generated_reference() -> None:
    assert DOCS.is_file(), f"docs/policies.md is missing: run `{REGENERATE}`"
    assert DOCS.read_text() == reference_text(), (
        f"docs/policies.md is out of date with policies/registry.py: run `{REGENERATE}`"
    )


def test_gpu_guard_policies_prints_the_same_reference() -> None:
    assert policy_reference() == reference_text()


def test_the_generator_module_prints_the_reference() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "policies.reference"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout == reference_text()


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=[p.id for p in ALL_POLICIES])
def test_every_registered_policy_has_a_section_with_its_default_action(policy: Policy) -> None:
    text = DOCS.read_text()
    heading = f"## `{policy.id}`"
    assert text.count(heading) == 1
    section = text.split(heading)[1].split("\n## ")[0]
    assert policy.summary in section
    assert (
        f"- default action: **{policy.default_action.label}**: {policy.default_reason}" in section
    )
    assert f"- when the policy itself fails: {policy.failure_action.label}" in section
    row = f"| `{policy.id}` | {policy.default_action.label} |"
    assert row in text, f"the summary table lacks {policy.id}"

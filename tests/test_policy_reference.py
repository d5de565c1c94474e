"""The policy reference: docs/policies.md is what `gpu-guard policies` prints; it names all."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

import webhook.config as config_module
from policies.cluster.view import ClusterView
from policies.reference import GENERATED_NOTE, REGENERATE, reference_text
from policies.registry import ALL_POLICIES
from policies.vocabulary.verdicts import Policy
from webhook.commands.policies import policy_reference
from webhook.config import parse_config

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "policies.md"


def test_docs_policies_md_is_the_generated_reference() -> None:
    assert DOCS.is_file(), f"docs/policies.md is missing: run `{REGENERATE}`"
    assert DOCS.read_text() == reference_text(), (
        f"docs/policies.md is out of date with policies/registry.py: run `{REGENERATE}`"
    )


def test_gpu_guard_policies_prints_the_same_reference_without_the_maintainers_note() -> None:
    assert GENERATED_NOTE in reference_text()
    assert "Generated from" not in policy_reference()
    assert policy_reference() == reference_text().replace(GENERATED_NOTE, "")


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
def test_every_registered_policy_has_a_section_with_its_default_action(
    policy: Policy[ClusterView],
) -> None:
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


# --- what the other documents say about the registry --------------------------------------------

#: Documents that name policies or show configuration; CONTRIBUTING.md walks through adding one.
DOCUMENTS = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    ROOT / "manifests" / "README.md",
    ROOT / "examples" / "homelab" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
YAML_FENCE = re.compile(r"^\s*```yaml\n(.*?)^\s*```", re.S | re.M)
CONFIG_SECTIONS = {"policies", "mutations", "exemptions"}
#: "(`vfio-rebind-with-gpu-pods`, deny)": a policy named with its default action.
NAMED_WITH_ACTION = re.compile(r"\(`([a-z0-9-]+)`, (deny|warn|audit|off)\b")


def configuration_examples() -> list[tuple[str, Any]]:
    """Every configuration shown to readers: YAML blocks of the documents with a configuration
    section, and the example in webhook/config.py's docstring."""
    examples = []
    for path in DOCUMENTS:
        for i, block in enumerate(YAML_FENCE.findall(path.read_text())):
            data = yaml.safe_load(textwrap.dedent(block))
            if isinstance(data, Mapping) and CONFIG_SECTIONS & set(data):
                examples.append((f"{path.relative_to(ROOT)} block {i + 1}", data))
    docstring = (config_module.__doc__ or "").split("\n\n")[1]
    examples.append(("webhook/config.py docstring", yaml.safe_load(textwrap.dedent(docstring))))
    return examples


EXAMPLES = configuration_examples()


def test_the_readme_shows_a_configuration_example() -> None:
    assert any(name.startswith("README.md") for name, _ in EXAMPLES)


@pytest.mark.parametrize(("where", "data"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_every_configuration_example_names_registered_ids_and_valid_actions(
    where: str, data: Any
) -> None:
    parse_config(data, where)  # raises ConfigError on an unknown id or action, naming it


def test_the_documents_count_the_registered_policies() -> None:
    counts = [
        (path.name, int(count))
        for path in DOCUMENTS
        for count in re.findall(r"\b(\d+) policies\b", path.read_text())
    ]
    assert counts, "README.md says how many policies there are"
    assert {count for _, count in counts} == {len(ALL_POLICIES)}, counts


def test_a_policy_named_with_an_action_in_the_documents_has_that_default_action() -> None:
    policies = {policy.id: policy for policy in ALL_POLICIES}
    pairs = [
        (path.name, *pair)
        for path in DOCUMENTS
        for pair in NAMED_WITH_ACTION.findall(path.read_text())
    ]
    assert pairs
    for document, policy_id, action in pairs:
        assert policy_id in policies, f"{document} names {policy_id}, which is not registered"
        assert policies[policy_id].default_action.label == action, (document, policy_id)

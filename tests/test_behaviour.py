"""Refactors keep behaviour: every recorded review, check and audit answers as recorded.

``tests/data/behaviour.json`` is what ``python -m tools.behaviour`` printed before the change;
a case that differs now is named, with the first line that differs. A deliberate change of
behaviour re-records the file (``make behaviour``) and says why in its commit.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import pytest

from tests import FIXTURES
from tests.conftest import require_fixture
from tools.behaviour import capture

RECORDED = Path(__file__).parent / "data" / "behaviour.json"


@pytest.fixture(scope="module")
def now_answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    require_fixture(FIXTURES)  # without the recorded reviews the comparison would be partial
    return capture(tmp_path_factory.mktemp("behaviour"))


def _cases() -> list[tuple[str, str]]:
    recorded = json.loads(RECORDED.read_text())
    return [(group, name) for group, cases in recorded.items() for name in cases]


@pytest.mark.parametrize(("group", "name"), _cases())
def test_answers_are_what_they_were_before_the_refactor(
    now_answers: dict[str, Any], group: str, name: str
) -> None:
    recorded = json.loads(RECORDED.read_text())[group][name]
    now = now_answers[group].get(name)
    if now != recorded:
        before = json.dumps(recorded, indent=1, sort_keys=True).splitlines()
        after = json.dumps(now, indent=1, sort_keys=True).splitlines()
        diff = "\n".join(list(difflib.unified_diff(before, after, lineterm=""))[:40])
        pytest.fail(f"{group} {name} changed:\n{diff}")


def test_no_case_disappeared(now_answers: dict[str, Any]) -> None:
    recorded = json.loads(RECORDED.read_text())
    for group, cases in recorded.items():
        assert set(cases) <= set(now_answers[group]), group

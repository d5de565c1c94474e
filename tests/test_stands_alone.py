"""The repository stands alone (issue 22): no code builds a path to the workplace folder beside
the checkout, and no file sends a reader there; the recordings are in tests/fixtures, the domain
facts in docs/field-guide.md and docs/design.md.

This module spells the folder's name in pieces, so that it does not mention it either."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

from tests.test_house_rules import ROOT, project_files

SHARED = "shared"
BESIDE = "../" + SHARED
GUIDE = "FIELD-" + "GUIDE"
NAVIGATION_ATTRIBUTES = {"parent", "parents", "pardir"}
JOINS = {"join", "joinpath", "Path", "PurePath", "PosixPath"}


def _is_shared(node: ast.AST) -> bool:
    """A path component naming the folder, alone or with a subfolder after a slash."""
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and (node.value.strip("/") == SHARED or node.value.startswith(SHARED + "/"))
    )


def _navigates_up(node: ast.AST) -> bool:
    """Whether an expression climbs out of a folder: ``.parent``, ``.parents[i]``, ``os.pardir``
    or a ``".."`` component."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Attribute) and inner.attr in NAVIGATION_ATTRIBUTES:
            return True
        if isinstance(inner, ast.Constant) and inner.value in ("..", "../"):
            return True
    return False


def _divided(node: ast.AST) -> list[ast.AST]:
    """The operands of a chain ``a / b / c``, left to right."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return [*_divided(node.left), node.right]
    return [node]


def _climbs_then_names_shared(parts: list[ast.AST]) -> bool:
    return any(
        _is_shared(part) and any(map(_navigates_up, parts[:i])) for i, part in enumerate(parts)
    )


def paths_beside_the_checkout(source: str) -> list[int]:
    """Line numbers where ``source`` builds a path into the folder beside the checkout."""
    found: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if BESIDE in node.value or "..\\" + SHARED in node.value:
                found.add(line)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if _climbs_then_names_shared(_divided(node)):
                found.add(line)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in JOINS:
                receiver = (
                    [func.value] if name == "joinpath" and isinstance(func, ast.Attribute) else []
                )
                if _climbs_then_names_shared([*receiver, *node.args]):
                    found.add(line)
        elif isinstance(node, ast.JoinedStr):
            values = node.values
            for before, after in itertools.pairwise(values):
                text = after.value if isinstance(after, ast.Constant) else None
                if (
                    isinstance(before, ast.FormattedValue)
                    and _navigates_up(before.value)
                    and isinstance(text, str)
                    and text.strip("/").split("/")[0] == SHARED
                ):
                    found.add(line)
    return sorted(found)


CAUGHT = [
    pytest.param('ROOT = "' + BESIDE + '/fixtures"', id="a string literal naming the folder"),
    pytest.param(
        'SHARED = Path(__file__).resolve().parents[2] / "shared"', id="parents[i] / shared"
    ),
    pytest.param('FIXTURES = ROOT.parent / "shared" / "fixtures"', id="parent / shared / fixtures"),
    pytest.param('CRDS = ROOT.parent / "' + SHARED + '/crds"', id="parent / a subfolder of it"),
    pytest.param('p = ROOT / ".." / "shared"', id="a '..' component then shared"),
    pytest.param('p = os.path.join(ROOT, "..", "shared", "fixtures")', id="os.path.join with '..'"),
    pytest.param('p = os.path.join(os.path.dirname(ROOT), os.pardir, "shared")', id="os.pardir"),
    pytest.param('p = Path(ROOT.parent, "shared")', id="Path(parent, shared)"),
    pytest.param('p = ROOT.parent.joinpath("shared", "fixtures")', id="parent.joinpath(shared)"),
    pytest.param('p = f"{ROOT.parent}/' + SHARED + '/fixtures"', id="an f-string after parent"),
]
LEFT_ALONE = [
    pytest.param('FIXTURES = Path(__file__).resolve().parent / "fixtures"', id="tests/fixtures"),
    pytest.param('NAME = f"{NVIDIA_DOMAIN}gpu.shared"', id="the gpu.shared resource name"),
    pytest.param("shared = Admission(engine, state)", id="a variable called shared"),
    pytest.param('p = tmp_path / "shared"', id="a shared folder of a test's own"),
    pytest.param('p = ROOT / "shared-notes.md"', id="another name starting with shared"),
]


@pytest.mark.parametrize("source", CAUGHT)
def test_each_way_of_building_a_path_beside_the_checkout_is_caught(source: str) -> None:
    assert paths_beside_the_checkout(f"import os\n{source}\n") == [2]


@pytest.mark.parametrize("source", LEFT_ALONE)
def test_paths_inside_the_repository_and_other_shared_words_are_left_alone(source: str) -> None:
    assert paths_beside_the_checkout(source) == []


def python_files() -> list[Path]:
    return [p for p in project_files() if p.suffix == ".py" and p.is_file()]


def test_no_python_code_builds_a_path_beside_the_checkout() -> None:
    files = python_files()
    assert ROOT / "tests" / "conftest.py" in files and ROOT / "tools" / "behaviour.py" in files
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in files
        for line in paths_beside_the_checkout(path.read_text(encoding="utf-8"))
    ]
    assert not found, "use tests.FIXTURES (tests/fixtures) instead:\n" + "\n".join(found)


#: What sends a reader out of the repository: the folder beside the checkout, its recordings,
#: and the workplace's field guide and design notes (in docs/ now, in the project's words).
ELSEWHERE = re.compile(
    re.escape(BESIDE)
    + r"|(?<![\w.-])"
    + SHARED
    + rf"/(?:fixtures|crds|{GUIDE}|DESIGN)"
    + rf"|{GUIDE}"
    + r"|(?<![\w/.-])DESIGN\.md"
)


@pytest.mark.parametrize(
    ("text", "sends"),
    [
        (f"see {BESIDE}/fixtures/dra/", True),
        (f"recorded in `{SHARED}/fixtures`", True),
        (f"the CRDs ({SHARED}/crds/platform)", True),
        (f"the catalogue is {GUIDE}.md section 3", True),
        ("the scale envelope of DESIGN" + ".md", True),
        ("see docs/field-guide.md section 3 and docs/design.md", False),
        ("tests/fixtures/dra/README.md", False),
        ("nvidia.com/gpu.shared/ and a shared/ folder of its own", False),
    ],
)
def test_the_pattern_finds_what_sends_a_reader_out_of_the_repository(
    text: str, sends: bool
) -> None:
    assert bool(ELSEWHERE.search(text)) is sends


def test_no_file_outside_ci_sends_a_reader_out_of_the_repository() -> None:
    # .ci/run may fetch the control-plane binaries from the workplace (issue 24).
    files = [p for p in project_files() if p.is_file() and p.relative_to(ROOT).parts[0] != ".ci"]
    assert ROOT / "README.md" in files and ROOT / "tests" / "fixtures" / "README.md" in files
    found = []
    for path in files:
        text = path.read_bytes().decode("utf-8", errors="ignore")
        for number, line in enumerate(text.splitlines(), 1):
            if ELSEWHERE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not found, "point at tests/fixtures or docs/ instead:\n" + "\n".join(found)

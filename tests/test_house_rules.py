"""House rules that hold for the whole tree: no package-registry or vulnerability-database host
is named, and a missing recording says so by failing, not by skipping."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests import FIXTURES
from tests.conftest import require_fixture

ROOT = Path(__file__).resolve().parents[1]

#: Hosts of package indexes and vulnerability databases, assembled from parts so that this file
#: does not name them either.
REGISTRY_HOSTS = tuple(
    ".".join(parts)
    for parts in [
        ("py" + "pi", "org"),
        ("files", "python" + "hosted", "org"),
        ("python" + "hosted", "org"),
        ("o" + "sv", "dev"),
        ("registry", "npm" + "js", "org"),
        ("npm" + "js", "com"),
        ("registry", "yarn" + "pkg", "com"),
        ("deb", "deb" + "ian", "org"),
        ("security", "deb" + "ian", "org"),
        ("archive", "ubu" + "ntu", "com"),
        ("security", "ubu" + "ntu", "com"),
        ("dl-cdn", "alpine" + "linux", "org"),
        ("crates", "io"),
        ("proxy", "go" + "lang", "org"),
        ("sum", "go" + "lang", "org"),
        ("ruby" + "gems", "org"),
        ("repo1", "maven", "org"),
        ("repo", "maven", "apache", "org"),
        ("conda", "ana" + "conda", "org"),
        ("repo", "ana" + "conda", "com"),
        ("nvd", "nist", "gov"),
    ]
)
NAMED_HOST = re.compile(
    "|".join(rf"(?<![\w-]){re.escape(host)}(?![\w-])" for host in REGISTRY_HOSTS), re.IGNORECASE
)
SKIPPED_DIRS = {".git", ".venv", ".venv-audit", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def project_files() -> list[Path]:
    """What git tracks or would add (untracked but not ignored); the tree itself without git."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return [
            path
            for path in ROOT.rglob("*")
            if path.is_file() and not SKIPPED_DIRS & set(path.relative_to(ROOT).parts)
        ]
    return [ROOT / name for name in listed.decode().split("\0") if name]


def test_the_host_pattern_finds_a_registry_host_and_ignores_look_alikes() -> None:
    pypi = REGISTRY_HOSTS[0]
    assert NAMED_HOST.search(f"see https://{pypi}/simple/")
    assert NAMED_HOST.search(f"the TEST.{pypi.upper()} index")
    assert not NAMED_HOST.search(f"not{pypi}")
    assert not NAMED_HOST.search("the package index's vulnerability service, PyPI by name")


def test_no_project_file_names_a_package_registry_or_vulnerability_database_host() -> None:
    files = project_files()
    assert ROOT / "Makefile" in files and ROOT / "docs" / "security.md" in files
    named = []
    for path in files:
        if not path.is_file():
            continue  # deleted in the worktree, not yet in the index
        text = path.read_bytes().decode("utf-8", errors="ignore")
        for number, line in enumerate(text.splitlines(), 1):
            named += [
                f"{path.relative_to(ROOT)}:{number}: {m[0]}" for m in NAMED_HOST.finditer(line)
            ]
    assert not named, (
        "describe these instead (e.g. the package index's vulnerability service):\n"
        + ("\n".join(named))
    )


def test_the_recordings_the_behaviour_freeze_replays_are_in_the_repository() -> None:
    # tools/behaviour.py (which reads tests.FIXTURES) passes over a missing folder; this makes
    # that absence a failure.
    assert FIXTURES == ROOT / "tests" / "fixtures"
    require_fixture(FIXTURES / "admission-reviews")
    require_fixture(FIXTURES / "dra" / "admission-reviews")

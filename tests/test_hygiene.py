"""The project's hygiene files (issue 40): the licence's text, a changelog entry for the version,
the security policy's supported versions; and requirements.lock, what the image installs and
``make audit-deps`` audits: every dependency and the build backend, pinned with hashes."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"


def locked() -> dict[str, tuple[str, list[str]]]:
    """name -> (pinned version, hashes), from the lock's requirement lines."""
    entries: dict[str, tuple[str, list[str]]] = {}
    text = re.sub(r"\\\n\s*", " ", LOCK.read_text())
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, rest = line.split("==", 1)
        version, *options = rest.split()
        hashes = [o.removeprefix("--hash=") for o in options if o.startswith("--hash=sha256:")]
        entries[canonicalize_name(name)] = (version, hashes)
    return entries


def project() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return project


def test_every_locked_package_is_pinned_with_the_hashes_of_its_files() -> None:
    entries = locked()
    assert entries
    for name, (version, hashes) in entries.items():
        assert re.fullmatch(r"[\w.+!-]+", version), name
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), name


def test_every_dependency_and_the_build_backend_is_locked_within_its_range() -> None:
    entries = locked()
    data = project()
    runtime = data["project"]["dependencies"]  # type: ignore[index]
    backend = data["build-system"]["requires"]  # type: ignore[index]
    for spec in [*runtime, *backend]:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in entries, f"{name} is not in requirements.lock: run make lock"
        assert requirement.specifier.contains(entries[name][0], prereleases=True), spec


def test_the_lock_names_no_index_and_nothing_from_this_machine() -> None:
    lines = [line for line in LOCK.read_text().splitlines() if not line.startswith("#")]
    for line in lines:
        assert not re.search(r"--(extra-)?index-url|--find-links|file://|/opt/|/home/", line), line


def version() -> str:
    return str(project()["project"]["version"])  # type: ignore[index]


def test_the_licence_is_the_apache_2_text_pyproject_and_the_image_name() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert project()["project"]["license"] == {"text": "Apache-2.0"}  # type: ignore[index]
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in (ROOT / "Dockerfile").read_text()


def test_the_changelog_has_an_entry_for_this_version() -> None:
    headings = re.findall(r"(?m)^## (.+)$", (ROOT / "CHANGELOG.md").read_text())
    assert headings[0] == "Unreleased" or headings[0].startswith(version()), headings
    assert any(h.startswith(version()) for h in headings), f"no entry for {version()}"


def test_the_security_policy_says_how_to_report_and_supports_this_version() -> None:
    text = (ROOT / "SECURITY.md").read_text()
    minor = ".".join(version().split(".")[:2])
    assert "## Supported versions" in text and f"({minor}.x)" in text
    assert "## Reporting a vulnerability" in text and "Report a vulnerability" in text

"""The layering the tree shows is the layering the code has."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_policies_never_import_the_webhook_or_io_libraries() -> None:
    banned = ("webhook", "aiohttp", "kubernetes_asyncio", "rich", "prometheus_client")
    for path in sorted((ROOT / "policies").rglob("*.py")):
        for name in _imports(path):
            assert name.split(".")[0] not in banned, f"{path.relative_to(ROOT)} imports {name}"


def test_the_in_cluster_server_imports_nothing_only_a_terminal_needs() -> None:
    probe = (
        "import sys\n"
        "import webhook.admission.server, webhook.audit.background, webhook.audit.publish\n"
        "import webhook.state.live, webhook.certs.sync\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'rich'}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_renderers_live_in_one_package() -> None:
    for path in sorted((ROOT / "webhook").rglob("*.py")):
        if path.parent.name == "render" or path.name == "cli.py":
            continue
        rich = [n for n in _imports(path) if n.split(".")[0] == "rich"]
        assert not rich, f"{path.relative_to(ROOT)} imports {rich}: rendering belongs in render/"


def test_the_engines_modules_are_its_own_everything_else_imports_webhook_engine() -> None:
    engine = ROOT / "webhook" / "engine"
    for folder in ("webhook", "tests", "tools", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.is_relative_to(engine):
                continue
            inside = [n for n in _imports(path) if n.startswith("webhook.engine.")]
            assert not inside, f"{path.relative_to(ROOT)} imports {inside}: use webhook.engine"


MAX_MODULE_LINES = 450
"""CONTRIBUTING.md's one size guideline for a module of policies/ or webhook/."""


@pytest.mark.parametrize("folder", ["policies", "webhook"])
def test_no_module_in_policies_or_webhook_is_over_450_lines(folder: str) -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split by concern, each new module saying why it exists: {long}"


def test_every_room_of_policies_is_a_package_that_says_what_belongs_in_it() -> None:
    rooms = [p for p in sorted((ROOT / "policies").iterdir()) if list(p.glob("*.py"))]
    assert {p.name for p in rooms} >= {"vocabulary", "cel", "cluster", "rules", "diagnoses"}
    for room in [ROOT / "policies", *rooms]:
        init = room / "__init__.py"
        assert init.exists(), f"{room.relative_to(ROOT)} is not a package"
        doc = ast.get_docstring(ast.parse(init.read_text()))
        missing = f"{init.relative_to(ROOT)}: say what belongs here and what it may import"
        assert doc and "import" in doc, missing


HOMELAB = "examples/homelab/cluster.yaml"
CHANGES = "examples/homelab/changes"
NEVER_FOR_FILES = {"kubernetes_asyncio", "aiohttp", "cryptography", "celpy", "jsonpatch"}
"""What no ``--state`` command reading the home lab uses: the cluster client, the server, the
certificates, CEL (no DRA selector there) and JSONPatch (nothing mutated)."""


def _imported_by(argv: list[str], banned: set[str]) -> list[str]:
    """The banned top-level packages in ``sys.modules`` after ``gpu-guard ARGV`` ran."""
    probe = (
        "import contextlib, io, json, sys\n"
        "import webhook.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    webhook.cli.main({argv!r})\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {banned!r})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    imported: list[str] = json.loads(result.stdout.strip().splitlines()[-1])
    return imported


@pytest.mark.parametrize(
    ("argv", "banned"),
    [
        (["audit", "--state", HOMELAB, "-o", "json"], NEVER_FOR_FILES | {"rich"}),
        (["audit", "--state", HOMELAB, "-o", "markdown"], NEVER_FOR_FILES | {"rich"}),
        (["audit", "--state", HOMELAB], NEVER_FOR_FILES),  # the table is drawn with rich
        (["check", "--state", HOMELAB, "-f", CHANGES, "-o", "json"], NEVER_FOR_FILES | {"rich"}),
        (["check", "--state", HOMELAB, "-f", CHANGES], NEVER_FOR_FILES | {"rich"}),
        (["inventory", "--state", HOMELAB, "-o", "json"], NEVER_FOR_FILES | {"rich"}),
        (["policies"], NEVER_FOR_FILES | {"rich", "prometheus_client"}),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_a_command_on_state_files_imports_only_the_libraries_it_uses(
    argv: list[str], banned: set[str]
) -> None:
    assert _imported_by(argv, banned) == []


def test_serving_state_files_imports_neither_the_cluster_client_nor_a_terminals_libraries() -> None:
    probe = (
        "import sys\n"
        "import webhook.cli, webhook.commands.serve\n"
        "from webhook.admission.pipeline import Admission\n"
        "from webhook.admission.server import make_app\n"
        "from webhook.engine import Engine\n"
        "from webhook.state.files import load_state\n"
        f"make_app(Admission(engine=Engine(), view=load_state([{HOMELAB!r}])))\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}"
        " & {'kubernetes_asyncio', 'cryptography', 'rich', 'celpy', 'jsonpatch'}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"

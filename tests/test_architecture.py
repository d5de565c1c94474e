"""The layering the tree shows is the layering the code has."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

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


def test_no_diagnoses_module_is_over_400_lines() -> None:
    for path in sorted((ROOT / "policies" / "diagnoses").glob("*.py")):
        lines = len(path.read_text().splitlines())
        assert lines <= 400, f"{path.relative_to(ROOT)} has {lines} lines: split it by subject"

"""Every command in README.md and the chart's README runs as written (issue 40): each shell
block's lines, the commented-out ones that are commands too, are valid shell with no brace
expansion; each helm command's --set names keys the chart's schema knows, with values it
accepts; each make target, path, gpu-guard and kubectl gpu-guard command exists."""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from webhook.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "gpu-guard"
DOCUMENTS = (ROOT / "README.md", CHART / "README.md")
PROGRAMS = ("helm", "kubectl", "make", "gpu-guard", "docker", "pip", "KUBEBUILDER_ASSETS=")
"""What a command line may start with: a new one is added here with its check below."""
ENVIRONMENT = {"REGISTRY": "registry.invalid/you"}
"""What the documents ask the reader to set (README: "REGISTRY below is ...")."""


@dataclass(frozen=True)
class Command:
    where: str
    text: str

    def words(self) -> list[str]:
        text = self.text
        for name, value in ENVIRONMENT.items():
            text = text.replace(f"${name}", value)
        return shlex.split(text.split(" > ")[0], comments=True)


def commands() -> list[Command]:
    found = []
    for document in DOCUMENTS:
        text = document.read_text()
        for block in re.finditer(r"```sh\n(.*?)```", text, re.S):
            joined = re.sub(r"\\\n\s*", "", block[1])
            for number, raw in enumerate(joined.splitlines(), 1):
                line = raw.strip()
                if line.startswith("# ") and line[2:].startswith(PROGRAMS):
                    line = line[2:]  # a commented-out command: run as written once uncommented
                if not line or line.startswith("#"):
                    continue
                first = text[: block.start()].count("\n") + 1
                where = f"{document.relative_to(ROOT)}, the block on line {first}, command {number}"
                found.append(Command(where, line))
    return found


COMMANDS = commands()


def test_the_documents_hold_the_install_path() -> None:
    texts = [c.text for c in COMMANDS]
    assert any(t.startswith("make image") for t in texts)
    installs = [t for t in texts if t.startswith(("helm install", "helm upgrade"))]
    assert installs and all("--wait" in t for t in installs), installs


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_every_command_is_valid_shell_without_brace_expansion(command: Command) -> None:
    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "", command.text)
    assert not re.search(r"\{[^{}\s]*,[^{}\s]*\}", unquoted), "the shell expands it"
    done = subprocess.run(["bash", "-n"], input=command.text, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert command.text.startswith(PROGRAMS), "a program the test does not check"


def values_after(settings: list[str]) -> dict[str, Any]:
    """values.yaml with each ``--set a.b=c`` applied as helm does (the value read as YAML)."""
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    for setting in settings:
        path, value = setting.split("=", 1)
        *parents, leaf = path.split(".")
        node = values
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = yaml.safe_load(value)
    return values


HELM = [c for c in COMMANDS if c.text.startswith("helm ")]


@pytest.mark.parametrize("command", HELM, ids=[c.where for c in HELM])
def test_every_helm_command_sets_only_what_the_chart_schema_knows(command: Command) -> None:
    words = command.words()
    assert words[1] in ("install", "upgrade") and (ROOT / words[3]).is_dir(), words
    settings = [words[i + 1] for i, word in enumerate(words) if word == "--set"]
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator(schema).validate(values_after(settings))


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_every_make_target_path_and_gpu_guard_command_exists(command: Command) -> None:
    words = command.words()
    if words[0].startswith("KUBEBUILDER_ASSETS="):
        words = words[1:]
    if words[0] == "make":
        makefile = (ROOT / "Makefile").read_text()
        for target in (w for w in words[1:] if "=" not in w):
            assert re.search(rf"(?m)^{re.escape(target)}:", makefile), target
    elif words[0] == "gpu-guard" or words[:2] == ["kubectl", "gpu-guard"]:
        argv = words[1:] if words[0] == "gpu-guard" else words[2:]
        try:
            build_parser().parse_args(argv)
        except SystemExit as exited:  # 2: a command or flag that does not exist; 0: --version
            assert exited.code == 0, argv
    elif words[:2] == ["kubectl", "apply"]:
        assert (ROOT / words[words.index("-k") + 1]).is_dir()
    elif words[0] == "pip":
        assert words[1:] == ["install", "."]

"""``kubectl gpu-guard``: the console script kubectl-gpu_guard, and kubectl's flags on either side.

kubectl runs a plugin with every argument as typed, so ``--kubeconfig``/``--context`` may come
before the command or after it. The end-to-end cases run the script pip would write for the
entry point pyproject.toml declares, against the API double, through kubectl when it is on PATH.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import stat
import sys
import tomllib
from pathlib import Path

import orjson
import pytest
import yaml

from tests.kubeapi import KubeApiDouble
from tests.test_cli import STATE
from webhook.cli import KUBECTL_PLUGIN, build_parser, main
from webhook.flags import cluster_args_anywhere

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = "kubectl-gpu_guard"
NOW = "2026-10-30T12:00:00Z"


def entry_point() -> str:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    entry: str = scripts[SCRIPT]
    return entry


def install_script(bin_dir: Path) -> Path:
    """The console script as pip writes it for the declared entry point, running this tree."""
    module, _, function = entry_point().partition(":")
    script = bin_dir / SCRIPT
    script.write_text(
        f"#!{sys.executable}\nimport sys\nfrom {module} import {function}\n"
        f"if __name__ == '__main__':\n    sys.exit({function}())\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def cluster_commands() -> list[str]:
    """Every command that talks to a cluster: those with a --context of their own."""
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(
        name
        for name, sub in commands.choices.items()
        if any("--context" in a.option_strings for a in sub._actions)
    )


#: The least each command needs besides the cluster flags, to parse.
REQUIRED = {
    "serve": ["--tls-cert", "c", "--tls-key", "k"],
    "check": ["-f", "x.yaml"],
    "snapshot": ["-o", "-"],
}


def parsed(argv: list[str]) -> argparse.Namespace:
    return cluster_args_anywhere(build_parser(KUBECTL_PLUGIN).parse_args(argv))


def test_the_kubectl_plugin_is_installed_under_the_name_kubectl_maps_to_gpu_guard() -> None:
    # kubectl reads a dash in a command as an underscore in the file name: gpu-guard.
    assert entry_point() == "webhook.cli:kubectl_plugin"


def test_every_command_that_talks_to_a_cluster_is_covered() -> None:
    assert cluster_commands() == ["audit", "certs", "check", "inventory", "serve", "snapshot"]


@pytest.mark.parametrize("command", cluster_commands())
@pytest.mark.parametrize("where", ["before", "after", "split"])
def test_kubeconfig_and_context_reach_the_command_before_or_after_it(
    command: str, where: str
) -> None:
    rest = REQUIRED.get(command, [])
    kubeconfig, context = ["--kubeconfig", "K"], ["--context", "C"]
    argv = {
        "before": [*kubeconfig, *context, command, *rest],
        "after": [command, *rest, *kubeconfig, *context],
        "split": ["--context", "C", command, *rest, *kubeconfig],
    }[where]
    args = parsed(argv)
    assert (args.kubeconfig, args.context) == ("K", "C")


def test_the_flag_after_the_command_wins_as_a_repeated_flag_does() -> None:
    args = parsed(["--context", "first", "audit", "--context", "second"])
    assert args.context == "second"


@pytest.mark.parametrize("command", ["policies", "demo"])
def test_a_command_that_reads_no_cluster_refuses_a_context_in_one_line(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    code = main(["--context", "C", command], prog=KUBECTL_PLUGIN)
    assert code == 2
    assert capsys.readouterr().err == (
        f"kubectl gpu-guard: --context: {command} does not read a cluster\n"
    )


# --- end to end: the script, the double, kubectl --------------------------------------------------


def kubeconfig_with_a_dead_current_context(api: KubeApiDouble, path: Path) -> Path:
    """Two contexts: the current one names a server nobody listens on, ``double`` the double;
    only a --context that arrives reaches it."""
    config = api.kubeconfig_dict()
    config["clusters"].append({"name": "dead", "cluster": {"server": "http://127.0.0.1:9"}})
    config["contexts"].append({"name": "dead", "context": {"cluster": "dead", "user": "double"}})
    config["current-context"] = "dead"
    path.write_text(yaml.safe_dump(config))
    return path


async def run(*argv: str | Path, path: str) -> tuple[int, bytes, bytes]:
    env = {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT)}
    env.pop("KUBECONFIG", None)
    process = await asyncio.create_subprocess_exec(
        *map(str, argv),
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(120):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out, err


def expected_audit(capsys: pytest.CaptureFixture[str]) -> object:
    code = main(["audit", "--state", STATE, "--now", NOW, "-o", "json"])
    assert code == 1, "the home lab has deny-level findings"
    return orjson.loads(capsys.readouterr().out)


async def test_the_script_audits_the_cluster_its_context_names_with_the_flags_on_either_side(
    homelab_api: KubeApiDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = install_script(tmp_path)
    kubeconfig = kubeconfig_with_a_dead_current_context(homelab_api, tmp_path / "kubeconfig")
    expected = expected_audit(capsys)
    flags = ["--kubeconfig", str(kubeconfig), "--context", "double"]
    audit = ["audit", "--now", NOW, "-o", "json"]
    for argv in ([*flags, *audit], [*audit, *flags]):
        code, out, err = await run(script, *argv, path=os.environ["PATH"])
        assert code == 1, err.decode()
        assert orjson.loads(out) == expected


async def test_the_scripts_usage_reads_kubectl_gpu_guard(tmp_path: Path) -> None:
    code, out, _ = await run(install_script(tmp_path), "audit", "--help", path=os.environ["PATH"])
    assert code == 0
    assert " ".join(out.decode().split()).startswith("usage: kubectl gpu-guard audit ")  # any width


async def test_kubectl_finds_the_plugin_and_passes_its_flags_through_to_the_double(
    homelab_api: KubeApiDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH (.ci/run does not install it): the script is tested")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = install_script(bin_dir)
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    code, out, err = await run(kubectl, "plugin", "list", path=path)
    assert code == 0, err.decode()
    assert str(script) in out.decode()
    kubeconfig = kubeconfig_with_a_dead_current_context(homelab_api, tmp_path / "kubeconfig")
    expected = expected_audit(capsys)
    flags = ["--kubeconfig", str(kubeconfig), "--context", "double"]
    audit = ["audit", "--now", NOW, "-o", "json"]
    for argv in ([*audit, *flags], [*flags, *audit]):
        code, out, err = await run(kubectl, "gpu-guard", *argv, path=path)
        assert code == 1, err.decode()
        assert orjson.loads(out) == expected

"""A command line that behaves like the tools people know (issue 40): --version and
``version``, did-you-mean, completion scripts generated from the parser, NO_COLOR and --color,
singular and plural, ``policies [ID] [-o json]``."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import subprocess

import pytest

from policies.reference import entry_ids
from tests.test_cli import NOW, STATE, run
from webhook.audit.report import parse_now, run_audit
from webhook.cli import build_parser
from webhook.commands.snapshot import wrote
from webhook.completion import bash_script, zsh_script
from webhook.engine import Engine
from webhook.render.markdown import render_markdown
from webhook.render.text import summary_line
from webhook.state.files import load_state
from webhook.usage import color_wanted, package_version


def test_version_flag_and_command_name_the_package_chart_and_app_versions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"gpu-guard {package_version()}\n"
    code, out, _ = run(capsys, "version", "-o", "json")
    assert code == 0
    found = json.loads(out)
    assert found["gpuGuard"] == found["chart"] == found["appVersion"] == package_version()
    code, out, _ = run(capsys, "version")
    assert out.startswith(f"gpu-guard {package_version()} (chart gpu-guard-{package_version()}")


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["audti"], "did you mean 'audit'?"),
        (["inventroy"], "did you mean 'inventory'?"),
        (["audit", "-o", "tabel"], "did you mean 'table'?"),
        (["audit", "--stat", STATE, "--kubeconfg", "x"], "did you mean '--kubeconfig'"),
        (["check", "-f", "x", "--recursve"], "did you mean '--recursive'?"),
        (["--colr=never", "version"], "did you mean '--color'?"),
        (["--colour", "never", "version"], "did you mean '--color'?"),
    ],
    ids=[
        "command",
        "another command",
        "a choice",
        "a flag of the command",
        "a flag",
        "top flag",
        "top flag whose value argparse takes for the command",
    ],
)
def test_a_mistyped_command_choice_or_flag_names_the_nearest_one(
    capsys: pytest.CaptureFixture[str], argv: list[str], hint: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert hint in err.splitlines()[-1], err


def test_nothing_near_gets_no_guess(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["zzzzzz"])
    assert "did you mean" not in capsys.readouterr().err


def test_the_bash_script_completes_commands_flags_and_choices_from_the_parser() -> None:
    script = bash_script(build_parser())

    def complete(*words: str) -> list[str]:
        cword = len(words) + 1
        program = (
            f"{script}\nCOMP_WORDS=(gpu-guard {' '.join(repr(w) for w in words)} '');"
            f'COMP_CWORD={cword}; _gpu_guard; printf "%s\\n" "${{COMPREPLY[@]}}"'
        )
        done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert {"audit", "inventory", "completion", "--color"} <= set(complete())
    assert complete("audit", "-o") == [
        "table",
        "json",
        "yaml",
        "policyreport",
        "openreports",
        "markdown",
        "text",
    ]
    assert "--what-if" in complete("audit") and "--what-if" not in complete("inventory")
    assert complete("--color") == ["auto", "always", "never"]
    assert complete("audit", "--state") == []  # bash's -o default: file names


def test_the_zsh_script_is_generated_from_the_parser_and_parses_in_zsh() -> None:
    script = zsh_script(build_parser())
    assert script.startswith("#compdef gpu-guard\n")
    for command in ("audit", "inventory", "completion", "policies"):
        assert f"'{command}:" in script and f"            {command})" in script
    assert "'(-o --output)'{-o,--output}'[" in script
    assert ":value:(table json yaml policyreport openreports markdown text)'" in script
    zsh = shutil.which("zsh")
    if zsh is not None:  # the syntax, where zsh is installed
        done = subprocess.run([zsh, "-n"], input=script, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("choice", "tty", "no_color", "colour"),
    [
        ("auto", True, None, True),
        ("auto", True, "1", False),
        ("auto", True, "", True),
        ("auto", False, None, False),
        ("always", False, "1", True),
        ("never", True, None, False),
    ],
    ids=[
        "auto on a terminal",
        "auto with NO_COLOR",
        "auto with NO_COLOR empty (unset, by no-color.org)",
        "auto into a pipe",
        "always wins over NO_COLOR",
        "never",
    ],
)
def test_colour_follows_the_flag_then_no_color_then_the_terminal(
    choice: str, tty: bool, no_color: str | None, colour: bool
) -> None:
    class Stream(io.StringIO):
        def isatty(self) -> bool:
            return tty

    environ = {} if no_color is None else {"NO_COLOR": no_color}
    assert color_wanted(choice, Stream(), environ) is colour


@pytest.mark.parametrize("where", ["before", "after"])
def test_color_always_colours_the_audit_table_given_before_or_after_the_command(
    capsys: pytest.CaptureFixture[str], where: str
) -> None:
    flag = ["--color", "always"]
    argv = [*flag, "audit"] if where == "before" else ["audit", *flag]
    code, out, _ = run(capsys, *argv, "--state", STATE, "--now", NOW)
    assert code == 1 and "\x1b[" in out
    code, out, _ = run(
        capsys, "--color", "always", "audit", "--color", "never", "--state", STATE, "--now", NOW
    )
    assert "\x1b[" not in out


def test_one_finding_is_singular_in_every_summary() -> None:
    report = run_audit(Engine(), load_state([STATE]), parse_now(NOW))
    one = dataclasses.replace(report, findings=report.findings[:1])
    assert ": 1 finding (" in summary_line(one)
    assert "\n1 finding: " in render_markdown(one)
    assert f": {len(report.findings)} findings (" in summary_line(report)


def test_snapshot_counts_one_object_in_the_singular() -> None:
    assert wrote(1, "x.json") == "wrote 1 object to x.json"
    assert wrote(2, "x.json") == "wrote 2 objects to x.json"


def test_policies_prints_one_entry_or_all_as_json_and_suggests_for_an_unknown_id(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "policies", "cordon-sole-provider")
    assert code == 0 and out.startswith("## `cordon-sole-provider`\n") and "\n## " not in out
    code, out, _ = run(capsys, "policies", "-o", "json")
    entries = json.loads(out)
    assert [e["id"] for e in entries] == entry_ids()
    assert {e["type"] for e in entries} == {"policy", "diagnosis", "mutation"}
    code, out, _ = run(capsys, "policies", "sole-provider", "-o", "json")
    assert json.loads(out)["type"] == "diagnosis"
    code, out, err = run(capsys, "policies", "cordon-sole-provdier")
    assert (code, out) == (2, "")
    assert err == (
        "gpu-guard: no policy, diagnosis or mutation 'cordon-sole-provdier' (did you mean "
        "'cordon-sole-provider' or 'sole-provider'?); gpu-guard policies lists them\n"
    )

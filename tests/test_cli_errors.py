"""Errors a person can act on (issue 40): a refusing or unreachable API server, a bad
kubeconfig or context, an expired token, a 403. Each is one line on stderr naming the server,
the file or the verb and what to do, exit 2, never a library's class name or a trace."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.kubeapi import KubeApiDouble
from tests.test_cli_live import closed_port, dead_kubeconfig, run

TOKEN = "kubeapi-double-token"
LIBRARY_WORDS = re.compile(r"Traceback|Error\b|Exception|\w+Error:|ConfigException|  in \"")


@dataclass(frozen=True)
class Case:
    """A broken setup: what it does to the double and the kubeconfig, and what the line says."""

    name: str
    arrange: Callable[[KubeApiDouble, Path], list[str]]
    """Breaks something; returns the arguments after the command (kubeconfig, context)."""
    says: Callable[[KubeApiDouble, Path], list[str]]
    """Parts the line must hold: the server, file or verb, and the step to take."""


def _kubeconfig(api: KubeApiDouble, tmp: Path) -> list[str]:
    return ["--kubeconfig", str(api.kubeconfig(tmp / "kubeconfig"))]


def _refusing(api: KubeApiDouble, tmp: Path) -> list[str]:
    return ["--kubeconfig", dead_kubeconfig(tmp / "dead", closed_port())]


def _malformed(api: KubeApiDouble, tmp: Path) -> list[str]:
    (tmp / "kubeconfig").write_text("clusters: [broken\n")
    return ["--kubeconfig", str(tmp / "kubeconfig")]


def _unknown_context(api: KubeApiDouble, tmp: Path) -> list[str]:
    return [*_kubeconfig(api, tmp), "--context", "prod"]


def _no_current_context(api: KubeApiDouble, tmp: Path) -> list[str]:
    config = api.kubeconfig_dict()
    del config["current-context"]
    (tmp / "kubeconfig").write_text(yaml.safe_dump(config))
    return ["--kubeconfig", str(tmp / "kubeconfig")]


def _expired(api: KubeApiDouble, tmp: Path) -> list[str]:
    api.expire(TOKEN)
    return _kubeconfig(api, tmp)


def _forbidden(api: KubeApiDouble, tmp: Path) -> list[str]:
    api.forbid(TOKEN, "alice", ["list"])
    return _kubeconfig(api, tmp)


CASES = [
    Case(
        "a refusing API server",
        _refusing,
        lambda api, tmp: [
            "cannot reach the API server at http://127.0.0.1:",
            "connection refused",
            "kubectl config current-context",
            "--context",
        ],
    ),
    Case(
        "a kubeconfig that is not YAML",
        _malformed,
        lambda api, tmp: [
            f"from {tmp / 'kubeconfig'}",
            "not valid YAML at line 2, column 1",
            "fix the file",
        ],
    ),
    Case(
        "a context the kubeconfig lacks",
        _unknown_context,
        lambda api, tmp: [
            f"from {tmp / 'kubeconfig'}",
            'no context "prod"',
            "it has: double",
            "kubectl config get-contexts",
        ],
    ),
    Case(
        "a kubeconfig without a current context",
        _no_current_context,
        lambda api, tmp: [f"from {tmp / 'kubeconfig'}", "no current-context", "--context NAME"],
    ),
    Case(
        "an expired token",
        _expired,
        lambda api, tmp: [
            f"the API server at {api.url}",
            "401 Unauthorized",
            "expired",
            "log in again",
        ],
    ),
    Case(
        "a user RBAC forbids to list",
        _forbidden,
        lambda api, tmp: [
            f"the API server at {api.url}",
            "403 Forbidden",
            'User "alice" cannot list',
            "kubectl auth can-i list ",
        ],
    ),
]


@pytest.mark.parametrize("command", [["audit"], ["snapshot", "-o", "-"]], ids=["audit", "snapshot"])
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
async def test_a_broken_cluster_setup_is_one_line_that_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: Case, command: list[str]
) -> None:
    async with KubeApiDouble() as api:
        argv = case.arrange(api, tmp_path)
        code, out, err = await run(capsys, *command, *argv)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("gpu-guard: "), err
    assert LIBRARY_WORDS.search(err) is None, err
    for part in case.says(api, tmp_path):
        assert part in err, (part, err)


async def test_certs_apply_against_an_expired_token_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with KubeApiDouble() as api:
        code, _, err = await run(capsys, "certs", "--apply", *_expired(api, tmp_path))
    assert code == 2 and err.count("\n") == 1, err
    assert f"the API server at {api.url} refused the credentials (401 Unauthorized)" in err
    assert LIBRARY_WORDS.search(err) is None, err

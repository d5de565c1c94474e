"""Mutation scores of the admission rules and the diagnoses (``make mutate``; issue 25).

A test suite that passes whatever a rule does protects nothing. For each module of
``policies/rules/`` (and of ``policies/diagnoses/``) this runs mutmut with only that module
mutated and only that module's own tests as the test command: the ``tests/test_policy_*.py``
file that imports the rule and the rule's samples in ``tests/test_policy_samples.py`` (for a
diagnosis, ``tests/test_diagnosis*.py``), never the behaviour replay, which would kill every
mutant by snapshot and say nothing about which test reads what. It writes the score per module
and the runtime into the generated table of ``docs/mutation-scores.md`` (the hand-written part
around it, the equivalent mutants and why, is kept).

Each module runs in its own folder under ``.mutate/`` (gitignored), made afresh: a
``pyproject.toml`` whose ``[tool.mutmut]`` names the module and its tests, and links to
``policies/``, ``tests/`` and the folders the tests read; mutmut copies them into ``mutants/``
there and forks one child per mutant from a process that has imported everything once. One
child at a time and ``nice``: the machine is shared. The surviving mutants' diffs go to
``.mutate/<room>.<module>/survivors.diff``.

    python -m tools.mutate                       # every rule and diagnosis module
    python -m tools.mutate --module mig_reconfig # one (MUTATE=mig_reconfig make mutate)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".mutate"
REPORT = ROOT / "docs" / "mutation-scores.md"
ROOMS = ("rules", "diagnoses")
BEGIN = "<!-- scores: written by `make mutate` (tools/mutate.py); edit around it, not in it -->"
END = "<!-- end of scores -->"
HEADER = (
    "| module | mutants | killed | survived | timeout | no tests | score | runtime |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
)
KILLED_STATUSES = frozenset({"killed", "timeout"})
"""A mutant that makes a test hang or fail is caught; a timeout is mutmut's CPU-time limit."""
BAR = 90.0
COPIED = ("tests", "tools", "examples", "manifests", "charts", "docs")
"""What the tests read beside policies/: their helpers and the files they load by path."""


@dataclass(frozen=True)
class Target:
    room: str
    name: str
    tests: tuple[str, ...]
    """pytest arguments selecting the module's own tests."""

    @property
    def path(self) -> str:
        return f"policies/{self.room}/{self.name}.py"

    @property
    def label(self) -> str:
        return f"{self.room}/{self.name}"


@dataclass(frozen=True)
class Score:
    target: Target
    statuses: dict[str, str]
    """mutant name -> mutmut's status (killed, survived, timeout, no tests, ...)."""
    seconds: float

    def count(self, *statuses: str) -> int:
        return sum(1 for s in self.statuses.values() if s in statuses)

    @property
    def percent(self) -> float:
        total = len(self.statuses)
        return 100.0 * self.count(*KILLED_STATUSES) / total if total else 100.0

    def row(self) -> str:
        other = Counter(
            s
            for s in self.statuses.values()
            if s not in {"killed", "survived", "timeout", "no tests"}
        )
        extra = "".join(f" ({n} {s})" for s, n in sorted(other.items()))
        mark = "" if self.target.room != "rules" or self.percent >= BAR else " **below 90 %**"
        return (
            f"| `{self.target.label}` | {len(self.statuses)} | {self.count('killed')} "
            f"| {self.count('survived')} | {self.count('timeout')} | {self.count('no tests')} "
            f"| {self.percent:.1f} %{mark}{extra} | {self.seconds:.0f} s |"
        )


def modules(room: str) -> list[str]:
    return sorted(p.stem for p in (ROOT / "policies" / room).glob("[a-z]*.py"))


def rule_tests(name: str) -> tuple[str, ...]:
    """The rule's own test file (the ``test_policy_*`` that imports it) and its samples' tests."""
    import_line = re.compile(rf"\bpolicies\.rules(\.{name}\b| import .*\b{name}\b)")
    own = sorted(
        f"tests/{p.name}"
        for p in (ROOT / "tests").glob("test_policy_*.py")
        if import_line.search(p.read_text())
    )
    if not own:
        raise SystemExit(f"mutate: no tests/test_policy_*.py imports policies.rules.{name}")
    return (*own, *sample_tests(policy_id(name)))


def policy_id(name: str) -> str:
    source = (ROOT / "policies" / "rules" / f"{name}.py").read_text()
    found = re.search(r'^ID = "([^"]+)"', source, re.M)
    if not found:
        raise SystemExit(f"mutate: policies/rules/{name}.py defines no ID")
    return found.group(1)


def sample_tests(pid: str) -> list[str]:
    """The node ids of tests/test_policy_samples.py's verdict tests on this policy's samples."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # run as a script from elsewhere
    from tests.samples import ALLOWED, all_samples

    module = "tests/test_policy_samples.py"
    allowed = "test_an_allowed_sample_passes_check_without_any_verdict"
    disallowed = "test_a_disallowed_sample_draws_only_its_policys_verdict_at_the_default_action"
    return [
        f"{module}::{allowed if s.expectation == ALLOWED else disallowed}[{s.name}]"
        for s in all_samples()
        if s.policy_id == pid
    ]


def targets(selected: list[str]) -> list[Target]:
    diagnosis_tests = tuple(sorted(f"tests/{p.name}" for p in ROOT.glob("tests/test_diagnosis*")))
    every = [Target("rules", n, rule_tests(n)) for n in modules("rules")] + [
        Target("diagnoses", n, diagnosis_tests) for n in modules("diagnoses")
    ]
    if not selected:
        return every
    chosen = [t for t in every if t.name in selected or t.label in selected or t.room in selected]
    unknown = set(selected) - {t.name for t in chosen} - {t.label for t in chosen} - set(ROOMS)
    if unknown:
        raise SystemExit(f"mutate: no module {', '.join(sorted(unknown))} in policies/{ROOMS}")
    return chosen


def toml_list(items: tuple[str, ...] | list[str]) -> str:
    quoted = ('"' + i.replace("\\", "\\\\").replace('"', '\\"') + '"' for i in items)
    return "[" + ", ".join(quoted) + "]"


def prepare(target: Target) -> Path:
    """A fresh folder whose pyproject.toml tells mutmut the one module and its tests."""
    folder = WORK / target.label.replace("/", ".")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for linked in ("policies", *COPIED):
        (folder / linked).symlink_to(ROOT / linked, target_is_directory=True)
    config = (ROOT / "pyproject.toml").read_text() + (
        "\n[tool.mutmut]\n"
        'source_paths = ["policies"]\n'
        f"also_copy = {toml_list(COPIED)}\n"
        f'only_mutate = ["{target.path}"]\n'
        f"pytest_add_cli_args_test_selection = {toml_list(target.tests)}\n"
        'pytest_add_cli_args = ["-p", "no:cacheprovider"]\n'
        "use_git_change_detection = false\n"
    )
    (folder / "pyproject.toml").write_text(config)
    return folder


class MutmutFailed(Exception):
    """mutmut could not score the module: its clean test run failed, say."""


def mutmut(folder: Path, *args: str, log: Path | None = None) -> str:
    command = [str(Path(sys.executable).with_name("mutmut")), *args]
    if log is not None:
        command = ["nice", "-n", "10", *command]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, check=False)
    if log is not None:
        log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-2000:]
        raise MutmutFailed(f"mutmut {' '.join(args)} failed in {folder} ({log or ''}):\n{tail}")
    return done.stdout


def run(target: Target) -> Score:
    folder = prepare(target)
    start = time.monotonic()
    mutmut(folder, "run", "--max-children", "1", log=folder / "run.log")
    seconds = time.monotonic() - start
    statuses: dict[str, str] = {}
    for line in mutmut(folder, "results", "--all", "true").splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep:
            statuses[name] = status
    survivors = [n for n, s in statuses.items() if s not in KILLED_STATUSES]
    (folder / "survivors.diff").write_text(
        "".join(mutmut(folder, "show", name) + "\n" for name in survivors)
    )
    return Score(target, statuses, seconds)


def write_report(scores: list[Score]) -> None:
    """Replace the rows of the modules just run in the generated table; keep every other row."""
    text = REPORT.read_text() if REPORT.exists() else f"# Mutation scores\n\n{BEGIN}\n{END}\n"
    head, _, rest = text.partition(BEGIN + "\n")
    table, _, tail = rest.partition(END)
    rows = {line.split("`")[1]: line for line in table.splitlines() if line.startswith("| `")}
    rows.update({s.target.label: s.row() for s in scores})
    order = [t.label for t in targets([])]
    body = [*HEADER, *(rows[label] for label in order if label in rows)]
    REPORT.write_text(head + BEGIN + "\n" + "\n".join(body) + "\n" + END + tail)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.mutate", description=__doc__)
    parser.add_argument(
        "--module",
        action="append",
        default=[],
        help="a module's name (mig_reconfig), room/name (diagnoses/facts) or room; repeatable",
    )
    parser.add_argument("--no-report", action="store_true", help="print, do not write the report")
    args = parser.parse_args(argv)
    if shutil.which("nice") is None:
        raise SystemExit("mutate: no nice on PATH")
    scores, failed = [], []
    for target in targets([m for ms in args.module for m in ms.split(",") if m]):
        print(f"== {target.label}: {target.tests[0]} (+{len(target.tests) - 1})", flush=True)
        try:
            score = run(target)
        except MutmutFailed as exc:
            print(f"mutate: {target.label}: {exc}", file=sys.stderr, flush=True)
            failed.append(target.label)
            continue
        print(score.row(), flush=True)
        scores.append(score)
        if not args.no_report:
            write_report([score])
    below = [s.target.label for s in scores if s.target.room == "rules" and s.percent < BAR]
    if below:
        print(f"mutate: below {BAR:.0f} %: {', '.join(below)}", file=sys.stderr)
    if failed:
        print(f"mutate: not scored (mutmut failed): {', '.join(failed)}", file=sys.stderr)
    return 1 if below or failed else 0


if __name__ == "__main__":
    sys.exit(main())

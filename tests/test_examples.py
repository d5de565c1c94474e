"""The example change files say what gpu-guard answers: their comments must agree with it.

Every example cluster: the home lab (device plugin), its DRA form (examples/dra), OpenShift
Virtualization (examples/openshift) and Kata and confidential containers (examples/confidential).
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from tests.test_cli import CHANGES, NOW, STATE, run

DRA = Path(__file__).resolve().parent.parent / "examples" / "dra"
OPENSHIFT = Path(__file__).resolve().parent.parent / "examples" / "openshift"
CONFIDENTIAL = Path(__file__).resolve().parent.parent / "examples" / "confidential"
CHANGE_FILES = sorted(CHANGES.glob("*.yaml"))
#: (change file, the state it is judged against) for every example.
EXAMPLES = (
    [(p, STATE) for p in CHANGE_FILES]
    + [(p, str(DRA / "cluster.yaml")) for p in sorted((DRA / "changes").glob("*.yaml"))]
    + [(p, str(OPENSHIFT / "cluster.yaml")) for p in sorted((OPENSHIFT / "changes").glob("*.yaml"))]
    + [
        (p, str(CONFIDENTIAL / "cluster.yaml"))
        for p in sorted((CONFIDENTIAL / "changes").glob("*.yaml"))
    ]
)


def expected_answer(path: Path) -> str:
    """The comment paragraph that starts "Expected answer from gpu-guard:", on one line."""
    comment = [line[1:].strip() for line in path.read_text().splitlines() if line.startswith("#")]
    start = next(i for i, line in enumerate(comment) if line.startswith("Expected answer"))
    end = next((i for i in range(start, len(comment)) if not comment[i]), len(comment))
    return " ".join(comment[start:end])


def test_every_change_file_states_its_expected_answer() -> None:
    assert len(CHANGE_FILES) == 5
    assert len(EXAMPLES) == 26
    for path, _ in EXAMPLES:
        assert expected_answer(path).startswith("Expected answer from gpu-guard: "), path.name


@pytest.mark.parametrize(
    ("path", "state"), EXAMPLES, ids=[f"{p.parent.parent.name}/{p.name}" for p, _ in EXAMPLES]
)
def test_a_change_files_expected_answer_is_what_check_answers(
    capsys: pytest.CaptureFixture[str], path: Path, state: str
) -> None:
    promise = expected_answer(path)
    code, out, _ = run(capsys, "check", "-f", str(path), "--state", state)
    verdict = promise.removeprefix("Expected answer from gpu-guard: ").split()[0].strip(",.")
    assert (verdict, code) in {("ALLOW", 0), ("DENY", 1)}, (verdict, code)
    assert ("WARNING" in promise) == ("Warning: " in out), out
    said = " ".join(out.split())
    for quoted in re.findall(r'"([^"]+)"', promise):
        assert quoted in said, f"{path.name} promises {quoted!r}; check says: {said}"
    for policy in re.findall(r"\[([a-z][a-z0-9-]+)\]", promise):
        assert f"[{policy}]" in said, f"{path.name} promises [{policy}]; check says: {said}"


def test_the_vms_the_rtx5090_change_says_are_waiting_are_the_ones_the_audit_reports(
    capsys: pytest.CaptureFixture[str],
) -> None:
    promise = expected_answer(CHANGES / "02-new-vm-needs-rtx5090.yaml")
    waiting = re.search(r"the (\d+) VMs already waiting for the 5090 \(([^)]*)\)", promise)
    assert waiting is not None, promise
    names = waiting[2].split(", ")
    assert int(waiting[1]) == len(names)
    _, out, _ = run(capsys, "audit", "--state", STATE, "--now", NOW, "-o", "json")
    stuck = [
        f"{f['resource']['namespace']}/{f['resource']['name']}"
        for f in orjson.loads(out)["findings"]
        if f["policy"] == "passthrough-without-ready-provider"
    ]
    assert sorted(stuck) == sorted(names)

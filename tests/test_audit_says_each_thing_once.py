"""The human-readable audit says each thing once: a summary first, each repair plan printed in
full once (a finding sharing it refers to it), no swap line that reads as an all-clear, and a
header to the whole second. JSON keeps every finding's full plan."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from policies.vocabulary.audit import AuditFinding, Link
from policies.vocabulary.requests import ObjectRef
from policies.vocabulary.text import heading_time
from policies.vocabulary.verdicts import Action, Severity, Verdict
from tests.test_audit_outputs import homelab
from webhook.audit.report import AuditReport
from webhook.render.markdown import render_markdown
from webhook.render.plans import plans
from webhook.render.table import render_table
from webhook.render.text import render_text

RENDERERS: list[tuple[str, Callable[[AuditReport], str]]] = [
    ("table", lambda r: render_table(r, width=400)),
    ("text", render_text),
    ("markdown", render_markdown),
]
#: omen2's recovery order: the trap's first three steps, which its two waiting VMs share.
TRAP_STEPS = 3


def finding(name: str, steps: tuple[str, ...]) -> AuditFinding:
    verdict = Verdict("p", Action.WARN, ObjectRef("", "Node", "", name), "m", remediation=steps)
    return AuditFinding(verdict, Severity.HIGH, Link(f"Node {name}"))


@pytest.mark.parametrize(("name", "render"), RENDERERS, ids=[n for n, _ in RENDERERS])
def test_each_step_of_omen2s_repair_is_printed_once(
    name: str, render: Callable[[AuditReport], str]
) -> None:
    report = homelab()
    out = render(report)
    trap = report.findings[0].verdict
    assert trap.policy == "recovery-trap-vm-passthrough"
    for step in trap.remediation[:TRAP_STEPS]:
        printed = step.replace("_", "\\_") if name == "markdown" else step
        assert out.count(printed) == 1, step
    assert out.count("as in finding 1 (") == 2  # the two VMs waiting for omen2


def test_the_full_plans_stay_in_json_for_machines() -> None:
    report = homelab()
    findings = report.to_json()["findings"]
    trap = findings[0]
    vm = [f for f in findings if f["policy"] == "passthrough-without-ready-provider"][-1]
    assert vm["remediation"][:TRAP_STEPS] == trap["remediation"][:TRAP_STEPS]


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ((("a", "b", "c"), ("a", "b", "x")), [(0, ""), (2, "1-2")]),
        ((("a", "b"), ("a", "x")), [(0, ""), (0, "")]),
        ((("a", "b", "c"), ("x", "y"), ("a", "b", "c", "d")), [(0, ""), (0, ""), (3, "1-3")]),
        ((("a", "b"), ("a", "b", "c"), ("a", "b", "c", "d")), [(0, ""), (2, "1-2"), (2, "1-2")]),
    ],
    ids=[
        "a shared lead of two refers",
        "one shared step is shown again",
        "the plan that shares most is named",
        "only a plan printed in full is referred to",
    ],
)
def test_a_plan_refers_to_the_first_one_printed_in_full_that_shares_its_lead(
    steps: tuple[tuple[str, ...], ...], expected: list[tuple[int, str]]
) -> None:
    shown = plans([finding(f"n{i}", s) for i, s in enumerate(steps)])
    assert [
        (len(s) - len(p.steps), p.shared) for s, p in zip(steps, shown, strict=True)
    ] == expected
    for plan, (drop, _) in zip(shown, expected, strict=True):
        assert [n for n, _ in plan.steps][:1] in ([], [drop + 1])


def test_a_summary_line_per_finding_comes_before_the_details_in_text() -> None:
    lines = render_text(homelab()).splitlines()
    assert lines[1].startswith("  1. DENY  recovery-trap-vm-passthrough  Node omen2")
    assert lines[7].startswith("  7. WARN  passthrough-without-ready-provider  VirtualMachine")
    assert lines[8].startswith("  8. AUDIT sole-provider  Node omen1")
    assert lines[10] == "" and lines[11].startswith("1. DENY  recovery-trap-vm-passthrough")


def test_a_silent_kubelets_zero_swap_is_not_told_as_evidence_against_swap() -> None:
    out = render_text(homelab())
    assert "swap capacity 0 at kubelet's last report" not in out
    assert "a kubelet that cannot start never reports swap" in out


def test_the_header_time_is_whole_seconds() -> None:
    when = datetime(2026, 12, 1, 11, 35, 57, 123456, tzinfo=UTC)
    assert heading_time(when) == "2026-12-01T11:35:57Z"
    report = homelab()
    report = replace(report, now=when)
    for _, render in RENDERERS:
        head = render(report).splitlines()[0]
        assert "2026-12-01T11:35:57Z" in head and ".123456" not in head

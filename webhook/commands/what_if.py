"""``gpu-guard audit --what-if EVENT``: the audit of a hypothetical, against the real one.

The raw objects the state came from (state files, or one read of the cluster) are edited as
copies by ``policies.prediction.what_if``; a second ClusterState is built from the copies and both
are audited by the same Engine at the same ``now``. Findings are matched by their subject (policy,
resource, device): a message that only changes its wording (a duration, a count) is neither new nor
gone. Label events are also judged as the Node UPDATE they would be, against the state the events
before them leave (the real one when none): the deny an admin would get. Nothing is written to the
cluster.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from policies.prediction.what_if import (
    NodeUpdate,
    WhatIfError,
    WhatIfEvent,
    apply_events,
    parse_event,
)
from policies.state.cluster import ClusterState
from policies.vocabulary.audit import AuditFinding
from policies.vocabulary.fields import ObjectError
from policies.vocabulary.requests import JSONObject, ObjectRef
from webhook.admission.changes import proposed_request
from webhook.audit.report import AuditReport, exit_code, run_audit
from webhook.commands.cluster import with_cluster
from webhook.commands.common import (
    EXIT_NOT_JUDGED,
    UsageError,
    follow_configuration,
    print_json,
    print_yaml,
    refuse_now_before,
    state_files_read,
)
from webhook.coverage import StateCoverage
from webhook.engine import Decision, Engine
from webhook.state.feeding import new_state
from webhook.state.files import load_state_objects

Subject = tuple[str, ObjectRef, str]


@dataclass(frozen=True)
class Admission:
    update: NodeUpdate
    decision: Decision


@dataclass(frozen=True)
class WhatIf:
    events: tuple[WhatIfEvent, ...]
    real: AuditReport
    hypothetical: AuditReport
    appears: tuple[AuditFinding, ...]
    disappears: tuple[AuditFinding, ...]
    notes: tuple[str, ...]
    admission: tuple[Admission, ...]

    def to_json(self) -> dict[str, Any]:
        """The hypothetical audit's JSON (the audit contract), and what it adds: the events,
        ``appears``, ``disappears``, the notes and the label events' admission verdicts."""
        now = self.hypothetical.now
        return self.hypothetical.to_json() | {
            "events": [str(e) for e in self.events],
            "appears": [f.to_json(now) for f in self.appears],
            "disappears": [f.to_json(self.real.now) for f in self.disappears],
            "notes": list(self.notes),
            "admission": [
                {
                    "event": str(a.update.event),
                    "allowed": a.decision.allowed,
                    "verdicts": [v.to_json() for v in a.decision.verdicts],
                }
                for a in self.admission
            ],
        }


def parse_events(texts: Sequence[str]) -> tuple[WhatIfEvent, ...]:
    try:
        return tuple(parse_event(text) for text in texts)
    except WhatIfError as exc:
        raise UsageError(str(exc)) from None


def state_of(objects: Sequence[JSONObject], engine: Engine | None = None) -> ClusterState:
    """The objects as a state; with ``engine``, reading its configured GPU Operator version."""
    state = new_state()
    if engine is not None:
        follow_configuration(state, engine)
    for obj in objects:
        try:
            state.upsert(obj)
        except ObjectError as exc:  # only an edit of ours could make a loaded object unusable
            raise UsageError(f"what-if: {exc.path}: {exc.problem}") from None
    return state


def as_change(update: NodeUpdate) -> JSONObject:
    """The label event as a change file would write it: a removal is the label set to null,
    which the merge patch onto the node removes (the whole new node alone would keep it)."""
    event = update.event
    if event.value is not None:
        return update.new
    meta = update.new.get("metadata") or {}
    labels = {**(meta.get("labels") or {}), event.key: None}
    return {**update.new, "metadata": {**meta, "labels": labels}}


def subject(finding: AuditFinding) -> Subject:
    return finding.verdict.subject


def what_if(
    engine: Engine,
    objects: Sequence[JSONObject],
    events: Sequence[WhatIfEvent],
    now: datetime,
    real_state: ClusterState | None = None,
    coverage: StateCoverage | None = None,
) -> WhatIf:
    """Both audits, their difference, and the admission verdicts of the label events; what
    needs a kind ``coverage`` never saw is left out of both and not judged in admission."""
    try:
        outcome = apply_events(objects, events, now)
    except WhatIfError as exc:
        raise UsageError(str(exc)) from None
    real_state = real_state if real_state is not None else state_of(objects, engine)
    follow_configuration(real_state, engine)

    def before_label(update: NodeUpdate) -> ClusterState:
        """The state the label change meets: the events before it applied (a drain first)."""
        earlier = list(events[: events.index(update.event)])
        if not earlier:
            return real_state
        return state_of(apply_events(objects, earlier, now).objects, engine)

    real = run_audit(engine, real_state, now, coverage=coverage)
    hypothetical = run_audit(engine, state_of(outcome.objects, engine), now, coverage=coverage)
    before = {subject(f) for f in real.findings}
    after = {subject(f) for f in hypothetical.findings}
    admission = tuple(
        Admission(
            u,
            engine.evaluate(proposed_request(as_change(u), u.old), before_label(u), coverage),
        )
        for u in outcome.updates
    )
    return WhatIf(
        tuple(events),
        real,
        hypothetical,
        tuple(f for f in hypothetical.findings if subject(f) not in before),
        tuple(f for f in real.findings if subject(f) not in after),
        tuple(outcome.notes),
        admission,
    )


def render_text(result: WhatIf) -> str:
    lines = [*result.real.not_judged(), f"what if: {', '.join(str(e) for e in result.events)}"]
    lines += [f"  note: {note}" for note in result.notes]
    for a in result.admission:
        answer = "allowed" if a.decision.allowed else "denied"
        lines.append(f"  admission of {a.update.event}: {answer}")
        lines += [
            f"    {v.action.label.upper()} [{v.policy}] {v.message}" for v in a.decision.verdicts
        ]
    for title, findings in (("appears", result.appears), ("disappears", result.disappears)):
        lines.append(f"{title}:" if findings else f"{title}: nothing")
        for f in findings:
            v = f.verdict
            lines.append(
                f"  {v.action.label.upper():5} {v.policy}  {v.resource.kind} "
                f"{v.resource}: {v.message}"
            )
    return "\n".join(lines) + "\n"


def exit_code_of(result: WhatIf, added: bool = False) -> int:
    """As audit's, on the hypothetical audit (an admission deny is in the output, not the code:
    the event is what is being asked about, not what exists). With ``added`` (``--exit-on
    added``) only what the events add counts: 1 when a deny-level finding appears or a label
    event's admission would be denied, else 3 when something was not judged for want of a
    kind the state never saw (as ``check``), else 0, whatever the cluster already has wrong:
    "is this maintenance safe?" for a script."""
    if not added:
        return exit_code(result.hypothetical.verdicts)
    if any(not a.decision.allowed for a in result.admission):
        return 1
    if exit_code([f.verdict for f in result.appears]):
        return 1
    unseen = any(v.unseen for a in result.admission for v in a.decision.verdicts)
    return EXIT_NOT_JUDGED if unseen or result.real.unseen else 0


def run(args: argparse.Namespace, engine: Engine, now: datetime) -> int:
    if args.output in ("policyreport", "markdown"):
        raise UsageError(f"--what-if prints text, json or yaml, not {args.output}")
    events = parse_events(args.what_if)
    real_state: ClusterState | None = None
    coverage: StateCoverage | None = None  # a live read lists every kind
    if args.state:
        real_state, items = load_state_objects(args.state)
        state_files_read(real_state, args.state)
        objects: list[JSONObject] = [item.obj for item in items]
        coverage = StateCoverage(real_state.seen_kinds())
    else:
        from webhook.state.snapshot import collect

        objects = with_cluster(
            args, lambda api: collect(api, args.sync_timeout), "cannot read the cluster"
        )
        real_state = state_of(objects)
    refuse_now_before(args, now, real_state)
    result = what_if(engine, objects, events, now, real_state, coverage)
    if args.output in ("json", "yaml"):
        (print_json if args.output == "json" else print_yaml)(result.to_json())
    else:
        sys.stdout.write(render_text(result))
    return exit_code_of(result, args.exit_on == "added")

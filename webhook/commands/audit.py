"""``gpu-guard audit``: every policy over every existing object, rendered for a person or a tool.

The renderers (rich among them) are imported when the command runs: nothing else needs them.
"""

from __future__ import annotations

import argparse
import gc
import sys
from datetime import datetime

from policies.state.cluster import ClusterState
from policies.vocabulary.audit import untracked
from webhook.audit.now import parse_now
from webhook.audit.report import exit_code, run_audit
from webhook.commands.cluster import live_state
from webhook.commands.common import (
    UsageError,
    follow_configuration,
    load_frozen_state,
    print_json,
    print_yaml,
    refuse_now_before,
    state_files_read,
    stdout_shape,
)
from webhook.config import load_config
from webhook.coverage import StateCoverage
from webhook.engine import Engine
from webhook.render.text import render_text
from webhook.usage import color_choice


def now_of(args: argparse.Namespace) -> datetime:
    """``--now``, else the clock; refused in one line when it is no RFC 3339 time."""
    try:
        return parse_now(args.now)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def state_at(args: argparse.Namespace, now: datetime) -> ClusterState:
    """The state (``--state`` files, else the live cluster), refused in one line when unusable
    or when a given ``--now`` comes before it: audit's and inventory's."""
    if args.state:
        state = load_frozen_state(args.state)
        state_files_read(state, args.state)
    else:
        from webhook.render.progress import status  # rich: only for a live read

        with status(sys.stderr, "reading the cluster"):
            state = live_state(args).state
        # As load_frozen_state does for files: the state lives as long as the command, so no
        # collection walks it again (the first full one after a large load took 0.2 s).
        gc.freeze()
    refuse_now_before(args, now, state)
    return state


def run(args: argparse.Namespace) -> int:
    """Each renderer is imported by its own output: ``-o json`` of a state file imports no rich
    (start-up is most of a small audit's time)."""
    now = now_of(args)
    engine = Engine(load_config(args.config, args.device_taint_rules))
    if args.what_if:
        from webhook.commands import what_if

        return what_if.run(args, engine, now)
    state = state_at(args, now)
    follow_configuration(state, engine)
    if args.state:  # no progress bar for files: the audit is over before one could be seen
        coverage = StateCoverage(state.seen_kinds())
        report = run_audit(engine, state, now, untracked, coverage)
    else:
        from webhook.render.progress import progress_bar

        with progress_bar(sys.stderr) as track:
            report = run_audit(engine, state, now, track)
    if args.output == "json":
        print_json(report.to_json())
    elif args.output == "yaml":
        print_yaml(report.to_json())
    elif args.output in ("policyreport", "openreports"):
        from webhook.audit.policyreport import render_policy_reports
        from webhook.defaults import OPENREPORTS, WGPOLICYK8S

        chosen = OPENREPORTS if args.output == "openreports" else WGPOLICYK8S
        sys.stdout.write(render_policy_reports(report, report_format=chosen))
    elif args.output == "markdown":
        from webhook.render.markdown import render_markdown

        sys.stdout.write(render_markdown(report))
    elif args.output == "text":
        sys.stdout.write(render_text(report))
    else:
        from webhook.render.table import render_table

        sys.stdout.write(render_table(report, **stdout_shape(color_choice(args))))
    return exit_code(report.verdicts)

"""``gpu-guard inventory``: one row per GPU node, from state files or the live cluster.

Exit codes as every command's: 0, or 2 on bad input (``webhook.commands.common``); an inventory
judges nothing, so it never exits 1.
"""

from __future__ import annotations

import argparse
import shutil
import sys

from policies.inventory import inventory
from webhook.audit.report import check_now_after_state, parse_now
from webhook.commands.cluster import live_state
from webhook.commands.common import EXIT_OK, UsageError, print_json, state_files_read
from webhook.state.files import load_state


def run(args: argparse.Namespace) -> int:
    from webhook.render.inventory import render_inventory_markdown, render_inventory_table
    from webhook.render.progress import status

    try:
        now = parse_now(args.now)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.state:
        state = load_state(args.state)
        state_files_read(state, args.state)
    else:
        with status(sys.stderr, "reading the cluster"):
            state = live_state(args).state
    if args.now is not None:
        try:
            check_now_after_state(now, state)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    nodes = inventory(state, now)
    if args.output == "json":
        print_json(nodes.to_json())
    elif args.output == "markdown":
        sys.stdout.write(render_inventory_markdown(nodes))
    else:
        tty = sys.stdout.isatty()
        width = max(60, shutil.get_terminal_size((100, 24)).columns) if tty else 140
        encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
        sys.stdout.write(render_inventory_table(nodes, width=width, color=tty, encoding=encoding))
    return EXIT_OK

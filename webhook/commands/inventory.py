"""``gpu-guard inventory``: one row per GPU node, from state files or the live cluster.

Exit codes as every command's: 0, or 2 on bad input (``webhook.commands.common``); an inventory
judges nothing, so it never exits 1.
"""

from __future__ import annotations

import argparse
import shutil
import sys

from policies.inventory import inventory
from webhook.commands.audit import now_of, state_at
from webhook.commands.common import EXIT_OK, print_json


def run(args: argparse.Namespace) -> int:
    now = now_of(args)
    state = state_at(args, now)
    nodes = inventory(state, now)
    if args.output == "json":
        print_json(nodes.to_json())
    elif args.output == "markdown":
        from webhook.render.inventory import render_inventory_markdown

        sys.stdout.write(render_inventory_markdown(nodes))
    else:
        from webhook.render.inventory import render_inventory_table  # rich: the table only

        tty = sys.stdout.isatty()
        width = max(60, shutil.get_terminal_size((100, 24)).columns) if tty else 100
        encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
        sys.stdout.write(render_inventory_table(nodes, width=width, color=tty, encoding=encoding))
    return EXIT_OK

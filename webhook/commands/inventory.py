"""``gpu-guard inventory``: one row per GPU node, from state files or the live cluster.

Exit codes as every command's: 0, or 2 on bad input (``webhook.commands.common``); an inventory
judges nothing, so it never exits 1.
"""

from __future__ import annotations

import argparse
import sys

from policies.prediction.inventory import inventory
from webhook.commands.audit import now_of, state_at
from webhook.commands.common import EXIT_OK, follow_configuration, print_json, stdout_shape
from webhook.config import load_config
from webhook.engine import Engine
from webhook.usage import color_choice


def run(args: argparse.Namespace) -> int:
    now = now_of(args)
    state = state_at(args, now)
    follow_configuration(state, Engine(load_config(args.config, args.device_taint_rules)))
    nodes = inventory(state, now)
    if args.output == "json":
        print_json(nodes.to_json())
    elif args.output == "markdown":
        from webhook.render.inventory import render_inventory_markdown

        sys.stdout.write(render_inventory_markdown(nodes))
    else:
        from webhook.render.inventory import render_inventory_table  # rich: the table only

        sys.stdout.write(render_inventory_table(nodes, **stdout_shape(color_choice(args))))
    return EXIT_OK

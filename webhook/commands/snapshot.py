"""``gpu-guard snapshot``: the objects the policies read, from the cluster to a state file."""

from __future__ import annotations

import argparse
import sys

from policies.vocabulary.requests import GroupKind
from policies.vocabulary.text import plural
from webhook.commands.cluster import with_cluster
from webhook.commands.common import EXIT_OK


def run(args: argparse.Namespace) -> int:
    from webhook.state.snapshot import collect, write_state_file

    listed: list[GroupKind] = []
    objects = with_cluster(
        args, lambda api: collect(api, args.sync_timeout, listed), "cannot read the cluster"
    )
    write_state_file(objects, args.output, listed)
    if args.output != "-":
        print(wrote(len(objects), args.output), file=sys.stderr)
    return EXIT_OK


def wrote(count: int, path: str) -> str:
    return f"wrote {plural(count, 'object')} to {path}"

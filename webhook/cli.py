"""``gpu-guard``: the command line's arguments, and the dispatch to ``webhook.commands``.

What each command does is in its module under ``webhook/commands/`` (exit codes in
``webhook.commands.common``); none imports kubernetes_asyncio until it reads a cluster. Bad
input is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence

from webhook.command_table import COMMANDS, add_members
from webhook.commands.common import EXIT_BAD_INPUT, UsageError
from webhook.config import ConfigError
from webhook.flags import (
    HelpFormatter,
    add_cluster_args_before_the_command,
    cluster_args_anywhere,
)
from webhook.logs import configure as configure_logging
from webhook.state.files import StateFileError
from webhook.usage import GuardParser, add_color, add_version


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """``webhook.commands.<name>.run``, imported when the command runs: each command imports
    only what it uses (``audit --state`` neither aiohttp nor cryptography), not every other
    command's libraries as well."""

    def run(args: argparse.Namespace) -> int:
        module = importlib.import_module(f"webhook.commands.{name}")
        code: int = module.run(args)
        return code

    return run


PROG = "gpu-guard"
KUBECTL_PLUGIN = "kubectl gpu-guard"
"""The name in usage and errors when run as the kubectl plugin (script ``kubectl-gpu_guard``)."""


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The command line, from ``COMMANDS``."""
    parser = GuardParser(
        prog=prog,
        description="Admission guard for GPU nodes, KubeVirt GPU VMs and the NVIDIA GPU Operator.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="least severe log record written to stderr",
    )
    add_cluster_args_before_the_command(parser)
    add_color(parser, top=True)
    add_version(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command_parser = sub.add_parser(
            command.name,
            help=command.text,
            description=command.text,
            epilog=command.epilog,
            formatter_class=HelpFormatter,
        )
        add_members(command_parser, command.members)
        command_parser.set_defaults(func=_command(command.name))
        if command.takes_parser:
            command_parser.set_defaults(parser=parser)
    return parser


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    configure_logging(getattr(logging, args.log_level), batched=args.command == "serve")
    try:
        code: int = args.func(cluster_args_anywhere(args))
    except (StateFileError, ConfigError, UsageError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    return code


def kubectl_plugin() -> int:
    """The ``kubectl-gpu_guard`` console script: ``kubectl gpu-guard ...`` runs it."""
    return main(prog=KUBECTL_PLUGIN)


if __name__ == "__main__":
    sys.exit(main())

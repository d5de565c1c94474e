"""``gpu-guard completion bash|zsh``: the completion script, generated from the parser."""

from __future__ import annotations

import argparse
import sys

from webhook.commands.common import EXIT_OK
from webhook.completion import script


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(script(args.parser, args.shell))  # the parser that parsed is completed
    return EXIT_OK

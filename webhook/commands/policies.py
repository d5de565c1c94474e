"""``gpu-guard policies``: the policy reference."""

from __future__ import annotations

import argparse
import sys

from policies.reference import reference_text
from webhook.commands.common import EXIT_OK


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(policy_reference())
    return EXIT_OK


def policy_reference() -> str:
    """The policy reference as Markdown: ids, scope, default action and why."""
    return reference_text()

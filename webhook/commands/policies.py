"""``gpu-guard policies [ID] [-o json]``: the policy reference, or one entry of it."""

from __future__ import annotations

import argparse
import sys

from policies.reference import entry_ids, entry_text, reference_entries, reference_text
from webhook.commands.common import EXIT_OK, UsageError, print_json
from webhook.usage import unknown


def run(args: argparse.Namespace) -> int:
    wanted = getattr(args, "id", None)
    if wanted is not None and wanted not in entry_ids():
        raise UsageError(
            unknown("policy, diagnosis or mutation", wanted, entry_ids(), "gpu-guard policies")
        )
    if getattr(args, "output", "markdown") == "json":
        entries = reference_entries()
        print_json(entries if wanted is None else next(e for e in entries if e["id"] == wanted))
    elif wanted is not None:
        sys.stdout.write(f"{entry_text(wanted)}\n")
    else:
        sys.stdout.write(policy_reference())
    return EXIT_OK


def policy_reference() -> str:
    """The policy reference as Markdown: ids, scope, default action and why (without the note
    on how docs/policies.md is generated, which is for its maintainers)."""
    return reference_text(generated_note=False)

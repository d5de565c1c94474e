"""What every command shares: its exit codes, the one-line usage error, JSON on stdout.

Exit codes: 0 allowed/clean, 1 denied/deny-level findings, 2 bad input (a file, a field or a
flag, named in one line on stderr, never a traceback).
"""

from __future__ import annotations

import sys
from typing import Any

import orjson

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2


class UsageError(Exception):
    """A flag with a value we cannot use. Not a ValueError: the handlers that turn a cluster's
    ValueErrors into "cannot reach the cluster" must let it through as it is."""


def print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")

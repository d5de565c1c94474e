"""Live-mode settings the command line shows as defaults.

Kept apart from ``webhook.state.live`` so that building the argument parser, and every ``--state``
command, does not import kubernetes_asyncio (about 0.5 s and 60 MiB) only to read a number.
"""

from __future__ import annotations

#: A kind whose watch has been broken longer than this (seconds) cannot deny.
DEFAULT_STALE_AFTER = 30.0

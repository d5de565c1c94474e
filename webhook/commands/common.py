"""What every command shares: its exit codes, the one-line usage error, JSON on stdout.

Exit codes: 0 allowed/clean, 1 denied/deny-level findings, 2 bad input (a file, a field or a
flag, named in one line on stderr, never a traceback), 3 nothing denied but not judged for want
of a kind the state never saw (``check``, ``audit --what-if --exit-on added``).
"""

from __future__ import annotations

import argparse
import gc
import shutil
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypedDict

import orjson

from policies.state.cluster import ClusterState
from webhook.engine import Engine
from webhook.state.files import ignored_kinds, load_state, refuse_without_nodes
from webhook.usage import color_wanted

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT, EXIT_NOT_JUDGED = 0, 1, 2, 3


class UsageError(Exception):
    """A flag with a value we cannot use. Not a ValueError: the handlers that turn a cluster's
    ValueErrors into "cannot reach the cluster" must let it through as it is."""


def print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


def print_yaml(data: Any) -> None:
    """``-o yaml``: the JSON document as YAML, keys in the order the JSON has them."""
    import yaml

    sys.stdout.write(yaml.safe_dump(data, sort_keys=False, width=100))


class TableShape(TypedDict):
    """The keyword arguments every ``-o table`` renderer takes."""

    width: int
    color: bool
    encoding: str


def stdout_shape(color: str = "auto") -> TableShape:
    """How a table fits stdout: the terminal's width (at least 60), 100 columns into a pipe or
    file; colour as ``--color`` says (``auto``: on a terminal unless ``NO_COLOR``); the encoding
    it writes in."""
    tty = sys.stdout.isatty()
    width = max(60, shutil.get_terminal_size((100, 24)).columns) if tty else 100
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    return TableShape(width=width, color=color_wanted(color, sys.stdout), encoding=encoding)


def load_frozen_state(paths: Sequence[str]) -> ClusterState:
    """``load_state`` with the collector off, the state then frozen (``gc.freeze``), as
    ``LiveState`` does once synced. Only for a state kept for the process's life: the state
    holds reference cycles, so a frozen one dropped is never freed.

    Loading makes no cyclic garbage (``gc.collect()`` after it finds none), yet the young
    collections it triggers took 7% of loading the large bench state; and left unfrozen, the
    state was walked by every later full collection, 0.1 s each in the middle of a request (the
    server's p99 at saturation was 140 ms against 7 ms: bench/RESULTS.md, issue 17)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        state = load_state(paths)
    finally:
        if enabled:
            gc.enable()
    gc.freeze()
    return state


def state_files_read(
    state: ClusterState, paths: Sequence[str], announce: bool = True
) -> str | None:
    """Refuses a state read from files that holds no Node (``StateFileError``); names the kinds
    no policy reads once on stderr (unless ``announce`` is off), and returns that line."""
    refuse_without_nodes(state, paths)
    ignored = ignored_kinds(state)
    if ignored is not None and announce:
        print(f"gpu-guard: {ignored}", file=sys.stderr)
    return ignored


def refuse_now_before(args: argparse.Namespace, now: datetime, state: ClusterState) -> None:
    """A ``--now`` given before the state's own timestamps is refused in one line."""
    from webhook.audit.now import check_now_after_state  # only audit and what-if ask

    if args.now is not None:
        try:
            check_now_after_state(now, state)
        except ValueError as exc:
            raise UsageError(str(exc)) from None


def follow_configuration(state: ClusterState, engine: Engine) -> None:
    """What of the configuration the policies read from the state: the GPU Operator's version
    (``gpuOperator.version``) and whether DeviceTaintRules act (``dra.deviceTaintRules``), read
    from the engine's configuration as it is now (a reload replaces it)."""
    state.follow_gpu_operator_version(lambda: engine.config.gpu_operator_version)
    state.follow_device_taint_rules(lambda: engine.config.device_taint_rules)

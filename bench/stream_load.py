"""Prototype for ``webhook/state/files.py``: a JSON ``kind: List`` state file loaded item by item.

Before commit 83319c7, ``load_state_objects`` parsed the whole document with ``orjson.loads``
and ``cli.cmd_serve`` kept every raw object: for the ~70 MB large state a 711 MiB peak and
548 MiB RSS that never went back, even with the raw objects freed, the state's strings
scattered over every arena the document filled. Here the ``items`` array is decoded one object
at a time (``json.JSONDecoder.raw_decode`` from an offset), each projected into the
``ClusterState`` and dropped at once, with the cyclic GC paused (no ``await`` inside): the heap
never holds more than the state and one raw object. 83319c7 made ``load_state`` do the same
(plus a per-item identity check); this stays as ``bench/variant_server.py --load stream``.

Anything but a JSON object with an ``items`` list (YAML, a JSON stream, a bare object) and any
decoding problem falls back to ``webhook.state.files.load_state``, which reports errors as today.

    python -m bench.stream_load [FILE] [--verify]
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import time
from collections.abc import Sequence
from pathlib import Path

from policies.objects import ObjectError
from webhook.state.cluster import ClusterState
from webhook.state.files import load_state

_SPACE = re.compile(r"[ \t\n\r]*")


class _NotAList(Exception):
    pass


def _stream_list(text: str, state: ClusterState) -> int:
    """Upserts the items of the JSON object ``text`` (a ``*List``); raises _NotAList when the
    document is not one, ObjectError for a bad object, ValueError for bad JSON."""
    decoder = json.JSONDecoder()
    i = _SPACE.match(text, 0).end()  # type: ignore[union-attr]
    if text[i : i + 1] != "{":
        raise _NotAList
    i += 1
    seen_items = False
    kind = None
    count = 0
    while True:
        i = _SPACE.match(text, i).end()  # type: ignore[union-attr]
        if text[i] == "}":
            break
        key, i = decoder.raw_decode(text, i)
        i = _SPACE.match(text, i).end()  # type: ignore[union-attr]
        if text[i] != ":":
            raise ValueError(f"expected ':' at {i}")
        i = _SPACE.match(text, i + 1).end()  # type: ignore[union-attr]
        if key == "items" and text[i] == "[":
            seen_items = True
            i += 1
            while True:
                i = _SPACE.match(text, i).end()  # type: ignore[union-attr]
                if text[i] == "]":
                    i += 1
                    break
                obj, i = decoder.raw_decode(text, i)
                if not isinstance(obj, dict):
                    raise _NotAList  # let the full loader name the problem
                state.upsert(obj)
                count += 1
                i = _SPACE.match(text, i).end()  # type: ignore[union-attr]
                if text[i] == ",":
                    i += 1
        else:
            value, i = decoder.raw_decode(text, i)
            if key == "kind":
                kind = value
        i = _SPACE.match(text, i).end()  # type: ignore[union-attr]
        if text[i] == ",":
            i += 1
    if not seen_items or not isinstance(kind, str) or not kind.endswith("List"):
        raise _NotAList
    return count


def stream_load_state(paths: Sequence[str]) -> ClusterState:
    """Like ``webhook.state.files.load_state``, JSON lists streamed; everything else as before."""
    state = ClusterState()
    for path in paths:
        try:
            text = Path(path).read_text()
        except (OSError, UnicodeDecodeError):
            return load_state(paths)
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            _stream_list(text, state)
        except (_NotAList, ObjectError, ValueError, IndexError):
            # Not a List, or a problem the full loader reports with file and object named.
            return load_state(paths)
        finally:
            if was_enabled:
                gc.enable()
    return state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stream_load")
    parser.add_argument("file", nargs="?", default="/tmp/gpu-guard-bench/big.json")
    parser.add_argument("--verify", action="store_true", help="compare with load_state")
    args = parser.parse_args(argv)

    def rss() -> float:
        status = Path("/proc/self/status").read_text()
        return int(status.split("VmRSS:")[1].split()[0]) / 1024

    started = time.perf_counter()
    state = stream_load_state([args.file])
    print(f"streamed: {time.perf_counter() - started:.2f} s, RSS {rss():.0f} MiB, {state.counts()}")
    if args.verify:
        from bench.compact import _comparable

        reference = load_state([args.file])
        same = _comparable(state) == _comparable(reference)
        print("same ClusterState as load_state" if same else "DIFFERENT from load_state")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Per-page costs of the first sync, in isolation: one list page of 2,000 synthetic pods.

Parses the page with orjson with the cyclic GC enabled and paused, projects it with
``policies.objects.project_pod``, frees it, and (when msgspec is importable) decodes it with a
msgspec schema holding only the fields ``project_pod`` reads. No server, no client: what the
LiveState pays per page before any HTTP. msgspec is not a gpu-guard dependency; to include it:

    pip install --target /tmp/msgspec-lib msgspec
    PYTHONPATH=/tmp/msgspec-lib python -m bench.micro_decode
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from types import GenericAlias
from typing import Any

import orjson

from bench.synthetic import DEFAULT_SEED, Layout, pods
from policies.objects import project_pod


def _msgspec_decoder() -> Callable[[bytes], Any] | None:
    """A decoder for a PodList keeping only what project_pod reads; None without msgspec."""
    try:
        import msgspec  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None

    def struct(name: str, *fields: tuple[str, Any]) -> Any:
        """A frozen msgspec Struct whose fields all default to empty (missing in the JSON)."""
        spec = []
        for field_name, kind in fields:
            if getattr(kind, "__origin__", None) in (dict, list):
                default = msgspec.field(default_factory=kind.__origin__)
            elif isinstance(kind, type) and issubclass(kind, msgspec.Struct):
                default = kind()
            elif kind is str:
                default = ""
            else:
                default = None
            spec.append((field_name, kind, default))
        return msgspec.defstruct(name, spec, frozen=True)

    resources = struct("Resources", ("requests", dict[str, Any]), ("limits", dict[str, Any]))
    container = struct("Container", ("resources", resources), ("restartPolicy", str))
    meta = struct(
        "Meta",
        ("name", str),
        ("namespace", str),
        ("labels", dict[str, str]),
        ("deletionTimestamp", str | None),
    )
    spec = struct(
        "Spec",
        ("nodeName", str),
        ("containers", GenericAlias(list, (container,))),
        ("initContainers", GenericAlias(list, (container,))),
    )
    condition = struct(
        "Condition",
        ("type", str),
        ("status", str),
        ("reason", str),
        ("message", str),
        ("lastTransitionTime", str | None),
    )
    reason = struct("Reason", ("reason", str))
    state = struct("State", ("waiting", reason | None), ("terminated", reason | None))
    container_status = struct("ContainerStatus", ("state", state))
    status = struct(
        "Status",
        ("phase", str),
        ("reason", str),
        ("conditions", GenericAlias(list, (condition,))),
        ("containerStatuses", GenericAlias(list, (container_status,))),
    )
    pod = struct("Pod", ("metadata", meta), ("spec", spec), ("status", status))
    pod_list = struct(
        "PodList", ("items", GenericAlias(list, (pod,))), ("metadata", dict[str, Any])
    )

    decoder = msgspec.json.Decoder(pod_list)
    decode: Callable[[bytes], Any] = decoder.decode
    return decode


def _ms(seconds: list[float]) -> str:
    return f"{statistics.median(seconds) * 1000:7.1f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.micro_decode", description=__doc__)
    parser.add_argument("--page", type=int, default=2000, help="pods per page (LIST_PAGE)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)
    layout = Layout.at(max(0.02, args.page / 100_000), args.seed)
    items = [p for _, p in zip(range(args.page), pods(layout), strict=False)]
    page = orjson.dumps({"metadata": {"resourceVersion": "1"}, "items": items})
    del items
    decode = _msgspec_decoder()
    timings: dict[str, list[float]] = {}

    def note(name: str, started: float) -> None:
        timings.setdefault(name, []).append(time.perf_counter() - started)

    for _ in range(args.repeat):
        started = time.perf_counter()
        parsed = orjson.loads(page)
        note("orjson.loads, gc enabled", started)
        del parsed
        gc.collect()
        gc.disable()
        try:
            started = time.perf_counter()
            parsed = orjson.loads(page)
            note("orjson.loads, gc paused", started)
            started = time.perf_counter()
            projected = [project_pod(p) for p in parsed["items"]]
            note("project_pod x page, gc paused", started)
            started = time.perf_counter()
            del parsed
            note("free the parsed page", started)
            del projected
            if decode is not None:
                started = time.perf_counter()
                typed = decode(page)
                note("msgspec typed decode, gc paused", started)
                started = time.perf_counter()
                del typed
                note("free the typed page", started)
        finally:
            gc.enable()
        gc.collect()
    print(f"{args.page} pods, {len(page) / 1e6:.1f} MB page, median of {args.repeat}:")
    for name, seconds in timings.items():
        print(f"  {name:<34} {_ms(seconds)}")
    if decode is None:
        print("  (msgspec not importable: see the module docstring)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

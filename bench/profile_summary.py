"""Where a server's time goes, from py-spy's raw (collapsed-stack) output.

Each sample is put in one category: walking its stack from the innermost frame outwards, the
first frame that matches a category's file decides (a dataclass ``__init__`` called by a policy
counts for the policies, orjson's C time inside ``parse_review`` for the review). Also lists the
functions with the most samples of their own ("self") and the most below them ("inclusive").

    python -m bench.profile_summary RAW [--top 25]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

#: (category, substrings of a frame's "function (file)" text), in the order they are tried.
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "decision log line (logging)",
        (
            "logging/__init__.py",
            "webhook/logs.py",
            "printable (policies/vocabulary/text.py)",
            "subject (webhook/admission/pipeline.py)",
            ".summary (webhook/admission/pipeline.py)",
        ),
    ),
    ("metrics (prometheus_client)", ("prometheus_client/", "webhook/metrics.py")),
    ("policies (policies/*)", ("(policies/",)),
    ("engine (webhook/engine/, config)", ("webhook/engine/", "webhook/config.py")),
    (
        "review in/out (orjson parse + checks, answer)",
        ("webhook/admission/review.py", "webhook/admission/response.py"),
    ),
    ("admit: semaphore + asyncio.timeout", ("asyncio/timeouts.py", "asyncio/locks.py")),
    (
        "server handler (webhook/admission/pipeline.py, server.py)",
        ("webhook/admission/pipeline.py", "webhook/admission/server.py"),
    ),
    ("baseline handler", ("bench/baseline_server.py",)),
    ("TLS (ssl, asyncio sslproto)", ("(ssl.py", "asyncio/sslproto.py")),
    ("socket I/O + epoll (selector transport)", ("asyncio/selector_events.py", "selectors.py")),
    ("aiohttp (HTTP parsing, request/response, middleware)", ("aiohttp/",)),
    ("asyncio event loop", ("asyncio/", "uvloop")),
)
_LINE = re.compile(r":\d+\)")


@dataclass(frozen=True)
class Profile:
    total: int
    categories: Counter[str]
    own: Counter[str]
    inclusive: Counter[str]


def read_raw(path: Path) -> Profile:
    categories: Counter[str] = Counter()
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_LINE.sub(")", f) for f in stack.split(";")]
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
        categories[categorize(frames)] += n
    return Profile(total, categories, own, inclusive)


def categorize(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, needles in CATEGORIES:
            if any(needle in frame for needle in needles):
                return name
    return "other"


def render(profile: Profile, top: int = 25, us_per_request: float | None = None) -> str:
    total = max(profile.total, 1)
    head = "| where | share of samples |"
    rule = "| --- | ---: |"
    if us_per_request is not None:
        head += " µs per request |"
        rule += " ---: |"
    lines = [head, rule]
    for name, n in profile.categories.most_common():
        row = f"| {name} | {n / total:.1%} |"
        if us_per_request is not None:
            row += f" {n / total * us_per_request:,.0f} |"
        lines.append(row)
    lines += [
        "",
        "| policy code, inclusive (policies/*, the state among them) | share |",
        "| --- | ---: |",
    ]
    ours = [(f, n) for f, n in profile.inclusive.most_common() if "(policies/" in f]
    lines += [f"| `{f}` | {n / total:.1%} |" for f, n in ours[:top]]
    lines += ["", "| function (self) | share |", "| --- | ---: |"]
    lines += [f"| `{f}` | {n / total:.1%} |" for f, n in profile.own.most_common(top)]
    lines += ["", "| function (inclusive) | share |", "| --- | ---: |"]
    skip = ("<frozen runpy>", "asyncio/runners.py", "asyncio/base_events.py", "cli.py")
    inclusive = [
        (f, n) for f, n in profile.inclusive.most_common() if not any(s in f for s in skip)
    ]
    lines += [f"| `{f}` | {n / total:.1%} |" for f, n in inclusive[:top]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_summary")
    parser.add_argument("raw", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    profile = read_raw(args.raw)
    print(f"{profile.total} samples")
    print(render(profile, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

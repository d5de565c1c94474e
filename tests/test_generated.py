"""Every file that mirrors the registry is what ``make generate`` writes (tools/generate.py)."""

from __future__ import annotations

from tools import generate


def test_every_generated_file_is_what_make_generate_writes() -> None:
    stale = [str(path.relative_to(generate.ROOT)) for path in generate.stale()]
    assert not stale, f"out of date: {', '.join(stale)}; run make generate"


def test_generating_twice_writes_nothing_the_second_time() -> None:
    for path, rewrite in generate.REWRITES.items():
        once = rewrite(path.read_text())
        assert rewrite(once) == once, f"{path.name}: generation is not stable"

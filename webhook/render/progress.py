"""Progress on a terminal while the audit reads and walks the cluster (rich, stderr only)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from policies.vocabulary.audit import Track, untracked

_T = TypeVar("_T")


@contextmanager
def progress_bar(stream: TextIO, enabled: bool = True) -> Iterator[Track]:
    """A ``Track`` that draws a rich progress bar on ``stream`` (stderr) while the audit walks
    the cluster; a silent pass-through when disabled or when ``stream`` is not a terminal."""
    if not enabled or not stream.isatty():
        yield untracked
        return
    console = Console(file=stream, stderr=True)
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:

        def track(items: Sequence[_T], description: str) -> Iterable[_T]:
            return progress.track(items, total=len(items), description=f"auditing {description}")

        yield track


@contextmanager
def status(stream: TextIO, message: str, enabled: bool = True) -> Iterator[None]:
    """A spinner on ``stream`` for a step without a count (reading the cluster)."""
    if not enabled or not stream.isatty():
        yield
        return
    with Console(file=stream, stderr=True).status(message):
        yield

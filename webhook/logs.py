"""Logging set-up for the command line: one line per record on stderr, cheap enough to write one
line per admission decision.

A decision line through the standard ``logging`` defaults cost about a sixth of a review's CPU
(py-spy, bench/RESULTS.md): a stack walk for the caller, thread and process lookups for every
record, a ``strftime`` per line, and a ``write`` system call per line (stderr is line-buffered).
None of the first three is in the format, so none is done; the server writes its lines in
batches, within ``FLUSH_DELAY`` of the first. Even so, a ``LogRecord`` and the logger's and
handler's per-record steps were ~30 µs of a review (issue 17): ``InfoLine`` writes a line the
caller has formatted straight into the server's handler, the same text the record would give.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import sys
import time
import weakref
from typing import TextIO

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
FLUSH_DELAY = 0.05
"""Seconds an INFO line may wait in the buffer while an event loop runs."""


class SecondCachingFormatter(logging.Formatter):
    """``logging.Formatter``'s default time format, with the seconds part built once a second."""

    def __init__(self, fmt: str = FORMAT) -> None:
        super().__init__(fmt)
        self._second = -1
        self._text = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return self.stamp(record.created, int(record.msecs))

    def stamp(self, created: float, msecs: int) -> str:
        """``formatTime`` of a record created at ``created`` with ``msecs`` milliseconds."""
        second = int(created)
        if second != self._second:
            self._second = second
            self._text = time.strftime(self.default_time_format, self.converter(second))
        return f"{self._text},{msecs:03d}"  # the default_msec_format


class BatchingHandler(logging.StreamHandler[TextIO]):
    """Writes records to a buffered stream and flushes in batches: WARNING and up at once, and
    so is everything outside an event loop; INFO and below within ``FLUSH_DELAY`` on the loop.
    What a crash can lose is the last ``FLUSH_DELAY`` of INFO lines; a fork flushes first, so
    no line is written twice."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._pending = False
        _BATCHING.add(self)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.stream.write(self.format(record) + self.terminator)
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)
            return
        self._written(record.levelno)

    def write_message(self, name: str, levelno: int, message: str) -> None:
        """The line a record of logger ``name`` at ``levelno`` with ``message`` would be, written
        without the record (``InfoLine``); needs this module's formatter and format."""
        created = time.time()
        formatter = self.formatter
        assert isinstance(formatter, SecondCachingFormatter)  # see _direct_handler
        self.acquire()
        try:
            # the milliseconds as LogRecord computes them (gh-89047)
            stamp = formatter.stamp(created, int((created - int(created)) * 1000))
            self.stream.write(
                f"{stamp} {logging.getLevelName(levelno)} {name} {message}{self.terminator}"
            )
            self._written(levelno)
        finally:
            self.release()

    def _written(self, levelno: int) -> None:
        """WARNING and up at once, the rest within ``FLUSH_DELAY`` on a loop, at once off it."""
        if levelno >= logging.WARNING:
            self.flush()
        elif not self._pending:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.flush()
                return
            self._pending = True
            loop.call_later(FLUSH_DELAY, self._flush_batch)

    def _flush_batch(self) -> None:
        self._pending = False
        self.flush()


_BATCHING: weakref.WeakSet[BatchingHandler] = weakref.WeakSet()


def _direct_handler(logger: logging.Logger) -> BatchingHandler | None:
    """The batching handler with this module's format, when it is the one handler a record of
    ``logger`` would reach and nothing could filter that record on the way; else None (a test's
    capture, a second handler or a filter added since ``configure``)."""
    found: logging.Handler | None = None
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        for handler in current.handlers:
            if found is not None:
                return None
            found = handler
        if not current.propagate:
            break
        current = current.parent
    if not isinstance(found, BatchingHandler) or found.filters or found.level > logging.INFO:
        return None
    formatter = found.formatter
    if not isinstance(formatter, SecondCachingFormatter) or formatter._fmt != FORMAT:
        return None
    return found


class InfoLine:
    """A logger's INFO lines, each preformatted by the caller: straight into the server's
    batching handler (same text, same batching as a record through ``logging``), through
    ``logger.info`` when that handler is not the only one the record would reach. The caller
    asks ``enabled()`` first, so that it builds the message only when it will be written."""

    __slots__ = ("logger",)

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger

    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)

    def write(self, message: str) -> None:
        handler = _direct_handler(self.logger)
        if handler is None:
            self.logger.info(message)  # no arguments: "%" in the message is kept as it is
            return
        try:
            handler.write_message(self.logger.name, logging.INFO, message)
        except RecursionError:
            raise
        except Exception:  # as Handler.handleError would: report, and the server goes on
            self.logger.info(message)


def _flush_before_fork() -> None:
    for handler in list(_BATCHING):
        with contextlib.suppress(ValueError, OSError):  # a stream closed since
            handler.flush()


os.register_at_fork(before=_flush_before_fork)


def buffered_stderr() -> TextIO | None:
    """A block-buffered writer on stderr's file descriptor, or None when stderr has none (a
    test's capture)."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(
        io.BufferedWriter(raw, 1 << 16), encoding="utf-8", errors="backslashreplace"
    )


def configure(level: int, *, batched: bool = False) -> None:
    """Root logging to stderr at ``level``, without the per-record work the format never uses
    (the logging HOWTO's "Optimization" settings); ``batched`` (the server) writes in batches."""
    if logging.getLogger().handlers:
        return  # configured already (basicConfig would do nothing either)
    logging._srcfile = None  # no caller lookup: the format has no file, line or function
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    stream = buffered_stderr() if batched else None
    handler = BatchingHandler(stream) if stream is not None else logging.StreamHandler(sys.stderr)
    handler.setFormatter(SecondCachingFormatter())
    logging.basicConfig(level=level, handlers=[handler])

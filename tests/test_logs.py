"""The server's logging: the cheap formatter writes what logging's default one writes, and lines
written in batches are all written, in order, once."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from webhook.logs import FLUSH_DELAY, FORMAT, BatchingHandler, InfoLine, SecondCachingFormatter


def record_at(created: float, message: str = "decision uid=u-1 allowed=True") -> logging.LogRecord:
    record = logging.LogRecord("gpu-guard.server", logging.INFO, "", 0, message, (), None)
    record.created = created
    record.msecs = (created - int(created)) * 1000
    return record


@pytest.mark.parametrize(
    "times",
    [
        [1796040000.0, 1796040000.999],
        [1796040000.5, 1796040001.0, 1796040001.25],
        [1796040059.999, 1796040060.001, 1796039999.0],
    ],
    ids=["within one second", "across a second", "across a minute, then back in time"],
)
def test_the_second_caching_formatter_writes_what_the_standard_formatter_writes(
    times: list[float],
) -> None:
    cheap, standard = SecondCachingFormatter(), logging.Formatter(FORMAT)
    for created in times:
        assert cheap.format(record_at(created)) == standard.format(record_at(created))


@pytest.fixture
def batching(tmp_path: Path) -> Iterator[tuple[logging.Logger, Path]]:
    """A logger writing through a BatchingHandler into a block-buffered file."""
    path = tmp_path / "server.log"
    with path.open("w", buffering=1 << 16) as stream:
        handler = BatchingHandler(stream)
        handler.setFormatter(SecondCachingFormatter())
        logger = logging.getLogger(f"gpu-guard.test-batching.{tmp_path.name}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)
        try:
            yield logger, path
        finally:
            logger.removeHandler(handler)


def lines(path: Path) -> list[str]:
    return [line.split(" ", 3)[3] for line in path.read_text().splitlines()]


def test_outside_an_event_loop_every_line_is_written_at_once(
    batching: tuple[logging.Logger, Path],
) -> None:
    logger, path = batching
    logger.info("decision uid=u-1")
    assert lines(path) == ["gpu-guard.test-batching." + path.parent.name + " decision uid=u-1"]


async def test_on_the_loop_info_lines_are_written_together_within_the_flush_delay(
    batching: tuple[logging.Logger, Path],
) -> None:
    logger, path = batching
    logger.info("decision uid=u-1")
    logger.info("decision uid=u-2")
    assert path.read_text() == ""
    await asyncio.sleep(FLUSH_DELAY * 3)
    assert [line.rsplit(" ", 1)[1] for line in lines(path)] == ["uid=u-1", "uid=u-2"]


async def test_on_the_loop_a_warning_is_written_at_once_with_the_lines_before_it(
    batching: tuple[logging.Logger, Path],
) -> None:
    logger, path = batching
    logger.info("decision uid=u-1")
    logger.warning("override used uid=u-2")
    assert [line.rsplit(" ", 1)[1] for line in lines(path)] == ["uid=u-1", "uid=u-2"]


async def test_a_fork_flushes_first_so_no_line_is_written_twice(
    batching: tuple[logging.Logger, Path],
) -> None:
    logger, path = batching
    logger.info("decision uid=u-1")  # buffered: the loop has not flushed it yet
    pid = os.fork()
    if pid == 0:  # the child flushes whatever it inherited, as the background audit does
        for handler in logger.handlers:
            handler.flush()
        os._exit(0)
    os.waitpid(pid, 0)
    await asyncio.sleep(FLUSH_DELAY * 3)
    assert [line.rsplit(" ", 1)[1] for line in lines(path)] == ["uid=u-1"]


def test_an_info_line_is_written_as_the_record_through_logging_would_be(
    batching: tuple[logging.Logger, Path],
) -> None:
    logger, path = batching
    message = "decision uid=u-1 op=CREATE name=100%-gpu ms=0.25"
    logger.info(message)
    InfoLine(logger).write(message)
    through_logging, direct = path.read_text().splitlines()
    # the same line but for the clock: the time stamp's shape, then every character after it
    assert direct.split(" ", 2)[2] == through_logging.split(" ", 2)[2]
    assert [len(part) for part in direct.split(" ", 2)[:2]] == [10, 12]


async def test_info_lines_are_batched_as_records_are_and_a_warning_flushes_them(
    batching: tuple[logging.Logger, Path],
) -> None:
    logger, path = batching
    lines_of = InfoLine(logger)
    lines_of.write("decision uid=u-1")
    lines_of.write("decision uid=u-2")
    assert path.read_text() == ""
    await asyncio.sleep(FLUSH_DELAY * 3)
    lines_of.write("decision uid=u-3")
    logger.warning("override used uid=u-4")
    assert [line.rsplit(" ", 1)[1] for line in lines(path)] == [f"uid=u-{n}" for n in range(1, 5)]


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record)


async def test_info_lines_go_through_logging_when_another_handler_would_see_the_record(
    batching: tuple[logging.Logger, Path],
) -> None:
    logger, path = batching
    capture = Capture()
    logger.addHandler(capture)
    try:
        InfoLine(logger).write("decision uid=u-1 100%")
    finally:
        logger.removeHandler(capture)
    assert [record.getMessage() for record in capture.seen] == ["decision uid=u-1 100%"]
    await asyncio.sleep(FLUSH_DELAY * 3)
    assert [line.split(" ", 1)[1] for line in lines(path)] == ["decision uid=u-1 100%"]


def test_info_lines_are_not_enabled_below_the_loggers_level(
    batching: tuple[logging.Logger, Path],
) -> None:
    logger, _ = batching
    logger.setLevel(logging.WARNING)
    assert not InfoLine(logger).enabled()

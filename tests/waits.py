"""Waiting in a test for a condition, never for a time: the machine is shared and noisy."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], object], timeout: float = 5.0, every: float = 0.01) -> None:
    """Returns once ``condition()`` is true; TimeoutError past ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(every)

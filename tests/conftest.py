"""Fixtures shared by several test modules."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakeapi import FakeApi, serve_fake_api


@pytest.fixture
async def fake_api(tmp_path: Path) -> AsyncIterator[tuple[FakeApi, str]]:
    async with serve_fake_api(tmp_path) as served:
        yield served

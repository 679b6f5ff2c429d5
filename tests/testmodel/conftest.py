"""Shared by the test model's tests."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The seconds the test model asked `asyncio.sleep` for, in order; every sleep returns at once."""
    seconds_asked: list[float] = []
    real_sleep = asyncio.sleep

    async def recording_sleep(seconds: float, *args: Any) -> Any:
        seconds_asked.append(seconds)
        return await real_sleep(0, *args)

    monkeypatch.setattr(asyncio, "sleep", recording_sleep)
    return seconds_asked

"""Time as an input: every lifecycle decision asks a `Clock`, never `datetime.now()` directly.

`SystemClock` is real time. `ManualClock` is moved by tests (and demos); moving it notifies subscribers,
which the timers use to re-queue the objects whose next transition has come (see `timers`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call `listener` whenever time jumps (never for real time, which only flows)."""


class SystemClock:
    """Real UTC time, truncated to whole seconds like metav1.Time."""

    def now(self) -> datetime:
        return datetime.now(UTC).replace(microsecond=0)

    def subscribe(self, listener: Callable[[], None]) -> None:
        return None


class ManualClock:
    """A clock that only moves when told to."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start")
        self._now = start.astimezone(UTC)
        self._listeners: list[Callable[[], None]] = []

    def now(self) -> datetime:
        return self._now

    def subscribe(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def set(self, when: datetime) -> None:
        """Jump to `when` (forwards or backwards) and tell the subscribers."""
        self._now = when.astimezone(UTC)
        for listener in list(self._listeners):
            listener()

    def advance(self, delta: timedelta) -> None:
        self.set(self._now + delta)

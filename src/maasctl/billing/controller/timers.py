"""Requeue at the next transition, not by polling.

A reconciler that knows when its object changes state next (a PriceBook's effectiveFrom, a successor's
activation) asks `Timers.after(request, when)`: the result requeues the key after exactly that long, and the
timer is remembered so that a jump of a `ManualClock` re-queues every key whose time has come at once.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from maasctl.billing.rules.clock import Clock
from maasctl.runtime import Request, Result, WorkQueue

__all__ = ["Timers", "seconds_until"]

_SECOND = timedelta(seconds=1)


def seconds_until(now: datetime, when: datetime) -> int:
    """Whole seconds from `now` to `when`, rounded up, at least 1."""
    return max(1, -((now - when) // _SECOND))


class Timers:
    """Next-transition times per request, on one clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._due: dict[Request, datetime] = {}

    def after(self, req: Request, when: datetime | None) -> Result:
        """`Result.done()` when nothing is due, else a requeue at `when` (remembered for clock jumps)."""
        if when is None:
            self._due.pop(req, None)
            return Result.done()
        self._due[req] = when
        return Result.requeue_after(seconds_until(self.clock.now(), when))

    def forget(self, req: Request) -> None:
        self._due.pop(req, None)

    def due(self) -> list[Request]:
        now = self.clock.now()
        return sorted(req for req, when in self._due.items() if when <= now)

    def bind(self, queue: WorkQueue[Request]) -> None:
        """Re-queue due keys into `queue` whenever the clock jumps."""

        def fire() -> None:
            for req in self.due():
                queue.add(req)

        self.clock.subscribe(fire)

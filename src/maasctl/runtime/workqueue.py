"""The controller work queue: de-duplicating, never concurrent per key, with backoff and priorities.

Guarantees (client-go semantics):
  * a key added several times before a worker takes it is processed once (``dirty`` set);
  * a key is never handed to two workers at once (``processing`` set); a key added while it is being
    processed is queued again when ``done`` is called, so no change is lost;
  * ``add_rate_limited`` delays a key by 5 ms * 2**failures, capped at 1000 s, until ``forget``;
  * ``add_after`` keeps the earliest pending deadline per key;
  * ``Priority.LOW`` keys (initial list, resync) are handed out only when no normal key is ready;
  * a worker waiting in ``get`` never sleeps through a key that is ready or falls due (see ``get``), and
    ``oldest_due_age`` (metric ``workqueue_oldest_due_seconds``) shows how long the oldest due key has waited.
Time comes from an injectable ``Clock`` so tests can drive backoff without sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Hashable
from dataclasses import dataclass
from enum import IntEnum
from typing import Generic, Protocol, TypeVar

from maasctl.runtime.metrics import Metrics

__all__ = ["Clock", "FakeClock", "MonotonicClock", "Priority", "RateLimiter", "WorkQueue"]

K = TypeVar("K", bound=Hashable)


class Clock(Protocol):
    def now(self) -> float: ...


class MonotonicClock:
    """Real time (``time.monotonic``)."""

    def now(self) -> float:
        return time.monotonic()


class FakeClock:
    """Manually advanced time for tests."""

    def __init__(self, start: float = 0.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class Priority(IntEnum):
    LOW = -100
    NORMAL = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class RateLimiter:
    """Per-item exponential backoff: ``base * 2**failures`` capped at ``cap`` seconds."""

    base: float = 0.005
    cap: float = 1000.0

    def delay(self, failures: int) -> float:
        if failures >= 64:
            return self.cap
        return float(min(self.base * (2**failures), self.cap))


class WorkQueue(Generic[K]):
    """See the module docstring. ``name`` labels the workqueue metrics."""

    def __init__(
        self,
        name: str = "",
        *,
        clock: Clock | None = None,
        rate_limiter: RateLimiter | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.name = name
        self._clock = clock or MonotonicClock()
        self._limiter = rate_limiter or RateLimiter()
        self._lanes: dict[Priority, dict[K, None]] = {Priority.NORMAL: {}, Priority.LOW: {}}
        self._dirty: dict[K, Priority] = {}
        self._processing: dict[K, float] = {}
        self._added_at: dict[K, float] = {}
        self._ready_since: dict[K, float] = {}
        self._waiting: dict[K, tuple[float, Priority]] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._seq = itertools.count()
        self._failures: dict[K, int] = {}
        self._shutting_down = False
        self._wakeup = asyncio.Event()
        self._metrics = metrics
        if metrics is not None:
            labels = (name, name)
            self._m_depth = metrics.workqueue_depth.labels(*labels)
            self._m_adds = metrics.workqueue_adds_total.labels(*labels)
            self._m_queue = metrics.workqueue_queue_duration_seconds.labels(*labels)
            self._m_work = metrics.workqueue_work_duration_seconds.labels(*labels)
            self._m_retries = metrics.workqueue_retries_total.labels(*labels)
            metrics.workqueue_unfinished_work_seconds.labels(*labels).set_function(self._unfinished)
            metrics.workqueue_longest_running_processor_seconds.labels(*labels).set_function(self._longest)
            metrics.workqueue_oldest_due_seconds.labels(*labels).set_function(self.oldest_due_age)

    # -- introspection -----------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys ready to be handed out (not counting delayed or in-process keys)."""
        return len(self._lanes[Priority.NORMAL]) + len(self._lanes[Priority.LOW])

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def is_processing(self, key: K) -> bool:
        return key in self._processing

    def processing_count(self) -> int:
        return len(self._processing)

    def waiting_count(self) -> int:
        return len(self._waiting)

    def num_requeues(self, key: K) -> int:
        return self._failures.get(key, 0)

    def _unfinished(self) -> float:
        now = self._clock.now()
        return sum(now - t for t in self._processing.values())

    def _longest(self) -> float:
        now = self._clock.now()
        return max((now - t for t in self._processing.values()), default=0.0)

    def _depth_changed(self) -> None:
        if self._metrics is not None:
            self._m_depth.set(len(self))

    # -- adding ------------------------------------------------------------------------------------------

    def add(self, key: K, priority: Priority = Priority.NORMAL) -> None:
        """Queue ``key`` now. No-op if it is already queued (a higher priority still upgrades it)."""
        if self._shutting_down:
            return
        queued = self._dirty.get(key)
        if queued is not None:
            if priority > queued:
                self._dirty[key] = priority
                if key not in self._processing:
                    del self._lanes[queued][key]
                    self._lanes[priority][key] = None
            return
        self._dirty[key] = priority
        self._added_at[key] = self._clock.now()
        if self._metrics is not None:
            self._m_adds.inc()
        if key not in self._processing:
            self._lanes[priority][key] = None
            self._ready_since[key] = self._added_at[key]
            self._depth_changed()
            self._wakeup.set()

    def add_after(self, key: K, delay: float, priority: Priority = Priority.NORMAL) -> None:
        """Queue ``key`` after ``delay`` seconds; an earlier pending deadline for the key wins."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key, priority)
            return
        ready = self._clock.now() + delay
        current = self._waiting.get(key)
        if current is not None and current[0] <= ready:
            return
        self._waiting[key] = (ready, priority)
        heapq.heappush(self._heap, (ready, next(self._seq), key))
        self._wakeup.set()

    def add_rate_limited(self, key: K) -> float:
        """Queue ``key`` after its backoff delay and count a failure; returns the delay used."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = self._limiter.delay(failures)
        if self._metrics is not None:
            self._m_retries.inc()
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """Reset ``key``'s failure count (call after a successful reconcile)."""
        self._failures.pop(key, None)

    def _head(self) -> tuple[float, K, Priority] | None:
        """The earliest pending deadline (superseded heap entries are dropped on the way), or None."""
        while self._heap:
            ready, _, key = self._heap[0]
            current = self._waiting.get(key)
            if current is not None and current[0] == ready:
                return ready, key, current[1]
            heapq.heappop(self._heap)  # superseded entry
        return None

    def _promote_ready(self) -> float | None:
        """Move due delayed keys into the queue; return seconds until the next deadline, if any."""
        now = self._clock.now()
        while (head := self._head()) is not None:
            ready, key, priority = head
            if ready > now:
                return ready - now
            heapq.heappop(self._heap)
            del self._waiting[key]
            self.add(key, priority)
        return None

    def _next_deadline(self) -> float | None:
        """Seconds until the earliest pending deadline (<= 0: already due), or None when nothing waits."""
        head = self._head()
        return None if head is None else head[0] - self._clock.now()

    def oldest_due_age(self) -> float:
        """Seconds the longest-waiting due key has waited for a worker: ready keys since they were added (or
        re-queued by ``done``), delayed keys since their deadline passed. 0 when nothing is due. A value that
        keeps growing while workers are idle means the queue stopped handing out work."""
        now = self._clock.now()
        oldest = now
        for lane in self._lanes.values():
            for key in lane:
                oldest = min(oldest, self._ready_since.get(key, now))
        for ready, _ in self._waiting.values():
            oldest = min(oldest, ready)
        return max(0.0, now - oldest)

    # -- taking ------------------------------------------------------------------------------------------

    def get_nowait(self) -> K | None:
        """Take the next ready key (normal lane first) and mark it processing; None if nothing is ready."""
        self._promote_ready()
        for lane in (self._lanes[Priority.NORMAL], self._lanes[Priority.LOW]):
            if lane:
                key = next(iter(lane))
                del lane[key]
                del self._dirty[key]
                now = self._clock.now()
                self._processing[key] = now
                added = self._added_at.pop(key, now)
                self._ready_since.pop(key, None)
                if self._metrics is not None:
                    self._m_queue.observe(max(0.0, now - added))
                self._depth_changed()
                return key
        return None

    async def get(self) -> K | None:
        """Wait for the next key. Returns None once the queue is shut down.

        The wake-up event is cleared *before* looking for work, never after: anything that becomes ready
        later (an add, a done, a delayed key promoted by another caller) sets it again, so a worker cannot
        sleep through work. The sleep is bounded by the next deadline, read without promoting, so a key that
        falls due while the worker decides is found on the next turn."""
        while True:
            if self._shutting_down:
                return None
            self._wakeup.clear()
            key = self.get_nowait()
            if key is not None:
                return key
            wait = self._next_deadline()
            if wait is not None and wait <= 0:
                continue
            try:
                async with asyncio.timeout(wait):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    def done(self, key: K) -> None:
        """Mark ``key`` finished; if it was added meanwhile, queue it again."""
        started = self._processing.pop(key, None)
        if started is not None and self._metrics is not None:
            self._m_work.observe(max(0.0, self._clock.now() - started))
        priority = self._dirty.get(key)
        if priority is not None and not self._shutting_down:
            self._lanes[priority][key] = None
            self._ready_since[key] = self._clock.now()
            self._depth_changed()
            self._wakeup.set()

    def shutdown(self) -> None:
        """Ignore further adds; ``get`` returns None. Keys being processed may still call ``done``."""
        self._shutting_down = True
        self._wakeup.set()

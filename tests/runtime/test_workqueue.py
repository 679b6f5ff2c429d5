"""Work queue: dedup, never concurrent per key, backoff, delays, priorities, shutdown (fake clock)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from maasctl.runtime.metrics import Metrics
from maasctl.runtime.workqueue import FakeClock, Priority, RateLimiter, WorkQueue


def make() -> tuple[WorkQueue[str], FakeClock]:
    clock = FakeClock()
    return WorkQueue("test", clock=clock), clock


def test_key_added_twice_is_processed_once() -> None:
    q, _ = make()
    q.add("a")
    q.add("a")
    assert q.get_nowait() == "a"
    assert q.get_nowait() is None


def test_key_added_while_processing_is_requeued_on_done_not_before() -> None:
    q, _ = make()
    q.add("a")
    assert q.get_nowait() == "a"
    q.add("a")
    assert q.get_nowait() is None  # never handed out while a worker holds it
    q.done("a")
    assert q.get_nowait() == "a"


def test_backoff_doubles_from_5ms_and_caps_at_1000s() -> None:
    q, _ = make()
    delays = [q.add_rate_limited("a") for _ in range(20)]
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert delays[-1] == 1000.0
    assert q.num_requeues("a") == 20
    q.forget("a")
    assert q.num_requeues("a") == 0
    assert RateLimiter().delay(200) == 1000.0


def test_rate_limited_key_waits_for_its_delay() -> None:
    q, clock = make()
    q.add_rate_limited("a")
    q.add_rate_limited("a")  # second failure: 10 ms, but the earlier 5 ms deadline wins
    assert q.get_nowait() is None
    clock.advance(0.004)
    assert q.get_nowait() is None
    clock.advance(0.001)
    assert q.get_nowait() == "a"


def test_add_after_keeps_earliest_deadline() -> None:
    q, clock = make()
    q.add_after("a", 10)
    q.add_after("a", 5)
    q.add_after("a", 20)
    clock.advance(5)
    assert q.get_nowait() == "a"
    q.done("a")
    clock.advance(20)
    assert q.get_nowait() is None  # superseded deadlines do not fire again


def test_add_after_non_positive_is_immediate() -> None:
    q, _ = make()
    q.add_after("a", 0)
    assert q.get_nowait() == "a"


def test_low_priority_never_delays_normal_keys() -> None:
    q, _ = make()
    for i in range(100):
        q.add(f"initial-{i}", Priority.LOW)
    q.add("real-change")
    assert q.get_nowait() == "real-change"
    assert q.get_nowait() == "initial-0"


def test_normal_add_upgrades_a_low_priority_key() -> None:
    q, _ = make()
    q.add("x", Priority.LOW)
    q.add("y", Priority.LOW)
    q.add("y")
    assert q.get_nowait() == "y"
    assert len(q) == 1


def test_shutdown_ignores_adds_and_releases_getters() -> None:
    async def scenario() -> None:
        q: WorkQueue[str] = WorkQueue("t")
        getter = asyncio.create_task(q.get())
        await asyncio.sleep(0)
        q.shutdown()
        assert await asyncio.wait_for(getter, 1) is None
        q.add("a")
        assert len(q) == 0

    asyncio.run(scenario())


async def test_get_waits_for_delayed_key_in_real_time() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    loop = asyncio.get_running_loop()
    start = loop.time()
    q.add_after("a", 0.05)
    assert await asyncio.wait_for(q.get(), 2) == "a"
    assert loop.time() - start >= 0.045


def test_metrics_count_adds_depth_retries_and_durations() -> None:
    clock = FakeClock()
    metrics = Metrics()
    q: WorkQueue[str] = WorkQueue("cm", clock=clock, metrics=metrics)
    q.add("a")
    q.add("a")
    q.add("b")
    reg = metrics.registry
    labels = {"name": "cm", "controller": "cm"}
    assert reg.get_sample_value("workqueue_adds_total", labels) == 2
    assert reg.get_sample_value("workqueue_depth", labels) == 2
    q.get_nowait()
    clock.advance(3)
    assert reg.get_sample_value("workqueue_longest_running_processor_seconds", labels) == 3
    q.done("a")
    q.add_rate_limited("a")
    assert reg.get_sample_value("workqueue_retries_total", labels) == 1
    assert reg.get_sample_value("workqueue_work_duration_seconds_count", labels) == 1
    assert reg.get_sample_value("workqueue_depth", labels) == 1


KEYS = st.sampled_from(["a", "b", "c", "d"])


class QueueMachine(RuleBasedStateMachine):
    """Model-based check of the queue contract against a plain-set model."""

    @initialize()
    def setup(self) -> None:
        self.clock = FakeClock()
        self.q: WorkQueue[str] = WorkQueue("prop", clock=self.clock)
        self.dirty: dict[str, Priority] = {}
        self.processing: set[str] = set()
        self.waiting: dict[str, tuple[float, Priority]] = {}

    def _model_add(self, key: str, prio: Priority) -> None:
        self.dirty[key] = max(prio, self.dirty.get(key, prio))

    @rule(key=KEYS, low=st.booleans())
    def add(self, key: str, low: bool) -> None:
        prio = Priority.LOW if low else Priority.NORMAL
        self.q.add(key, prio)
        self._model_add(key, prio)

    @rule(key=KEYS, delay=st.sampled_from([-1.0, 0.0, 0.5, 1.0, 3.0]))
    def add_after(self, key: str, delay: float) -> None:
        self.q.add_after(key, delay)
        if delay <= 0:
            self._model_add(key, Priority.NORMAL)
            return
        ready = self.clock.now() + delay
        if key not in self.waiting or self.waiting[key][0] > ready:
            self.waiting[key] = (ready, Priority.NORMAL)

    @rule(dt=st.sampled_from([0.25, 1.0, 5.0]))
    def advance(self, dt: float) -> None:
        self.clock.advance(dt)

    @rule()
    def get(self) -> None:
        now = self.clock.now()
        for key, (ready, prio) in sorted(self.waiting.items(), key=lambda kv: kv[1][0]):
            if ready <= now:
                del self.waiting[key]
                self._model_add(key, prio)
        candidates = {k: p for k, p in self.dirty.items() if k not in self.processing}
        got = self.q.get_nowait()
        if not candidates:
            assert got is None
            return
        assert got is not None
        assert got not in self.processing, "a key was handed to two workers"
        assert got in candidates, "a key was handed out that nobody added"
        assert candidates[got] == max(candidates.values()), "a low-priority key jumped ahead"
        del self.dirty[got]
        self.processing.add(got)

    @precondition(lambda self: bool(self.processing))
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.processing)))
        self.q.done(key)
        self.processing.discard(key)

    @invariant()
    def processing_matches(self) -> None:
        assert self.q.processing_count() == len(self.processing)


QueueMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_queue_contract = QueueMachine.TestCase


@pytest.mark.parametrize("failures", [0, 1, 10, 17, 18, 100])
def test_backoff_formula(failures: int) -> None:
    assert RateLimiter().delay(failures) == min(0.005 * 2**failures, 1000.0)


class SteppingClock(FakeClock):
    """Time moves on by ``step`` at every reading, so the queue sees time pass between its own calls."""

    def __init__(self, step: float) -> None:
        super().__init__()
        self.step = step

    def now(self) -> float:
        self.t += self.step
        return self.t


@pytest.mark.parametrize(("step", "delay"), [(1.0, 1.5), (1.0, 2.0), (0.5, 0.75), (0.25, 0.3)])
async def test_a_key_falling_due_while_a_worker_decides_to_wait_is_not_slept_through(step: float,
                                                                                    delay: float) -> None:
    """The lost wake-up: the worker finds nothing ready, the delayed key falls due before it goes to sleep,
    and the only key comes back through ``add_after`` (the rater's single key, ``requeue_after``)."""
    q: WorkQueue[str] = WorkQueue("t", clock=SteppingClock(step))
    q.add_after("rater", delay)
    assert await asyncio.wait_for(q.get(), 1) == "rater"
    q.done("rater")
    q.add_after("rater", delay)  # requeue_after, again
    assert await asyncio.wait_for(q.get(), 1) == "rater"


async def test_a_waiting_worker_is_woken_by_a_key_requeued_by_done() -> None:
    q: WorkQueue[str] = WorkQueue("t", clock=SteppingClock(0.5))
    q.add("a")
    assert q.get_nowait() == "a"
    waiter = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.add("a")  # while processing: not handed out yet
    await asyncio.sleep(0)
    assert not waiter.done()
    q.done("a")
    assert await asyncio.wait_for(waiter, 1) == "a"


def test_oldest_due_age_counts_ready_and_overdue_keys_only() -> None:
    metrics = Metrics()
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue("age", clock=clock, metrics=metrics)
    labels = {"name": "age", "controller": "age"}
    assert metrics.registry.get_sample_value("workqueue_oldest_due_seconds", labels) == 0
    q.add_after("later", 10)
    clock.advance(4)
    assert q.oldest_due_age() == 0  # not due yet
    q.add("now")
    clock.advance(3)
    assert q.oldest_due_age() == 3
    clock.advance(5)  # "later" has been due for 2 s, "now" ready for 8 s
    assert metrics.registry.get_sample_value("workqueue_oldest_due_seconds", labels) == 8
    assert q.get_nowait() == "now"  # ready first; "later" joins the lane behind it when promoted
    assert q.get_nowait() == "later"
    assert q.oldest_due_age() == 0
    q.add("later")  # added while processing: due only once done
    clock.advance(7)
    assert q.oldest_due_age() == 0
    q.done("later")
    clock.advance(1)
    assert q.oldest_due_age() == 1


_SETTLE = 0.006  # real seconds; longer than any fake delay the machine below uses (<= 0.004)


class WorkersMachine(RuleBasedStateMachine):
    """Workers blocked in ``get()`` against a clock that jumps between the queue's own readings.

    After every step the event loop runs long enough for any armed timeout to fire; then no key may be due
    (ready, or past its deadline) while a worker still waits, no key is handed to two workers, and every key
    handed out was owed (added since it was last handed out)."""

    @initialize(step=st.sampled_from([0.0, 0.0005, 0.001, 0.003]))
    def setup(self, step: float) -> None:
        self.loop = asyncio.new_event_loop()
        self.clock = SteppingClock(step)
        self.q: WorkQueue[str] = WorkQueue("workers", clock=self.clock,
                                           rate_limiter=RateLimiter(base=0.001, cap=0.004))
        self.getters: list[asyncio.Task[str | None]] = []
        self.holding: set[str] = set()
        self.dirty: set[str] = set()
        self.delayed: dict[str, float] = {}
        self.closed = False

    def teardown(self) -> None:
        self.q.shutdown()
        self.loop.run_until_complete(asyncio.sleep(0))
        for task in self.getters:
            task.cancel()
        self.loop.run_until_complete(asyncio.sleep(0))
        self.loop.close()

    def _due(self) -> bool:
        now = self.clock.t  # read without stepping
        return len(self.q) > 0 or any(ready <= now for ready, _ in self.q._waiting.values())

    def _collect(self) -> None:
        for task in [t for t in self.getters if t.done()]:
            self.getters.remove(task)
            key = task.result()
            if key is None:
                assert self.closed, "get() returned None before shutdown"
                continue
            assert key not in self.holding, "a key was handed to two workers at once"
            deadline = self.delayed.get(key)
            assert key in self.dirty or deadline is not None, "a key was handed out that was not owed"
            self.dirty.discard(key)
            if deadline is not None and deadline <= self.clock.t:
                del self.delayed[key]
            self.holding.add(key)

    def _settle(self) -> None:
        for _ in range(3):
            self.loop.run_until_complete(asyncio.sleep(_SETTLE))
            self._collect()
            if not self.getters or not self._due():
                return

    @precondition(lambda self: not self.closed)
    @rule()
    def worker_waits(self) -> None:
        if len(self.getters) < 3:
            self.getters.append(self.loop.create_task(self.q.get()))
        self._settle()

    @rule(key=KEYS, low=st.booleans())
    def add(self, key: str, low: bool) -> None:
        self.q.add(key, Priority.LOW if low else Priority.NORMAL)
        if not self.closed:
            self.dirty.add(key)
        self._settle()

    @rule(key=KEYS, delay=st.sampled_from([0.0005, 0.001, 0.003]))
    def add_after(self, key: str, delay: float) -> None:
        before = self.clock.t
        self.q.add_after(key, delay)
        if not self.closed:
            self.delayed[key] = min(self.delayed.get(key, before + delay), self.clock.t + delay)
        self._settle()

    @rule(key=KEYS)
    def add_rate_limited(self, key: str) -> None:
        self.q.add_rate_limited(key)
        if not self.closed:
            self.delayed[key] = min(self.delayed.get(key, float("inf")), self.clock.t + 0.004)
        self._settle()

    @rule(dt=st.sampled_from([0.0005, 0.002, 0.01]))
    def advance(self, dt: float) -> None:
        self.clock.advance(dt)
        self._settle()

    @precondition(lambda self: bool(self.holding))
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.holding)))
        self.holding.discard(key)
        self.q.done(key)
        self._settle()

    @precondition(lambda self: not self.closed)
    @rule()
    def shutdown(self) -> None:
        self.closed = True
        self.q.shutdown()
        self._settle()
        assert not self.getters, "a worker kept waiting after shutdown"

    @invariant()
    def no_worker_sleeps_through_due_work(self) -> None:
        if self.getters and not self.closed:
            assert not self._due(), "a key is due while a worker waits"


WorkersMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_workers_never_sleep_through_due_work = WorkersMachine.TestCase

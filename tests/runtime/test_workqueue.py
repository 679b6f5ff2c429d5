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

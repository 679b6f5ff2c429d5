"""Controller result handling and event mapping, without a cluster (no I/O happens before run())."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.runtime import (
    Cache,
    Client,
    Event,
    EventType,
    GroupVersionKind,
    Metrics,
    OwnerLabels,
    Request,
    Result,
    TerminalError,
    freeze,
)
from maasctl.runtime.controller import Controller, ControllerBuilder
from maasctl.runtime.objects import FrozenObject
from maasctl.runtime.predicates import not_observed
from maasctl.runtime.workqueue import FakeClock, Priority, WorkQueue

PARENT = GroupVersionKind("example.io", "v1", "Parent")
CHILD = GroupVersionKind("", "v1", "ConfigMap")


@pytest.fixture
async def cache() -> AsyncIterator[Cache]:
    api = k8s.ApiClient(k8s.Configuration(host="https://127.0.0.1:1"))
    try:
        yield Cache(Client(api))
    finally:
        await api.close()


def _build(cache: Cache, reconcile: object, metrics: Metrics) -> Controller:
    built: list[Controller] = []
    builder = ControllerBuilder("c", cache=cache, metrics=metrics, register=built.append)
    builder.for_(PARENT).owns(CHILD).owns(CHILD, owner_labels=OwnerLabels(name="owner", namespace="owner-ns"))
    builder.complete(reconcile)  # type: ignore[arg-type]
    return built[0]


async def _run_one(ctl: Controller, req: Request) -> None:
    ctl.queue.add(req)
    got = ctl.queue.get_nowait()
    assert got == req
    try:
        await ctl._process(got)
    finally:
        ctl.queue.done(got)


async def test_error_is_retried_with_backoff_and_terminal_error_is_not(cache: Cache) -> None:
    metrics = Metrics()
    failures = {"boom": RuntimeError("transient"), "fatal": TerminalError("bad spec")}

    async def reconcile(req: Request) -> Result:
        raise failures[req.name]

    ctl = _build(cache, reconcile, metrics)
    ctl.queue = WorkQueue("c", clock=FakeClock())  # a real clock could let the backoff end between the two runs
    await _run_one(ctl, Request("ns", "boom"))
    assert ctl.queue.num_requeues(Request("ns", "boom")) == 1 and ctl.queue.waiting_count() == 1
    await _run_one(ctl, Request("ns", "fatal"))
    assert ctl.queue.num_requeues(Request("ns", "fatal")) == 0 and ctl.queue.waiting_count() == 1
    reg = metrics.registry
    assert reg.get_sample_value("controller_runtime_reconcile_errors_total", {"controller": "c"}) == 2
    assert reg.get_sample_value("controller_runtime_terminal_reconcile_errors_total", {"controller": "c"}) == 1
    assert reg.get_sample_value("controller_runtime_reconcile_total", {"controller": "c", "result": "error"}) == 2


async def test_requeue_after_forgets_failures_and_delays(cache: Cache) -> None:
    metrics = Metrics()

    async def reconcile(req: Request) -> Result:
        return Result.requeue_after(30)

    ctl = _build(cache, reconcile, metrics)
    clock = FakeClock()
    ctl.queue = WorkQueue("c", clock=clock)
    req = Request("ns", "p")
    ctl.queue.add_rate_limited(req)
    clock.advance(1)
    await _run_one(ctl, req)
    assert ctl.queue.num_requeues(req) == 0
    clock.advance(29)
    assert ctl.queue.get_nowait() is None
    clock.advance(1)
    assert ctl.queue.get_nowait() == req
    assert (
        metrics.registry.get_sample_value(
            "controller_runtime_reconcile_total", {"controller": "c", "result": "requeue_after"}
        )
        == 1
    )


async def test_events_map_to_owners_old_and_new(cache: Cache) -> None:
    async def reconcile(req: Request) -> Result:
        return Result.done()

    ctl = _build(cache, reconcile, Metrics())
    child_inf = cache.informer(CHILD)
    ref = {"apiVersion": "example.io/v1", "kind": "Parent", "name": "p1", "uid": "u", "controller": True}
    old = freeze({"metadata": {"name": "c", "namespace": "ns", "ownerReferences": [ref]}})
    new = freeze({"metadata": {"name": "c", "namespace": "ns", "labels": {"owner": "p2", "owner-ns": "other"}}})
    child_inf._emit(Event(EventType.UPDATED, new, old))
    got = {ctl.queue.get_nowait(), ctl.queue.get_nowait()}
    assert got == {Request("ns", "p1"), Request("other", "p2")}

    not_controller = freeze(
        {"metadata": {"name": "d", "namespace": "ns", "ownerReferences": [{**ref, "controller": False}]}}
    )
    child_inf._emit(Event(EventType.ADDED, not_controller))
    assert ctl.queue.get_nowait() is None

    parent = freeze({"metadata": {"name": "p", "namespace": "ns"}})
    cache.informer(PARENT)._emit(Event(EventType.ADDED, parent, low_priority=True))
    cache.informer(PARENT)._emit(Event(EventType.ADDED, freeze({"metadata": {"name": "q", "namespace": "ns"}})))
    assert ctl.queue.get_nowait() == Request("ns", "q")  # the initial-list event waits behind real changes
    assert ctl.queue.get_nowait() == Request("ns", "p")
    assert Priority.LOW < Priority.NORMAL


async def test_a_settling_watch_turns_a_burst_of_events_into_one_request(cache: Cache) -> None:
    """Events of a `settle` watch enqueue their request after the delay; those within it join the pending one,
    and one after it was taken starts a new delay. The primary kind's events are not delayed."""
    async def reconcile(req: Request) -> Result:
        return Result.done()

    built: list[Controller] = []
    ControllerBuilder("c", cache=cache, metrics=Metrics(), register=built.append).for_(PARENT).watches(
        CHILD, map_to=lambda obj: [Request("ns", "summary")], settle=2.0).complete(reconcile)
    ctl = built[0]
    clock = FakeClock()
    ctl.queue = WorkQueue("c", clock=clock)
    child = cache.informer(CHILD)
    for i in range(10):  # ten inputs change within 1.8 s
        child._emit(Event(EventType.ADDED, freeze({"metadata": {"name": f"m{i}", "namespace": "ns"}})))
        assert ctl.queue.get_nowait() is None
        clock.advance(0.2)
    clock.advance(0.2)  # 2 s after the first
    assert ctl.queue.get_nowait() == Request("ns", "summary")
    ctl.queue.done(Request("ns", "summary"))
    assert ctl.queue.get_nowait() is None and ctl.queue.waiting_count() == 0  # one reconcile for the burst
    child._emit(Event(EventType.ADDED, freeze({"metadata": {"name": "late", "namespace": "ns"}})))
    clock.advance(1.9)
    assert ctl.queue.get_nowait() is None
    clock.advance(0.1)
    assert ctl.queue.get_nowait() == Request("ns", "summary")
    ctl.queue.done(Request("ns", "summary"))
    cache.informer(PARENT)._emit(Event(EventType.ADDED, freeze({"metadata": {"name": "p", "namespace": "ns"}})))
    assert ctl.queue.get_nowait() == Request("ns", "p")  # no delay for the object itself
    with pytest.raises(ValueError):
        ControllerBuilder("x", cache=cache, metrics=Metrics(), register=built.append).for_(PARENT).watches(
            CHILD, map_to=lambda obj: [], settle=-1)


async def test_an_unmapped_initial_list_waits_for_the_primary_and_later_events_are_mapped(cache: Cache) -> None:
    """`map_initial_list=False`: before the controller starts, the initial-list (low-priority) events of that
    kind map nothing (the primary's own initial list names every object); the same kind's real changes do, and
    after the start its low-priority events (resync, a re-list) do too. A watch without the flag still maps its
    initial list."""
    async def reconcile(req: Request) -> Result:
        return Result.done()

    built: list[Controller] = []
    other = GroupVersionKind("", "v1", "Secret")
    ControllerBuilder("c", cache=cache, metrics=Metrics(), register=built.append).for_(PARENT).watches(
        CHILD, map_to=lambda obj: [Request("ns", "from-child")], map_initial_list=False).watches(
        other, map_to=lambda obj: [Request("ns", "from-secret")]).complete(reconcile)
    ctl = built[0]
    obj = freeze({"metadata": {"name": "x", "namespace": "ns"}})
    cache.informer(CHILD)._emit(Event(EventType.ADDED, obj, low_priority=True))
    assert ctl.queue.get_nowait() is None
    cache.informer(other)._emit(Event(EventType.ADDED, obj, low_priority=True))
    assert ctl.queue.get_nowait() == Request("ns", "from-secret")
    cache.informer(CHILD)._emit(Event(EventType.UPDATED, obj, obj))
    assert ctl.queue.get_nowait() == Request("ns", "from-child")
    ctl.started = True
    cache.informer(CHILD)._emit(Event(EventType.UPDATED, obj, obj, low_priority=True))
    assert ctl.queue.get_nowait() is None  # still being processed: the queue holds it back (dirty)
    ctl.queue.done(Request("ns", "from-child"))
    assert ctl.queue.get_nowait() == Request("ns", "from-child")


def test_builder_rejects_incomplete_wiring() -> None:
    b = ControllerBuilder("x", cache=None, metrics=Metrics(), register=lambda c: None)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        b.owns(CHILD)
    with pytest.raises(ValueError):
        b.complete(lambda req: None)  # type: ignore[arg-type,return-value]


async def test_unfinished_objects_of_the_initial_list_come_before_the_others(cache: Cache) -> None:
    """`for_(unfinished=not_observed)`: a listed object whose status does not report its generation (created or
    changed while the controller was down, or being deleted) is queued at normal priority, ahead of the listed
    objects whose work is done; live changes keep their normal priority."""
    async def reconcile(req: Request) -> Result:
        return Result.done()

    built: list[Controller] = []
    ControllerBuilder("c", cache=cache, metrics=Metrics(), register=built.append).for_(
        PARENT, unfinished=not_observed).complete(reconcile)
    ctl = built[0]

    def parent(name: str, generation: int, observed: int | None, **meta: object) -> Event:
        status = {} if observed is None else {"status": {"observedGeneration": observed}}
        obj = {"metadata": {"name": name, "namespace": "ns", "generation": generation, **meta}, **status}
        return Event(EventType.ADDED, freeze(obj), low_priority=True)

    informer = cache.informer(PARENT)
    for event in (parent("done", 2, 2), parent("changed", 3, 2), parent("done-too", 1, 1), parent("new", 1, None),
                  parent("deleting", 2, 2, deletionTimestamp="2026-12-07T00:00:00Z")):
        informer._emit(event)
    order = [ctl.queue.get_nowait() for _ in range(5)]
    assert [r.name for r in order if r is not None] == ["changed", "new", "deleting", "done", "done-too"]


def test_not_observed_reads_the_status_generation_and_deletion() -> None:
    def obj(generation: int, status: object = None, deleting: bool = False) -> FrozenObject:
        meta: dict[str, object] = {"name": "x", "generation": generation}
        if deleting:
            meta["deletionTimestamp"] = "2026-12-07T00:00:00Z"
        frozen: FrozenObject = freeze({"metadata": meta, **({} if status is None else {"status": status})})
        return frozen

    assert not not_observed(obj(4, {"observedGeneration": 4}))
    assert not_observed(obj(5, {"observedGeneration": 4}))
    assert not_observed(obj(1))
    assert not_observed(obj(1, {"phase": "Active"}))
    assert not_observed(obj(1, "not a mapping"))
    assert not_observed(obj(4, {"observedGeneration": 4}, deleting=True))


async def test_a_worker_lets_the_event_loop_run_between_reconciles(cache: Cache) -> None:
    """Reconciles that write nothing await nothing: a worker draining a backlog of them must still yield, or a
    restart's initial list starves every other task of the process (live changes' writes, lease renewal)."""
    ticks = 0
    seen: list[int] = []

    async def reconcile(req: Request) -> Result:
        seen.append(ticks)
        return Result.done()

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    built: list[Controller] = []
    ControllerBuilder("c", cache=cache, metrics=Metrics(), register=built.append).for_(PARENT).complete(reconcile)
    ctl = built[0]
    for i in range(20):
        ctl.queue.add(Request("ns", f"r{i}"))
    tick = asyncio.create_task(ticker())
    worker = asyncio.create_task(ctl._worker())
    try:
        for _ in range(1000):
            if len(seen) == 20:
                break
            await asyncio.sleep(0)
        ctl.shutdown()
        await asyncio.wait_for(worker, 5)
    finally:
        tick.cancel()
    assert len(seen) == 20 and len(set(seen)) == 20  # the ticker ran between every two reconciles

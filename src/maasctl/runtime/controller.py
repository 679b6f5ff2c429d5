"""Controllers: events in, requests through a work queue, a level-based reconcile function out.

A controller is built with ``ControllerBuilder``::

    (manager.controller("widgets")
        .for_(WIDGET, predicates=[generation_changed])
        .owns(CONFIG_MAP)                                  # via the controller ownerReference
        .owns(POLICY, owner_labels=OwnerLabels(...))       # cross-namespace children, via labels
        .watches(SECRET, map_to=secret_to_widgets)
        .max_concurrent_reconciles(4)
        .complete(reconcile))

``reconcile(Request) -> Result`` reads the cache, never the event. It returns ``Result.done()`` or
``Result.requeue_after(s)``; it raises to fail. Guarantees: one key is never reconciled twice at once;
failures are logged with context, counted and retried with per-key exponential backoff (5 ms .. 1000 s);
``TerminalError`` is logged and counted but not retried; a failure never stops the worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from maasctl.runtime.errors import TerminalError
from maasctl.runtime.gvk import GroupVersionKind
from maasctl.runtime.informer import Event, EventType
from maasctl.runtime.metrics import Metrics
from maasctl.runtime.objects import FrozenObject
from maasctl.runtime.predicates import Predicate
from maasctl.runtime.workqueue import Priority, WorkQueue

if TYPE_CHECKING:
    from maasctl.runtime.cache import Cache

__all__ = [
    "Controller",
    "ControllerBuilder",
    "MapFunc",
    "OwnerLabels",
    "ReconcileFunc",
    "Reconciler",
    "Request",
    "Result",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, order=True)
class Request:
    """What to reconcile: an object's namespace (None for cluster-scoped) and name."""

    namespace: str | None
    name: str

    @classmethod
    def for_object(cls, obj: Mapping[str, Any]) -> Request:
        meta = obj["metadata"]
        return cls(meta.get("namespace") or None, str(meta["name"]))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def __str__(self) -> str:
        return self.key


@dataclass(frozen=True, slots=True)
class Result:
    """The outcome of a successful reconcile; build it with ``done()`` or ``requeue_after(seconds)``."""

    after: float | None = None

    @classmethod
    def done(cls) -> Result:
        """Nothing more to do until something changes."""
        return cls()

    @classmethod
    def requeue_after(cls, seconds: float) -> Result:
        """Reconcile again after ``seconds`` (> 0) even if nothing changes (e.g. to poll something)."""
        if seconds <= 0:
            raise ValueError("requeue_after needs a positive delay")
        return cls(float(seconds))


ReconcileFunc = Callable[[Request], Awaitable[Result]]
MapFunc = Callable[[FrozenObject], Iterable[Request]]


class Reconciler(Protocol):
    async def reconcile(self, req: Request) -> Result: ...


@dataclass(frozen=True, slots=True)
class OwnerLabels:
    """Labels on a child naming its owner, for children in another namespace (ownerReferences cannot
    cross namespaces). A missing namespace label means the child's own namespace."""

    name: str
    namespace: str | None = None

    def owner_of(self, obj: FrozenObject) -> Iterable[Request]:
        labels = obj["metadata"].get("labels") or {}
        name = labels.get(self.name)
        if not name:
            return ()
        ns = labels.get(self.namespace) if self.namespace else obj["metadata"].get("namespace")
        return (Request(ns or None, name),)


def _controller_owner(owner: GroupVersionKind) -> MapFunc:
    def owner_of(obj: FrozenObject) -> Iterable[Request]:
        for ref in obj["metadata"].get("ownerReferences") or ():
            if not ref.get("controller"):
                continue
            group = str(ref.get("apiVersion", "")).rpartition("/")[0]
            if group == owner.group and ref.get("kind") == owner.kind:
                return (Request(obj["metadata"].get("namespace") or None, str(ref["name"])),)
        return ()

    return owner_of


def _self(obj: FrozenObject) -> Iterable[Request]:
    return (Request.for_object(obj),)


@dataclass(frozen=True, slots=True)
class _Watch:
    gvk: GroupVersionKind
    map_to: MapFunc
    predicates: tuple[Predicate, ...]
    settle: float = 0.0  # > 0: enqueue this long after the event, so a burst of them is one reconcile
    map_initial_list: bool = True  # False: the initial list's events are not mapped before the controller starts
    unfinished: Callable[[FrozenObject], bool] | None = None  # initial-list objects it matches: normal priority


class Controller:
    """Runs ``max_concurrent_reconciles`` workers over one work queue. Built by ``ControllerBuilder``."""

    def __init__(
        self,
        name: str,
        reconcile: ReconcileFunc,
        *,
        cache: Cache,
        watches: Sequence[_Watch],
        max_concurrent_reconciles: int = 1,
        metrics: Metrics | None = None,
        queue: WorkQueue[Request] | None = None,
    ) -> None:
        if max_concurrent_reconciles < 1:
            raise ValueError("max_concurrent_reconciles must be >= 1")
        self.name = name
        self._reconcile = reconcile
        self._cache = cache
        self._watches = tuple(watches)
        self._workers = max_concurrent_reconciles
        self._metrics = metrics or Metrics()
        self.queue: WorkQueue[Request] = queue or WorkQueue(name, metrics=self._metrics)
        self.started = False
        m = self._metrics
        m.max_concurrent_reconciles.labels(name).set(max_concurrent_reconciles)
        # Like controller-runtime, expose zero-valued series up front so rate() works from the start.
        for result in ("success", "error", "requeue", "requeue_after"):
            m.reconcile_total.labels(name, result)
        m.reconcile_errors_total.labels(name)
        m.terminal_reconcile_errors_total.labels(name)
        m.active_workers.labels(name)
        for watch in self._watches:
            cache.informer(watch.gvk).add_handler(self._handler(watch))

    @property
    def kinds(self) -> tuple[GroupVersionKind, ...]:
        return tuple(w.gvk for w in self._watches)

    def _handler(self, watch: _Watch) -> Callable[[Event], None]:
        def handle(event: Event) -> None:
            if event.low_priority and not watch.map_initial_list and not self.started:
                return  # the primary's own initial list enqueues every request this mapping could name
            if not all(p(event) for p in watch.predicates):
                return
            low = event.low_priority and not (watch.unfinished is not None and watch.unfinished(event.obj))
            priority = Priority.LOW if low else Priority.NORMAL
            requests = set(watch.map_to(event.obj))
            if event.type is EventType.UPDATED and event.old is not None:
                requests.update(watch.map_to(event.old))  # a changed mapping must reach the old target too
            for req in requests:
                if watch.settle > 0:
                    self.queue.add_after(req, watch.settle, priority)  # the earliest pending deadline wins
                else:
                    self.queue.add(req, priority)

        return handle

    async def run(self) -> None:
        """Wait for this controller's informers to sync, then run workers until ``shutdown``."""
        await self._cache.wait_for_sync(self.kinds, deadline=None)
        self.started = True
        # as controller-runtime's "Starting workers": when a restarted controller works again is read off this line
        log.info("starting workers", extra={"controller": self.name, "workers": self._workers})
        try:
            async with asyncio.TaskGroup() as tg:
                for i in range(self._workers):
                    tg.create_task(self._worker(), name=f"{self.name} worker {i}")
        finally:
            self.started = False

    def shutdown(self) -> None:
        """Stop handing out work; workers finish their current reconcile and exit."""
        self.queue.shutdown()

    async def _worker(self) -> None:
        while True:
            req = await self.queue.get()
            if req is None:
                return
            # A reconcile with nothing to write awaits nothing, and neither does get() while work is queued: without
            # this, one worker drains a restart's whole initial list before anything else on the event loop runs
            # (a live change's reconcile waiting on its write, other controllers, lease renewal, probes).
            await asyncio.sleep(0)
            try:
                await self._process(req)
            finally:
                self.queue.done(req)

    async def _process(self, req: Request) -> None:
        m = self._metrics
        reconcile_id = uuid.uuid4().hex
        ctx = {"controller": self.name, "request": req.key, "reconcile_id": reconcile_id}
        start = time.monotonic()
        m.active_workers.labels(self.name).inc()
        try:
            result = await self._reconcile(req)
        except TerminalError as exc:
            log.error("reconcile failed permanently", extra={**ctx, "error": str(exc)})
            m.terminal_reconcile_errors_total.labels(self.name).inc()
            m.reconcile_errors_total.labels(self.name).inc()
            m.reconcile_total.labels(self.name, "error").inc()
            self.queue.forget(req)
        except Exception as exc:  # the worker boundary: any failure is retried, never fatal
            delay = self.queue.add_rate_limited(req)
            log.error(
                "reconcile failed, will retry",
                exc_info=exc,
                extra={**ctx, "error": repr(exc), "retry_in": delay},
            )
            m.reconcile_errors_total.labels(self.name).inc()
            m.reconcile_total.labels(self.name, "error").inc()
        else:
            self.queue.forget(req)
            if result.after is not None:
                self.queue.add_after(req, result.after)
                m.reconcile_total.labels(self.name, "requeue_after").inc()
            else:
                m.reconcile_total.labels(self.name, "success").inc()
        finally:
            m.active_workers.labels(self.name).dec()
            m.reconcile_time_seconds.labels(self.name).observe(time.monotonic() - start)


class ControllerBuilder:
    """Fluent wiring of a controller: one primary kind, owned kinds and mapped kinds."""

    def __init__(self, name: str, *, cache: Cache, metrics: Metrics, register: Callable[[Controller], None]) -> None:
        self._name = name
        self._cache = cache
        self._metrics = metrics
        self._register = register
        self._for: _Watch | None = None
        self._others: list[_Watch] = []
        self._max = 1

    def for_(
        self, gvk: GroupVersionKind, *, predicates: Sequence[Predicate] = (),
        unfinished: Callable[[FrozenObject], bool] | None = None,
    ) -> ControllerBuilder:
        """The primary kind: its events enqueue the object itself.

        The initial list (a start, a re-list) is queued at low priority, behind every live change: it mostly
        confirms work already done. ``unfinished`` (e.g. ``predicates.not_observed``) picks the listed objects
        whose work is not done, such as one created while the controller was down, and queues those at normal
        priority, so a restarted controller serves pending changes before it re-checks the rest."""
        if self._for is not None:
            raise ValueError("for_ may be called once")
        self._for = _Watch(gvk, _self, tuple(predicates), unfinished=unfinished)
        return self

    def owns(
        self,
        gvk: GroupVersionKind,
        *,
        owner_labels: OwnerLabels | None = None,
        predicates: Sequence[Predicate] = (),
    ) -> ControllerBuilder:
        """Children of the primary kind: events enqueue the owner, found through the controller
        ownerReference, or through ``owner_labels`` for cross-namespace children."""
        if self._for is None:
            raise ValueError("call for_ before owns")
        map_to = owner_labels.owner_of if owner_labels is not None else _controller_owner(self._for.gvk)
        self._others.append(_Watch(gvk, map_to, tuple(predicates)))
        return self

    def watches(
        self, gvk: GroupVersionKind, *, map_to: MapFunc, predicates: Sequence[Predicate] = (), settle: float = 0.0,
        map_initial_list: bool = True,
    ) -> ControllerBuilder:
        """Any other kind: ``map_to(obj)`` names the requests to enqueue (for updates: old and new).

        ``settle`` (seconds) delays those requests: a status that summarises many inputs (every model a
        policy names becoming ready in turn) is then written once per burst instead of once per input; events
        within the delay join the pending request.

        ``map_initial_list=False`` skips the events of this kind's initial list (and the replay of cached
        objects to a new handler) until the controller has started: only for a ``map_to`` that names primary
        objects found in the cache. The primary kind's own initial list enqueues each of those anyway, so
        mapping them again only lengthened the cache sync (issue 39: at 300 subscriptions over 50 models, the
        routes' and policies' initial events mapped to 31,000 requests, 45 % of the sync's CPU). Later events,
        a re-list after a lost watch and a kind installed after the start are mapped as usual."""
        if settle < 0:
            raise ValueError("settle must be >= 0")
        self._others.append(_Watch(gvk, map_to, tuple(predicates), settle, map_initial_list))
        return self

    def max_concurrent_reconciles(self, n: int) -> ControllerBuilder:
        self._max = n
        return self

    def complete(self, reconciler: Reconciler | ReconcileFunc) -> Controller:
        """Build the controller and register it with the manager."""
        if self._for is None:
            raise ValueError("a controller needs for_(kind)")
        fn: ReconcileFunc = reconciler.reconcile if hasattr(reconciler, "reconcile") else reconciler
        ctl = Controller(
            self._name,
            fn,
            cache=self._cache,
            watches=[self._for, *self._others],
            max_concurrent_reconciles=self._max,
            metrics=self._metrics,
        )
        self._register(ctl)
        return ctl

"""The manager: owns the client, shared cache, controllers, leader election, probes and metrics.

Expected flow of ``run``: start the probe and metrics servers; start the cache; wait for it to sync; with
leader election, wait for the lease (a standby runs the warm-ups meanwhile, ``add_warm_up``); run the
controllers (and keep renewing) until ``stop()`` is called or the lease is lost. Shutdown order follows
controller-runtime: controllers finish their in-flight reconciles (bounded by ``graceful_shutdown_timeout``), the
lease is released, the cache stops, the servers stop last.

Guarantees: every task lives in a TaskGroup owned by ``run``; when the lease is lost the write gate closes
(``Client`` refuses writes with ``NotLeader``) before controllers are cancelled, and ``run`` raises
``LeaderElectionLost`` so the process exits and competes again fresh. ``/readyz`` is ready when the caches
synced and, once elected, all controllers run; informers waiting for a CRD are listed but do not fail it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import ApiClient

from maasctl.runtime.apply import Applier
from maasctl.runtime.cache import Cache, CacheOptions
from maasctl.runtime.client import Client
from maasctl.runtime.controller import Controller, ControllerBuilder
from maasctl.runtime.errors import LeaderElectionLost
from maasctl.runtime.events import EventRecorder
from maasctl.runtime.gvk import GroupVersionKind
from maasctl.runtime.informer import InformerState, Transform
from maasctl.runtime.leaderelection import LeaderElectionOptions, LeaderElector
from maasctl.runtime.metrics import Metrics
from maasctl.runtime.probes import Check, HttpServer, named, parse_bind_address

__all__ = ["Manager", "ManagerOptions"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class ManagerOptions:
    """Everything ``maasctl run`` configures, with controller-runtime's defaults.

    namespaces: namespaces to watch (empty: all).
    metrics_bind_address / health_probe_bind_address: ``host:port``, ``":8080"``; ``"0"`` disables.
    leader_election: see ``LeaderElectionOptions`` (disabled by default).
    max_concurrent_reconciles: default worker count per controller.
    field_manager / status_field_manager: SSA field managers for objects and for /status.
    graceful_shutdown_timeout: seconds in-flight reconciles get to finish on shutdown.
    cache_sync_timeout: seconds to wait for the first LIST of every informer before giving up.
    cache_label_selectors: per kind, cache only objects matching a label selector (see ``CacheOptions``).
    cache_transforms: per kind, a transform of every cached object (see ``CacheOptions``).
    cache_kind_namespaces: per kind, watch only these namespaces (see ``CacheOptions``).
    """

    namespaces: tuple[str, ...] = ()
    metrics_bind_address: str = ":8080"
    health_probe_bind_address: str = ":8081"
    leader_election: LeaderElectionOptions = field(default_factory=LeaderElectionOptions)
    max_concurrent_reconciles: int = 1
    field_manager: str = "maasctl"
    status_field_manager: str = "maasctl-status"
    graceful_shutdown_timeout: float = 30.0
    cache_sync_timeout: float = 120.0
    resync_period: float | None = None
    cache_label_selectors: Mapping[GroupVersionKind, str] = field(default_factory=dict)
    cache_transforms: Mapping[GroupVersionKind, Transform] = field(default_factory=dict)
    cache_kind_namespaces: Mapping[GroupVersionKind, tuple[str, ...]] = field(default_factory=dict)


class Manager:
    """Wire controllers with ``controller(name)``, then ``await run()``; call ``stop()`` to shut down."""

    def __init__(self, api: ApiClient, options: ManagerOptions | None = None) -> None:
        self.options = opts = options or ManagerOptions()
        self.metrics = Metrics()
        self.raw_client = Client(api, metrics=self.metrics)
        self.elector: LeaderElector | None = None
        if opts.leader_election.enabled:
            self.elector = LeaderElector(self.raw_client, opts.leader_election, metrics=self.metrics)
            elector = self.elector
            self.client = self.raw_client.with_write_gate(lambda: elector.is_leader)
        else:
            self.client = self.raw_client
        self.cache = Cache(
            self.client,
            CacheOptions(
                namespaces=opts.namespaces,
                keep_managed_fields_for=frozenset({opts.field_manager, opts.status_field_manager}),
                resync_period=opts.resync_period,
                label_selectors=opts.cache_label_selectors,
                transforms=opts.cache_transforms,
                kind_namespaces=opts.cache_kind_namespaces,
            ),
        )
        self.applier = Applier(
            self.client,
            self.cache,
            field_manager=opts.field_manager,
            status_field_manager=opts.status_field_manager,
        )
        self.controllers: list[Controller] = []
        self._warm_ups: list[Callable[[], Awaitable[None]]] = []
        self._healthz = [named("ping", lambda: None), named("leader-election", self._lease_check)]
        self._readyz = [
            named("informers", self._informers_check),
            named("controllers", self._controllers_check),
        ]
        self._stop = asyncio.Event()
        self._synced = False
        self._lost = False
        self._stopping = False
        self._servers: list[HttpServer] = []
        self.metrics_port: int | None = None
        self.health_port: int | None = None

    # -- wiring ------------------------------------------------------------------------------------------

    def controller(self, name: str) -> ControllerBuilder:
        """Start building a controller; ``complete()`` registers it here."""
        if any(c.name == name for c in self.controllers):
            raise ValueError(f"controller {name!r} already exists")
        builder = ControllerBuilder(name, cache=self.cache, metrics=self.metrics, register=self.controllers.append)
        return builder.max_concurrent_reconciles(self.options.max_concurrent_reconciles)

    def event_recorder(self, controller: str) -> EventRecorder:
        identity = self.elector.identity if self.elector else "maasctl"
        return EventRecorder(self.client, controller=controller, instance=identity)

    def add_health_check(self, name: str, check: Check) -> None:
        self._healthz.append(named(name, check))

    def add_ready_check(self, name: str, check: Check) -> None:
        self._readyz.append(named(name, check))

    def add_warm_up(self, warm_up: Callable[[], Awaitable[None]]) -> None:
        """Work the first reconciles would do once (e.g. compiling what they check), done by a standby on its
        synced cache while it waits for the lease, so that a takeover does not pay for it. It runs on the event
        loop: it should yield now and then. A candidate that gets the lease at its first try skips it."""
        self._warm_ups.append(warm_up)

    @property
    def elected(self) -> bool:
        return self.elector is None or self.elector.is_leader

    # -- checks ------------------------------------------------------------------------------------------

    def _lease_check(self) -> str | None:
        return "leader lease lost" if self._lost else None

    def _informers_check(self) -> str | None:
        if self._stopping:
            return "shutting down"
        if not self._synced:
            pending = [k for k, s in self.cache.status().items() if s is InformerState.PENDING]
            return "waiting for cache sync: " + ", ".join(pending)
        return None

    def _controllers_check(self) -> str | None:
        if self._stopping:
            return "shutting down"
        if self.elected:
            idle = [c.name for c in self.controllers if not c.started]
            if idle:
                return "controllers not running: " + ", ".join(idle)
        return None

    def _notes(self) -> list[str]:
        return [f"[i]informer {k} waiting for its CRD" for k in self.waiting_for_crds()]

    def waiting_for_crds(self) -> list[str]:
        """Kinds whose informers wait for a CRD to be installed (reported in /readyz?verbose)."""
        return [k for k, s in self.cache.status().items() if s is InformerState.WAITING_FOR_CRD]

    # -- running -----------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Request a graceful shutdown (safe to call from a signal handler)."""
        self._stop.set()

    async def _start_servers(self) -> None:
        metrics_addr = parse_bind_address(self.options.metrics_bind_address)
        health_addr = parse_bind_address(self.options.health_probe_bind_address)
        if health_addr is not None:
            server = HttpServer()
            server.add_probes(self._healthz, self._readyz, notes=self._notes)
            if metrics_addr == health_addr:
                server.add_metrics(self.metrics.registry)
            await server.start(*health_addr)
            self._servers.append(server)
            self.health_port = server.port
            if metrics_addr == health_addr:
                self.metrics_port = server.port
        if metrics_addr is not None and metrics_addr != health_addr:
            server = HttpServer()
            server.add_metrics(self.metrics.registry)
            await server.start(*metrics_addr)
            self._servers.append(server)
            self.metrics_port = server.port

    async def run(self) -> None:
        """Run until ``stop()``. Raises ``LeaderElectionLost`` if the lease is lost."""
        await self._start_servers()
        try:
            async with asyncio.TaskGroup() as tg:
                cache_task = tg.create_task(self.cache.run(), name="cache")
                try:
                    await self._run_elected()
                finally:
                    self._stopping = True
                    cache_task.cancel()
        except BaseExceptionGroup as group:
            # TaskGroups wrap failures; callers want the cause (LeaderElectionLost, TimeoutError, ...).
            raise _first_leaf(group) from group
        finally:
            self._stopping = True
            for server in reversed(self._servers):
                await server.stop()
            self._servers.clear()

    async def _until_stopped(self, fut: asyncio.Future[Any]) -> bool:
        """Wait for ``fut`` or stop; True if ``fut`` finished first (its exception is raised)."""
        stop: asyncio.Future[Any] = asyncio.ensure_future(self._stop.wait())
        both: set[asyncio.Future[Any]] = {fut, stop}
        try:
            await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for f in both:
                f.cancel()
            await asyncio.wait(both)
        if fut.done() and not fut.cancelled():
            fut.result()
            return True
        return False

    async def _run_elected(self) -> None:
        sync = asyncio.ensure_future(self.cache.wait_for_sync(deadline=self.options.cache_sync_timeout))
        if not await self._until_stopped(sync):
            return
        if not sync.result():
            raise TimeoutError("caches did not sync within cache_sync_timeout")
        self._synced = True
        if self.elector is not None:
            acquire = asyncio.ensure_future(self.elector.acquire(while_waiting=self._warm_up))
            if not await self._until_stopped(acquire):
                return
        try:
            async with asyncio.TaskGroup() as tg:
                runs = [tg.create_task(c.run(), name=f"controller {c.name}") for c in self.controllers]
                hold = tg.create_task(self._hold(), name="leader-election") if self.elector else None
                await self._stop.wait()
                self._stopping = True
                for ctl in self.controllers:
                    ctl.shutdown()
                if runs:
                    _, pending = await asyncio.wait(runs, timeout=self.options.graceful_shutdown_timeout)
                    for task in pending:
                        log.warning("reconcile still running at shutdown timeout", extra={"task": task.get_name()})
                        task.cancel()
                if hold is not None:
                    hold.cancel()
        finally:
            if self.elector is not None and not self._lost:
                await self.elector.release()

    async def _warm_up(self) -> None:
        for warm_up in self._warm_ups:
            try:
                await warm_up()
            except Exception as exc:  # an optimisation only: the reconciles do the same work and report
                log.warning("warm-up failed", extra={"warm_up": getattr(warm_up, "__name__", repr(warm_up)),
                                                     "error": repr(exc)})

    async def _hold(self) -> None:
        assert self.elector is not None
        try:
            await self.elector.hold()
        except LeaderElectionLost:
            self._lost = True
            raise


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first real exception in a (possibly nested) exception group from TaskGroups."""
    first = group.exceptions[0]
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first

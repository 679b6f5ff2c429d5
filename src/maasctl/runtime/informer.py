"""The reflector and informer: keep a local store equal to the server's objects of one kind.

Expected flow: wait until the kind is served (a CRD may not be installed yet), LIST (paginated), then WATCH
from the list's resourceVersion with bookmarks. A watch that ends normally is resumed from the last seen
resourceVersion (bookmarks advance it); a 410 Gone, or a kind that disappears, forces a fresh LIST, which is
diffed against the store so handlers see the adds, updates and deletes that were missed. Errors back off
from 0.8 s to 30 s, with jitter; while the server does not answer, the backoff is cut short as soon as its
``/readyz`` does again (probed every second), so an outage costs its own length, not the backoff's.

Guarantees: handlers are called in the order the server sent events, after the store was updated; the store
only holds frozen objects. Caveat: handlers run inline and must be quick (they enqueue keys).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from maasctl.runtime.client import Client
from maasctl.runtime.errors import ApiError, Gone, NotFound, ServerError, error_from_response
from maasctl.runtime.gvk import GroupVersionKind
from maasctl.runtime.objects import FrozenObject, freeze, key_of
from maasctl.runtime.store import Store

__all__ = ["Event", "EventType", "Informer", "InformerState", "Transform", "strip_managed_fields"]

log = logging.getLogger(__name__)

Transform = Callable[[Mapping[str, Any]], Mapping[str, Any]]
"""Applied to each object (read-only, as decoded) before it is cached: returns the object to keep, a new mapping
that may share the parts it keeps unchanged; the informer freezes what the transform built."""


class EventType(StrEnum):
    ADDED = "add"
    UPDATED = "update"
    DELETED = "delete"


@dataclass(frozen=True, slots=True)
class Event:
    """A change seen by the informer. ``old`` is set for updates; ``low_priority`` marks initial-list and
    resync events, which must not delay real changes."""

    type: EventType
    obj: FrozenObject
    old: FrozenObject | None = None
    low_priority: bool = False


Handler = Callable[[Event], None]


class InformerState(StrEnum):
    PENDING = "pending"
    WAITING_FOR_CRD = "waiting-for-crd"
    SYNCED = "synced"


def strip_managed_fields(keep_managers: frozenset[str] = frozenset()) -> Transform:
    """A transform dropping ``managedFields`` entries except those of ``keep_managers``.

    The entries of our own field managers are kept so the apply no-op guard can compare field ownership.
    """

    def transform(obj: Mapping[str, Any]) -> Mapping[str, Any]:
        meta = obj.get("metadata") or {}
        entries = meta.get("managedFields")
        if entries is None:
            return obj
        kept = [e for e in entries if e.get("manager") in keep_managers]
        stripped = {k: v for k, v in meta.items() if k != "managedFields"}
        if kept:
            stripped["managedFields"] = kept
        return {**obj, "metadata": stripped}

    return transform


class _Backoff:
    def __init__(self, initial: float = 0.8, cap: float = 30.0) -> None:
        self.initial, self.cap, self.current = initial, cap, 0.0

    def next(self) -> float:
        self.current = self.initial if self.current == 0 else min(self.current * 2, self.cap)
        return self.current * random.uniform(1.0, 1.2)

    def reset(self) -> None:
        self.current = 0.0


class Informer:
    """List+watch one kind (optionally per namespace, with selectors) into a ``Store`` and notify handlers.

    Args:
        namespaces: namespaces to watch, or None for all (ignored for cluster-scoped kinds).
        transform: applied to every object before it is frozen into the store.
        resync_period: replay every cached object as a low-priority update this often (no API call).
        crd_poll_interval: how often to ask discovery again while the kind is not served.
    """

    def __init__(
        self,
        client: Client,
        gvk: GroupVersionKind,
        *,
        namespaces: tuple[str, ...] | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = None,
        resync_period: float | None = None,
        crd_poll_interval: float = 5.0,
        watch_timeout: tuple[int, int] = (300, 600),
        backoff: tuple[float, float] = (0.8, 30.0),
        ready_probe_interval: float = 1.0,
    ) -> None:
        self.client = client
        self.gvk = gvk
        self.store = Store()
        self._namespaces = namespaces
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._transform = transform
        self._resync_period = resync_period
        self._crd_poll = crd_poll_interval
        self._watch_timeout = watch_timeout
        self._backoff = backoff
        self._probe_every = ready_probe_interval
        self._handlers: list[Handler] = []
        self._synced = asyncio.Event()
        self.state = InformerState.PENDING
        self.relists = 0
        self.handler_errors = 0
        self.empty_watches = 0

    # -- handlers ----------------------------------------------------------------------------------------

    def add_handler(self, handler: Handler) -> None:
        """Register a handler; objects already cached are replayed to it as low-priority adds."""
        self._handlers.append(handler)
        for obj in self.store:
            handler(Event(EventType.ADDED, obj, low_priority=True))

    def _emit(self, event: Event) -> None:
        """Call every handler; one that raises is logged and skipped, so the others still get the event and
        the watch goes on (client-go's handlers cannot break the reflector either)."""
        for handler in self._handlers:
            try:
                handler(event)
            except Exception as exc:  # a handler's bug must not cost other handlers their events
                self.handler_errors += 1
                log.error("informer handler failed", extra={"gvk": str(self.gvk), "handler": repr(handler),
                                                           "error": repr(exc)})

    # -- sync state --------------------------------------------------------------------------------------

    @property
    def has_synced(self) -> bool:
        """True after the first complete LIST (or while waiting for a CRD that is not installed)."""
        return self._synced.is_set()

    async def wait_for_sync(self, deadline: float | None = None) -> bool:
        """Wait up to ``deadline`` seconds (None: forever) for ``has_synced``."""
        try:
            async with asyncio.timeout(deadline):
                await self._synced.wait()
        except TimeoutError:
            return False
        return True

    # -- running -----------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until cancelled."""
        while not await self._served():
            self.state = InformerState.WAITING_FOR_CRD
            self._synced.set()  # nothing to wait for; readiness reports the state
            await asyncio.sleep(self._crd_poll)
        info = await self.client.mapper.resource_for(self.gvk)
        scopes: tuple[str | None, ...] = self._namespaces if (self._namespaces and info.namespaced) else (None,)
        self._synced.clear()
        pending = set(scopes)
        async with asyncio.TaskGroup() as tg:
            for ns in scopes:
                tg.create_task(self._reflect(ns, pending))
            if self._resync_period:
                tg.create_task(self._resync_loop(self._resync_period))

    async def _until_served(self) -> None:
        for _ in itertools.count():
            if await self._served():
                return
            await asyncio.sleep(self._crd_poll)

    async def _served(self) -> bool:
        try:
            return await self.client.mapper.is_served(self.gvk)
        except ApiError as exc:
            log.warning("discovery failed", extra={"gvk": str(self.gvk), "error": str(exc)})
            return False

    async def _resync_loop(self, period: float) -> None:
        while True:
            await asyncio.sleep(period * random.uniform(0.9, 1.1))
            for obj in self.store:
                self._emit(Event(EventType.UPDATED, obj, obj, low_priority=True))

    async def _pause(self, backoff: _Backoff) -> None:
        """Sleep out the backoff after a failure; if the server was not answering, return (and reset the
        backoff) as soon as it is ready again. A server that answers means the failure was something else:
        then the full backoff applies, so a bad stream never turns into a 1 Hz retry loop."""
        delay = backoff.next()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + delay
        if delay <= self._probe_every or await self.client.ready():
            await asyncio.sleep(delay)
            return
        while (left := deadline - loop.time()) > 0:
            await asyncio.sleep(min(self._probe_every, left))
            if await self.client.ready():
                log.info("API server answers again, resuming", extra={"gvk": str(self.gvk)})
                backoff.reset()
                return

    async def _reflect(self, namespace: str | None, pending: set[str | None]) -> None:
        backoff = _Backoff(*self._backoff)
        rv: str | None = None
        first = True
        while True:
            try:
                if rv is None:
                    listed = await self.client.list_frozen(
                        self.gvk,
                        namespace,
                        label_selector=self._label_selector,
                        field_selector=self._field_selector,
                    )
                    self._replace(namespace, listed.items, initial=first)
                    if not first:
                        self.relists += 1
                    first = False
                    rv = listed.resource_version
                    pending.discard(namespace)
                    if not pending:
                        self.state = InformerState.SYNCED
                        self._synced.set()
                low, high = self._watch_timeout
                opened, seen = time.monotonic(), 0
                async for event in self.client.watch(
                    self.gvk,
                    namespace,
                    resource_version=rv,
                    timeout_seconds=random.randint(low, high),
                    label_selector=self._label_selector,
                    field_selector=self._field_selector,
                    frozen=True,
                ):
                    rv = self._on_watch_event(event) or rv
                    seen += 1
                    backoff.reset()
                if seen == 0 and time.monotonic() - opened < 1.0:
                    # closed at once with nothing in it (a proxy or a restarting server): back off, don't spin
                    self.empty_watches += 1
                    await self._pause(backoff)
            except Gone:
                log.info("watch expired, re-listing", extra={"gvk": str(self.gvk), "namespace": namespace})
                rv = None
                await asyncio.sleep(backoff.next() / 4)
            except NotFound:
                # The kind went away (CRD deleted) or discovery is stale: ask again, then re-list.
                self.client.mapper.refresh(self.gvk.group_version)
                rv = None
                if not await self._served():
                    self._replace(namespace, [], initial=False)  # its objects are gone with it
                    self.state = InformerState.WAITING_FOR_CRD
                    await self._until_served()
                await asyncio.sleep(backoff.next())
            except Exception as exc:  # any failure (bad stream, oversized line, ...): back off and resume
                log.warning(
                    "list/watch failed, retrying",
                    extra={"gvk": str(self.gvk), "namespace": namespace, "error": repr(exc)},
                )
                await self._pause(backoff)

    def _on_watch_event(self, event: Mapping[str, Any]) -> str | None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, Mapping):
            raise ServerError(0, "BadWatchEvent", f"unexpected watch payload {str(event)[:200]}")
        if kind == "ERROR":
            raise error_from_response(int(obj.get("code") or 500), obj)
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            return str(rv) if rv else None
        if "apiVersion" not in obj or "kind" not in obj:
            obj = {"apiVersion": self.gvk.api_version, "kind": self.gvk.kind, **obj}
        if kind in ("ADDED", "MODIFIED"):
            self._upsert(obj, low_priority=False)
        elif kind == "DELETED":
            frozen = self._freeze(obj)
            key = key_of(frozen)
            old = self.store.delete(key)
            self._emit(Event(EventType.DELETED, frozen, old))
        return str(rv) if rv else None

    def _freeze(self, obj: Mapping[str, Any]) -> FrozenObject:
        """The object as cached: transformed, and read-only (what the transform built gets frozen; what it
        kept of a frozen decode is already)."""
        if self._transform is not None:
            obj = self._transform(obj)
        frozen: FrozenObject = freeze(obj)
        return frozen

    def _upsert(self, obj: Mapping[str, Any], *, low_priority: bool) -> None:
        frozen = self._freeze(obj)
        old = self.store.upsert(key_of(frozen), frozen)
        if old is None:
            self._emit(Event(EventType.ADDED, frozen, low_priority=low_priority))
        elif old["metadata"].get("resourceVersion") != frozen["metadata"].get("resourceVersion"):
            self._emit(Event(EventType.UPDATED, frozen, old, low_priority=low_priority))

    def _replace(self, namespace: str | None, items: Sequence[Mapping[str, Any]], *, initial: bool) -> None:
        """Make the store's view of ``namespace`` equal ``items``, emitting the differences."""
        seen: set[str] = set()
        for obj in items:
            seen.add(key_of(obj))
            self._upsert(obj, low_priority=initial)
        for key in self.store.keys_in(namespace):
            if key not in seen:
                old = self.store.delete(key)
                if old is not None:
                    self._emit(Event(EventType.DELETED, old, old))

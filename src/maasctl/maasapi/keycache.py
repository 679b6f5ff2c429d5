"""In-memory API key rows for the validation hot path, invalidated by PostgreSQL LISTEN/NOTIFY.

Why: reading the key row on every validation made p99 depend on the database round trip, and at 1,000
validations/s on two shared cores that round trip queues. A row that no writer touched since it was read
answers exactly as the database would, so it may be served from memory as long as we are sure to hear about
every write: migration 0009 makes PostgreSQL announce every changed `api_keys` row on `CHANNEL`.

Safety rules (the cache may only make answers faster, never different):
- entries are served only while the LISTEN connection is up and answered a heartbeat less than `grace`
  seconds ago (a silently dead connection stops serving within that bound); losing it clears everything,
  and re-established LISTEN clears again (notices sent during the gap were missed);
- a row read before an invalidation is never stored after it (`generation`);
- only rows that exist are stored (random ids cannot grow it), at most `max_entries`, each for at most
  `max_age` seconds (a safety net, not the freshness mechanism);
- callers re-read the database for every answer other than "valid" (`KeyService.validate`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from maasctl.maasapi.metrics import ApiMetrics
from maasctl.maasapi.store import KeyRecord

CHANNEL = "maasapi_api_keys"  # the NOTIFY channel of migration 0009
FLUSH = "*"  # the payload announcing "every row may have changed" (TRUNCATE)

Monotonic = Callable[[], float]
log = structlog.get_logger("maasctl.maasapi")


class KeyCache:
    """`key_id -> KeyRecord`, served only while `live` (see the module docstring)."""

    def __init__(self, max_entries: int, max_age: float, metrics: ApiMetrics | None = None,
                 monotonic: Monotonic = time.monotonic) -> None:
        self.max_entries = max_entries
        self.max_age = max_age
        self.monotonic = monotonic
        self.generation = 0  # bumped by every invalidation: a read older than the bump is not stored
        self._entries: dict[str, tuple[KeyRecord, float]] = {}
        self._live_until = 0.0  # monotonic deadline; 0: the listener is down
        self._recent: deque[tuple[int, str]] = deque(maxlen=1024)  # (generation, key id or FLUSH)
        self._changed = asyncio.Event()
        self._listening = asyncio.Event()  # set by the first heartbeat after (re)connecting
        metrics = metrics or ApiMetrics()
        self._hit = metrics.key_cache_lookups.labels("hit")
        self._miss = metrics.key_cache_lookups.labels("miss")
        self._off = metrics.key_cache_lookups.labels("not_live")
        self._invalidations = metrics.key_cache_invalidations
        self._up = metrics.key_cache_listener_up
        metrics.key_cache_entries.set_function(lambda: len(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key_id: str) -> bool:
        return key_id in self._entries

    @property
    def live(self) -> bool:
        return self.monotonic() < self._live_until

    def get(self, key_id: str) -> KeyRecord | None:
        now = self.monotonic()
        if now >= self._live_until:
            self._off.inc()
            return None
        entry = self._entries.get(key_id)
        if entry is None or now - entry[1] >= self.max_age:
            self._miss.inc()
            return None
        self._hit.inc()
        return entry[0]

    def put(self, record: KeyRecord, generation: int, read_at: float) -> None:
        """Store a row read from the database; `generation` and `read_at` are taken before the read."""
        if generation != self.generation or read_at >= self._live_until:
            return  # invalidated (or not live) while the read was in flight: the row may be stale
        if record.id not in self._entries and len(self._entries) >= self.max_entries:
            del self._entries[next(iter(self._entries))]  # the oldest insertion
        self._entries[record.id] = (record, read_at)

    def invalidate(self, key_id: str, cause: str = "notify") -> None:
        self._entries.pop(key_id, None)
        self._bump(key_id, cause)

    def changed_here(self, key_ids: Iterable[str]) -> None:
        """This process changed `key_ids` (revoked, deleted, regrouped): drop them without waiting for the
        database's notice (a replica reads its own writes)."""
        for key_id in key_ids:
            self.invalidate(key_id, "local")

    def clear(self, cause: str) -> None:
        self._entries.clear()
        self._bump(FLUSH, cause)

    def keep_live(self, until: float) -> None:
        """The listener proved itself up (LISTEN active, heartbeat answered) as of `until - grace`."""
        self._live_until = max(self._live_until, until)
        self._up.set(1)
        self._listening.set()

    def go_dark(self, cause: str) -> None:
        """The listener is down (or stopping): stop serving now and forget everything."""
        self._live_until = 0.0
        self._up.set(0)
        self._listening.clear()
        self.clear(cause)

    def _bump(self, key_id: str, cause: str) -> None:
        self.generation += 1
        self._recent.append((self.generation, key_id))
        self._invalidations.labels(cause).inc()
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def listening(self) -> None:
        """Return once the listener has (re)connected and vouched for the cache (tests; wrap in a timeout)."""
        await self._listening.wait()

    async def invalidated(self, key_id: str, after: int) -> None:
        """Return once `key_id` (or everything) was invalidated after generation `after` (for tests and
        diagnostics; wrap it in a timeout)."""
        while True:
            if any(g > after and k in (key_id, FLUSH) for g, k in self._recent):
                return
            await self._changed.wait()


class KeyCacheListener:
    """Keeps `cache` live while a dedicated LISTEN connection to `dsn` is up; reconnects with backoff.

    Stopping sets a flag the loops check as well as cancelling the task: on Python 3.11 a cancellation that
    lands as an awaited query completes can be swallowed (`asyncio.wait_for`, asyncpg), and a listener that
    missed it would keep the shutdown waiting forever."""

    def __init__(self, dsn: str, cache: KeyCache, *, heartbeat: float = 0.25, grace: float = 1.0,
                 max_backoff: float = 5.0) -> None:
        self.dsn = dsn
        self.cache = cache
        self.heartbeat = heartbeat
        self.grace = grace
        self.max_backoff = max_backoff
        self.backend_pid: int | None = None  # the listening backend (tests terminate it)
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._stopped = asyncio.Event()
        self._wake = asyncio.Event()  # set when the current connection is lost or the listener stops

    def start(self) -> None:
        if self._task is None:
            self._stopping = False
            self._stopped.clear()
            self._task = asyncio.create_task(self._run(), name="maasapi-key-cache-listener")

    async def stop(self) -> None:
        self._stopping = True
        self._stopped.set()
        self._wake.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.cache.go_dark("listener_stopped")

    async def _run(self) -> None:
        backoff = 0.1
        while not self._stopping:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # connection refused, terminated, heartbeat timeout, ...
                log.warning("key_cache_listener_lost", error_type=type(exc).__name__, retry_in=backoff)
            await _pause(self._stopped, backoff)
            backoff = min(backoff * 2, self.max_backoff)

    async def _listen(self) -> None:
        import asyncpg

        self._wake = wake = asyncio.Event()
        if self._stopping:
            return

        def on_lost(_conn: Any) -> None:
            self.cache.go_dark("listener_lost")  # before anything else runs: stop serving at once
            wake.set()

        def on_notify(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
            if payload == FLUSH:
                self.cache.clear("notify")
            else:
                self.cache.invalidate(payload)

        conn = await asyncpg.connect(self.dsn, timeout=self.grace * 5)
        try:
            conn.add_termination_listener(on_lost)
            await conn.add_listener(CHANNEL, on_notify)
            self.backend_pid = conn.get_server_pid()
            self.cache.clear("listener_started")  # anything stored before LISTEN may have missed notices
            log.info("key_cache_listening", channel=CHANNEL)
            while not wake.is_set():
                started = self.cache.monotonic()
                async with asyncio.timeout(self.grace):
                    await conn.fetchval("SELECT 1")
                # Notices committed before the heartbeat was sent arrived before its answer.
                if not wake.is_set():
                    self.cache.keep_live(started + self.grace)
                await _pause(wake, self.heartbeat)
            if not self._stopping:
                raise ConnectionError("the LISTEN connection was terminated")
        finally:
            self.cache.go_dark("listener_lost")
            self.backend_pid = None
            conn.terminate()


async def _pause(event: asyncio.Event, seconds: float) -> None:
    """Sleep up to `seconds`, less if `event` is set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()

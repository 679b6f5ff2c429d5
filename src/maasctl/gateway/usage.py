"""Usage records (`contract.usage.UsageRecord`): one per completed request, emitted to a pluggable sink.

Sinks: `LogSink` (default; one structured log line per record), `MemorySink` (tests, simulate) and
`HttpBatchSink`, which buffers records and POSTs them in batches to maas-api `/internal/v1/usage`
(`{"records": [...]}`, authenticated with the shared usage ingest token as a bearer token), retrying with
backoff and keeping at most `max_buffer` records while maas-api or its database is unavailable. Above 90 % of
that the sink stops `accepting` and the gateway refuses new requests (503) rather than serve them unbilled; the
rest of the buffer holds the records of requests already running (beyond it the oldest is dropped and counted).
maas-api stores a batch atomically and skips record ids it already has, so resending a batch whose answer was
lost never counts it twice. Without a spool, records live in memory until maas-api stored them: a gateway
killed outright loses at most what arrived since the last delivered batch (about `flush_interval` seconds, or
everything buffered during an outage); a stopping gateway keeps trying for `close_timeout` seconds and counts
and logs what it could not deliver. With a spool (`maasctl.gateway.spool`, `--usage-spool-dir`) every record is
also on disk before it is buffered, and the next gateway on that directory sends what was not acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import httpx
from prometheus_client import Counter, Gauge

from maasctl.contract.usage import UsageRecord
from maasctl.gateway.spool import NOT_SPOOLED, UsageSpool

__all__ = ["USAGE_PATH", "HttpBatchSink", "LogSink", "MemorySink", "UsageRecord", "UsageSink"]

USAGE_PATH = "/internal/v1/usage"
log = logging.getLogger("maasctl.gateway.usage")


class UsageSink(Protocol):
    async def start(self) -> None:
        """Called once the gateway is ready to serve (e.g. to send what a spool kept from an earlier run)."""
        ...

    def accepting(self) -> bool:
        """False while a new request's record could not be kept: the gateway refuses it (never serves unbilled)."""
        ...

    def emit(self, record: UsageRecord) -> None:
        """Take `record` (synchronous: nothing can cancel it half way once the answer is settled)."""
        ...

    async def aclose(self) -> None: ...


class LogSink:
    """Logs each record (no secrets are ever part of a record)."""

    async def start(self) -> None:
        return None

    def accepting(self) -> bool:
        return True

    def emit(self, record: UsageRecord) -> None:
        log.info("usage %s", record.to_json())

    async def aclose(self) -> None:
        return None


@dataclass
class MemorySink:
    """Keeps records in memory (tests)."""

    records: list[UsageRecord] = field(default_factory=list)

    async def start(self) -> None:
        return None

    def accepting(self) -> bool:
        return True

    def emit(self, record: UsageRecord) -> None:
        self.records.append(record)

    async def aclose(self) -> None:
        return None


# maas-api answers these for a batch it will never accept as sent (schema, size): split it and retry smaller,
# so one bad record cannot block (or take down) the good ones behind it.
_REJECTED = frozenset({400, 413, 422})

RECORDS = Counter("maas_gateway_usage_records_total",
                  "Usage records by outcome: sent (stored by maas-api), dropped (buffer full), rejected "
                  "(malformed), undelivered (still buffered when the gateway stopped)", ["outcome"])
POSTS = Counter("maas_gateway_usage_posts_total", "Usage batch POSTs to maas-api by result", ["result"])
BUFFERED = Gauge("maas_gateway_usage_buffered", "Usage records waiting for delivery to maas-api",
                 multiprocess_mode="livesum")  # several workers: their sum


def _refused_in(response: httpx.Response) -> int:
    """How many records of an accepted batch maas-api refused one by one (`rejected[]`), logged by reason."""
    try:
        rejected = response.json().get("rejected") or []
    except (ValueError, AttributeError):
        return 0
    if not isinstance(rejected, list):
        return 0
    for item in rejected[:20]:
        if isinstance(item, dict):
            log.error("maas-api refused usage record %s (%s): %s", str(item.get("requestId"))[:64],
                      str(item.get("code"))[:64], str(item.get("message"))[:300])
    return len(rejected)


class HttpBatchSink:
    """Buffers records and POSTs them to maas-api in batches, retrying with capped exponential backoff.

    Batching is by size or interval: the background task sends as soon as `batch_size` records are buffered
    (only whole batches; the rest waits), and everything buffered once `flush_interval` seconds pass without
    a full batch. Records arriving while a POST is in flight wait for the next trigger instead of being sent
    at once in small batches (under load that made one POST per few requests). While maas-api fails, the task
    retries only after the backoff, however many records arrive meanwhile.

    A batch holds at most `batch_size` records and `max_batch_bytes` of JSON (maas-api bounds both). A batch
    maas-api rejects as malformed or too large is halved until the culprit is alone; that record is then
    dropped and counted in `rejected`. Any other failure (connection, 5xx, 401/403) keeps the records
    buffered for the next attempt. Records in flight stay at the head of the buffer and are removed only once
    maas-api stored them; a full buffer drops the oldest record not in flight. Every record lost (dropped,
    rejected, undelivered at close) is counted (attributes and `maas_gateway_usage_records_total`) and logged.

    With a `spool`, a record is appended to it before it is buffered (and only when the buffer has room, so
    the spool obeys `max_buffer` too), is forgotten there once stored, rejected or dropped, and the records an
    earlier process left in the spool are buffered at construction (oldest dropped beyond `max_buffer`) and
    sent once `start()` runs. Records still buffered at `aclose` stay in the spool for the next start instead
    of being counted undelivered.
    """

    def __init__(
        self,
        base_url: str,
        http: httpx.AsyncClient,
        *,
        batch_size: int = 100,
        flush_interval: float = 2.0,
        max_buffer: int = 10_000,
        max_backoff: float = 30.0,
        token: str | None = None,
        max_batch_bytes: int = 60_000,
        close_timeout: float = 5.0,
        spool: UsageSpool | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + USAGE_PATH
        self._http = http
        self._batch = batch_size
        self._cap = batch_size
        self._max_bytes = max_batch_bytes
        self._interval = flush_interval
        self._max_buffer = max(1, max_buffer)
        # New requests are refused above this mark; the rest of the buffer holds the records of requests
        # already admitted and still running.
        self._high_water = max(1, self._max_buffer * 9 // 10)
        # (the record as JSON, its spool segment): encoded once, for the spool line and the batch alike
        self._buffer: deque[tuple[bytes, int]] = deque()
        self._spool = spool
        self._in_flight = 0  # the first records of the buffer, sent and not yet acknowledged
        self._max_backoff = max_backoff
        self._close_timeout = close_timeout
        self._headers = {"Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()  # one flush at a time (the background task and explicit callers)
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0
        self.rejected = 0
        self.undelivered = 0
        self.sent = 0
        self.posts = 0
        self.failures = 0
        self.kept = 0  # records left in the spool at aclose for the next start
        if spool is not None:
            for spooled in spool.recover():
                self._make_room()
                self._buffer.append((spooled.record.model_dump_json().encode(), spooled.segment))
                BUFFERED.inc()

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def accepting(self) -> bool:
        return len(self._buffer) < self._high_water

    async def start(self) -> None:
        """Start sending now when records are buffered already (replayed from the spool)."""
        if self._buffer and self._task is None:
            self._task = asyncio.create_task(self._run(), name="usage sink")

    def emit(self, record: UsageRecord) -> None:
        if self._make_room():
            encoded = record.model_dump_json().encode()
            segment = self._spool.append(record, encoded) if self._spool is not None else NOT_SPOOLED
            self._buffer.append((encoded, segment))
            BUFFERED.inc()
        else:  # everything buffered is in flight: the new record is the one that cannot be kept
            self._count_drop()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="usage sink")
        if len(self._buffer) >= self._batch:
            self._wake.set()

    def _make_room(self) -> bool:
        """Whether one more record fits, after dropping the oldest record not in flight from a full buffer."""
        if len(self._buffer) >= self._max_buffer and self._in_flight < len(self._buffer):
            _, segment = self._buffer[self._in_flight]
            del self._buffer[self._in_flight]
            self._forget(segment)
            BUFFERED.dec()
            self._count_drop()
        return len(self._buffer) < self._max_buffer

    def _forget(self, segment: int) -> None:
        if self._spool is not None:
            self._spool.forget(segment)

    def _count_drop(self) -> None:
        if not self.dropped:
            log.error("usage buffer full (%d records, maas-api unreachable?): dropping the oldest; counted in "
                      "maas_gateway_usage_records_total{outcome=\"dropped\"}", self._max_buffer)
        self.dropped += 1
        RECORDS.labels("dropped").inc()

    def _next_batch(self, limit: int) -> tuple[int, bytes]:
        """How many records from the head of the buffer go next (at most `limit`), and the request body."""
        parts: list[bytes] = []
        size = len(b'{"records":[]}')
        for i in range(min(self._cap, len(self._buffer), max(1, limit))):
            part = self._buffer[i][0]
            if parts and size + len(part) + 1 > self._max_bytes:
                break
            parts.append(part)
            size += len(part) + 1
        return len(parts), b'{"records":[' + b",".join(parts) + b"]}"

    def _remove(self, count: int) -> None:
        """Drop the first `count` records (just acknowledged or rejected) from the buffer."""
        for _ in range(count):
            _, segment = self._buffer.popleft()
            self._forget(segment)
        BUFFERED.dec(count)

    async def flush(self) -> bool:
        """Send everything buffered now; False when a POST failed (the records stay buffered)."""
        async with self._lock:
            return await self._flush(len(self._buffer))

    async def _flush(self, budget: int) -> bool:
        """Send up to `budget` records from the head of the buffer (those there when the flush began)."""
        while self._buffer and budget > 0:
            count, body = self._next_batch(budget)
            self._in_flight = count
            try:
                response = await self._http.post(self.url, content=body, headers=self._headers)
                status = response.status_code
            except httpx.HTTPError:
                status = 0
            finally:
                self._in_flight = 0
            if status in _REJECTED:
                POSTS.labels("rejected").inc()
                if count > 1:
                    self._cap = max(1, count // 2)
                    continue
                self._remove(1)
                self.rejected += 1
                RECORDS.labels("rejected").inc()
                budget -= 1
                log.error("maas-api rejected a usage record (HTTP %d); dropped it", status)
                continue
            if not 200 <= status < 300:
                POSTS.labels("failed").inc()
                self.failures += 1
                return False
            POSTS.labels("ok").inc()
            self._remove(count)
            refused = _refused_in(response)
            RECORDS.labels("sent").inc(count - refused)
            if refused:  # stored apart from these (e.g. too old to be told from a resend): never resent
                RECORDS.labels("rejected").inc(refused)
                self.rejected += refused
            self.sent += count - refused
            self.posts += 1
            budget -= count
            self._cap = self._batch
        return True

    async def _run(self) -> None:
        backoff = 0.0
        while True:
            by_size = False
            if backoff:
                await asyncio.sleep(backoff)  # failing: retry after the backoff, however many records arrive
            else:
                try:
                    await asyncio.wait_for(self._wake.wait(), self._interval)
                    by_size = True
                except TimeoutError:
                    pass
            self._wake.clear()
            async with self._lock:
                # woken by size: whole batches only; by the interval (or retrying): everything buffered
                n = len(self._buffer)
                ok = await self._flush(n - n % self._batch if by_size else n)
            if ok:
                backoff = 0.0
            else:
                backoff = min(self._max_backoff, max(self._interval, backoff * 2))
                log.warning("usage records not delivered to %s; %d buffered", self.url, len(self._buffer))

    async def aclose(self) -> None:
        """Stop the background task and send what is buffered (for up to `close_timeout` seconds); records
        still undelivered then are counted and logged as lost, or, with a spool, kept there for the next start."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        deadline = time.monotonic() + self._close_timeout
        while self._buffer and time.monotonic() < deadline:
            if not await self.flush():
                await asyncio.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
        if self._spool is not None:
            on_disk = sum(segment != NOT_SPOOLED for _, segment in self._buffer)
            if on_disk:  # the rest (their append failed) are counted undelivered below
                self.kept = on_disk
                self._buffer = deque(entry for entry in self._buffer if entry[1] == NOT_SPOOLED)
                BUFFERED.dec(on_disk)
                log.warning("gateway stopping: %d usage records not yet delivered to %s stay in the spool %s and "
                            "are sent by the next gateway started on it", on_disk, self.url, self._spool.directory)
            self._spool.close()
        if self._buffer:
            lost = len(self._buffer)
            self.undelivered += lost
            RECORDS.labels("undelivered").inc(lost)
            self._remove(lost)
            log.error("gateway stopping: %d usage records could not be delivered to %s and are lost", lost, self.url)

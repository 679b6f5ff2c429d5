"""Usage records (`contract.usage.UsageRecord`): one per completed request, emitted to a pluggable sink.

Sinks: `LogSink` (default; one structured log line per record), `MemorySink` (tests, simulate) and
`HttpBatchSink`, which buffers records and POSTs them in batches to maas-api `/internal/v1/usage`
(`{"records": [...]}`, authenticated with the shared usage ingest token as a bearer token), retrying with
backoff and keeping at most `max_buffer` records (oldest dropped and counted) while maas-api or its database
is unavailable. maas-api stores a batch atomically and skips record ids it already has, so resending a batch
whose answer was lost never counts it twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import httpx

from maasctl.contract.usage import UsageRecord

__all__ = ["USAGE_PATH", "HttpBatchSink", "LogSink", "MemorySink", "UsageRecord", "UsageSink"]

USAGE_PATH = "/internal/v1/usage"
log = logging.getLogger("maasctl.gateway.usage")


class UsageSink(Protocol):
    async def emit(self, record: UsageRecord) -> None: ...

    async def aclose(self) -> None: ...


class LogSink:
    """Logs each record (no secrets are ever part of a record)."""

    async def emit(self, record: UsageRecord) -> None:
        log.info("usage %s", record.to_json())

    async def aclose(self) -> None:
        return None


@dataclass
class MemorySink:
    """Keeps records in memory (tests)."""

    records: list[UsageRecord] = field(default_factory=list)

    async def emit(self, record: UsageRecord) -> None:
        self.records.append(record)

    async def aclose(self) -> None:
        return None


# maas-api answers these for a batch it will never accept as sent (schema, size): split it and retry smaller,
# so one bad record cannot block (or take down) the good ones behind it.
_REJECTED = frozenset({400, 413, 422})


class HttpBatchSink:
    """Buffers records and POSTs them to maas-api in batches, retrying with capped exponential backoff.

    A batch holds at most `batch_size` records and `max_batch_bytes` of JSON (maas-api bounds both). A batch
    maas-api rejects as malformed or too large is halved until the culprit is alone; that record is then
    dropped and counted in `rejected`. Any other failure (connection, 5xx, 401/403) keeps the records
    buffered for the next attempt.
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
    ) -> None:
        self.url = base_url.rstrip("/") + USAGE_PATH
        self._http = http
        self._batch = batch_size
        self._cap = batch_size
        self._max_bytes = max_batch_bytes
        self._interval = flush_interval
        self._buffer: deque[UsageRecord] = deque(maxlen=max_buffer)
        self._max_backoff = max_backoff
        self._headers = {"Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()  # one flush at a time (the background task and explicit callers)
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0
        self.rejected = 0
        self.sent = 0
        self.failures = 0

    @property
    def pending(self) -> int:
        return len(self._buffer)

    async def emit(self, record: UsageRecord) -> None:
        if len(self._buffer) == self._buffer.maxlen:
            self.dropped += 1
        self._buffer.append(record)
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="usage sink")
        if len(self._buffer) >= self._batch:
            self._wake.set()

    def _next_batch(self) -> tuple[list[UsageRecord], bytes]:
        """The buffered records that go next, and the request body holding them."""
        batch: list[UsageRecord] = []
        parts: list[bytes] = []
        size = len(b'{"records":[]}')
        for i in range(min(self._cap, len(self._buffer))):
            part = json.dumps(self._buffer[i].to_json(), separators=(",", ":")).encode()
            if parts and size + len(part) + 1 > self._max_bytes:
                break
            batch.append(self._buffer[i])
            parts.append(part)
            size += len(part) + 1
        return batch, b'{"records":[' + b",".join(parts) + b"]}"

    def _remove(self, batch: list[UsageRecord]) -> None:
        """Drop `batch` from the head of the buffer. Records emitted into a full buffer while the POST was in
        flight push the oldest out on the left, so only what is still there is removed."""
        ids = {id(r) for r in batch}
        while self._buffer and id(self._buffer[0]) in ids:
            self._buffer.popleft()

    async def flush(self) -> bool:
        """Send everything buffered now; False when a POST failed (the records stay buffered)."""
        async with self._lock:
            return await self._flush()

    async def _flush(self) -> bool:
        while self._buffer:
            batch, body = self._next_batch()
            count = len(batch)
            try:
                response = await self._http.post(self.url, content=body, headers=self._headers)
                status = response.status_code
            except httpx.HTTPError:
                status = 0
            if status in _REJECTED:
                if count > 1:
                    self._cap = max(1, count // 2)
                    continue
                self._remove(batch)
                self.rejected += 1
                log.error("maas-api rejected a usage record (HTTP %d); dropped it", status)
                continue
            if not 200 <= status < 300:
                self.failures += 1
                return False
            self._remove(batch)
            self.sent += count
            self._cap = self._batch
        return True

    async def _run(self) -> None:
        backoff = self._interval
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), backoff)
            self._wake.clear()
            if await self.flush():
                backoff = self._interval
            else:
                backoff = min(self._max_backoff, backoff * 2)
                log.warning("usage records not delivered to %s; %d buffered", self.url, len(self._buffer))

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        deadline = time.monotonic() + 5
        while self._buffer and time.monotonic() < deadline and await self.flush():
            pass

"""Token counters with reservations: in process (one gateway replica) or in Redis (shared by all replicas).

Each counter is a fixed window (`seconds`) that starts at its first hit, as Limitador's expiring counters do.
Besides what was used, a counter holds what in-flight requests have reserved. A request is admitted only
when, for every rate that applies, `used + reserved <= limit` (Limitador's `used > limit` refusal when nothing
is in flight); it then reserves its estimate on all of them at
once (atomically: one Lua script in Redis, one synchronous step in process), and settles when its usage is
known (`used += actual`, `reserved -= estimate`). Concurrent requests therefore see each other, and a burst
can overshoot a limit by about one request's worth instead of by the burst (Limitador's check-then-report
cannot: every request of a burst passes the check before any of them is reported).

A gateway that dies mid-request leaves its reservation behind until the counter's window (plus a grace
period) expires; reserved amounts are never read below zero.

Restarts: Redis keeps the counts of every replica whatever happens to the gateways. In process, the counts
survive a restart when the store has a journal (`gateway.counter_journal`; the gateway keeps one beside its
usage spool): `counter_store` picks the store from the gateway's settings.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from maasctl.gateway.counter_journal import CounterJournal

__all__ = ["JOURNAL_NAME", "CounterKey", "CounterStore", "Denied", "MemoryCounterStore", "RedisCounterStore", "Slot",
           "Usage", "counter_store"]

CounterKey = tuple[str, str, int, tuple[str, ...]]
"""(domain, limit name, window seconds, counter values)."""

RESERVATION_GRACE = 600
"""Seconds a reservation outlives its window in Redis (a request may run that long)."""


@dataclass(frozen=True)
class Slot:
    """One rate of one applicable limit: where to count and the limit that must hold."""

    key: CounterKey
    limit: int


@dataclass(frozen=True)
class Usage:
    used: int
    reserved: int
    resets_in: float | None  # seconds until the window resets; None while it has not started


@dataclass(frozen=True)
class Denied:
    """The first slot without room, as it was read."""

    slot: Slot
    usage: Usage


class CounterStore(Protocol):
    async def read(self, keys: Sequence[CounterKey]) -> list[Usage]: ...

    async def reserve(self, slots: Sequence[Slot], amount: int) -> Denied | None:
        """Reserve `amount` on every slot if none is over (`used + reserved <= limit`), else nothing."""

    async def settle(self, keys: Sequence[CounterKey], reserved: int, actual: int) -> None:
        """Release a reservation of `reserved` and count `actual` (starting the window if needed)."""

    async def clear(self) -> None: ...

    async def aclose(self) -> None: ...


class MemoryCounterStore:
    """In-process counters (Limitador's default storage): one replica; kept across restarts with a `journal`."""

    def __init__(self, clock: Callable[[], float] = time.time, max_entries: int = 1_000_000,
                 journal: CounterJournal | None = None) -> None:
        self.clock = clock
        self._journal = journal
        self._used: dict[CounterKey, list[float]] = journal.load(clock()) if journal is not None else {}
        self._reserved: dict[CounterKey, int] = {}
        self._max = max_entries
        self._ops = 0

    def _usage(self, key: CounterKey, now: float) -> Usage:
        entry = self._used.get(key)
        reserved = max(0, self._reserved.get(key, 0))
        if entry is None or entry[1] <= now:
            return Usage(0, reserved, None)
        return Usage(int(entry[0]), reserved, entry[1] - now)

    async def read(self, keys: Sequence[CounterKey]) -> list[Usage]:
        now = self.clock()
        return [self._usage(k, now) for k in keys]

    async def reserve(self, slots: Sequence[Slot], amount: int) -> Denied | None:
        now = self.clock()
        for slot in slots:
            usage = self._usage(slot.key, now)
            if usage.used + usage.reserved > slot.limit:
                return Denied(slot, usage)
        for slot in slots:
            self._reserved[slot.key] = self._reserved.get(slot.key, 0) + amount
        return None

    async def settle(self, keys: Sequence[CounterKey], reserved: int, actual: int) -> None:
        now = self.clock()
        for key in keys:
            left = self._reserved.get(key, 0) - reserved
            if left > 0:
                self._reserved[key] = left
            else:
                self._reserved.pop(key, None)
            if actual <= 0:
                continue
            entry = self._used.get(key)
            if entry is None or entry[1] <= now:
                entry = [0.0, now + key[2]]
                self._used[key] = entry
            entry[0] += actual
            if self._journal is not None:
                self._journal.write(key, entry)
        self._ops += 1
        if self._ops % 1024 == 0 or len(self._used) > self._max:
            for k in [k for k, (_, exp) in self._used.items() if exp <= now]:
                del self._used[k]
        if self._journal is not None and self._journal.needs_compaction(len(self._used)):
            self._journal.compact([(k, e) for k, e in self._used.items() if e[1] > now])

    async def clear(self) -> None:
        self._used.clear()
        self._reserved.clear()
        if self._journal is not None:
            self._journal.compact(())

    async def aclose(self) -> None:
        if self._journal is not None:
            self._journal.close()


JOURNAL_NAME: Final = "counters.jsonl"


def counter_store(redis_url: str | None, state_dir: str | None) -> CounterStore:
    """The gateway's counter store: Redis when configured (shared by replicas), else in process, journaled in
    `state_dir` (the usage spool directory) when there is one so that a restart keeps the counts."""
    if redis_url:
        return RedisCounterStore(redis_url)
    return MemoryCounterStore(journal=CounterJournal(Path(state_dir) / JOURNAL_NAME) if state_dir else None)


# Lua: KEYS = used_1, reserved_1, used_2, reserved_2, ...; ARGV = amount, grace, limit_1, seconds_1, ...
_RESERVE = """
local amount = tonumber(ARGV[1])
local grace = tonumber(ARGV[2])
local n = #KEYS / 2
for i = 1, n do
  local used = tonumber(redis.call('GET', KEYS[2*i-1]) or '0')
  local reserved = math.max(0, tonumber(redis.call('GET', KEYS[2*i]) or '0'))
  if used + reserved > tonumber(ARGV[2*i+1]) then
    return {i, used, reserved, redis.call('PTTL', KEYS[2*i-1])}
  end
end
for i = 1, n do
  redis.call('INCRBY', KEYS[2*i], amount)
  redis.call('EXPIRE', KEYS[2*i], tonumber(ARGV[2*i+2]) + grace)
end
return {0}
"""
# KEYS = used_i, reserved_i...; ARGV = reserved, actual, seconds_1, seconds_2, ...
_SETTLE = """
local reserved = tonumber(ARGV[1])
local actual = tonumber(ARGV[2])
for i = 1, #KEYS / 2 do
  if reserved > 0 and redis.call('DECRBY', KEYS[2*i], reserved) <= 0 then
    redis.call('DEL', KEYS[2*i])  -- nothing left in flight (or the key had expired: never a debt without TTL)
  end
  if actual > 0 then
    if redis.call('EXISTS', KEYS[2*i-1]) == 0 then
      redis.call('SET', KEYS[2*i-1], actual, 'EX', tonumber(ARGV[i+2]))
    else
      redis.call('INCRBY', KEYS[2*i-1], actual)
    end
  end
end
return 0
"""


def _redis_key(prefix: str, key: CounterKey) -> str:
    digest = hashlib.sha256(json.dumps([key[0], key[1], key[2], list(key[3])]).encode()).hexdigest()[:32]
    return f"{prefix}{digest}"


class RedisCounterStore:
    """Counters shared by every gateway replica, in Redis (windows expire with the keys' TTL).

    The connection pool blocks when all `max_connections` are busy: a burst of concurrent requests waits for a
    connection instead of failing (redis-py's default pool raises past 100 connections in use). A connect or a
    command that takes longer than `socket_seconds` fails (redis-py's default, 5 s, made explicit)."""

    def __init__(self, url: str, prefix: str = "maasctl:rl:", *, max_connections: int = 64,
                 wait_seconds: float = 10, socket_seconds: float = 5) -> None:
        import redis.asyncio as redis

        pool = redis.BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=wait_seconds,
                                                     socket_timeout=socket_seconds,
                                                     socket_connect_timeout=socket_seconds)
        self._redis: Any = redis.Redis.from_pool(pool)
        self._prefix = prefix
        self._reserve = self._redis.register_script(_RESERVE)
        self._settle = self._redis.register_script(_SETTLE)

    def _keys(self, keys: Sequence[CounterKey]) -> list[str]:
        out = []
        for key in keys:
            base = _redis_key(self._prefix, key)
            out += [base, base + ":r"]
        return out

    async def read(self, keys: Sequence[CounterKey]) -> list[Usage]:
        if not keys:
            return []
        names = self._keys(keys)
        async with self._redis.pipeline(transaction=False) as pipe:
            for i in range(0, len(names), 2):
                pipe.get(names[i])
                pipe.get(names[i + 1])
                pipe.pttl(names[i])
            raw = await pipe.execute()
        out = []
        for i in range(len(keys)):
            used, reserved, pttl = raw[3 * i: 3 * i + 3]
            resets = int(pttl) / 1000 if used is not None and int(pttl) > 0 else None
            out.append(Usage(int(used or 0), max(0, int(reserved or 0)), resets))
        return out

    async def reserve(self, slots: Sequence[Slot], amount: int) -> Denied | None:
        if not slots:
            return None
        args: list[int] = [amount, RESERVATION_GRACE]
        for slot in slots:
            args += [slot.limit, slot.key[2]]
        result = await self._reserve(keys=self._keys([s.key for s in slots]), args=args)
        if int(result[0]) == 0:
            return None
        pttl = int(result[3])
        resets = pttl / 1000 if pttl > 0 else None
        return Denied(slots[int(result[0]) - 1], Usage(int(result[1]), int(result[2]), resets))

    async def settle(self, keys: Sequence[CounterKey], reserved: int, actual: int) -> None:
        if keys:
            await self._settle(keys=self._keys(keys), args=[reserved, actual, *(k[2] for k in keys)])

    async def clear(self) -> None:
        async for name in self._redis.scan_iter(match=f"{self._prefix}*"):
            await self._redis.delete(name)

    async def aclose(self) -> None:
        await self._redis.aclose()

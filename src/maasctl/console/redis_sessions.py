"""Sessions in Redis, shared by every console replica (`maasctl console --redis-url`).

Why Redis and not maas-api's PostgreSQL: a session is a small record with an absolute expiry, read and
written by key on every request, which is exactly a Redis hash with a TTL (Redis forgets expired sessions by
itself: no table, no migration, no sweeper); an install already runs a Redis (the payload processor's token
counters); and the console never gets maas-api's database credentials (API key hashes, usage records).

Layout (one hash tag, so a Redis Cluster keeps it in one slot; every bound is kept by one Lua script, so
replicas never race on them):
- `{maas-console}:s:<key>` a hash of the sealed fields, `expires` and `u` (the user's keyed hash, empty when
  anonymous), with the session's TTL;
- `{maas-console}:anon`, `{maas-console}:signed` and `{maas-console}:u:<user>`: sorted sets of keys by last
  use, for the least-recently-used evictions of `sessions.Bounds`. Members whose session expired are removed
  by their last use (older than the pool's TTL means expired) or when they come first in an eviction;
- `{maas-console}:lock:<key>`: the refresh lock (a random token, released only by its holder, with a TTL so
  a replica that dies holding it blocks nobody for long).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as redis
from redis.exceptions import RedisError

from maasctl.console.sessions import Bounds, StoreUnavailable

PREFIX = "{maas-console}:"
LOCK_SECONDS = 15.0

# Remove one session and its index entries (the user's set is named by the record's `u`).
_FORGET = """
local function forget(prefix, member)
  local record = prefix .. 's:' .. member
  local user = redis.call('HGET', record, 'u')
  redis.call('DEL', record)
  redis.call('ZREM', prefix .. 'anon', member)
  redis.call('ZREM', prefix .. 'signed', member)
  if user and user ~= '' then redis.call('ZREM', prefix .. 'u:' .. user, member) end
end
"""

# KEYS: record, pool, user set ('' when anonymous). ARGV: prefix, member, ttl_ms, now, cutoff, max_pool,
# max_user, then field/value pairs.
_CREATE = _FORGET + """
local prefix, member = ARGV[1], ARGV[2]
local now, cutoff = tonumber(ARGV[4]), tonumber(ARGV[5])
local max_pool, max_user = tonumber(ARGV[6]), tonumber(ARGV[7])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', cutoff)
if KEYS[3] ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', cutoff)
  while redis.call('ZCARD', KEYS[3]) >= max_user do
    local victim = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    forget(prefix, victim)
    redis.call('ZREM', KEYS[3], victim)
  end
end
while redis.call('ZCARD', KEYS[2]) >= max_pool do
  local victim = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  forget(prefix, victim)
  redis.call('ZREM', KEYS[2], victim)
end
redis.call('HSET', KEYS[1], unpack(ARGV, 8))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], now, member)
if KEYS[3] ~= '' then redis.call('ZADD', KEYS[3], now, member) end
return 1
"""

# KEYS: record. ARGV: prefix, member, now. The record, after marking it the most recently used of its pool.
_GET = """
local record = redis.call('HGETALL', KEYS[1])
if #record == 0 then return record end
local prefix, member, now = ARGV[1], ARGV[2], ARGV[3]
local user = redis.call('HGET', KEYS[1], 'u')
if user and user ~= '' then
  redis.call('ZADD', prefix .. 'signed', 'XX', now, member)
  redis.call('ZADD', prefix .. 'u:' .. user, 'XX', now, member)
else
  redis.call('ZADD', prefix .. 'anon', 'XX', now, member)
end
return record
"""

# KEYS: record. ARGV: field/value pairs. Only while the session exists (a sign-out elsewhere stays).
_UPDATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""

_DELETE = _FORGET + "forget(ARGV[1], ARGV[2])\nreturn 1\n"

_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisBackend:
    def __init__(self, url: str, bounds: Bounds | None = None) -> None:
        self.bounds = bounds or Bounds()
        self._redis: Any = redis.Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
        self._create = self._redis.register_script(_CREATE)
        self._get = self._redis.register_script(_GET)
        self._update = self._redis.register_script(_UPDATE)
        self._delete = self._redis.register_script(_DELETE)
        self._unlock = self._redis.register_script(_UNLOCK)

    @staticmethod
    def _record(key: str) -> str:
        return f"{PREFIX}s:{key}"

    async def get(self, key: str, now: float) -> dict[str, bytes] | None:
        try:
            flat = await self._get(keys=[self._record(key)], args=[PREFIX, key, now])
        except RedisError as exc:
            raise StoreUnavailable("the session store (Redis) cannot be reached") from exc
        if not flat:
            return None
        return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}

    async def create(self, key: str, record: dict[str, bytes], ttl: float, user: str | None, now: float) -> None:
        b = self.bounds
        pool = f"{PREFIX}signed" if user is not None else f"{PREFIX}anon"
        cutoff = now - (b.signed_in_ttl if user is not None else b.anonymous_ttl)
        pairs = [part for item in record.items() for part in item]
        try:
            await self._create(
                keys=[self._record(key), pool, f"{PREFIX}u:{user}" if user is not None else ""],
                args=[PREFIX, key, max(1, int(ttl * 1000)), now, cutoff,
                      max(1, b.max_signed_in if user is not None else b.max_anonymous), max(1, b.max_per_user),
                      *pairs])
        except RedisError as exc:
            raise StoreUnavailable("the session store (Redis) cannot be reached") from exc

    async def update(self, key: str, record: dict[str, bytes]) -> None:
        try:
            await self._update(keys=[self._record(key)], args=[part for item in record.items() for part in item])
        except RedisError as exc:
            raise StoreUnavailable("the session store (Redis) cannot be reached") from exc

    async def delete(self, key: str) -> None:
        try:
            await self._delete(keys=[self._record(key)], args=[PREFIX, key])
        except RedisError as exc:
            raise StoreUnavailable("the session store (Redis) cannot be reached") from exc

    @asynccontextmanager
    async def lock(self, key: str) -> AsyncIterator[None]:
        """Held by one replica at a time; a waiter polls (a refresh takes one round trip to the provider)."""
        name, token = f"{PREFIX}lock:{key}", secrets.token_hex(16)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LOCK_SECONDS
        try:
            while not await self._redis.set(name, token, nx=True, px=int(LOCK_SECONDS * 1000)):
                if loop.time() > deadline:
                    raise StoreUnavailable("the session is being renewed elsewhere: try again")
                await asyncio.sleep(0.05)
        except RedisError as exc:
            raise StoreUnavailable("the session store (Redis) cannot be reached") from exc
        try:
            yield
        finally:
            with contextlib.suppress(RedisError):  # else the lock's TTL frees it
                await self._unlock(keys=[name], args=[token])

    async def ping(self) -> None:
        try:
            await self._redis.ping()
        except RedisError as exc:
            raise StoreUnavailable("the session store (Redis) cannot be reached") from exc

    async def close(self) -> None:
        await self._redis.aclose()

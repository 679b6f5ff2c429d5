"""The validation key cache (maasapi.keycache): pure rules, and two replicas with their own LISTEN connections
on one real PostgreSQL database. Tests wait for the replica's invalidation (never for wall-clock time), then
assert the answer."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from pydantic import SecretStr

from maasctl.maasapi import keys
from maasctl.maasapi.app import create_app
from maasctl.maasapi.auth import StaticAuthenticator
from maasctl.maasapi.deps import AppState
from maasctl.maasapi.keycache import FLUSH, KeyCache
from maasctl.maasapi.metrics import ApiMetrics
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import StaticSources
from maasctl.maasapi.store import KeyRecord
from maasctl.testenv.postgres import PostgresServer

from .conftest import GATEWAY_TOKEN, GW, USERS, Clock, auth, sample_subscriptions

WAIT = 10.0  # generous bound for a notice to arrive on a shared machine (not a latency assertion)


def record(key_id: str = "k1") -> KeyRecord:
    now = datetime.now(UTC)
    return KeyRecord(id=key_id, key_hash="0" * 64, hash_algorithm="hmac-sha256", name="n", description="",
                     owner="alice", groups=(), subscription_namespace="ns", subscription_name="s", ephemeral=False,
                     created_at=now, expires_at=now + timedelta(hours=1))


class Tick:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def live_cache(max_entries: int = 10, max_age: float = 30.0) -> tuple[KeyCache, Tick]:
    tick = Tick()
    cache = KeyCache(max_entries, max_age, ApiMetrics(), monotonic=tick)
    cache.keep_live(tick.now + 1.0)
    return cache, tick


# --- pure rules ---------------------------------------------------------------------------------------------


def test_nothing_is_served_unless_the_listener_vouched_recently() -> None:
    tick = Tick()
    cache = KeyCache(10, 30.0, ApiMetrics(), monotonic=tick)
    cache.put(record(), cache.generation, tick.now)
    assert cache.get("k1") is None and len(cache) == 0  # never live: not even stored
    cache.keep_live(tick.now + 1.0)
    cache.put(record(), cache.generation, tick.now)
    assert cache.get("k1") is not None
    tick.now += 1.0  # no heartbeat answered for the grace period: a silently dead connection
    assert not cache.live and cache.get("k1") is None
    cache.keep_live(tick.now + 1.0)
    assert cache.get("k1") is not None
    cache.go_dark("listener_lost")
    assert cache.get("k1") is None and len(cache) == 0
    cache.keep_live(tick.now + 1.0)
    assert cache.get("k1") is None  # going dark forgot everything


def test_a_row_read_before_an_invalidation_is_not_stored_after_it() -> None:
    cache, tick = live_cache()
    generation, read_at = cache.generation, tick.now
    cache.invalidate("k1")  # the notice overtook the in-flight read
    cache.put(record(), generation, read_at)
    assert cache.get("k1") is None
    generation = cache.generation
    cache.go_dark("listener_lost")
    cache.keep_live(tick.now + 1.0)
    cache.put(record(), generation, read_at)
    assert cache.get("k1") is None  # and neither across a listener outage


def test_entries_age_out_and_the_size_is_bounded() -> None:
    cache, tick = live_cache(max_entries=3, max_age=30.0)
    for i in range(5):
        cache.put(record(f"k{i}"), cache.generation, tick.now)
    assert len(cache) == 3 and cache.get("k0") is None and cache.get("k4") is not None
    cache.keep_live(tick.now + 60.0)
    tick.now += 30.0
    assert cache.get("k4") is None


async def test_invalidated_waits_for_that_key_or_a_flush() -> None:
    cache, _ = live_cache()
    start = cache.generation
    waiter = asyncio.create_task(cache.invalidated("k1", start))
    cache.invalidate("k2")
    await asyncio.sleep(0)
    assert not waiter.done()
    cache.invalidate("k1")
    await asyncio.wait_for(waiter, WAIT)
    cache.clear("notify")
    await asyncio.wait_for(cache.invalidated("k9", start), WAIT)  # a flush covers every key


# --- two replicas on PostgreSQL -------------------------------------------------------------------------------


@dataclass
class Replica:
    http: httpx.AsyncClient
    state: AppState

    @property
    def cache(self) -> KeyCache:
        cache = self.state.keys().cache
        assert cache is not None
        return cache

    async def validate(self, key: str) -> dict[str, Any]:
        r = await self.http.post("/internal/v1/api-keys/validate", json={"key": key}, headers=GW)
        assert r.status_code == 200
        body: dict[str, Any] = r.json()
        return body

    def hits(self) -> float:
        value = self.state.metrics.registry.get_sample_value("maas_api_key_cache_lookups_total", {"result": "hit"})
        return value or 0.0


@dataclass
class Cluster:
    a: Replica
    b: Replica
    dsn: str

    async def sql(self, statement: str, *args: Any) -> Any:
        conn = await asyncpg.connect(self.dsn)
        try:
            return await conn.execute(statement, *args)
        finally:
            await conn.close()

    async def mint(self, user: str = "alice", **body: Any) -> dict[str, Any]:
        r = await self.a.http.post("/v1/api-keys", json={"name": "k", **body}, headers=auth(user))
        assert r.status_code == 201, r.text
        created: dict[str, Any] = r.json()
        return created


@pytest.fixture
async def cluster(pg_server: PostgresServer) -> AsyncIterator[Cluster]:
    url = await pg_server.acreate_database(f"c_{uuid.uuid4().hex[:12]}")
    settings = MaasApiSettings(database_url=url, gateway_tokens=(SecretStr(GATEWAY_TOKEN),))
    apps = [create_app(settings, StaticSources(sample_subscriptions()),
                       StaticAuthenticator(USERS, admins=["admin"])) for _ in range(2)]
    async with apps[0].router.lifespan_context(apps[0]), apps[1].router.lifespan_context(apps[1]):
        replicas = [Replica(httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://r"),
                            app.state.maasapi) for app in apps]
        try:
            for replica in replicas:
                await asyncio.wait_for(replica.cache.listening(), WAIT)
            dsn = replicas[0].state.keys().store.pg_dsn
            assert dsn is not None
            yield Cluster(replicas[0], replicas[1], dsn)
        finally:
            for r in replicas:
                await r.http.aclose()


async def cached_in_b(cluster: Cluster, key: str, key_id: str) -> None:
    """Validate through b until b answers from memory (a notice about an earlier write may drop it once)."""
    b = cluster.b
    assert (await b.validate(key))["valid"]
    hits = b.hits()
    async with asyncio.timeout(WAIT):
        while True:
            assert (await b.validate(key))["valid"]
            if b.hits() > hits and key_id in b.cache:
                return
            hits = b.hits()


async def test_revocation_through_a_reaches_bs_cache(cluster: Cluster) -> None:
    created = await cluster.mint()
    await cached_in_b(cluster, created["key"], created["id"])
    generation = cluster.b.cache.generation
    assert (await cluster.a.http.delete(f"/v1/api-keys/{created['id']}", headers=auth("alice"))).status_code == 200
    assert created["id"] not in cluster.a.cache  # dropped locally at once, without waiting for the notice
    await asyncio.wait_for(cluster.b.cache.invalidated(created["id"], generation), WAIT)
    assert (await cluster.b.validate(created["key"]))["reason"] == "revoked"


async def test_a_revocation_by_plain_sql_is_seen(cluster: Cluster) -> None:
    created = await cluster.mint()
    await cached_in_b(cluster, created["key"], created["id"])
    generation = cluster.b.cache.generation
    await cluster.sql("UPDATE api_keys SET revoked_at = now(), revoked_by = 'dba' WHERE id = $1", created["id"])
    await asyncio.wait_for(cluster.b.cache.invalidated(created["id"], generation), WAIT)
    assert (await cluster.b.validate(created["key"]))["reason"] == "revoked"


async def test_bulk_revocation_refresh_groups_and_truncate_invalidate(cluster: Cluster) -> None:
    first, second = await cluster.mint(), await cluster.mint()
    await cached_in_b(cluster, first["key"], first["id"])
    generation = cluster.b.cache.generation
    store = cluster.a.state.keys().store
    assert await store.refresh_groups("alice", ["premium-users", "new-team"], datetime.now(UTC)) == 2
    await asyncio.wait_for(cluster.b.cache.invalidated(first["id"], generation), WAIT)
    assert (await cluster.b.validate(first["key"]))["groups"] == ["premium-users", "new-team"]

    await cached_in_b(cluster, second["key"], second["id"])
    generation = cluster.b.cache.generation
    r = await cluster.a.http.post("/v1/api-keys/bulk-revoke", json={"username": "alice"}, headers=auth("alice"))
    assert r.status_code == 200, r.text
    await asyncio.wait_for(cluster.b.cache.invalidated(second["id"], generation), WAIT)
    assert (await cluster.b.validate(second["key"]))["reason"] == "revoked"

    third = await cluster.mint()
    await cached_in_b(cluster, third["key"], third["id"])
    generation = cluster.b.cache.generation
    await cluster.sql("TRUNCATE api_keys CASCADE")
    await asyncio.wait_for(cluster.b.cache.invalidated(FLUSH, generation), WAIT)
    assert (await cluster.b.validate(third["key"]))["reason"] == "invalid_key"


async def test_last_used_updates_are_not_announced(cluster: Cluster) -> None:
    used, other = await cluster.mint(), await cluster.mint()
    await cached_in_b(cluster, used["key"], used["id"])
    generation = cluster.b.cache.generation
    await cluster.sql("UPDATE api_keys SET last_used_at = now() WHERE id = $1", used["id"])
    await cluster.sql("UPDATE api_keys SET description = 'changed' WHERE id = $1", other["id"])
    # Notices arrive in commit order: once the second one is here, the first would have been too.
    await asyncio.wait_for(cluster.b.cache.invalidated(other["id"], generation), WAIT)
    assert used["id"] in cluster.b.cache


async def test_without_the_listener_nothing_is_served_from_memory(cluster: Cluster) -> None:
    b = cluster.b
    listener = b.state.key_cache_listener
    assert listener is not None and listener.backend_pid is not None
    kept, revoked = await cluster.mint(), await cluster.mint()
    await cached_in_b(cluster, revoked["key"], revoked["id"])
    dsn, listener.dsn = listener.dsn, "postgresql://nobody@127.0.0.1:1/none"  # hold the listener down
    generation = b.cache.generation
    await cluster.sql("SELECT pg_terminate_backend($1)", listener.backend_pid)
    await asyncio.wait_for(b.cache.invalidated(FLUSH, generation), WAIT)
    assert not b.cache.live and len(b.cache) == 0
    await cluster.sql("UPDATE api_keys SET revoked_at = now(), revoked_by = 'dba' WHERE id = $1", revoked["id"])
    assert (await b.validate(revoked["key"]))["reason"] == "revoked"  # the very next validation reads the row
    assert (await b.validate(kept["key"]))["valid"] and len(b.cache) == 0  # read, but not kept while dark

    listener.dsn = dsn
    await asyncio.wait_for(b.cache.listening(), WAIT)
    await cached_in_b(cluster, kept["key"], kept["id"])  # serving from memory again


async def test_wrong_secrets_and_unknown_ids(cluster: Cluster) -> None:
    created = await cluster.mint()
    await cached_in_b(cluster, created["key"], created["id"])
    b = cluster.b
    forged = keys.NewKey(created["id"], keys.generate().secret).plaintext
    assert (await b.validate(forged))["reason"] == "invalid_key"
    assert (await b.validate(created["key"]))["valid"]
    size = len(b.cache)
    for _ in range(50):
        assert (await b.validate(keys.generate().plaintext))["reason"] == "invalid_key"
    assert len(b.cache) == size


async def test_expiry_and_group_age_are_judged_by_the_clock(cluster: Cluster) -> None:
    created = await cluster.mint(expiresIn="1h")
    await cached_in_b(cluster, created["key"], created["id"])
    clock = Clock()
    service = cluster.b.state.keys()
    service.clock = clock
    clock.advance(timedelta(minutes=59))
    assert (await cluster.b.validate(created["key"]))["valid"]
    clock.advance(timedelta(minutes=2))
    assert (await cluster.b.validate(created["key"]))["reason"] == "expired"

    long_lived = await cluster.mint(expiresIn="30d")
    clock.now = datetime.now(UTC)
    await cached_in_b(cluster, long_lived["key"], long_lived["id"])
    clock.advance(service.settings.key_groups_max_age + timedelta(minutes=1))
    assert (await cluster.b.validate(long_lived["key"]))["reason"] == "groups_stale"

"""The gateway's HttpBatchSink against the real ingestion endpoint: a PostgreSQL outage loses nothing and
double-counts nothing; a malformed record is isolated and dropped without blocking the good ones; batching by
size and interval under concurrent emitters, through an outage, delivers every record exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import httpx
from pydantic import SecretStr
from sqlalchemy import func, select

from maasctl.gateway.usage import HttpBatchSink, UsageRecord
from maasctl.maasapi import migrate
from maasctl.maasapi.app import create_app
from maasctl.maasapi.auth import StaticAuthenticator
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import StaticSources
from maasctl.maasapi.store import KeyStore, make_engine
from maasctl.maasapi.usage.tables import usage_daily, usage_records
from maasctl.testenv.postgres import PostgresServer

from .usage_data import NOW


def gateway_record(i: int) -> UsageRecord:
    return UsageRecord(timestamp=NOW.timestamp() - i, request_id=uuid.uuid4().hex, user="alice", key_id="k1",
                       subscription="models-as-a-service/premium", organization="org-a", model="llm/granite",
                       route="llm/granite", status=200, latency_ms=12.5, input_tokens=10 + i, cached_tokens=2,
                       output_tokens=5, reasoning_tokens=1, total_tokens=15 + i, charged_tokens=15 + i)


async def _set_connections(server: PostgresServer, db: str, allowed: bool) -> None:
    admin = await asyncpg.connect(server.dsn)
    try:
        await admin.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS {"true" if allowed else "false"}')
        if not allowed:
            await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", db)
    finally:
        await admin.close()


@dataclass
class MaasApi:
    """maas-api on its own PostgreSQL database, reached in process."""

    http: httpx.AsyncClient
    store: KeyStore
    db: str

    async def sums(self) -> tuple[int, int, int, int]:
        """Records stored, distinct record ids, and the tokens in the raw table and in the daily rollup."""
        async with self.store.engine.connect() as conn:
            raw, ids, tokens = (await conn.execute(select(
                func.count(), func.count(func.distinct(usage_records.c.id)), func.sum(usage_records.c.total_tokens),
            ))).one()
            rolled = (await conn.execute(select(func.sum(usage_daily.c.total_tokens)))).scalar_one()
        return raw, ids, tokens, rolled


@contextlib.asynccontextmanager
async def maas_api(pg_server: PostgresServer) -> AsyncIterator[MaasApi]:
    db = f"t_{uuid.uuid4().hex[:12]}"
    store = KeyStore(make_engine(await pg_server.acreate_database(db)))
    await migrate.upgrade(store.engine)
    settings = MaasApiSettings(gateway_tokens=(SecretStr("gw"),))
    app = create_app(settings, StaticSources(), StaticAuthenticator({}), store=store)
    try:
        async with app.router.lifespan_context(app):
            app.state.maasapi_usage.clock = lambda: NOW
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://maas-api") as http:
                yield MaasApi(http, store, db)
    finally:
        await store.close()


async def test_sink_buffers_through_a_database_outage_and_nothing_is_lost_or_doubled(
    pg_server: PostgresServer,
) -> None:
    async with maas_api(pg_server) as api:
        sink = HttpBatchSink("http://maas-api", api.http, batch_size=7, flush_interval=3600, token="gw")
        sent = [gateway_record(i) for i in range(30)]
        for rec in sent[:10]:
            sink.emit(rec)
        assert await sink.flush() and sink.sent == 10
        await _set_connections(pg_server, api.db, allowed=False)
        for rec in sent[10:]:
            sink.emit(rec)
        assert not await sink.flush()  # 503 usage_store_unavailable: kept
        assert not await sink.flush()
        assert sink.pending == 20 and sink.failures >= 2 and sink.dropped == 0
        await _set_connections(pg_server, api.db, allowed=True)
        assert await sink.flush() and sink.pending == 0 and sink.sent == 30
        # the answer to a delivered batch got lost: the gateway sends it again -> not counted twice
        for rec in sent[:7]:
            sink.emit(rec)
        assert await sink.flush()
        # one malformed record among good ones: isolated by halving, only it is dropped
        bad = gateway_record(99).model_copy(update={"status": -1})  # skips validation, as a bug would
        good = [gateway_record(40 + i) for i in range(5)]
        for rec in [*good[:3], bad, *good[3:]]:
            sink.emit(rec)
        assert await sink.flush() and sink.rejected == 1 and sink.pending == 0
        # a record too old to be told from a resend, in an accepted batch: counted as refused, not as sent,
        # and not resent (maas-api lists it in `rejected[]` of a 2xx answer)
        stale = gateway_record(0).model_copy(update={"timestamp": NOW.timestamp() - 400 * 86400})
        fresh = gateway_record(60)
        sent_before = sink.sent
        for rec in (stale, fresh):
            sink.emit(rec)
        assert await sink.flush() and sink.rejected == 2 and sink.sent == sent_before + 1 and sink.pending == 0
        await sink.aclose()
        tokens = sum(r.total_tokens for r in [*sent, *good, fresh])
        assert await api.sums() == (36, 36, tokens, tokens)


async def test_batching_by_size_and_interval_delivers_every_record_exactly_once(pg_server: PostgresServer) -> None:
    """Many emitters at once while the background task flushes whole batches (size) and leftovers (a short
    interval) and callers flush explicitly, through a database outage in the middle: maas-api's table holds
    each record once."""
    rng = random.Random(23)
    sent = [gateway_record(i % 50) for i in range(1200)]
    async with maas_api(pg_server) as api:
        sink = HttpBatchSink("http://maas-api", api.http, batch_size=25, flush_interval=0.005, token="gw",
                             max_backoff=0.05, close_timeout=60)

        async def emitter(records: list[UsageRecord]) -> None:
            for rec in records:
                sink.emit(rec)
                if rng.random() < 0.3:
                    await asyncio.sleep(0)
                if rng.random() < 0.02:
                    await sink.flush()

        await asyncio.gather(*(emitter(sent[i:600:12]) for i in range(12)))
        await _set_connections(pg_server, api.db, allowed=False)  # 503s: batches stay buffered, then resent
        await asyncio.gather(*(emitter(sent[600 + i:900:12]) for i in range(12)))
        await _set_connections(pg_server, api.db, allowed=True)
        await asyncio.gather(*(emitter(sent[900 + i::12]) for i in range(12)))
        await sink.aclose()
        assert sink.failures > 0 and sink.dropped == 0 and sink.rejected == 0 and sink.undelivered == 0
        assert sink.pending == 0 and sink.sent == len(sent)
        tokens = sum(r.total_tokens for r in sent)
        assert await api.sums() == (len(sent), len(sent), tokens, tokens)

"""The gateway's HttpBatchSink against the real ingestion endpoint: a PostgreSQL outage loses nothing and
double-counts nothing; a malformed record is isolated and dropped without blocking the good ones."""

from __future__ import annotations

import uuid

import asyncpg
import httpx
from pydantic import SecretStr

from maasctl.gateway.usage import HttpBatchSink, UsageRecord
from maasctl.maasapi import migrate
from maasctl.maasapi.app import create_app
from maasctl.maasapi.auth import StaticAuthenticator
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import StaticSources
from maasctl.maasapi.store import KeyStore, make_engine
from maasctl.maasapi.usage.store import UsageStore
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


async def test_sink_buffers_through_a_database_outage_and_nothing_is_lost_or_doubled(
    pg_server: PostgresServer,
) -> None:
    db = f"t_{uuid.uuid4().hex[:12]}"
    store = KeyStore(make_engine(await pg_server.acreate_database(db)))
    await migrate.upgrade(store.engine)
    settings = MaasApiSettings(gateway_tokens=(SecretStr("gw"),))
    app = create_app(settings, StaticSources(), StaticAuthenticator({}), store=store)
    usage = UsageStore(store.engine)
    try:
        async with app.router.lifespan_context(app):
            app.state.maasapi_usage.clock = lambda: NOW
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://maas-api") as http:
                sink = HttpBatchSink("http://maas-api", http, batch_size=7, flush_interval=3600, token="gw")
                sent = [gateway_record(i) for i in range(30)]
                for rec in sent[:10]:
                    await sink.emit(rec)
                assert await sink.flush() and sink.sent == 10
                await _set_connections(pg_server, db, allowed=False)
                for rec in sent[10:]:
                    await sink.emit(rec)
                assert not await sink.flush()  # 503 usage_store_unavailable: kept
                assert not await sink.flush()
                assert sink.pending == 20 and sink.failures >= 2 and sink.dropped == 0
                await _set_connections(pg_server, db, allowed=True)
                assert await sink.flush() and sink.pending == 0 and sink.sent == 30
                # the answer to a delivered batch got lost: the gateway sends it again -> not counted twice
                for rec in sent[:7]:
                    await sink.emit(rec)
                assert await sink.flush()
                # one malformed record among good ones: isolated by halving, only it is dropped
                bad = gateway_record(99).model_copy(update={"status": -1})  # skips validation, as a bug would
                good = [gateway_record(40 + i) for i in range(5)]
                for rec in [*good[:3], bad, *good[3:]]:
                    await sink.emit(rec)
                assert await sink.flush() and sink.rejected == 1 and sink.pending == 0
                await sink.aclose()
        assert await usage.count_raw() == 35
        async with store.engine.connect() as conn:
            from sqlalchemy import func, select

            from maasctl.maasapi.usage.tables import usage_daily, usage_records

            raw = (await conn.execute(select(func.sum(usage_records.c.total_tokens)))).scalar_one()
            rolled = (await conn.execute(select(func.sum(usage_daily.c.total_tokens)))).scalar_one()
        assert raw == rolled == sum(r.total_tokens for r in [*sent, *good])
    finally:
        await store.close()

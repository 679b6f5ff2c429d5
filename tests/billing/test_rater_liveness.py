"""The rater says when it falls behind or stops: records behind and the age of the oldest unrated record as
metrics, and the billing operator's /readyz failing ("rater") once it has made no progress for
`rater_stall_seconds`, recovering when it rates again (real maas-api schema, SQLite and PostgreSQL)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from datetime import UTC, datetime, timedelta

import aiohttp
from prometheus_client import CollectorRegistry
from sqlalchemy import text

from maasctl.billing.controller.rater import Rater, RaterMetrics
from maasctl.billing.controller.usage_source import UsageReader
from maasctl.billing.ledger import Ledger
from maasctl.billing.rules.catalog import build_catalog
from maasctl.maasapi import migrate
from maasctl.maasapi.store import make_engine
from maasctl.maasapi.usage.store import UsageStore
from maasctl.testenv.controlplane import ControlPlane
from maasctl.testenv.postgres import PostgresServer

from .conftest import SETTINGS, eventually, start_billing
from .test_rater import objects, record


async def test_backlog_and_age_of_the_oldest_unrated_record_are_exported(ledger_url: str) -> None:
    engine = make_engine(ledger_url)
    await migrate.upgrade(engine)
    store = UsageStore(engine)
    ledger = Ledger.from_url(ledger_url)
    await ledger.create_schema()
    reader = UsageReader.from_url(ledger_url)
    registry = CollectorRegistry()
    catalog = build_catalog(**objects())
    rater = Rater(reader, ledger, lambda: catalog, page_size=2, metrics=RaterMetrics(registry))
    try:
        received = datetime.now(UTC) - timedelta(seconds=90)
        await store.ingest([record(i) for i in range(1, 8)], received)
        await rater.run_once(max_pages=1)  # 2 of 7 rated: 5 behind, received 90 s ago
        assert registry.get_sample_value("maasctl_billing_rater_records_behind") == 5
        age = registry.get_sample_value("maasctl_billing_rater_oldest_unrated_seconds")
        assert age is not None and 85 <= age < 600
        assert rater.stalled(3600) is None
        await rater.run_once()
        assert registry.get_sample_value("maasctl_billing_rater_records_behind") == 0
        assert registry.get_sample_value("maasctl_billing_rater_oldest_unrated_seconds") == 0
        assert registry.get_sample_value("maasctl_billing_rated_records_total", {"result": "charged"}) == 7

        await store.ingest([record(i) for i in range(8, 11)], received)
        await rater.run_once(max_pages=1)  # that page re-reads the lag window: the 3 new records stay behind
        rater.progress_at = time.monotonic() - 500  # as if nothing had been committed for 500 s
        reason = rater.stalled(120)
        assert reason is not None and "no progress for 500 s" in reason and "3 usage records behind" in reason
        since = registry.get_sample_value("maasctl_billing_rater_seconds_since_progress")
        assert since is not None and since >= 500
        assert rater.stalled(600) is None
    finally:
        await reader.close()
        await ledger.close()
        await engine.dispose()


async def _ready(port: int) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/readyz?verbose") as resp:
        return resp.status, await resp.text()


async def test_readyz_fails_while_the_rater_cannot_progress_and_recovers(billing_cluster: ControlPlane,
                                                                         billing_pg: PostgresServer) -> None:
    url = await billing_pg.acreate_database(f"live_{uuid.uuid4().hex[:10]}")
    engine = make_engine(url)
    await migrate.upgrade(engine)
    settings = dataclasses.replace(SETTINGS, ledger_url=url, usage_database_url=url, rate_interval_seconds=1,
                                   rater_stall_seconds=3, health_probe_bind_address="127.0.0.1:0")
    running = await start_billing(billing_cluster, settings)
    try:
        port = running.manager.health_port
        assert port is not None

        async def ready() -> bool:
            status, body = await _ready(port)
            return status == 200 and "[+]rater ok" in body

        await eventually(ready, timeout=60)
        async with engine.begin() as conn:  # the usage table goes away: every pass fails from now on
            await conn.execute(text("ALTER TABLE usage_records RENAME TO usage_records_away"))

        async def stalled() -> str | None:
            status, body = await _ready(port)
            return body if status == 500 and "[-]rater failed: the rater has made no progress" in body else None

        assert "no progress" in await eventually(stalled, timeout=60)
        async with engine.begin() as conn:
            await conn.execute(text("ALTER TABLE usage_records_away RENAME TO usage_records"))
        await eventually(ready, timeout=60)
    finally:
        await running.stop()
        await engine.dispose()

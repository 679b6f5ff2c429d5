"""The rater against maas-api's real usage store (SQLite and PostgreSQL): records become ledger charges once,
unpriced records are reported, organizations without a TenantAccount are not charged, and a rater killed
mid-batch (SIGKILL, its own process, PostgreSQL) and started again never double-charges."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from maasctl.billing import money
from maasctl.billing.controller.rater import Rater
from maasctl.billing.controller.usage_source import UsageReader
from maasctl.billing.ledger import Ledger, credit
from maasctl.billing.rules.catalog import build_catalog
from maasctl.billing.rules.rating import RatedLine, rate
from maasctl.maasapi import migrate
from maasctl.maasapi.store import make_engine
from maasctl.maasapi.usage.store import UsageEntry, UsageStore
from maasctl.testenv.postgres import PostgresServer

NS = "maas-gateway"
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1)
CREATED = (T0 - timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
API = "billing.opendatahub.io/v1alpha1"


def objects(*, pin: bool = True) -> dict[str, list[dict[str, Any]]]:
    book = {"apiVersion": API, "kind": "PriceBook",
            "metadata": {"name": "pb", "namespace": NS, "generation": 2, "creationTimestamp": CREATED},
            "spec": {"currency": "USD", "effectiveFrom": CREATED, "noticeDays": 0, "skus": [
                {"sku": "llama", "unit": "per-1M-tokens", "rates": {"prompt_tokens": "2.50",
                                                                     "completion_tokens": "10.00"}}]}}
    plan = {"apiVersion": API, "kind": "Plan", "metadata": {"name": "basic", "namespace": NS},
            "spec": {"limits": {}, "priceBookRef": "pb",
                     "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}}}
    tenant = {"apiVersion": API, "kind": "TenantAccount",
              "metadata": {"name": "ten-helix", "namespace": NS,
                           "labels": {"billing.opendatahub.io/organization-id": "helix"}},
              "spec": {"displayName": "Helix", "planRef": {"name": "basic"}, "billingMode": "Prepaid",
                       **({"priceBookPin": "pb"} if pin else {})}}
    return {"books": [book], "plans": [plan], "tenants": [tenant]}


def record(i: int, org: str = "helix", model: str = "team/llama", at: datetime | None = None,
           **kw: Any) -> UsageEntry:
    base: dict[str, Any] = dict(
        id=f"req-{i:06d}", ts=at or T0 + timedelta(seconds=i), username="alice", key_id="k", subscription="s/sub",
        organization_id=org, model=model, route="r", status=200, latency_ms=1.0, streamed=False,
        input_tokens=100 + i, cached_tokens=0, output_tokens=10 * i, reasoning_tokens=0,
        total_tokens=100 + 11 * i, charged_tokens=100 + 11 * i)
    return UsageEntry(**{**base, **kw})


async def usage_store(url: str) -> UsageStore:
    engine = make_engine(url)
    await migrate.upgrade(engine)
    return UsageStore(engine)


def expected_charge(entries: list[UsageEntry]) -> Decimal:
    catalog = build_catalog(**objects())
    total = Decimal(0)
    for e in entries:
        tenant = catalog.tenant_for(e.organization_id)
        assert tenant is not None
        book = catalog.book_for(tenant, e.ts)
        assert book is not None
        line = rate(_usage(e), book)
        assert isinstance(line, RatedLine)
        total += line.amount
    return total


def _usage(e: UsageEntry) -> Any:
    from maasctl.billing.rules.rating import Usage
    return Usage(record_id=e.id, time=e.ts, model=e.model, status=e.status, input_tokens=e.input_tokens,
                 output_tokens=e.output_tokens, total_tokens=e.total_tokens)


async def test_usage_records_are_rated_into_the_ledger_once(ledger_url: str) -> None:
    store = await usage_store(ledger_url)  # maas-api's tables and the ledger share one database here
    ledger = Ledger.from_url(ledger_url)
    await ledger.create_schema()
    reader = UsageReader.from_url(ledger_url)
    try:
        tenant = f"{NS}/ten-helix"
        await ledger.post([credit("c1", tenant, T0, Decimal("1"), reason="trial", actor="ops")])
        charged = [record(i) for i in range(1, 8)]
        batch = [*charged, record(100, org="nobody"), record(101, model="team/unknown"), record(102, org="")]
        await store.ingest(batch, datetime.now(UTC))
        catalog = build_catalog(**objects())
        touched: list[set[str]] = []
        rater = Rater(reader, ledger, lambda: catalog, page_size=3, on_page=lambda r: touched.append(r.tenants))
        report = await rater.run_once()
        assert (report.read, report.charged, report.unpriced, report.skipped) == (10, 7, 1, 2)
        assert report.tenants == {tenant} and touched
        assert await ledger.balance(tenant) == Decimal("1") - expected_charge(charged)
        count, unpriced = await rater.book.unpriced(tenant)
        assert count == 1 and "no SKU of PriceBook pb prices model 'team/unknown'" in unpriced[0].reason
        entry = (await ledger.entries(tenant, kind="usage", limit=1))[0]
        assert entry.details["priceBook"] == "pb" and entry.details["generation"] == 2
        assert entry.details["record"] == "req-000007"

        again = await rater.run_once()
        assert again.charged == 0 and again.known == 8  # the lag window is re-read, the ledger knows it
        later = [record(i) for i in range(8, 11)]
        await store.ingest(later, datetime.now(UTC))
        assert (await rater.run_once()).charged == 3
        assert await ledger.balance(tenant) == Decimal("1") - expected_charge(charged + later)
        assert await ledger.count(tenant) == 11 and await ledger.verify() == []
    finally:
        await reader.close()
        await ledger.close()
        await store.engine.dispose()


async def test_a_record_before_any_pricebook_is_in_force_is_reported(ledger_url: str) -> None:
    store = await usage_store(ledger_url)
    ledger = Ledger.from_url(ledger_url)
    await ledger.create_schema()
    reader = UsageReader.from_url(ledger_url)
    try:
        await store.ingest([record(1, at=T0 - timedelta(days=10))], datetime.now(UTC))
        catalog = build_catalog(**objects(pin=False))
        rater = Rater(reader, ledger, lambda: catalog)
        report = await rater.run_once()
        assert report.unpriced == 1
        _, items = await rater.book.unpriced(f"{NS}/ten-helix")
        assert "no PriceBook is in force" in items[0].reason
    finally:
        await reader.close()
        await ledger.close()
        await store.engine.dispose()


@pytest.mark.postgres
async def test_a_rater_killed_mid_batch_never_double_charges(billing_pg: PostgresServer, tmp_path: Path) -> None:
    url = await billing_pg.acreate_database("killed_rater")
    store = await usage_store(url)
    ledger = Ledger.from_url(url)
    await ledger.create_schema()
    total = 3000
    try:
        entries = [record(i) for i in range(total)]
        for i in range(0, total, 500):
            await store.ingest(entries[i: i + 500], datetime.now(UTC))
        path = tmp_path / "objects.json"
        path.write_text(json.dumps(objects()))
        argv = [sys.executable, "-m", "tests.billing.rate_process", url, url, str(path), "20"]
        root = Path(__file__).parents[2]  # the test's module, and this checkout's maasctl (as the test imports it)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "src")])}
        kills = 0
        for _ in range(2):  # kill it twice, at different points, mid-way through
            proc = await asyncio.create_subprocess_exec(*argv, env=env, stdout=asyncio.subprocess.DEVNULL,
                                                        stderr=asyncio.subprocess.DEVNULL)
            try:
                if await _grows(ledger, proc, by=400):
                    proc.send_signal(signal.SIGKILL)
                    kills += 1
            finally:
                await asyncio.wait_for(proc.wait(), 30)
        assert kills == 2
        assert 0 < await ledger.count() < total
        done = await asyncio.create_subprocess_exec(*argv, env=env, stdout=asyncio.subprocess.DEVNULL,
                                                    stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(done.communicate(), 240)
        assert done.returncode == 0, err[-2000:]
        tenant = f"{NS}/ten-helix"
        assert await ledger.count(tenant) == total
        assert await ledger.balance(tenant) == -expected_charge(entries)
        assert await ledger.verify() == []
        assert money.quantize(await ledger.spend(tenant, T0 - timedelta(days=1))) == expected_charge(entries)
    finally:
        await ledger.close()
        await store.engine.dispose()


async def _grows(ledger: Ledger, proc: asyncio.subprocess.Process, by: int) -> bool:
    """True once the ledger holds `by` more entries while `proc` still runs (False: it finished first)."""
    start = await ledger.count()
    for _ in range(60_000):
        if proc.returncode is not None:
            return False
        if await ledger.count() >= start + by:
            return True
        await asyncio.sleep(0.01)
    return False


async def test_a_committed_tenant_owes_its_monthly_fee_without_any_usage(ledger_url: str) -> None:
    """The fee is what the tenant signed up for: a month without a rated record still charges it, once, and a
    record rated later in the month does not charge it again."""
    store = await usage_store(ledger_url)
    ledger = Ledger.from_url(ledger_url)
    await ledger.create_schema()
    reader = UsageReader.from_url(ledger_url)
    try:
        objs = objects()
        objs["books"][0]["spec"]["committedUse"] = [{"name": "starter", "tokensPerSecond": 1,
                                                     "monthlyPrice": "99.50"}]
        objs["tenants"][0]["metadata"]["annotations"] = {"billing.opendatahub.io/committed-use": "starter"}
        plain = {**objs["tenants"][0], "metadata": {"name": "ten-plain", "namespace": NS,
                                                     "labels": {"billing.opendatahub.io/organization-id": "plain"}}}
        objs["tenants"].append(plain)
        catalog = build_catalog(**objs)
        rater = Rater(reader, ledger, lambda: catalog)
        now = datetime.now(UTC)
        tenant = f"{NS}/ten-helix"
        assert await rater.charge_commitments(now) == 1  # no usage at all this month
        assert await rater.charge_commitments(now) == 0
        assert await ledger.balance(tenant) == Decimal("-99.50")
        assert await ledger.balance(f"{NS}/ten-plain") == 0  # not committed: no fee
        await store.ingest([record(1, at=now)], datetime.now(UTC))
        assert (await rater.run_once()).charged == 1
        fees = await ledger.entries(tenant, kind="commitment", limit=10)
        assert [f.key for f in fees] == [f"commitment:{tenant}:starter:{now:%Y-%m}"]
        assert await ledger.verify() == []
    finally:
        await reader.close()
        await ledger.close()
        await store.engine.dispose()


async def test_usage_from_before_the_tenant_existed_is_showback_whenever_it_is_read(ledger_url: str) -> None:
    """A record made before its organization's TenantAccount was created is never charged, even when a pass
    reads it (the lag window re-reads the last 30 s) after the account appeared; one made after is charged."""
    store = await usage_store(ledger_url)
    ledger = Ledger.from_url(ledger_url)
    await ledger.create_schema()
    reader = UsageReader.from_url(ledger_url)
    try:
        created = T0 + timedelta(seconds=50)
        objs = objects()
        objs["tenants"][0]["metadata"]["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
        catalog = build_catalog(**objs)
        before, same_second, after = record(1, at=created - timedelta(seconds=3)), \
            record(2, at=created + timedelta(milliseconds=400)), record(3, at=created + timedelta(seconds=2))
        await store.ingest([before, same_second, after], datetime.now(UTC))
        report = await Rater(reader, ledger, lambda: catalog).run_once()
        assert (report.charged, report.skipped, report.unpriced) == (1, 2, 0)
        assert await ledger.balance(f"{NS}/ten-helix") == -expected_charge([after])
    finally:
        await reader.close()
        await ledger.close()
        await store.engine.dispose()

"""Benchmark issue 18: rating throughput, the ledger's write rate on PostgreSQL, and the time from a balance
crossing zero to the first refused request.

Run: ``.venv/bin/python benchmarks/billing_ledger_bench.py [--freeze]`` (``--freeze`` also starts the local
stack: control plane, controller, maas-api, gateway, test model and ``maasctl billing run``).

Method:
  * rate (pure): `rating.rate` on 50,000 records (the seed's llama SKU, cached and reasoning tokens, a volume
    tier), after a warm-up; records/s.
  * rater pass (PostgreSQL): 20,000 records in maas-api's `usage_records` (real schema, real PostgreSQL from the
    Debian package), one `Rater.run_once` with 500-record pages: keyset read, rating, one transaction per page
    writing the charges and the cursor; records/s, median of 3 fresh databases.
  * ledger writes (PostgreSQL): `Ledger.post` of 20,000 usage charges in batches of 500, and 1,000 single-entry
    transactions (one commit each); entries/s, median of 3.
  * freeze (``--freeze``): a Prepaid tenant with 0.05 USD calls a model at 0.02 a call every 50 ms through the
    gateway. t_cross is when the ledger recorded the charge that took the balance below zero (`recorded_at`),
    t_403 when the client got the first refusal; also from the request whose record crossed zero (its time)
    to the refusal, which adds the gateway's usage flush (2 s) to maas-api. 5 runs, median and max.
"""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from maasctl.billing.api import PriceBookSpec
from maasctl.billing.controller.rater import Rater
from maasctl.billing.controller.usage_source import UsageReader
from maasctl.billing.ledger import Ledger, usage_charge
from maasctl.billing.rules.catalog import build_catalog
from maasctl.billing.rules.rating import Book, Context, Usage, rate
from maasctl.testenv.postgres import PostgresServer, start_postgres

NS = "bench"
T0 = datetime(2026, 9, 10, tzinfo=UTC)
SPEC = PriceBookSpec.model_validate({
    "currency": "USD", "effectiveFrom": "2026-09-01T00:00:00Z", "noticeDays": 0,
    "skus": [{"sku": "llama-3-70b", "unit": "per-1M-tokens",
              "rates": {"prompt_tokens": "2.50", "completion_tokens": "10.00", "reasoning_tokens": "10.00",
                        "cached_tokens": "0.625"}}],
    "volumeTiers": [{"thresholdTokens": 1000000, "discountPct": "8"}]})


def bench_rate(n: int = 50_000) -> float:
    book = Book("pb", 1, SPEC)
    usages = [Usage(f"r{i}", T0, "team/llama-3-70b", input_tokens=1000 + i % 97, cached_tokens=i % 200,
                    output_tokens=300 + i % 13, reasoning_tokens=i % 50) for i in range(n)]
    ctx = Context(month_tokens_before=2_000_000)
    for u in usages[:1000]:
        rate(u, book, ctx)
    start = time.perf_counter()
    for u in usages:
        rate(u, book, ctx)
    return n / (time.perf_counter() - start)


def objects() -> dict[str, list[dict[str, Any]]]:
    api = "billing.opendatahub.io/v1alpha1"
    book = {"apiVersion": api, "kind": "PriceBook",
            "metadata": {"name": "pb", "namespace": NS, "generation": 1, "creationTimestamp": "2026-08-01T00:00:00Z"},
            "spec": SPEC.model_dump(mode="json", by_alias=True, exclude_none=True)}
    plan = {"apiVersion": api, "kind": "Plan", "metadata": {"name": "p", "namespace": NS},
            "spec": {"limits": {}, "priceBookRef": "pb",
                     "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}}}
    tenants = [{"apiVersion": api, "kind": "TenantAccount", "metadata": {"name": f"t{i}", "namespace": NS},
                "spec": {"displayName": "t", "planRef": {"name": "p"}, "billingMode": "Prepaid"}} for i in range(10)]
    return {"books": [book], "plans": [plan], "tenants": tenants}


async def bench_rater(pg: PostgresServer, n: int = 20_000) -> float:
    from maasctl.maasapi import migrate
    from maasctl.maasapi.store import make_engine
    from maasctl.maasapi.usage.store import UsageEntry, UsageStore

    url = await pg.acreate_database(f"r_{uuid.uuid4().hex[:8]}")
    engine = make_engine(url)
    await migrate.upgrade(engine)
    store = UsageStore(engine)
    rows = [UsageEntry(id=f"req-{i:07d}", ts=T0 + timedelta(milliseconds=i), username="u", key_id="k",
                       subscription="s/s", organization_id=f"t{i % 10}", model="team/llama-3-70b", route="r",
                       status=200, latency_ms=1.0, streamed=False, input_tokens=1000, cached_tokens=100,
                       output_tokens=300, reasoning_tokens=20, total_tokens=1300, charged_tokens=1300)
            for i in range(n)]
    for i in range(0, n, 2000):
        await store.ingest(rows[i: i + 2000], datetime.now(UTC))
    ledger = Ledger.from_url(url)
    await ledger.create_schema()
    reader = UsageReader.from_url(url)
    catalog = build_catalog(**objects())
    try:
        start = time.perf_counter()
        report = await Rater(reader, ledger, lambda: catalog, page_size=500).run_once()
        elapsed = time.perf_counter() - start
        assert report.charged == n, report
        return n / elapsed
    finally:
        await reader.close()
        await ledger.close()
        await engine.dispose()


async def bench_ledger(pg: PostgresServer, n: int = 20_000, singles: int = 1000) -> tuple[float, float]:
    url = await pg.acreate_database(f"l_{uuid.uuid4().hex[:8]}")
    ledger = Ledger.from_url(url)
    await ledger.create_schema()
    try:
        txs = [usage_charge(f"usage:b{i}", f"{NS}/t{i % 10}", T0, Decimal("0.001234"), currency="USD", tokens=1300,
                            details={"record": f"b{i}"}) for i in range(n)]
        start = time.perf_counter()
        for i in range(0, n, 500):
            await ledger.post(txs[i: i + 500])
        batched = n / (time.perf_counter() - start)
        one = [usage_charge(f"usage:s{i}", f"{NS}/t0", T0, Decimal("0.001"), currency="USD", tokens=1,
                            details={}) for i in range(singles)]
        start = time.perf_counter()
        for tx in one:
            await ledger.post([tx])
        single = singles / (time.perf_counter() - start)
        assert await ledger.verify() == []
        return batched, single
    finally:
        await ledger.close()


async def main() -> None:
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}")
    print(f"rate (pure): {bench_rate():,.0f} records/s")
    pg = start_postgres()
    try:
        raters = [await bench_rater(pg) for _ in range(3)]
        print(f"rater pass on PostgreSQL (read + rate + write, 500/page): {statistics.median(raters):,.0f} records/s "
              f"(runs: {', '.join(f'{r:,.0f}' for r in raters)})")
        ledgers = [await bench_ledger(pg) for _ in range(3)]
        print(f"ledger writes on PostgreSQL, batches of 500: {statistics.median(b for b, _ in ledgers):,.0f} "
              f"entries/s; one entry per commit: {statistics.median(s for _, s in ledgers):,.0f} entries/s")
    finally:
        pg.stop()
    if "--freeze" in sys.argv:
        from billing_freeze import freeze_runs  # beside this script

        crossings = await freeze_runs(5)
        ledger_to_403 = [c[0] for c in crossings]
        request_to_403 = [c[1] for c in crossings]
        print(f"balance crossing zero (ledger) -> first 403: median {statistics.median(ledger_to_403):.2f} s, "
              f"max {max(ledger_to_403):.2f} s; the request that crossed -> first 403: median "
              f"{statistics.median(request_to_403):.2f} s, max {max(request_to_403):.2f} s")


if __name__ == "__main__":
    asyncio.run(main())

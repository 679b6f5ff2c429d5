"""Benchmark: usage metering on PostgreSQL, loopback only, bounded in count.

1. Ingest: the gateway's batch format POSTed to maas-api (uvicorn child process) at /internal/v1/usage,
   batches of 1000 records, 4 in flight -> records/s through HTTP, validation, raw insert and both rollups.
2. Volume: `--records` more records (default 1,000,000; `--users` users x 2 keys x 10 models x 50
   subscriptions, i.e. 20,000 distinct key/model combinations at the default 1000 users)
   are generated inside PostgreSQL (generate_series) into usage_records, and the rollups are built from them
   with the same keys the ingest path uses; a check compares rollup and raw totals.
3. A 1-year report (GET /v1/usage/report?range=1y) and a monthly CSV export grouped by user
   (GET /v1/usage/export?groupBy=user&by=month&range=1y): wall time, rows, and the server process' peak RSS
   (VmHWM) before and after (flat memory = the export streams). The report query is also timed in process
   from the full rollups (what it read before migration 0008) and from the subscription/user rollups,
   interleaved in the same run.

    .venv/bin/python benchmarks/usage_bench.py [--records 1000000] [--ingest 100000] [--users 1000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

TOKEN = "bench-gw"
ADMIN = "bench-admin"


def serve_child(database_url: str, port: int) -> None:
    """Child process: maas-api on uvicorn with a static admin identity (no cluster needed)."""
    import logging

    import structlog
    import uvicorn
    from pydantic import SecretStr

    from maasctl.eventloop import tune_gc
    from maasctl.maasapi.app import create_app
    from maasctl.maasapi.auth import Identity, StaticAuthenticator
    from maasctl.maasapi.settings import MaasApiSettings
    from maasctl.maasapi.sources import StaticSources

    log_file = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    structlog.configure(processors=[structlog.processors.JSONRenderer()],
                        logger_factory=structlog.WriteLoggerFactory(log_file), cache_logger_on_first_use=True)
    logging.basicConfig(level=logging.WARNING)
    settings = MaasApiSettings(database_url=database_url, port=port, max_body_bytes=1024 * 1024,
                               gateway_tokens=(SecretStr(TOKEN),), usage_max_batch_records=1000)
    authn = StaticAuthenticator({ADMIN: Identity("admin", ("system:authenticated",))}, admins=["admin"])
    app = create_app(settings, StaticSources(), authn)
    tune_gc()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="on")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def peak_rss_mb(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) of a process in MiB."""
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                values[line.split(":")[0]] = int(line.split()[1]) / 1024
    return values["VmRSS"], values["VmHWM"]


def batch_body(start: int, n: int, users: int, now: float) -> bytes:
    records = []
    for i in range(start, start + n):
        u = i * 7919 % users
        records.append({
            "timestamp": now - (i % 86400), "request_id": f"ing-{i}", "user": f"user-{u}",
            "key_id": f"key-{u}-{i // 7 % 2}", "subscription": f"ns/sub-{u % 50}", "organization": f"org-{u % 7}",
            "model": f"llm/model-{i // 13 % 10}", "route": "llm/route", "status": 200, "latency_ms": 12.5,
            "input_tokens": 100 + i % 900, "cached_tokens": i % 100, "output_tokens": 50 + i % 450,
            "reasoning_tokens": i % 30, "total_tokens": 150 + i % 900 + i % 450, "charged_tokens": 0,
        })
    return json.dumps({"records": records}).encode()


async def measure_ingest(http: httpx.AsyncClient, total: int, users: int, concurrency: int = 4) -> float:
    now = time.time()
    bodies = [batch_body(i, min(1000, total - i), users, now) for i in range(0, total, 1000)]
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    queue = list(reversed(bodies))

    async def worker() -> None:
        while queue:
            body = queue.pop()
            r = await http.post("/internal/v1/usage", content=body, headers=headers)
            if r.status_code != 200:
                raise RuntimeError(f"ingest failed: {r.status_code} {r.text[:200]}")

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return total / (time.perf_counter() - t0)


GENERATE = """
INSERT INTO usage_records (id, ts, received_at, username, key_id, subscription, organization_id, model, route,
    status, latency_ms, streamed, input_tokens, cached_tokens, output_tokens, reasoning_tokens, total_tokens,
    charged_tokens)
SELECT 'gen-' || g, $1::timestamptz + (g::float8 / $2) * interval '365 days', now(),
    'user-' || (g * 7919 % $3), 'key-' || (g * 7919 % $3) || '-' || (g / 7 % 2),
    'ns/sub-' || ((g * 7919 % $3) % 50), 'org-' || ((g * 7919 % $3) % 7), 'llm/model-' || (g / 13 % 10), 'llm/route',
    CASE WHEN g % 50 = 0 THEN 429 ELSE 200 END, 12.5, false, 100 + g % 900, g % 100, 50 + g % 450, g % 30,
    150 + g % 900 + g % 450, 0
FROM generate_series($4::bigint, $5::bigint) g
"""
COUNTERS = """count(*), count(*) FILTER (WHERE status >= 400), sum(input_tokens), sum(cached_tokens),
    sum(output_tokens), sum(reasoning_tokens), sum(total_tokens)"""
ROLLUP_COLS = "subscription, username, key_id, model, organization_id"
USER_ROLLUP_COLS = "subscription, username, organization_id"
VALUE_COLS = ("requests, failed_requests, input_tokens, cached_tokens, output_tokens, reasoning_tokens, "
              "total_tokens")


def build_rollup(table: str, time_col: str, time_expr: str, extra_col: str = "", extra_expr: str = "",
                 keys: str = ROLLUP_COLS) -> str:
    """INSERT ... SELECT ... GROUP BY for one rollup table, with the keys and sums the ingest path uses."""
    sums = ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in VALUE_COLS.split(", "))
    group = ", ".join(str(i) for i in range(1, 2 + len(keys.split(", ")) + bool(extra_col)))
    return f"""
INSERT INTO {table} ({time_col}, {keys}{extra_col}, {VALUE_COLS})
SELECT {time_expr}, {keys}{extra_expr}, {COUNTERS}
FROM usage_records WHERE id LIKE 'gen-%' GROUP BY {group}
ON CONFLICT ({time_col}, {keys}) DO UPDATE SET {sums}
"""


BUILDERS = (
    build_rollup("usage_hourly", "bucket", "date_trunc('hour', ts, 'UTC')"),
    build_rollup("usage_daily", "day", "(ts AT TIME ZONE 'UTC')::date", ", month",
                 ", to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM')"),
    build_rollup("usage_monthly", "month_start", "date_trunc('month', ts, 'UTC')::date"),
    build_rollup("usage_user_daily", "day", "(ts AT TIME ZONE 'UTC')::date", ", month",
                 ", to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM')", keys=USER_ROLLUP_COLS),
    build_rollup("usage_user_monthly", "month_start", "date_trunc('month', ts, 'UTC')::date", keys=USER_ROLLUP_COLS),
)
ROLLUP_TABLES = ("usage_hourly", "usage_daily", "usage_monthly", "usage_user_daily", "usage_user_monthly")


async def generate(dsn: str, n: int, users: int) -> dict[str, float]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        start = datetime.now(UTC) - timedelta(days=365)
        t0 = time.perf_counter()
        step = 1_000_000
        for lo in range(1, n + 1, step):
            await conn.execute(GENERATE, start, n, users, lo, min(n, lo + step - 1))
        t1 = time.perf_counter()
        for stmt in BUILDERS:
            await conn.execute(stmt)
        await conn.execute("ANALYZE")
        t2 = time.perf_counter()
        raw = await conn.fetchval("SELECT sum(total_tokens) FROM usage_records")
        sums = [await conn.fetchval(f"SELECT sum(total_tokens) FROM {t}") for t in ROLLUP_TABLES]
        if any(total != raw for total in sums):
            raise RuntimeError(f"rollups disagree with raw rows: {raw} {sums}")
        return {
            "generate_s": round(t1 - t0, 1),
            "rollup_build_s": round(t2 - t1, 1),
            "raw_rows": await conn.fetchval("SELECT count(*) FROM usage_records"),
            **{f"{t.removeprefix('usage_')}_rows": await conn.fetchval(f"SELECT count(*) FROM {t}")
               for t in ROLLUP_TABLES},
            "db_size_mb": round(await conn.fetchval("SELECT pg_database_size(current_database())") / 2**20),
        }
    finally:
        await conn.close()


async def timed_get(http: httpx.AsyncClient, path: str, params: dict[str, str], pid: int) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    _, before = peak_rss_mb(pid)
    t0 = time.perf_counter()
    size = 0
    lines = 0
    first_byte = None
    async with http.stream("GET", path, params=params, headers=headers) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{path}: {r.status_code} {(await r.aread())[:200]!r}")
        async for chunk in r.aiter_bytes():
            if first_byte is None:
                first_byte = time.perf_counter() - t0
            size += len(chunk)
            lines += chunk.count(b"\n")
    elapsed = time.perf_counter() - t0
    _, after = peak_rss_mb(pid)
    return {"seconds": round(elapsed, 3), "first_byte_s": round(first_byte or 0, 3), "bytes": size,
            "lines": lines, "server_peak_rss_mb_before": round(before, 1), "server_peak_rss_mb_after": round(after, 1)}


async def report_full_vs_user_rollups(url: str, rounds: int = 5) -> dict[str, float]:
    """The 1-year report query in process, read from the full rollups (as before migration 0008) and from the
    subscription/user rollups, interleaved in one run; median seconds of each."""
    import statistics

    from sqlalchemy.ext.asyncio import create_async_engine

    from maasctl.maasapi.usage import store as usage_store
    from maasctl.maasapi.usage.ranges import resolve

    engine = create_async_engine(url)
    usage = usage_store.UsageStore(engine)
    rng = resolve(datetime.now(UTC), "1y", None, None)
    chosen = usage_store._by_user
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        for _ in range(rounds):
            for narrow in (False, True):
                usage_store._by_user = (lambda group: narrow)  # type: ignore[assignment]  # noqa: B023
                t0 = time.perf_counter()
                await usage.report(rng, ("username", "subscription"), usage_store.UsageFilter())
                times[narrow].append(time.perf_counter() - t0)
    finally:
        usage_store._by_user = chosen
        await engine.dispose()
    return {"full_rollups_s": round(statistics.median(times[False]), 3),
            "user_rollups_s": round(statistics.median(times[True]), 3)}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from sqlalchemy.ext.asyncio import create_async_engine

    from maasctl.maasapi import migrate
    from maasctl.testenv.postgres import start_postgres

    server = start_postgres()
    child = None
    try:
        db = f"usage_{uuid.uuid4().hex[:8]}"
        url = await server.acreate_database(db)
        engine = create_async_engine(url)
        await migrate.upgrade(engine)
        await engine.dispose()
        port = free_port()
        child = subprocess.Popen([sys.executable, __file__, "--serve", url, str(port)])  # noqa: ASYNC220
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=600) as http:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if (await http.get("/health")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError("maas-api did not start")
                await asyncio.sleep(0.2)
            result: dict[str, Any] = {"machine": f"{platform.machine()} {os.cpu_count()} cpu",
                                      "records": args.records, "users": args.users}
            result["ingest_records_per_s"] = round(await measure_ingest(http, args.ingest, args.users))
            result["volume"] = await generate(server.url_for(db).replace("+asyncpg", ""), args.records, args.users)
            result["report_1y"] = await timed_get(http, "/v1/usage/report", {"range": "1y"}, child.pid)
            result["report_1y_again"] = await timed_get(http, "/v1/usage/report", {"range": "1y"}, child.pid)
            result["report_1y_in_process"] = await report_full_vs_user_rollups(url)
            result["export_user_month_1y"] = await timed_get(
                http, "/v1/usage/export", {"groupBy": "user", "by": "month", "range": "1y"}, child.pid)
            if not args.skip_key_export:  # the largest export: one row per key and day
                result["export_key_day_1y"] = await timed_get(
                    http, "/v1/usage/export", {"groupBy": "key", "by": "day", "range": "1y"}, child.pid)
            return result
    finally:
        if child is not None:
            child.terminate()
            child.wait(timeout=30)
        server.stop()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve_child(sys.argv[2], int(sys.argv[3]))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=1_000_000, help="records generated for report/export")
    p.add_argument("--ingest", type=int, default=100_000, help="records ingested over HTTP (rate)")
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--json", action="store_true")
    p.add_argument("--skip-key-export", action="store_true", help="skip the per-key daily export")
    args = p.parse_args()
    args.records = min(args.records, 20_000_000)
    args.ingest = min(args.ingest, 1_000_000)
    result = asyncio.run(main_async(args))
    print(json.dumps(result, indent=None if args.json else 2))


if __name__ == "__main__":
    main()

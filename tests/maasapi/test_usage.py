"""Usage metering end to end (in-process ASGI) on SQLite and PostgreSQL: idempotent, atomic ingestion,
rejections, and reports / CSV exports checked against totals computed here from the raw records."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from sqlalchemy import func, select, text, update

from maasctl.maasapi import migrate
from maasctl.maasapi.app import create_app
from maasctl.maasapi.auth import StaticAuthenticator
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import StaticSources
from maasctl.maasapi.store import KeyStore
from maasctl.maasapi.usage.tables import (
    usage_daily,
    usage_hourly,
    usage_monthly,
    usage_records,
    usage_user_daily,
    usage_user_monthly,
)
from tests.error_fields import error_code

from .conftest import USERS as TOKENS_BY_USER
from .conftest import auth, sample_subscriptions
from .usage_data import COUNTS, NOW, batches, expected, make_records, ts_of

GW = {"Authorization": "Bearer gw-secret"}
ROLLUPS = (usage_hourly, usage_daily, usage_monthly, usage_user_daily, usage_user_monthly)
MAX_RECORDS = 20


def usage_settings(**over: Any) -> MaasApiSettings:
    values: dict[str, Any] = {
        "max_body_bytes": 16 * 1024,
        "gateway_tokens": (SecretStr("old-secret"), SecretStr("gw-secret")),
        "usage_max_batch_records": MAX_RECORDS,
        **over,
    }
    return MaasApiSettings(**values)


@dataclass
class Env:
    client: httpx.AsyncClient
    app: FastAPI
    store: KeyStore


@pytest.fixture
async def env(store: KeyStore) -> AsyncIterator[Env]:
    app = create_app(usage_settings(), StaticSources(sample_subscriptions()),
                     StaticAuthenticator(TOKENS_BY_USER, admins=["admin"]), store=store)
    async with app.router.lifespan_context(app):
        app.state.maasapi_usage.clock = lambda: NOW
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://maas-api") as c:
            yield Env(c, app, store)


async def post(env: Env, records: list[dict[str, Any]], headers: dict[str, str] = GW) -> httpx.Response:
    return await env.client.post("/internal/v1/usage", json={"records": records}, headers=headers)


def set_clock(env: Env, now: datetime) -> None:
    env.app.state.maasapi_usage.clock = lambda: now


async def ingest_all(env: Env, records: list[dict[str, Any]]) -> None:
    """Ingest `records` as the gateway sends them: each batch when its newest record happened (records older
    than the raw retention are refused on arrival), then the clock is back at NOW."""
    try:
        for batch in batches(sorted(records, key=ts_of), MAX_RECORDS):
            set_clock(env, max(ts_of(rec) for rec in batch))
            r = await post(env, batch)
            assert r.status_code == 200 and "rejected" not in r.json(), r.text
    finally:
        set_clock(env, NOW)


async def row_counts(store: KeyStore) -> tuple[int, int, int]:
    async with store.engine.connect() as conn:
        n = [(await conn.execute(select(func.count()).select_from(t))).scalar_one()
             for t in (usage_records, usage_hourly, usage_daily)]
    return n[0], n[1], n[2]


async def raw_token_sum(store: KeyStore) -> int:
    async with store.engine.connect() as conn:
        return int((await conn.execute(select(func.coalesce(func.sum(usage_records.c.total_tokens), 0)))).scalar_one())


def counts_of(row: dict[str, Any]) -> dict[str, int]:
    camel = {"requests": "requests", "failed_requests": "failedRequests", "total_tokens": "totalTokens",
             "input_tokens": "inputTokens", "cached_tokens": "cachedTokens", "output_tokens": "outputTokens",
             "reasoning_tokens": "reasoningTokens"}
    return {k: int(row[v]) for k, v in camel.items()}


# --- ingestion ---------------------------------------------------------------------------------------------


async def test_ingestion_is_idempotent_and_rollups_match_raw(env: Env) -> None:
    records = make_records(60)
    first = await post(env, records[:20])
    assert first.status_code == 200 and first.json() == {"accepted": 20, "duplicates": 0}
    again = await post(env, records[:20])  # a retried batch whose answer was lost
    assert again.json() == {"accepted": 0, "duplicates": 20}
    overlap = await post(env, records[10:30])
    assert overlap.json() == {"accepted": 10, "duplicates": 10}
    inside = await post(env, [records[30], records[30], records[31]])  # the same id twice in one batch
    assert inside.json() == {"accepted": 2, "duplicates": 1}
    raw, hourly, daily = await row_counts(env.store)
    assert raw == 32 and 0 < hourly <= 32 and 0 < daily <= hourly
    want = sum(r["total_tokens"] for r in records[:32])
    assert await raw_token_sum(env.store) == want
    async with env.store.engine.connect() as conn:
        for t in ROLLUPS:
            got = (await conn.execute(select(func.sum(t.c.total_tokens), func.sum(t.c.requests)))).one()
            assert (int(got[0]), int(got[1])) == (want, 32), t.name
    stored = await env.client.get("/v1/usage/report", params={"range": "90d"}, headers=auth("admin"))
    assert counts_of(stored.json()["totals"])["total_tokens"] == want


async def test_raw_records_are_complete_and_immutable(env: Env) -> None:
    rec = make_records(1)[0]
    await ingest_all(env, [rec])
    async with env.store.engine.connect() as conn:
        row = (await conn.execute(select(usage_records))).one()._mapping
    assert row["id"] == rec["request_id"] and row["ts"] == ts_of(rec) and row["ts"].tzinfo is not None
    assert (row["username"], row["key_id"], row["subscription"], row["organization_id"], row["model"],
            row["route"], row["status"], row["streamed"]) == (
        rec["user"], rec["key_id"], rec["subscription"], rec["organization"], rec["model"], rec["route"],
        rec["status"], rec["streamed"])
    assert [row[k] for k in ("input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens",
                             "total_tokens", "charged_tokens")] == [
        rec[k] for k in ("input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens", "total_tokens",
                         "charged_tokens")]
    with pytest.raises(Exception, match="immutable"):
        async with env.store.engine.begin() as conn:
            await conn.execute(update(usage_records).values(total_tokens=0))
    assert await raw_token_sum(env.store) == rec["total_tokens"]


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r.update(total_tokens=-1), "records.5.total_tokens"),
        (lambda r: r.update(input_tokens=True), "records.5.input_tokens"),
        (lambda r: r.update(input_tokens="12"), "records.5.input_tokens"),
        (lambda r: r.pop("status"), "records.5.status"),
        (lambda r: r.update(prompt="secret text"), "records.5.prompt"),
        (lambda r: r.update(request_id=""), "records.5.request_id"),
        (lambda r: r.update(timestamp="2026-03-01T00:00:00"), "records.5.timestamp"),  # no offset
        (lambda r: r.update(user="u" * 300), "records.5.user"),
    ],
)
async def test_malformed_batches_are_rejected_whole(env: Env, mutate: Any, field: str) -> None:
    records = make_records(10)
    mutate(records[5])
    r = await post(env, records)
    assert r.status_code == 400
    body = r.json()["error"]
    assert body["code"] == "invalid_request" and any(d["field"].startswith(field) for d in body["details"])
    assert await row_counts(env.store) == (0, 0, 0)  # the 9 good records were not stored either


async def test_oversized_unauthenticated_and_odd_batches_are_rejected(env: Env) -> None:
    records = make_records(MAX_RECORDS + 1)
    r = await post(env, records)
    assert r.status_code == 413 and error_code(r) == "batch_too_large"
    big = make_records(1)[0] | {"user": "x" * 250, "organization": "o" * 250, "route": "r" * 300}
    r = await post(env, [big | {"request_id": f"r{i}"} for i in range(MAX_RECORDS)])
    assert r.status_code == 413 and error_code(r) == "request_too_large"  # body > max_body_bytes
    future = make_records(2)
    future[1]["timestamp"] = (NOW + timedelta(hours=2)).isoformat()
    r = await post(env, future)
    assert r.status_code == 400 and error_code(r) == "timestamp_in_future"
    assert r.json()["error"]["details"] == [{"field": "records.1.timestamp"}]
    r = await post(env, [])
    assert r.status_code == 400 and error_code(r) == "invalid_request"
    r = await env.client.post("/internal/v1/usage", content=b'{"records": [',
                                headers={**GW, "Content-Type": "application/json"})
    assert r.status_code == 400 and error_code(r) == "invalid_json"
    assert (await post(env, make_records(1), headers={})).status_code == 401
    wrong = await post(env, make_records(1), headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and error_code(wrong) == "unauthenticated"
    user_token = await post(env, make_records(1), headers=auth("admin"))  # users cannot forge usage
    assert user_token.status_code == 401
    assert await row_counts(env.store) == (0, 0, 0)
    rotated = await post(env, make_records(1), headers={"Authorization": "Bearer old-secret"})
    assert rotated.status_code == 200


OLDEST = NOW - timedelta(days=90) + timedelta(days=1)  # the default raw retention, less the margin


async def monthly_tokens(store: KeyStore) -> int:
    async with store.engine.connect() as conn:
        return int((await conn.execute(select(func.coalesce(func.sum(usage_monthly.c.total_tokens), 0)))).scalar_one())


@pytest.mark.parametrize("stale", [
    (NOW - timedelta(days=400)).timestamp(),
    (NOW - timedelta(days=400)).isoformat(),
    1.0,  # the Unix epoch (contract.usage accepts anything after it)
    (NOW - timedelta(days=91)).isoformat(),  # older than the retention itself: purgeable at once
    (NOW - timedelta(days=89, seconds=1)).timestamp(),  # within the retention, but inside the margin
    (OLDEST - timedelta(microseconds=1)).isoformat(),  # just before the boundary
])
async def test_records_older_than_the_raw_retention_window_are_refused_one_by_one(env: Env, stale: Any) -> None:
    """A record whose raw row the purge may delete (or has deleted) could not be recognised as a duplicate
    later: it is refused, with a reason, while the rest of its batch is stored (the gateway forgets a batch
    answered 2xx, so the refused record is not resent forever)."""
    fresh, at_boundary, old = make_records(3)
    at_boundary["timestamp"] = OLDEST.isoformat()  # exactly the oldest accepted timestamp
    old["timestamp"] = stale
    r = await post(env, [fresh, old, at_boundary])
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["accepted"], body["duplicates"]) == (2, 0)
    assert [(x["index"], x["requestId"], x["code"]) for x in body["rejected"]] == [
        (1, old["request_id"], "timestamp_too_old")]
    assert "retention" in body["rejected"][0]["message"]
    want = fresh["total_tokens"] + at_boundary["total_tokens"]
    assert (await row_counts(env.store))[0] == 2
    assert await raw_token_sum(env.store) == want and await monthly_tokens(env.store) == want
    again = (await post(env, [old])).json()
    assert (again["accepted"], again["duplicates"], len(again["rejected"])) == (0, 0, 1)
    assert await monthly_tokens(env.store) == want


async def test_a_record_resent_after_the_purge_is_not_counted_twice(env: Env) -> None:
    """Stored at the last moment it is accepted, then resent (a spool replay, a retry racing the purge) just
    before, just after and long after the purge deleted its raw row: counted once."""
    rec = make_records(1)[0]
    ts = ts_of(rec)
    set_clock(env, ts + timedelta(days=89))  # the boundary: accepted
    assert (await post(env, [rec])).json() == {"accepted": 1, "duplicates": 0}
    outcomes = []
    for later in (timedelta(days=89), timedelta(days=90), timedelta(days=90, microseconds=1), timedelta(days=91),
                  timedelta(days=400)):
        set_clock(env, ts + later)
        purge = await env.client.post("/internal/v1/usage/purge", headers=auth("admin"))
        assert purge.status_code == 200, purge.text
        again = (await post(env, [rec])).json()
        assert again["accepted"] == 0, (later, again)
        outcomes.append("duplicate" if again["duplicates"] else again["rejected"][0]["code"])
        assert await monthly_tokens(env.store) == rec["total_tokens"]
    assert outcomes == ["duplicate", "timestamp_too_old", "timestamp_too_old", "timestamp_too_old",
                        "timestamp_too_old"]
    assert (await row_counts(env.store))[0] == 0  # the raw row is gone: only the refusal kept it out


async def test_a_total_below_input_plus_output_is_stored_as_their_sum(env: Env) -> None:
    """`total_tokens` is what reports, exports and rollups add up: a record claiming fewer tokens in total than
    its input and output is stored with total = input + output (a larger total is kept: nothing undercounted)."""
    base = {"cached_tokens": 0, "reasoning_tokens": 0}
    recs = [rec | base for rec in make_records(3)]
    recs[0] |= {"input_tokens": 10**12, "output_tokens": 0, "total_tokens": 0}
    recs[1] |= {"input_tokens": 100, "output_tokens": 50, "total_tokens": 7}
    recs[2] |= {"input_tokens": 100, "output_tokens": 50, "total_tokens": 1000}
    r = await post(env, recs)
    assert r.status_code == 200 and r.json() == {"accepted": 3, "duplicates": 0}
    async with env.store.engine.connect() as conn:
        stored = dict((await conn.execute(select(usage_records.c.id, usage_records.c.total_tokens))).all())
        sums = [(await conn.execute(select(func.sum(t.c.total_tokens)))).scalar_one() for t in ROLLUPS]
    assert [stored[rec["request_id"]] for rec in recs] == [10**12, 150, 1000]
    assert sums == [10**12 + 1150] * len(ROLLUPS)
    report = await env.client.get("/v1/usage/report", params={"range": "90d"}, headers=auth("admin"))
    assert counts_of(report.json()["totals"])["total_tokens"] == 10**12 + 1150


async def test_ingestion_is_refused_when_no_token_is_configured(store: KeyStore) -> None:
    app = create_app(usage_settings(gateway_tokens=()), StaticSources(),
                     StaticAuthenticator({}), store=store)
    async with (app.router.lifespan_context(app),
                httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://m") as c):
        r = await c.post("/internal/v1/usage", json={"records": make_records(1)}, headers=GW)
    assert r.status_code == 401 and error_code(r) == "unauthenticated"  # closed by default


# --- reports -----------------------------------------------------------------------------------------------


def hour_range(days: int) -> tuple[datetime, datetime]:
    end = NOW.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    return end - timedelta(days=days), end


def report_map(body: dict[str, Any]) -> dict[tuple[Any, ...], dict[str, int]]:
    return {(row["username"], row["subscription"]): counts_of(row) for row in body["data"]}


async def test_report_every_range_and_filter_matches_raw_records(env: Env) -> None:
    records = make_records(400, span=timedelta(days=120))
    await ingest_all(env, records)
    by_user_sub = lambda r: (r["user"], r["subscription"])  # noqa: E731
    for name, days in (("1d", 1), ("7d", 7), ("30d", 30), ("90d", 90), ("1y", 365)):
        r = await env.client.get("/v1/usage/report", params={"range": name}, headers=auth("admin"))
        assert r.status_code == 200, r.text
        body = r.json()
        start, end = hour_range(days)
        assert (datetime.fromisoformat(body["from"]), datetime.fromisoformat(body["to"])) == (start, end)
        want = expected(records, start, end, by_user_sub)
        assert report_map(body) == want, name
        totals = expected(records, start, end, lambda r: ())
        assert counts_of(body["totals"]) == totals.get((), dict.fromkeys(COUNTS, 0))
        totals_desc = [row["totalTokens"] for row in body["data"]]
        assert totals_desc == sorted(totals_desc, reverse=True)
    # explicit from/to (not hour aligned: rounded out to whole hours), subscription filter, username search
    start, end = datetime(2026, 1, 20, 7, 45, tzinfo=UTC), datetime(2026, 2, 27, 13, 5, tzinfo=UTC)
    params = {"from": start.isoformat(), "to": end.isoformat(), "subscription": "premium", "user": "O"}
    body = (await env.client.get("/v1/usage/report", params=params, headers=auth("admin"))).json()
    lo, hi = datetime(2026, 1, 20, 7, tzinfo=UTC), datetime(2026, 2, 27, 14, tzinfo=UTC)
    assert (body["from"], body["to"]) == (lo.isoformat().replace("+00:00", "Z"), hi.isoformat().replace("+00:00", "Z"))
    want = expected(records, lo, hi, by_user_sub,
                    keep=lambda r: r["subscription"] == "models-as-a-service/premium" and "o" in r["user"].lower())
    assert want and report_map(body) == want
    assert {u for u, _ in want} == {"bob", "carol", 'o"neil'}
    limited = (await env.client.get("/v1/usage/report", params={"range": "1y", "limit": 2},
                                    headers=auth("admin"))).json()
    assert len(limited["data"]) == 2 and limited["hasMore"] is True


async def test_report_is_for_admins_and_validates_ranges(env: Env) -> None:
    r = await env.client.get("/v1/usage/report", headers=auth("alice"))
    assert r.status_code == 403 and error_code(r) == "forbidden"
    assert (await env.client.get("/v1/usage/report")).status_code == 401
    bad = [{"range": "2d"}, {"range": "7d", "from": "2026-01-01T00:00:00Z"}, {"to": "2026-01-01T00:00:00Z"},
           {"from": "2026-02-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"},
           {"from": "2000-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}]
    for params in bad:
        r = await env.client.get("/v1/usage/report", params=params, headers=auth("admin"))
        assert r.status_code == 400, params
        assert error_code(r) in {"invalid_time_range", "invalid_request"}


# --- CSV export --------------------------------------------------------------------------------------------

GROUPS = {
    "subscription": (["subscription"], lambda r: (r["subscription"],)),
    "user": (["username"], lambda r: (r["user"],)),
    "key": (["key_id", "username", "subscription"], lambda r: (r["key_id"], r["user"], r["subscription"])),
    "model": (["model"], lambda r: (r["model"],)),
}
CSV_COUNTS = ["total_tokens", "input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens", "requests",
              "failed_requests"]


def period_of(by: str, ts: datetime) -> tuple[str, str]:
    d = ts.date()
    if by == "day":
        first, after = d, d + timedelta(days=1)
    else:
        first = date(d.year, d.month, 1)
        after = date(d.year + (d.month == 12), d.month % 12 + 1, 1)
    return f"{first}T00:00:00Z", f"{after}T00:00:00Z"


@pytest.mark.parametrize("by", ["day", "month"])
@pytest.mark.parametrize("group_by", list(GROUPS))
async def test_csv_export_every_grouping_matches_raw_records(env: Env, group_by: str, by: str) -> None:
    records = make_records(300, span=timedelta(days=70))
    await ingest_all(env, records)
    params = {"groupBy": group_by, "by": by, "range": "30d"}
    r = await env.client.get("/v1/usage/export", params=params, headers=auth("admin"))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    assert f'filename="usage-{group_by}-{by}-' in r.headers["content-disposition"]
    end = datetime(2026, 3, 16, tzinfo=UTC)  # whole UTC days: the current day is included
    start = end - timedelta(days=30)
    assert r.headers["x-usage-from"] == start.isoformat() and r.headers["x-usage-to"] == end.isoformat()
    cols, key = GROUPS[group_by]
    rows = list(csv.reader(io.StringIO(r.text)))
    assert rows[0] == ["period_start", "period_end", *cols, *CSV_COUNTS]
    got = {tuple(row[:2 + len(cols)]): dict(zip(CSV_COUNTS, map(int, row[2 + len(cols):]), strict=True))
           for row in rows[1:]}
    assert len(got) == len(rows) - 1  # one row per period and group
    want = expected(records, start, end, lambda rec: (*period_of(by, ts_of(rec)), *key(rec)))
    assert got == want
    assert [tuple(row[:2 + len(cols)]) for row in rows[1:]] == sorted(got)  # stable order: period, group
    if group_by in {"user", "key"}:
        assert '"dave, jr."' in r.text and '"o""neil"' in r.text  # csv quoting of , and "
    filtered = await env.client.get("/v1/usage/export", params={**params, "subscription": "other-ns/bobs"},
                                    headers=auth("admin"))
    frows = list(csv.reader(io.StringIO(filtered.text)))[1:]
    want_f = expected(records, start, end, lambda rec: (*period_of(by, ts_of(rec)), *key(rec)),
                      keep=lambda rec: rec["subscription"] == "other-ns/bobs")
    assert sum(int(x[-7]) for x in frows) == sum(v["total_tokens"] for v in want_f.values()) > 0


async def test_csv_export_is_for_admins_and_empty_exports_have_a_header(env: Env) -> None:
    assert (await env.client.get("/v1/usage/export", headers=auth("bob"))).status_code == 403
    r = await env.client.get("/v1/usage/export", params={"groupBy": "model", "by": "month"}, headers=auth("admin"))
    assert r.status_code == 200 and r.text == ",".join(["period_start", "period_end", "model", *CSV_COUNTS]) + "\r\n"
    bad = await env.client.get("/v1/usage/export", params={"groupBy": "team"}, headers=auth("admin"))
    assert bad.status_code == 400


# --- per-subscription view ---------------------------------------------------------------------------------


async def test_subscription_view_for_owners_and_admins(env: Env) -> None:
    records = make_records(300, span=timedelta(days=20))
    records.append(make_records(1, seed=99)[0] | {"user": "alice", "model": "llm/retired", "timestamp": NOW.timestamp(),
                                                   "subscription": "models-as-a-service/premium"})
    await ingest_all(env, records)
    start, end = hour_range(7)
    premium = "models-as-a-service/premium"
    r = await env.client.get(f"/v1/usage/subscriptions/{premium}", params={"range": "7d"}, headers=auth("alice"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["subscription"] == premium and body["username"] == "alice"
    want = expected(records, start, end, lambda rec: (rec["model"],),
                    keep=lambda rec: rec["subscription"] == premium and rec["user"] == "alice")
    models = {m["model"]: m for m in body["models"]}
    assert [m["model"] for m in body["models"]][:2] == ["llm/granite", "llm/llama"]  # subscription order first
    assert models["llm/granite"]["tokenRateLimits"] == [{"limit": 50000, "window": "1m"}]
    assert models["llm/llama"]["tokenRateLimits"] == [{"limit": 1000, "window": "1m"}]
    assert models["llm/retired"]["inSubscription"] is False and models["llm/granite"]["inSubscription"] is True
    assert {(m,): counts_of(v) for m, v in models.items() if counts_of(v)["requests"]} == want
    # bob owns no premium access (premium-users group): not visible; other users' usage is admin-only
    r = await env.client.get(f"/v1/usage/subscriptions/{premium}", headers=auth("bob"))
    assert r.status_code == 404 and error_code(r) == "subscription_not_found"
    r = await env.client.get(f"/v1/usage/subscriptions/{premium}", params={"user": "bob"}, headers=auth("alice"))
    assert r.status_code == 403
    r = await env.client.get(f"/v1/usage/subscriptions/{premium}", params={"range": "7d"}, headers=auth("admin"))
    everyone = expected(records, start, end, lambda rec: (rec["model"],),
                        keep=lambda rec: rec["subscription"] == premium)
    assert r.json()["username"] is None
    assert {(m["model"],): counts_of(m) for m in r.json()["models"] if m["requests"]} == everyone
    r = await env.client.get(f"/v1/usage/subscriptions/{premium}", params={"range": "7d", "user": "bob"},
                             headers=auth("admin"))
    only_bob = expected(records, start, end, lambda rec: (rec["model"],),
                        keep=lambda rec: rec["subscription"] == premium and rec["user"] == "bob")
    assert {(m["model"],): counts_of(m) for m in r.json()["models"] if m["requests"]} == only_bob


# --- metrics and retention ---------------------------------------------------------------------------------


async def test_prometheus_metrics_by_subscription_and_model_without_users(env: Env) -> None:
    records = make_records(40)
    await ingest_all(env, records)
    await post(env, records[:5])  # duplicates are not metered twice
    text_ = (await env.client.get("/metrics")).text
    total = sum(r["total_tokens"] for r in records)
    lines = [ln for ln in text_.splitlines() if ln.startswith("maas_usage_tokens_total{") and 'kind="total"' in ln]
    assert lines and all("user=" not in ln for ln in lines)
    assert sum(float(ln.rsplit(" ", 1)[1]) for ln in lines) == total
    assert 'maas_usage_records_total{result="duplicate"} 5.0' in text_
    assert 'maas_usage_records_total{result="stored"} 40.0' in text_


async def test_metrics_cardinality_is_capped_and_user_labels_are_opt_in(store: KeyStore) -> None:
    app = create_app(usage_settings(usage_metrics_per_user=True, usage_metrics_max_series=2),
                     StaticSources(), StaticAuthenticator({}), store=store)
    async with app.router.lifespan_context(app):
        app.state.maasapi_usage.clock = lambda: NOW
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://m") as c:
            recs = [r | {"user": f"user-{i}"} for i, r in enumerate(make_records(10))]
            assert (await c.post("/internal/v1/usage", json={"records": recs}, headers=GW)).status_code == 200
            body = (await c.get("/metrics")).text
    series = {ln.split(" ")[0] for ln in body.splitlines() if ln.startswith("maas_usage_requests_total{")}
    assert len(series) == 3 and any('user="other"' in s for s in series) and any('user="user-0"' in s for s in series)


async def test_retention_purges_raw_records_and_keeps_daily_rollups(env: Env) -> None:
    records = make_records(200, span=timedelta(days=120))
    await ingest_all(env, records)
    assert (await env.client.post("/internal/v1/usage/purge", headers=auth("alice"))).status_code == 403
    r = await env.client.post("/internal/v1/usage/purge", headers=auth("admin"))
    assert r.status_code == 200, r.text
    cutoff = NOW - timedelta(days=90)
    old = [rec for rec in records if ts_of(rec) < cutoff]
    assert r.json()["rawPurged"] == len(old) > 0 and r.json()["hourlyPurged"] == 0
    assert (await row_counts(env.store))[0] == len(records) - len(old)
    body = (await env.client.get("/v1/usage/report", params={"range": "1y"}, headers=auth("admin"))).json()
    start, end = hour_range(365)
    assert report_map(body) == expected(records, start, end, lambda rec: (rec["user"], rec["subscription"]))


async def test_usage_tables_are_created_by_the_migration(env: Env) -> None:
    async with env.store.engine.connect() as conn:
        names = await conn.run_sync(lambda c: set(c.dialect.get_table_names(c)))
        assert {"usage_records", "usage_hourly", "usage_daily"} <= names
        assert (await conn.execute(text("SELECT count(*) FROM usage_records"))).scalar_one() == 0


async def test_user_rollups_are_backfilled_from_the_full_rollups_by_their_migration(env: Env) -> None:
    """Usage stored before 0008 (only the full rollups) is reported the same after upgrading: the migration
    fills the subscription/user rollups that reports by user and subscription now read."""
    from .test_store import downgrade

    records = make_records(300, span=timedelta(days=120))
    await ingest_all(env, records)
    before = (await env.client.get("/v1/usage/report", params={"range": "1y"}, headers=auth("admin"))).json()
    await downgrade(env.store, "0007_key_organization")
    async with env.store.engine.connect() as conn:
        names = await conn.run_sync(lambda c: set(c.dialect.get_table_names(c)))
    assert not {"usage_user_daily", "usage_user_monthly"} & names
    await migrate.upgrade(env.store.engine)
    after = (await env.client.get("/v1/usage/report", params={"range": "1y"}, headers=auth("admin"))).json()
    start, end = hour_range(365)
    assert report_map(after) == report_map(before) == expected(records, start, end,
                                                                lambda r: (r["user"], r["subscription"]))
    async with env.store.engine.connect() as conn:
        for full, narrow in ((usage_daily, usage_user_daily), (usage_monthly, usage_user_monthly)):
            sums = [(await conn.execute(select(*(func.sum(t.c[c]) for c in COUNTS)))).one() for t in (full, narrow)]
            assert sums[0] == sums[1] and sums[0][0] == len(records)


async def test_a_limit_window_shorter_than_an_hour_is_read_from_the_records(env: Env) -> None:
    """My Subscriptions showed "used 15 this hour" beside a per-minute limit: `window` gives the use of the last
    window itself, for the caller (or everyone, for admins), and refuses what it cannot answer."""
    premium = "models-as-a-service/premium"
    base = make_records(1, seed=42)[0] | {"subscription": premium, "model": "llm/granite", "status": 200}

    def at(seconds_ago: int, user: str, tokens: int, n: int) -> dict[str, Any]:
        return base | {"request_id": f"win-{user}-{seconds_ago}-{n}", "user": user,
                       "timestamp": (NOW - timedelta(seconds=seconds_ago)).timestamp(), "input_tokens": tokens,
                       "cached_tokens": 0, "output_tokens": 0, "reasoning_tokens": 0, "total_tokens": tokens,
                       "charged_tokens": tokens}

    await ingest_all(env, [at(10, "alice", 100, 0), at(50, "alice", 7, 1), at(90, "alice", 50, 2),
                           at(30, "bob", 20, 3), at(4000, "alice", 1000, 4)])

    async def granite(params: dict[str, str], who: str = "alice") -> int:
        r = await env.client.get(f"/v1/usage/subscriptions/{premium}", params=params, headers=auth(who))
        assert r.status_code == 200, r.text
        return int(next(m for m in r.json()["models"] if m["model"] == "llm/granite")["totalTokens"])

    assert await granite({"window": "1m"}) == 107  # the last minute, not the hour (which has the 50 too)
    assert await granite({"window": "2m"}) == 157
    assert await granite({"window": "30s"}) == 100
    assert await granite({"window": "1h"}) == 157  # the record 4000 s ago is outside
    assert await granite({"window": "1m"}, who="admin") == 127  # everyone's, for an administrator
    for bad in ({"window": "2h"}, {"window": "1d"}, {"window": "0m"}, {"window": "1m", "range": "7d"},
                {"window": "1m", "from": "2026-01-01T00:00:00Z"}):
        r = await env.client.get(f"/v1/usage/subscriptions/{premium}", params=bad, headers=auth("alice"))
        assert r.status_code == 400, (bad, r.text)


async def test_the_serving_provider_is_stored_and_records_from_before_0010_read_none(env: Env) -> None:
    """A model with several providers (issue 38): the record names the provider that served; records stored
    before the column existed read "" (one provider, as every model had)."""
    from .test_store import downgrade

    old, new = make_records(2, seed=3)
    await ingest_all(env, [old])
    await downgrade(env.store, "0009_key_change_notify")
    await migrate.upgrade(env.store.engine)
    await ingest_all(env, [new | {"provider": "backup-eu"}])
    r = await env.client.get("/v1/usage/records", params={"limit": 10}, headers=auth("admin"))
    assert r.status_code == 200, r.text
    assert {rec["id"]: rec["provider"] for rec in r.json()} == {old["request_id"]: "", new["request_id"]: "backup-eu"}
    too_long = make_records(1, seed=4)[0] | {"provider": "p" * 64}
    assert (await post(env, [too_long])).status_code == 400  # refused whole, as any record out of its bounds

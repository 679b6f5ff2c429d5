"""SQLAlchemy tables of usage metering (mirrors migration 0002_usage, which is the source of truth).

`usage_records` holds one immutable row per gateway request (an UPDATE is refused by a trigger; only the
retention purge deletes). `usage_hourly`, `usage_daily` and `usage_monthly` are rollups keyed by time bucket,
subscription, user, API key, model and organization id; reports and exports read only these (a 1-year report
reads whole months from `usage_monthly`, the partial months at its edges from the finer tables).

`usage_user_daily` and `usage_user_monthly` are the same sums without the key and model columns (migration
0008): reports and exports grouped and filtered by subscription, user and organization read them, about
keys x models times fewer rows than the full rollups.
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Boolean, Column, Date, Float, Index, Integer, String, Table, false

from maasctl.dbtypes import UTCDateTime
from maasctl.maasapi.db import metadata

ID_LEN = 64
USER_LEN = 253
REF_LEN = 317  # namespace/name

usage_records = Table(
    "usage_records",
    metadata,
    Column("id", String(ID_LEN), primary_key=True),  # the gateway's request id: the idempotency key
    Column("ts", UTCDateTime, nullable=False),
    Column("received_at", UTCDateTime, nullable=False),
    Column("username", String(USER_LEN), nullable=False),
    Column("key_id", String(ID_LEN), nullable=False),
    Column("subscription", String(REF_LEN), nullable=False),
    Column("organization_id", String(USER_LEN), nullable=False),
    Column("model", String(REF_LEN), nullable=False),
    Column("route", String(REF_LEN), nullable=False),
    Column("status", Integer, nullable=False),
    Column("latency_ms", Float, nullable=False),
    Column("streamed", Boolean, nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("cached_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("reasoning_tokens", BigInteger, nullable=False),
    Column("total_tokens", BigInteger, nullable=False),
    Column("charged_tokens", BigInteger, nullable=False),
    Column("cost_center", String(USER_LEN), nullable=False, server_default=""),
    Column("labels", JSON, nullable=False, server_default="{}"),  # the subscription's metering labels
    Column("estimated", Boolean, nullable=False, server_default=false()),  # usage unreadable: charged an estimate
    Column("estimate_reason", String(256), nullable=False, server_default=""),
    Column("termination", String(32), nullable=False, server_default="complete"),
    Column("provider", String(63), nullable=False, server_default=""),  # a model with several providers (0010)
)
Index("ix_usage_records_ts", usage_records.c.ts)

ROLLUP_KEYS = ("subscription", "username", "key_id", "model", "organization_id")
COUNTERS = (
    "requests",
    "failed_requests",
    "input_tokens",
    "cached_tokens",
    "output_tokens",
    "reasoning_tokens",
    "total_tokens",
)


USER_ROLLUP_KEYS = ("subscription", "username", "organization_id")
_KEY_LENGTHS = {"subscription": REF_LEN, "username": USER_LEN, "key_id": ID_LEN, "model": REF_LEN,
                "organization_id": USER_LEN}


def _key_columns(keys: tuple[str, ...] = ROLLUP_KEYS) -> list[Column[str]]:
    return [Column(name, String(_KEY_LENGTHS[name]), primary_key=True) for name in keys]


def _counter_columns() -> list[Column[int]]:
    return [Column(name, BigInteger, nullable=False) for name in COUNTERS]


usage_hourly = Table(
    "usage_hourly",
    metadata,
    Column("bucket", UTCDateTime, primary_key=True),  # start of the UTC hour
    *_key_columns(),
    *_counter_columns(),
)

usage_daily = Table(
    "usage_daily",
    metadata,
    Column("day", Date, primary_key=True),  # the UTC day
    *_key_columns(),
    Column("month", String(7), nullable=False),  # "YYYY-MM" of `day`: portable month grouping
    *_counter_columns(),
)
Index("ix_usage_daily_subscription_day", usage_daily.c.subscription, usage_daily.c.day)

usage_monthly = Table(
    "usage_monthly",
    metadata,
    Column("month_start", Date, primary_key=True),  # first day of the UTC month
    *_key_columns(),
    *_counter_columns(),
)

usage_user_daily = Table(
    "usage_user_daily",
    metadata,
    Column("day", Date, primary_key=True),
    *_key_columns(USER_ROLLUP_KEYS),
    Column("month", String(7), nullable=False),
    *_counter_columns(),
)

usage_user_monthly = Table(
    "usage_user_monthly",
    metadata,
    Column("month_start", Date, primary_key=True),
    *_key_columns(USER_ROLLUP_KEYS),
    *_counter_columns(),
)

"""Persistence of usage: append-only raw records plus hourly/daily rollups, written in one transaction.

Idempotency: the record id (the gateway's request id) is the primary key of `usage_records`; a record whose
id is already stored is skipped (`ON CONFLICT DO NOTHING ... RETURNING id`) and only the rows actually
inserted are added to the rollups, so a retried batch is never counted twice. Rollup rows are upserted in
key order, so concurrent batches on several replicas cannot deadlock on them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date, datetime
from typing import Any, Literal

from sqlalchemy import Select, case, delete, false, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import ColumnElement

from maasctl.maasapi.usage.ranges import TimeRange, as_date, floor_hour, split
from maasctl.maasapi.usage.tables import (
    COUNTERS,
    ROLLUP_KEYS,
    USER_ROLLUP_KEYS,
    usage_daily,
    usage_hourly,
    usage_monthly,
    usage_records,
    usage_user_daily,
    usage_user_monthly,
)

GroupBy = Literal["subscription", "user", "key", "model"]
Period = Literal["day", "month"]

GROUP_COLUMNS: dict[GroupBy, tuple[str, ...]] = {
    "subscription": ("subscription",),
    "user": ("username",),
    "key": ("key_id", "username", "subscription"),
    "model": ("model",),
}


@dataclass(frozen=True)
class UsageEntry:
    """One validated usage record (the wire format is `schemas.UsageRecordIn`)."""

    id: str
    ts: datetime
    username: str
    key_id: str
    subscription: str
    organization_id: str
    model: str
    route: str
    status: int
    latency_ms: float
    streamed: bool
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    reasoning_tokens: int
    total_tokens: int
    charged_tokens: int
    cost_center: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    estimated: bool = False
    estimate_reason: str = ""
    termination: str = "complete"
    provider: str = ""


@dataclass(frozen=True)
class IngestResult:
    inserted: list[UsageEntry]
    duplicates: int


@dataclass(frozen=True)
class UsageFilter:
    subscription: str | None = None  # exact namespace/name
    username: str | None = None  # exact
    user_search: str | None = None  # case-insensitive substring of the username
    organizations: frozenset[str] | None = None  # None: any; else records attributed to one of these only


@dataclass
class Totals:
    requests: int = 0
    failed_requests: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0

    def add(self, values: Iterable[int]) -> None:
        for name, value in zip(COUNTERS, values, strict=True):
            setattr(self, name, getattr(self, name) + int(value or 0))

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _insert(engine_or_conn: AsyncEngine | AsyncConnection, table: Any) -> Any:
    if engine_or_conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    if engine_or_conn.dialect.name == "sqlite":
        return sqlite.insert(table)
    raise NotImplementedError(f"usage store does not support {engine_or_conn.dialect.name}")


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _conditions(table: Any, f: UsageFilter) -> list[ColumnElement[bool]]:
    conds: list[ColumnElement[bool]] = []
    if f.subscription is not None:
        conds.append(table.c.subscription == f.subscription)
    if f.username is not None:
        conds.append(table.c.username == f.username)
    if f.user_search:
        conds.append(func.lower(table.c.username).like(f"%{_like_escape(f.user_search.lower())}%", escape="\\"))
    if f.organizations is not None:  # an empty set matches nothing (deny by default)
        conds.append(table.c.organization_id.in_(sorted(f.organizations)) if f.organizations else false())
    return conds


@dataclass(frozen=True)
class _Rollup:
    table: Any
    time_col: str  # "bucket" (hour), "day" or "month_start"
    keys: tuple[str, ...]

    def bucket(self, ts: datetime) -> Any:
        if self.time_col == "bucket":
            return floor_hour(ts)
        day = as_date(ts)
        return day if self.time_col == "day" else day.replace(day=1)


_ROLLUPS = (
    _Rollup(usage_hourly, "bucket", ROLLUP_KEYS),
    _Rollup(usage_daily, "day", ROLLUP_KEYS),
    _Rollup(usage_monthly, "month_start", ROLLUP_KEYS),
    _Rollup(usage_user_daily, "day", USER_ROLLUP_KEYS),
    _Rollup(usage_user_monthly, "month_start", USER_ROLLUP_KEYS),
)
_FILTER_COLUMNS = frozenset(USER_ROLLUP_KEYS)  # every column _conditions reads


def _rollup_rows(entries: Sequence[UsageEntry]) -> list[list[dict[str, Any]]]:
    """Rows to add to each rollup of `_ROLLUPS` (same order), sorted by primary key."""
    accs: list[dict[tuple[Any, ...], list[int]]] = [{} for _ in _ROLLUPS]
    for e in entries:
        values = (1, int(e.status >= 400), e.input_tokens, e.cached_tokens, e.output_tokens,
                  e.reasoning_tokens, e.total_tokens)
        for acc, rollup in zip(accs, _ROLLUPS, strict=True):
            key = (rollup.bucket(e.ts), *(getattr(e, k) for k in rollup.keys))
            current = acc.setdefault(key, [0] * len(COUNTERS))
            for i, value in enumerate(values):
                current[i] += value
    out: list[list[dict[str, Any]]] = []
    for rollup, acc in zip(_ROLLUPS, accs, strict=True):
        rows = []
        for k, sums in sorted(acc.items()):
            row = {rollup.time_col: k[0], **dict(zip(rollup.keys, k[1:], strict=True)),
                   **dict(zip(COUNTERS, sums, strict=True))}
            if rollup.time_col == "day":
                row["month"] = k[0].strftime("%Y-%m")
            rows.append(row)
        out.append(rows)
    return out


def _by_user(group: Sequence[str]) -> bool:
    """Whether the subscription/user rollups answer a query grouped by `group` (filters never need more)."""
    return set(group) <= _FILTER_COLUMNS


class UsageStore:
    """Usage rows in the maas-api database (the same engine as the API keys)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._read = engine.execution_options(isolation_level="AUTOCOMMIT")

    async def ingest(self, entries: Sequence[UsageEntry], received_at: datetime) -> IngestResult:
        """Store a batch atomically: new raw rows and their rollup increments, or nothing at all."""
        unique: dict[str, UsageEntry] = {}
        for e in entries:
            unique.setdefault(e.id, e)
        rows = [{**asdict(e), "received_at": received_at} for e in unique.values()]
        async with self.engine.begin() as conn:
            inserted_ids: set[str] = set()
            if rows:
                stmt = _insert(conn, usage_records).on_conflict_do_nothing(index_elements=["id"])
                result = await conn.execute(stmt.returning(usage_records.c.id), rows)
                inserted_ids = {r[0] for r in result}
            inserted = [e for e in unique.values() if e.id in inserted_ids]
            if inserted:
                await self._add_to_rollups(conn, inserted)
        return IngestResult(inserted, len(entries) - len(inserted))

    async def _add_to_rollups(self, conn: AsyncConnection, entries: Sequence[UsageEntry]) -> None:
        for rollup, rows in zip(_ROLLUPS, _rollup_rows(entries), strict=True):
            table = rollup.table
            ins = _insert(conn, table)
            stmt = ins.on_conflict_do_update(
                index_elements=[rollup.time_col, *rollup.keys],
                set_={c: table.c[c] + ins.excluded[c] for c in COUNTERS},
            )
            await conn.execute(stmt, rows)

    async def records(self, f: UsageFilter, *, key_id: str | None = None, since: datetime | None = None,
                      limit: int = 100) -> list[dict[str, Any]]:
        """Raw records, newest first (audit: who, what, how much, whether estimated)."""
        t = usage_records
        conds = []
        if f.subscription:
            conds.append(t.c.subscription == f.subscription)
        if f.username:
            conds.append(t.c.username == f.username)
        if f.organizations is not None:
            conds.append(t.c.organization_id.in_(sorted(f.organizations)) if f.organizations else false())
        if key_id:
            conds.append(t.c.key_id == key_id)
        if since is not None:
            conds.append(t.c.ts >= since)
        stmt = select(t).where(*conds).order_by(t.c.ts.desc(), t.c.id).limit(limit)
        async with self._read.connect() as conn:
            rows = (await conn.execute(stmt)).mappings().all()
        return [dict(r) for r in rows]

    async def report(
        self, rng: TimeRange, group: Sequence[str], f: UsageFilter
    ) -> dict[tuple[str, ...], Totals]:
        """Totals per `group` columns (e.g. username, subscription) over `rng`, read from the rollups:
        whole months from `usage_monthly`, other whole days from `usage_daily`, partial days at the edges
        from `usage_hourly`; the day and month parts from the subscription/user rollups when `group` needs
        neither key nor model."""
        parts = split(rng)
        narrow = _by_user(group)
        stmts: list[Select[Any]] = []
        for part in parts.hourly:
            h = usage_hourly
            stmts.append(self._grouped(h, group, [h.c.bucket >= part.start, h.c.bucket < part.end], f))
        for part in parts.daily:
            d = usage_user_daily if narrow else usage_daily
            stmts.append(self._grouped(d, group, [d.c.day >= as_date(part.start), d.c.day < as_date(part.end)], f))
        if parts.monthly is not None:
            m, months = usage_user_monthly if narrow else usage_monthly, parts.monthly
            stmts.append(self._grouped(
                m, group, [m.c.month_start >= as_date(months.start), m.c.month_start < as_date(months.end)], f))
        out: dict[tuple[str, ...], Totals] = {}
        async with self.engine.connect() as conn:
            if conn.dialect.name == "postgresql":  # one snapshot for all parts (SQLite is serializable)
                conn = await conn.execution_options(isolation_level="REPEATABLE READ")
            for stmt in stmts:
                for row in await conn.execute(stmt):
                    out.setdefault(tuple(row[: len(group)]), Totals()).add(row[len(group):])
        return out

    async def recent_by_model(self, since: datetime, f: UsageFilter) -> dict[tuple[str, ...], Totals]:
        """Totals per model of the raw records since `since`: a limit window shorter than the rollups' hour (a
        per-minute limit) is read from the records themselves (the `ts` index bounds the scan to the window)."""
        t = usage_records
        stmt = (
            select(t.c.model, func.count(), func.sum(case((t.c.status >= 400, 1), else_=0)),
                   *[func.sum(t.c[c]) for c in COUNTERS[2:]])
            .where(t.c.ts >= since, *_conditions(t, f))
            .group_by(t.c.model)
        )
        out: dict[tuple[str, ...], Totals] = {}
        async with self.engine.connect() as conn:
            for row in await conn.execute(stmt):
                out.setdefault((row[0],), Totals()).add(row[1:])
        return out

    @staticmethod
    def _grouped(table: Any, group: Sequence[str], time_conds: list[ColumnElement[bool]], f: UsageFilter
                 ) -> Select[Any]:
        cols = [table.c[g] for g in group]
        return (
            select(*cols, *[func.sum(table.c[c]) for c in COUNTERS])
            .where(*time_conds, *_conditions(table, f))
            .group_by(*cols)
        )

    async def export(
        self, start: date, end: date, group_by: GroupBy, period: Period, f: UsageFilter, chunk: int = 2000
    ) -> AsyncGenerator[tuple[Any, ...], None]:
        """Rows `(period, *group columns, *COUNTERS)` ordered by period then group, streamed from the daily
        rollup with a server-side cursor (memory stays flat however long the export is); by subscription or
        user from the rollup without key and model columns."""
        t = usage_user_daily if _by_user(GROUP_COLUMNS[group_by]) else usage_daily
        period_col = t.c.day if period == "day" else t.c.month
        cols = [t.c[g] for g in GROUP_COLUMNS[group_by]]
        stmt = (
            select(period_col, *cols, *[func.sum(t.c[c]) for c in COUNTERS])
            .where(t.c.day >= start, t.c.day < end, *_conditions(t, f))
            .group_by(period_col, *cols)
            .order_by(period_col, *cols)
            .execution_options(yield_per=chunk)
        )
        async with self.engine.connect() as conn:
            result = await conn.stream(stmt)
            async for part in result.partitions(chunk):
                for row in part:
                    yield tuple(row)

    async def purge(self, raw_before: datetime, hourly_before: datetime | None) -> tuple[int, int]:
        """Retention: delete raw records older than `raw_before` and hourly rollups older than
        `hourly_before` (daily rollups are kept: long-range reports and exports read them)."""
        async with self.engine.begin() as conn:
            raw = await conn.execute(delete(usage_records).where(usage_records.c.ts < raw_before))
            hourly = 0
            if hourly_before is not None:
                res = await conn.execute(delete(usage_hourly).where(usage_hourly.c.bucket < hourly_before))
                hourly = res.rowcount
        return raw.rowcount, hourly

    async def count_raw(self) -> int:
        async with self._read.connect() as conn:
            return int((await conn.execute(select(func.count()).select_from(usage_records))).scalar_one())

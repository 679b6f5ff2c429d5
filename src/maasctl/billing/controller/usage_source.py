"""A small, read-only view of maas-api's usage records, for rating (billing never imports maas-api).

maas-api keeps one immutable row per request in its `usage_records` table (PostgreSQL, or SQLite embedded);
the id is the gateway's request id and `received_at` is when maas-api stored it. This module mirrors the
columns rating needs (never `latency_ms`, the only float), and the labels of API keys (`api_key_labels`, for
budget selectors), and only ever SELECTs them, in `(received_at, id)`
order, keyset-paginated. Records become visible in commit order, which `received_at` does not follow exactly
(two maas-api replicas, a slow transaction), so the rater re-reads a short lag window before its cursor and
skips what its ledger already knows: the ledger's natural keys make the overlap harmless.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, Column, Integer, MetaData, String, Table, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from maasctl.dbtypes import UTCDateTime

__all__ = ["UsageReader", "UsageRow", "api_key_labels", "usage_records"]

usage_records = Table(
    "usage_records",
    MetaData(),
    Column("id", String(64), primary_key=True),
    Column("ts", UTCDateTime, nullable=False),
    Column("received_at", UTCDateTime, nullable=False),
    Column("key_id", String(64), nullable=False),
    Column("subscription", String(317), nullable=False),
    Column("organization_id", String(253), nullable=False),
    Column("model", String(317), nullable=False),
    Column("status", Integer, nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("cached_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("reasoning_tokens", BigInteger, nullable=False),
    Column("total_tokens", BigInteger, nullable=False),
    Column("estimated", Boolean, nullable=False),
    Column("estimate_reason", String(256), nullable=False),
    Column("termination", String(32), nullable=False),
)

api_key_labels = Table(
    "api_key_labels",
    MetaData(),
    Column("key_id", String(32), primary_key=True),
    Column("name", String(63), primary_key=True),
    Column("value", String(253), nullable=False),
)
"""maas-api's API key labels (set at mint, never changed): which keys a BudgetPolicy's selector covers."""


@dataclass(frozen=True)
class UsageRow:
    id: str
    ts: datetime
    received_at: datetime
    key_id: str
    subscription: str
    organization_id: str
    model: str
    status: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    reasoning_tokens: int
    total_tokens: int
    estimated: bool
    estimate_reason: str
    termination: str


class UsageReader:
    """Reads maas-api's usage records (SELECT only)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @classmethod
    def from_url(cls, url: str) -> UsageReader:
        return cls(create_async_engine(url, pool_pre_ping=not url.startswith("sqlite")))

    async def close(self) -> None:
        await self.engine.dispose()

    async def keys_matching(self, key_ids: Sequence[str], selector: Mapping[str, str]) -> set[str]:
        """Which of `key_ids` carry every label of `selector` (labels are set when a key is minted)."""
        ids = sorted({k for k in key_ids if k})
        if not selector:
            return set(ids)
        out: set[str] = set()
        t = api_key_labels
        for i in range(0, len(ids), 500):
            part = ids[i: i + 500]
            async with self.engine.connect() as conn:
                rows = (await conn.execute(select(t.c.key_id, t.c.name, t.c.value).where(
                    and_(t.c.key_id.in_(part), t.c.name.in_(sorted(selector)))))).all()
            found: dict[str, dict[str, str]] = {}
            for r in rows:
                found.setdefault(str(r.key_id), {})[str(r.name)] = str(r.value)
            out |= {k for k, labels in found.items() if all(labels.get(n) == v for n, v in selector.items())}
        return out

    async def backlog(self, after: tuple[datetime, str] | None, cap: int = 100_000) -> tuple[int, datetime | None]:
        """How many records lie after `(received_at, id)` (counted up to `cap`, so a long outage stays a cheap
        query) and when the oldest of them was received."""
        t = usage_records
        inner = select(t.c.received_at)
        if after is not None:
            inner = inner.where(_after(after))
        inner = inner.order_by(t.c.received_at, t.c.id).limit(cap)
        sub = inner.subquery()
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(func.count(), func.min(sub.c.received_at)))).one()
        return int(row[0]), row[1]

    async def page(self, after: tuple[datetime, str] | None, limit: int) -> list[UsageRow]:
        """Up to `limit` records strictly after `(received_at, id)` (or from the start), in that order."""
        t = usage_records
        stmt = select(*t.c).order_by(t.c.received_at, t.c.id).limit(limit)
        if after is not None:
            stmt = stmt.where(_after(after))
        async with self.engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return [_row(r) for r in rows]

    async def records(self, ids: Sequence[str]) -> list[UsageRow]:
        """The records with these ids (re-rating: the ledger remembers ids, maas-api the records)."""
        t = usage_records
        out: list[UsageRow] = []
        wanted = sorted(set(ids))
        for i in range(0, len(wanted), 500):
            async with self.engine.connect() as conn:
                rows = (await conn.execute(select(*t.c).where(t.c.id.in_(wanted[i: i + 500])))).all()
            out += [_row(r) for r in rows]
        return out


def _row(r: Any) -> UsageRow:
    return UsageRow(id=str(r.id), ts=r.ts, received_at=r.received_at, key_id=str(r.key_id),
                    subscription=str(r.subscription),
                    organization_id=str(r.organization_id), model=str(r.model), status=int(r.status),
                    input_tokens=int(r.input_tokens), cached_tokens=int(r.cached_tokens),
                    output_tokens=int(r.output_tokens), reasoning_tokens=int(r.reasoning_tokens),
                    total_tokens=int(r.total_tokens), estimated=bool(r.estimated),
                    estimate_reason=str(r.estimate_reason), termination=str(r.termination))


def _after(after: tuple[datetime, str]) -> Any:
    """Records strictly after `(received_at, id)`, the order the rater reads in."""
    at, rid = after
    t = usage_records
    return or_(t.c.received_at > at, and_(t.c.received_at == at, t.c.id > rid))

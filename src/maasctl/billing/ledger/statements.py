"""One tenant's statement, read only: the queries the tenant portal's read API answers (docs/billing-console.md,
"The tenant portal"). Every query is bound to one tenant's wallet (`wallet:<ns>/<name>` postings and the
tenant's own transactions): there is no query here that could return another tenant's row, whatever id it is
given. Sums stay integer micro-units in SQL and `Decimal` in Python (never a float); time buckets are decided in
SQL with a CASE over the bucket edges, the same on PostgreSQL and SQLite.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import and_, case, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from maasctl.billing.ledger.entries import from_micros, wallet
from maasctl.billing.ledger.schema import postings, transactions
from maasctl.billing.ledger.store import Entry, spend_postings

__all__ = ["Statements"]

_NO_MODEL = ""


class Statements:
    """Reads of one tenant's part of the ledger (the portal API's; the Ledger writes)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    def _entries(self, tenant: str) -> Any:
        t = transactions
        amount = func.sum(postings.c.amount_micros).filter(postings.c.account == wallet(tenant))
        return (select(t.c.id, t.c.key, t.c.kind, t.c.tenant, t.c.currency, t.c.occurred_at, t.c.recorded_at,
                       t.c.actor, t.c.reason, t.c.tokens, t.c.details, amount.label("amount"))
                .join(postings, postings.c.transaction_id == t.c.id)
                .where(t.c.tenant == tenant).group_by(t.c.id))

    async def page(self, tenant: str, *, before: int | None = None, limit: int = 50, kind: str | None = None,
                   since: datetime | None = None, until: datetime | None = None, oldest_first: bool = False
                   ) -> list[Entry]:
        """The tenant's entries, newest first (id order), those with an id below `before` when given; `since` and
        `until` bound their `occurred_at` ([since, until))."""
        t = transactions
        stmt = self._entries(tenant)
        if before is not None:
            stmt = stmt.where(t.c.id < before)
        if kind is not None:
            stmt = stmt.where(t.c.kind == kind)
        if since is not None:
            stmt = stmt.where(t.c.occurred_at >= since)
        if until is not None:
            stmt = stmt.where(t.c.occurred_at < until)
        stmt = stmt.order_by(t.c.id.asc() if oldest_first else t.c.id.desc()).limit(limit)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return [_entry(r) for r in rows]

    async def entry(self, tenant: str, entry_id: int) -> Entry | None:
        """The entry `entry_id` if it is the tenant's (None otherwise: another tenant's id is not found)."""
        stmt = self._entries(tenant).where(transactions.c.id == entry_id)
        async with self.engine.connect() as conn:
            row = (await conn.execute(stmt)).first()
        return _entry(row) if row is not None else None

    async def entry_id(self, tenant: str, key: str) -> int | None:
        """The id of the tenant's entry with natural key `key` (None when there is none of the tenant's)."""
        t = transactions
        async with self.engine.connect() as conn:
            found = (await conn.execute(select(t.c.id).where(t.c.tenant == tenant, t.c.key == key))).first()
        return int(found.id) if found is not None else None

    async def usage_by_bucket(self, tenant: str, edges: Sequence[datetime]) -> dict[tuple[int, str], Decimal]:
        """What the tenant's usage charges cost per (bucket, model): bucket i is [edges[i], edges[i+1]), by the
        time of the usage record; the model as the rated line names it."""
        if len(edges) < 2:
            return {}
        bucket = _bucket(postings.c.occurred_at, edges)
        model = func.coalesce(transactions.c.details["model"].as_string(), _NO_MODEL)
        stmt = (select(bucket.label("bucket"), model.label("model"), func.sum(postings.c.amount_micros))
                .select_from(postings.join(transactions, postings.c.transaction_id == transactions.c.id))
                .where(and_(postings.c.account == wallet(tenant), postings.c.kind == "usage",
                            postings.c.occurred_at >= edges[0], postings.c.occurred_at < edges[-1]))
                .group_by(bucket, model))
        async with self.engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return {(int(b), str(m or _NO_MODEL)): from_micros(-int(s or 0)) for b, m, s in rows}

    async def spend_by_bucket(self, tenant: str, edges: Sequence[datetime]) -> list[Decimal]:
        """The tenant's spend (`Ledger.spend`: usage charges and re-rating corrections) in each bucket
        [edges[i], edges[i+1])."""
        if len(edges) < 2:
            return []
        bucket = _bucket(postings.c.occurred_at, edges)
        stmt = (select(bucket.label("bucket"), func.sum(postings.c.amount_micros))
                .select_from(postings.join(transactions, postings.c.transaction_id == transactions.c.id))
                .where(and_(spend_postings(tenant), postings.c.occurred_at >= edges[0],
                            postings.c.occurred_at < edges[-1]))
                .group_by(bucket))
        async with self.engine.connect() as conn:
            sums = {int(b): int(s or 0) for b, s in (await conn.execute(stmt)).all()}
        return [from_micros(-sums.get(i, 0)) for i in range(len(edges) - 1)]

    async def balances_at(self, tenant: str, edges: Sequence[datetime]) -> list[Decimal]:
        """The wallet's balance at each edge (every posting before it, by the time it occurred)."""
        if not edges:
            return []
        bucket = _bucket(postings.c.occurred_at, edges, before=-1)
        stmt = (select(bucket.label("bucket"), func.sum(postings.c.amount_micros))
                .where(and_(postings.c.account == wallet(tenant), postings.c.occurred_at < edges[-1]))
                .group_by(bucket))
        async with self.engine.connect() as conn:
            moves = {int(b): int(s or 0) for b, s in (await conn.execute(stmt)).all()}
        out, running = [], moves.get(-1, 0)
        for i in range(len(edges)):
            out.append(from_micros(running))
            running += moves.get(i, 0)
        return out


def _bucket(column: Any, edges: Sequence[datetime], before: int | None = None) -> Any:
    """The index i of the bucket [edges[i], edges[i+1]) holding `column` (`before` below the first edge)."""
    whens = [(column < edges[i + 1], i) for i in range(len(edges) - 1)]
    if before is not None:
        whens.insert(0, (column < edges[0], before))
    return case(*whens, else_=len(edges) - 1)


def _entry(r: Any) -> Entry:
    return Entry(id=int(r.id), key=str(r.key), kind=str(r.kind), tenant=str(r.tenant), currency=str(r.currency),
                 occurred_at=r.occurred_at, recorded_at=r.recorded_at, actor=str(r.actor), reason=str(r.reason),
                 tokens=int(r.tokens), amount=from_micros(int(r.amount or 0)), details=dict(r.details or {}))

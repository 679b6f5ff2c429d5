"""The rating book: the rater's bookkeeping beside the ledger, in the same database, and not money.

- its cursor (`billing_rater_cursor`): where the rater is in maas-api's usage records, written in the transaction
  that posts the page's charges, so a crash re-reads at most the page in flight;
- unpriced usage (`billing_unpriced_usage`): the records (and GPU segments) no SKU priced, reported on the
  TenantAccount until a PriceBook prices them; the row goes in the transaction that posts the charge
  (`settle_unpriced`), so the report shrinks exactly when the charge exists.

Methods that take `conn` run inside the caller's transaction (the rater's and the GPU meter's page), next to
`Ledger.post` on the same connection.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import and_, delete, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from maasctl.billing.ledger.db import chunks, dialect_insert, present
from maasctl.billing.ledger.schema import cursor, unpriced

__all__ = ["RatingBook", "Unpriced"]


@dataclass(frozen=True)
class Unpriced:
    record_id: str
    tenant: str
    model: str
    occurred_at: datetime
    reason: str


class RatingBook:
    """The rater's cursor and the unpriced usage, on the ledger's database (its schema is the ledger's:
    `Ledger.ensure_schema` migrates it)."""

    def __init__(self, engine: AsyncEngine, now: Callable[[], datetime] | None = None) -> None:
        self.engine = engine
        self._now = now or (lambda: datetime.now(UTC))

    # -- the rater's cursor --------------------------------------------------------------------------------

    async def cursor(self, name: str) -> tuple[datetime, str] | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(cursor.c.received_at, cursor.c.record_id)
                                      .where(cursor.c.name == name))).first()
        return (row.received_at, str(row.record_id)) if row is not None else None

    async def set_cursor(self, name: str, received_at: datetime, record_id: str, conn: AsyncConnection) -> None:
        ins = dialect_insert(conn, cursor)
        values = {"received_at": received_at, "record_id": record_id, "updated_at": self._now()}
        await conn.execute(ins.values(name=name, **values).on_conflict_do_update(index_elements=["name"],
                                                                                 set_=values))

    # -- unpriced usage ------------------------------------------------------------------------------------

    async def mark_unpriced(self, items: Sequence[Unpriced], *, conn: AsyncConnection | None = None) -> None:
        """Remember records no SKU prices (reported; rated again by `Rater.revisit_unpriced` when a PriceBook
        that may price them appears)."""
        if not items:
            return
        rows = [{"record_id": u.record_id, "tenant": u.tenant, "model": u.model, "occurred_at": u.occurred_at,
                 "reason": u.reason[:1024], "recorded_at": self._now()} for u in items]

        async def write(c: AsyncConnection) -> None:
            for part in chunks(rows):
                await c.execute(dialect_insert(c, unpriced).on_conflict_do_nothing(index_elements=["record_id"]),
                                list(part))

        if conn is None:
            async with self.engine.begin() as own:
                await write(own)
        else:
            await write(conn)

    async def unpriced_page(self, tenants: Sequence[str], after: tuple[datetime, str] | None,
                            limit: int) -> list[Unpriced]:
        """The unpriced records of `tenants` strictly after `(occurred_at, record id)`, in that order (the
        rater revisits them when the tenants' PriceBooks change)."""
        u = unpriced
        if not tenants:
            return []
        stmt = select(u).where(u.c.tenant.in_(list(tenants))).order_by(u.c.occurred_at, u.c.record_id).limit(limit)
        if after is not None:
            stmt = stmt.where(or_(u.c.occurred_at > after[0], and_(u.c.occurred_at == after[0],
                                                                     u.c.record_id > after[1])))
        async with self.engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return [Unpriced(str(r.record_id), str(r.tenant), str(r.model), r.occurred_at, str(r.reason)) for r in rows]

    async def settle_unpriced(self, record_ids: Sequence[str], *, conn: AsyncConnection) -> None:
        """Forget unpriced records that are now charged (their entry is posted in `conn`'s transaction: the
        report shrinks exactly when the charge exists)."""
        for part in chunks(list(record_ids)):
            await conn.execute(delete(unpriced).where(unpriced.c.record_id.in_(list(part))))

    async def reported(self, record_ids: Sequence[str], *, conn: AsyncConnection | None = None) -> set[str]:
        """Which of `record_ids` are reported unpriced."""
        return await present(self.engine, unpriced.c.record_id, record_ids, conn)

    async def unpriced(self, tenant: str, limit: int = 20) -> tuple[int, list[Unpriced]]:
        """How many of the tenant's records no SKU priced, and the latest few."""
        u = unpriced
        async with self.engine.connect() as conn:
            total = int((await conn.execute(select(func.count()).select_from(u).where(u.c.tenant == tenant)))
                        .scalar_one())
            rows = (await conn.execute(select(u).where(u.c.tenant == tenant)
                                       .order_by(u.c.occurred_at.desc()).limit(limit))).all()
        return total, [Unpriced(str(r.record_id), str(r.tenant), str(r.model), r.occurred_at, str(r.reason))
                       for r in rows]

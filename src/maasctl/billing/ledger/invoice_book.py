"""What the psp-connector pushed for invoicing and the invoices it created, in the ledger's database: the two
tables, and `InvoiceBook`, the read of one tenant's invoices that the tenant portal's API answers.

Why here and not in `billing.connector.schema`: the billing controller serves the portal API but may not import
the psp-connector (the floor plan keeps the two processes apart); both may import the ledger package. The tables
stay in the connector's schema history (`billing/connector/migrations`, its version table): `metadata` below is
the connector's `MetaData`, which `billing.connector.schema` extends with its other tables, so nothing about the
database, its migrations or the connector's writes changed.

An invoice as a tenant sees it: the connector creates one when usage was pushed since the tenant's last invoice,
in the same run and with the same time as that run's push (`sync.py`). So the invoice at `at` covers exactly the
tenant's pushes after its previous invoice and up to `at`; its amount is their sum, in integer micro-units (the
usage invoiced, before any tax the PSP adds), and the ledger entries behind it are the tenant's usage entries
after the last entry pushed before that period, up to the last entry its pushes cover. When that cannot be said
exactly (no push in the period, pushes in two currencies, another invoice of the tenant at the same instant),
the amount is None with the reason, never a guess. Every query is bound to one tenant: no id, key or cursor
given here can return another tenant's row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, Column, Index, MetaData, String, Table, and_, case, func, inspect, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from maasctl.billing.ledger.entries import from_micros
from maasctl.dbtypes import UTCDateTime

__all__ = ["Invoice", "InvoiceBook", "invoices", "metadata", "usage_pushes"]

metadata = MetaData()  # the psp-connector's tables (billing.connector.schema adds the others)

usage_pushes = Table(
    "billing_psp_usage_pushes",
    metadata,
    Column("key", String(400), primary_key=True),
    Column("connector", String(317), nullable=False),
    Column("tenant", String(317), nullable=False),
    Column("upto_entry_id", BigInteger, nullable=False),  # ledger usage entries up to this id are pushed
    Column("records", BigInteger, nullable=False),
    Column("amount_micros", BigInteger, nullable=False),  # what was pushed (whole minor units)
    Column("currency", String(3), nullable=False),
    Column("external_id", String(255)),
    Column("at", UTCDateTime, nullable=False),
)
Index("ix_billing_psp_pushes_tenant", usage_pushes.c.tenant, usage_pushes.c.upto_entry_id)

invoices = Table(
    "billing_psp_invoices",
    metadata,
    Column("key", String(400), primary_key=True),  # the PSP idempotency key of <connector>, <tenant>, <period>
    Column("connector", String(317), nullable=False),
    Column("tenant", String(317), nullable=False),
    Column("invoice_id", String(255)),
    Column("status", String(32), nullable=False),
    Column("at", UTCDateTime, nullable=False),
)


@dataclass(frozen=True)
class Invoice:
    """One invoice of a tenant: the usage pushed in (period_start, at], where period_start is the previous
    invoice's time (None for the first)."""

    key: str
    connector: str
    invoice_id: str
    status: str
    at: datetime
    period_start: datetime | None
    amount: Decimal | None  # the usage pushed for it; None when it cannot be derived exactly (`unknown`)
    currency: str | None
    unknown: str  # why the amount is None ("" when it is known)
    records: int
    entries_after: int  # the ledger usage entries behind it: ids in (entries_after, entries_upto]
    entries_upto: int


class InvoiceBook:
    """Reads of one tenant's invoices (the portal API's; the psp-connector writes them)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._present = False

    async def _ready(self, conn: AsyncConnection) -> bool:
        """Whether the connector's tables are there: they are created by the psp-connector's schema history, which
        a database whose tenants are all Prepaid may never have run (then nobody has an invoice)."""
        if not self._present:
            self._present = await conn.run_sync(lambda c: inspect(c).has_table(invoices.name)
                                                and inspect(c).has_table(usage_pushes.name))
        return self._present

    async def page(self, tenant: str, *, before: str | None = None, limit: int = 50) -> list[Invoice] | None:
        """The tenant's invoices, newest first, those older than the tenant's invoice with key `before` when
        given (None when `before` is not one of the tenant's invoices)."""
        i = invoices
        stmt = select(i.c.key, i.c.connector, i.c.invoice_id, i.c.status, i.c.at).where(i.c.tenant == tenant)
        async with self.engine.connect() as conn:
            if not await self._ready(conn):
                return None if before is not None else []
            if before is not None:
                cursor = (await conn.execute(select(i.c.at).where(i.c.tenant == tenant, i.c.key == before))).first()
                if cursor is None:
                    return None
                stmt = stmt.where(or_(i.c.at < cursor.at, and_(i.c.at == cursor.at, i.c.key < before)))
            rows = (await conn.execute(stmt.order_by(i.c.at.desc(), i.c.key.desc()).limit(limit + 1))).all()
            return await self._derive(conn, tenant, rows[:limit], rows[limit].at if len(rows) > limit else None)

    async def invoice(self, tenant: str, key: str) -> Invoice | None:
        """The tenant's invoice with key `key` (None otherwise: another tenant's key is not found)."""
        i = invoices
        cols = (i.c.key, i.c.connector, i.c.invoice_id, i.c.status, i.c.at)
        async with self.engine.connect() as conn:
            if not await self._ready(conn):
                return None
            at = (await conn.execute(select(i.c.at).where(i.c.tenant == tenant, i.c.key == key))).scalar()
            if at is None:
                return None
            rows = (await conn.execute(select(*cols).where(i.c.tenant == tenant, i.c.at == at))).all()
            prev = (await conn.execute(select(func.max(i.c.at)).where(i.c.tenant == tenant, i.c.at < at))).scalar()
            return next(v for v in await self._derive(conn, tenant, rows, prev) if v.key == key)

    async def _derive(self, conn: AsyncConnection, tenant: str, rows: Sequence[Any], previous: datetime | None
                      ) -> list[Invoice]:
        """The invoices of `rows` with what was pushed for each; `previous` is the time of the tenant's invoice
        before the oldest of them (None: there is none)."""
        if not rows:
            return []
        ats = [r.at for r in rows]
        edges = sorted({*ats, *([previous] if previous is not None else [])})
        p = usage_pushes
        # bucket k: pushes in (edges[k-1], edges[k]] (k = 0: at or before edges[0]); beyond the newest: ignored
        bucket = case(*[(p.c.at <= edges[k], k) for k in range(len(edges))], else_=len(edges))
        stmt = (select(bucket.label("bucket"), p.c.currency, func.sum(p.c.amount_micros), func.sum(p.c.records),
                       func.max(p.c.upto_entry_id), func.count())
                .where(p.c.tenant == tenant, p.c.at <= edges[-1]).group_by(bucket, p.c.currency))
        sums: dict[int, list[tuple[str, int, int, int, int]]] = {}
        for b, cur, micros, records, upto, count in (await conn.execute(stmt)).all():
            sums.setdefault(int(b), []).append((str(cur), int(micros or 0), int(records or 0), int(upto or 0),
                                                int(count)))
        same_instant = {a for a in ats if ats.count(a) > 1 or a == previous}
        out = []
        for r in rows:
            k = edges.index(r.at)
            start = edges[k - 1] if k else None
            pushed = sums.get(k, [])
            after = max((e[3] for j in range(k) for e in sums.get(j, [])), default=0)
            upto = max((e[3] for e in pushed), default=after)
            records = sum(e[2] for e in pushed)
            amount: Decimal | None = None
            currency: str | None = None
            if r.at in same_instant:
                unknown = "another invoice of this tenant has the same time: the usage pushed cannot be split"
            elif not pushed:
                unknown = "no usage push is recorded for this invoice's period"
            elif len(pushed) > 1:
                unknown = "the usage of this period was pushed in more than one currency"
            else:
                unknown, currency, amount = "", pushed[0][0], from_micros(pushed[0][1])
            out.append(Invoice(key=str(r.key), connector=str(r.connector), invoice_id=str(r.invoice_id or ""),
                               status=str(r.status), at=r.at, period_start=start, amount=amount, currency=currency,
                               unknown=unknown, records=records, entries_after=after, entries_upto=upto))
        return out

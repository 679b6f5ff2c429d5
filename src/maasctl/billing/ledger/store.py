"""The ledger store: append idempotent, balanced transactions; derive balances, spend and tokens by SQL.

`post` writes a batch in one database transaction: each entry is inserted unless its natural key is already
there (`ON CONFLICT (key) DO NOTHING ... RETURNING`), and only the inserted entries get postings. A crash
before the commit leaves nothing; a retry skips what is already recorded; the same key with different content
is a conflict (reported, not applied). Nothing is ever updated or deleted (the tables' triggers refuse it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import structlog
from sqlalchemy import and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from maasctl.billing.ledger.db import chunks, create_tables, dialect_insert, make_engine, present
from maasctl.billing.ledger.entries import (
    RERATE_FEE_PREFIX,
    RERATE_PREFIX,
    Transaction,
    from_micros,
    to_micros,
    wallet,
)
from maasctl.billing.ledger.schema import create_schema_sync, postings, transactions
from maasctl.billing.money import parse_signed

__all__ = ["Charge", "Entry", "Fee", "Ledger", "PostResult"]

log = structlog.get_logger("maasctl.billing.ledger")
_PREFIXES = 200  # key ranges per SELECT


def spend_postings(tenant: str) -> Any:
    """The postings that are the tenant's spend (`Ledger.spend`): its wallet's usage charges and re-rating
    adjustments (a select over postings joined with their transactions)."""
    rerating = and_(transactions.c.kind == "adjustment",
                    transactions.c.key.startswith(RERATE_PREFIX, autoescape=True))
    return and_(postings.c.account == wallet(tenant), or_(postings.c.kind == "usage", rerating))


@dataclass(frozen=True)
class PostResult:
    inserted: tuple[str, ...] = ()
    duplicates: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()  # same key, different content: not applied


@dataclass(frozen=True)
class Charge:
    """A usage record's charge: the amount taken from the wallet and the rated line (details) it keeps."""

    amount: Decimal
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def geo(self) -> str:
        """The region of the SKU it was rated with."""
        return str(self.details.get("geo") or "")


@dataclass(frozen=True)
class Fee:
    """A committed-use fee as charged: its tier, its month (start) and the amount taken from the wallet."""

    tier: str
    month: datetime
    amount: Decimal


@dataclass(frozen=True)
class Entry:
    """One recorded transaction as `maasctl billing ledger` shows it, seen from the tenant's wallet."""

    id: int
    key: str
    kind: str
    tenant: str
    currency: str
    occurred_at: datetime
    recorded_at: datetime
    actor: str
    reason: str
    tokens: int
    amount: Decimal  # effect on the wallet (negative: a charge)
    details: dict[str, Any] = field(default_factory=dict)


class Ledger:
    """The billing ledger on one database (its own, or shared with maas-api: the table names are prefixed).
    Money only: the rater's cursor and unpriced usage are the `RatingBook`'s, budget firings and their webhook
    outbox the `BudgetBook`'s, on the same database and schema history."""

    def __init__(self, engine: AsyncEngine, now: Any = None) -> None:
        self.engine = engine
        self._now = now or (lambda: datetime.now(UTC))
        self._schema_ready = False
        self._schema_lock = asyncio.Lock()

    @classmethod
    def from_url(cls, url: str) -> Ledger:
        return cls(make_engine(url))

    async def create_schema(self) -> None:
        """Migrate the ledger's schema history to head: its tables and the rating and budget books' beside them
        (see `db.create_tables`)."""
        await create_tables(self.engine, create_schema_sync)

    async def ensure_schema(self) -> None:
        """`create_schema` once per process (the controllers of one process share it)."""
        async with self._schema_lock:
            if not self._schema_ready:
                await self.create_schema()
                self._schema_ready = True

    async def close(self) -> None:
        await self.engine.dispose()

    # -- writing -----------------------------------------------------------------------------------------

    async def post(self, txs: Sequence[Transaction], *, conn: AsyncConnection | None = None) -> PostResult:
        """Record `txs` atomically (idempotent by key). With `conn`, inside the caller's transaction."""
        if conn is None:
            async with self.engine.begin() as own:
                return await self._post(own, txs)
        return await self._post(conn, txs)

    async def _post(self, conn: AsyncConnection, txs: Sequence[Transaction]) -> PostResult:
        unique: dict[str, Transaction] = {}
        for tx in txs:
            unique.setdefault(tx.key, tx)
        if not unique:
            return PostResult()
        recorded_at = self._now()
        digests = {k: tx.digest() for k, tx in unique.items()}
        rows = [{"key": tx.key, "kind": tx.kind, "tenant": tx.tenant, "currency": tx.currency,
                 "occurred_at": tx.occurred_at, "recorded_at": recorded_at, "actor": tx.actor, "reason": tx.reason,
                 "tokens": tx.tokens, "details": dict(tx.details), "digest": digests[tx.key]}
                for tx in unique.values()]
        ids: dict[str, int] = {}
        for part in chunks(rows):
            stmt = dialect_insert(conn, transactions).on_conflict_do_nothing(index_elements=["key"])
            result = await conn.execute(stmt.returning(transactions.c.id, transactions.c.key), list(part))
            ids.update({str(r.key): int(r.id) for r in result})
        legs = [{"transaction_id": ids[k], "account": p.account, "tenant": tx.tenant, "kind": tx.kind,
                 "occurred_at": tx.occurred_at, "amount_micros": to_micros(p.amount)}
                for k, tx in unique.items() if k in ids for p in tx.postings]
        for part in chunks(legs):
            await conn.execute(postings.insert(), list(part))
        others = [k for k in unique if k not in ids]
        conflicts: list[str] = []
        for part in chunks(others):
            stored = await conn.execute(select(transactions.c.key, transactions.c.digest)
                                        .where(transactions.c.key.in_(list(part))))
            conflicts += [str(r.key) for r in stored if r.digest != digests[str(r.key)]]
        if conflicts:
            log.warning("ledger entries with a known key and different content were not applied",
                        count=len(conflicts), keys=conflicts[:5])
        return PostResult(tuple(k for k in unique if k in ids),
                          tuple(k for k in others if k not in conflicts), tuple(conflicts))

    async def usage_charges(self, tenant: str, since: datetime, until: datetime) -> dict[str, Charge]:
        """Usage record id -> what its `usage:<id>` entry charged the tenant and the rated line it keeps, for
        records in [since, until)."""
        t = transactions
        stmt = (select(t.c.key, t.c.details, postings.c.amount_micros)
                .select_from(t.join(postings, postings.c.transaction_id == t.c.id))
                .where(and_(t.c.tenant == tenant, t.c.kind == "usage", t.c.occurred_at >= since,
                            t.c.occurred_at < until, postings.c.account == wallet(tenant))))
        async with self.engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return {str(r.key).removeprefix("usage:"): Charge(from_micros(-int(r.amount_micros)), dict(r.details or {}))
                for r in rows}

    async def rerated(self, tenant: str, *, fees: bool = False) -> dict[str, Decimal]:
        """Usage record id (with `fees`: committed-use fee key) -> the sum of what re-rating adjustments added to
        its charge so far."""
        t = transactions
        prefix, what = (RERATE_FEE_PREFIX, "fees") if fees else (RERATE_PREFIX, "records")
        stmt = select(t.c.details).where(and_(t.c.tenant == tenant, t.c.kind == "adjustment",
                                              t.c.key.startswith(prefix, autoescape=True)))
        out: dict[str, Decimal] = {}
        async with self.engine.connect() as conn:
            for (details,) in (await conn.execute(stmt)).all():
                for rid, delta in ((details or {}).get(what) or {}).items():
                    out[str(rid)] = out.get(str(rid), Decimal(0)) + parse_signed(str(delta))
        return out

    async def commitment_fees(self, tenant: str, since: datetime, until: datetime) -> dict[str, Fee]:
        """Fee key -> the committed-use fee charged for each month starting in [since, until)."""
        t = transactions
        stmt = (select(t.c.key, t.c.details, t.c.occurred_at, postings.c.amount_micros)
                .select_from(t.join(postings, postings.c.transaction_id == t.c.id))
                .where(and_(t.c.tenant == tenant, t.c.kind == "commitment", t.c.occurred_at >= since,
                            t.c.occurred_at < until, postings.c.account == wallet(tenant))))
        async with self.engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return {str(r.key): Fee(str((r.details or {}).get("tier") or ""), r.occurred_at,
                                from_micros(-int(r.amount_micros))) for r in rows}

    # -- reading -------------------------------------------------------------------------------------------

    async def details_by_prefix(self, prefixes: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
        """(key, details) of the entries whose key starts with one of `prefixes`, each a key range on the unique
        key's index (the GPU meter: the segments charged per Workload, `gpu:<uid>:`)."""
        t = transactions
        out: list[tuple[str, dict[str, Any]]] = []
        async with self.engine.connect() as conn:
            for part in chunks([p for p in prefixes if p], _PREFIXES):
                ranges = [and_(t.c.key >= p, t.c.key < p[:-1] + chr(ord(p[-1]) + 1)) for p in part]
                rows = (await conn.execute(select(t.c.key, t.c.details).where(or_(*ranges)))).all()
                out += [(str(key), dict(details or {})) for key, details in rows]
        return out

    async def usage_after(self, tenant: str, after_id: int) -> tuple[int, int, Decimal]:
        """(the tenant's newest usage entry id, at least `after_id`; how many usage entries came after `after_id`;
        what its usage up to that newest entry cost it): the psp-connector's usage sync pushes the difference to
        what it pushed before."""
        t = transactions
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(func.max(t.c.id), func.count()).where(and_(
                t.c.tenant == tenant, t.c.kind == "usage", t.c.id > after_id)))).first()
            upto, records = (int(row[0] or after_id), int(row[1] or 0)) if row is not None else (after_id, 0)
            used = int((await conn.execute(select(func.sum(postings.c.amount_micros)).where(and_(
                postings.c.account == wallet(tenant), postings.c.kind == "usage",
                postings.c.transaction_id <= upto)))).scalar() or 0)
        return upto, records, from_micros(-used)

    async def known(self, keys: Sequence[str], *, conn: AsyncConnection | None = None) -> set[str]:
        """Which of `keys` are recorded entries."""
        return await present(self.engine, transactions.c.key, keys, conn)

    async def balance(self, tenant: str) -> Decimal:
        return (await self.balances([tenant]))[tenant]

    async def balances(self, tenants: Sequence[str]) -> dict[str, Decimal]:
        accounts = {wallet(t): t for t in tenants}
        out = {t: from_micros(0) for t in tenants}
        if not accounts:
            return out
        async with self.engine.connect() as conn:
            res = await conn.execute(select(postings.c.account, func.sum(postings.c.amount_micros))
                                     .where(postings.c.account.in_(list(accounts))).group_by(postings.c.account))
            for account, micros in res:
                out[accounts[str(account)]] = from_micros(int(micros or 0))
        return out

    async def spend(self, tenant: str, since: datetime, until: datetime | None = None) -> Decimal:
        """What rated usage cost the tenant in [since, until): the usage charges of records in the period, plus
        the re-rating adjustments posted in it (`maasctl billing rerate`: a correction counts in the period it is
        posted, as a credit note does), so budgets and `mtdSpend` see the corrected rating, not the mistaken one.
        Goodwill adjustments, credits, fees and payments are not spend."""
        t = transactions
        conds = [spend_postings(tenant), postings.c.occurred_at >= since]
        if until is not None:
            conds.append(postings.c.occurred_at < until)
        stmt = (select(func.sum(postings.c.amount_micros))
                .select_from(postings.join(t, postings.c.transaction_id == t.c.id)).where(and_(*conds)))
        async with self.engine.connect() as conn:
            micros = (await conn.execute(stmt)).scalar()
        return from_micros(-int(micros or 0))

    async def spend_by_key(self, tenant: str, since: datetime, until: datetime) -> dict[str, Decimal]:
        """`spend` per API key id: the usage charges of records in [since, until) and the re-rating adjustments
        posted in it, each under its `keyId` (a re-rating entry corrects the records of one key; "" for tokens
        and for entries made before keys were recorded). Budgets with a key selector."""
        t = transactions
        key_id = func.coalesce(t.c.details["keyId"].as_string(), "")
        rerating = and_(t.c.kind == "adjustment", t.c.key.startswith(RERATE_PREFIX, autoescape=True))
        stmt = (select(key_id.label("key_id"), func.sum(postings.c.amount_micros))
                .select_from(t.join(postings, postings.c.transaction_id == t.c.id))
                .where(and_(t.c.tenant == tenant, or_(t.c.kind == "usage", rerating), t.c.occurred_at >= since,
                            t.c.occurred_at < until, postings.c.account == wallet(tenant)))
                .group_by(key_id))
        async with self.engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return {str(k or ""): from_micros(-int(m or 0)) for k, m in rows}

    async def tokens(self, tenant: str, since: datetime, until: datetime | None = None) -> int:
        """Tokens of the tenant's rated usage for records in [since, until) (volume tiers, committed use)."""
        conds = [transactions.c.tenant == tenant, transactions.c.kind == "usage",
                 transactions.c.occurred_at >= since]
        if until is not None:
            conds.append(transactions.c.occurred_at < until)
        async with self.engine.connect() as conn:
            total = (await conn.execute(select(func.sum(transactions.c.tokens)).where(and_(*conds)))).scalar()
        return int(total or 0)

    async def last_id(self) -> int:
        """The newest entry's id (0: none)."""
        async with self.engine.connect() as conn:
            return int((await conn.execute(select(func.max(transactions.c.id)))).scalar() or 0)

    async def tenants_after(self, after: int) -> tuple[int, set[str]]:
        """The newest entry id (at least `after`) and the tenants with an entry newer than `after` (the ledger
        watch: who must be looked at again)."""
        t = transactions
        async with self.engine.connect() as conn:
            rows = (await conn.execute(select(t.c.tenant, func.max(t.c.id)).where(t.c.id > after)
                                       .group_by(t.c.tenant))).all()
        return max([after, *(int(r[1]) for r in rows)]), {str(r[0]) for r in rows}

    async def count(self, tenant: str | None = None) -> int:
        stmt = select(func.count()).select_from(transactions)
        if tenant is not None:
            stmt = stmt.where(transactions.c.tenant == tenant)
        async with self.engine.connect() as conn:
            return int((await conn.execute(stmt)).scalar_one())

    async def entries(self, tenant: str, limit: int = 50, kind: str | None = None) -> list[Entry]:
        """The tenant's most recent entries, newest first, with their effect on its wallet."""
        account = wallet(tenant)
        amount = func.sum(postings.c.amount_micros).filter(postings.c.account == account)
        t = transactions
        stmt = (select(t.c.id, t.c.key, t.c.kind, t.c.tenant, t.c.currency, t.c.occurred_at, t.c.recorded_at,
                       t.c.actor, t.c.reason, t.c.tokens, t.c.details, amount.label("amount"))
                .join(postings, postings.c.transaction_id == t.c.id)
                .where(t.c.tenant == tenant)
                .group_by(t.c.id).order_by(t.c.id.desc()).limit(limit))
        if kind is not None:
            stmt = stmt.where(t.c.kind == kind)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return [Entry(id=int(r.id), key=str(r.key), kind=str(r.kind), tenant=str(r.tenant), currency=str(r.currency),
                      occurred_at=r.occurred_at, recorded_at=r.recorded_at, actor=str(r.actor), reason=str(r.reason),
                      tokens=int(r.tokens), amount=from_micros(int(r.amount or 0)), details=dict(r.details or {}))
                for r in rows]

    async def verify(self) -> list[str]:
        """Problems with the books (empty: every transaction balances, and so does the whole ledger)."""
        problems: list[str] = []
        async with self.engine.connect() as conn:
            res = await conn.execute(
                select(transactions.c.key, func.coalesce(func.sum(postings.c.amount_micros), 0),
                       func.count(postings.c.id))
                .select_from(transactions.outerjoin(postings, postings.c.transaction_id == transactions.c.id))
                .group_by(transactions.c.key)
                .having(func.coalesce(func.sum(postings.c.amount_micros), 0) != 0))
            problems += [f"transaction {k} does not balance ({from_micros(int(s))}, {n} postings)" for k, s, n in res]
            empty = await conn.execute(
                select(transactions.c.key).select_from(
                    transactions.outerjoin(postings, postings.c.transaction_id == transactions.c.id))
                .where(postings.c.id.is_(None)))
            problems += [f"transaction {r[0]} has no postings" for r in empty]
            total = (await conn.execute(select(func.sum(postings.c.amount_micros)))).scalar()
            if int(total or 0) != 0:
                problems.append(f"the ledger does not balance: postings sum to {from_micros(int(total))}")
        return problems


"""The ledger store: append idempotent, balanced transactions; derive balances, spend and tokens by SQL.

`post` writes a batch in one database transaction: each entry is inserted unless its natural key is already
there (`ON CONFLICT (key) DO NOTHING ... RETURNING`), and only the inserted entries get postings. A crash
before the commit leaves nothing; a retry skips what is already recorded; the same key with different content
is a conflict (reported, not applied). Nothing is ever updated or deleted (the tables' triggers refuse it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import structlog
from sqlalchemy import Connection, and_, delete, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from maasctl.billing.ledger.entries import RERATE_PREFIX, Transaction, from_micros, to_micros, wallet
from maasctl.billing.ledger.migrate import alembic_lock
from maasctl.billing.ledger.schema import (
    create_schema_sync,
    cursor,
    firings,
    notices,
    postings,
    transactions,
    unpriced,
)
from maasctl.billing.money import parse_signed
from maasctl.dbfiles import private_sqlite_file

__all__ = ["Entry", "Ledger", "Notice", "PendingNotice", "PostResult", "Unpriced", "create_tables", "make_engine"]

log = structlog.get_logger("maasctl.billing.ledger")
_CHUNK = 500  # rows per INSERT statement (bind-parameter limits)


async def create_tables(engine: AsyncEngine, create: Callable[[Connection], None]) -> None:
    """Run `create` (a schema's migration to head, `ledger.migrate`) in one transaction. Concurrent processes
    wait for each other's lock (PostgreSQL advisory lock, SQLite write lock); should one still trip over a table
    another just created, its second look finds the schema current. In one process, one migration at a time
    (`alembic_lock`)."""
    for attempt in (1, 2):
        try:
            async with alembic_lock(), engine.begin() as conn:
                await conn.run_sync(create)
            return
        except OperationalError as exc:
            if attempt == 2 or "already exists" not in str(exc):
                raise


def make_engine(url: str) -> AsyncEngine:
    """An engine for `url` (postgresql+asyncpg://... or sqlite+aiosqlite:///path, its file created 0600)."""
    if url.startswith("sqlite"):
        private_sqlite_file(url)
        return create_async_engine(url, connect_args={"timeout": 30})
    return create_async_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)


@dataclass(frozen=True)
class PostResult:
    inserted: tuple[str, ...] = ()
    duplicates: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()  # same key, different content: not applied


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


@dataclass(frozen=True)
class Unpriced:
    record_id: str
    tenant: str
    model: str
    occurred_at: datetime
    reason: str


def _insert(conn: AsyncConnection, table: Any) -> Any:
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    if conn.dialect.name == "sqlite":
        return sqlite.insert(table)
    raise NotImplementedError(f"the ledger does not support {conn.dialect.name}")


def _chunks(rows: Sequence[Any], size: int = _CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(rows), size):
        yield rows[i: i + size]


@dataclass(frozen=True)
class Notice:
    """A budget firing's webhook to record with its claim: the event id and the JSON `data` (budget_notice)."""

    tenant: str
    event_id: str
    data: str


@dataclass(frozen=True)
class PendingNotice:
    key: str
    event_id: str
    budget: str
    data: str
    attempts: int


class Ledger:
    """The billing ledger on one database (its own, or shared with maas-api: the table names are prefixed)."""

    def __init__(self, engine: AsyncEngine, now: Any = None) -> None:
        self.engine = engine
        self._now = now or (lambda: datetime.now(UTC))
        self._schema_ready = False
        self._schema_lock = asyncio.Lock()

    @classmethod
    def from_url(cls, url: str) -> Ledger:
        return cls(make_engine(url))

    async def create_schema(self) -> None:
        """Migrate the ledger's tables to head (see `create_tables`)."""
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
        for part in _chunks(rows):
            stmt = _insert(conn, transactions).on_conflict_do_nothing(index_elements=["key"])
            result = await conn.execute(stmt.returning(transactions.c.id, transactions.c.key), list(part))
            ids.update({str(r.key): int(r.id) for r in result})
        legs = [{"transaction_id": ids[k], "account": p.account, "tenant": tx.tenant, "kind": tx.kind,
                 "occurred_at": tx.occurred_at, "amount_micros": to_micros(p.amount)}
                for k, tx in unique.items() if k in ids for p in tx.postings]
        for part in _chunks(legs):
            await conn.execute(postings.insert(), list(part))
        others = [k for k in unique if k not in ids]
        conflicts: list[str] = []
        for part in _chunks(others):
            stored = await conn.execute(select(transactions.c.key, transactions.c.digest)
                                        .where(transactions.c.key.in_(list(part))))
            conflicts += [str(r.key) for r in stored if r.digest != digests[str(r.key)]]
        if conflicts:
            log.warning("ledger entries with a known key and different content were not applied",
                        count=len(conflicts), keys=conflicts[:5])
        return PostResult(tuple(k for k in unique if k in ids),
                          tuple(k for k in others if k not in conflicts), tuple(conflicts))

    async def mark_unpriced(self, items: Sequence[Unpriced], *, conn: AsyncConnection | None = None) -> None:
        """Remember records no SKU prices (reported; rated again by `Rater.revisit_unpriced` when a PriceBook
        that may price them appears)."""
        if not items:
            return
        rows = [{"record_id": u.record_id, "tenant": u.tenant, "model": u.model, "occurred_at": u.occurred_at,
                 "reason": u.reason[:1024], "recorded_at": self._now()} for u in items]

        async def write(c: AsyncConnection) -> None:
            for part in _chunks(rows):
                await c.execute(_insert(c, unpriced).on_conflict_do_nothing(index_elements=["record_id"]), list(part))

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
        """Forget unpriced records that are now charged (their `usage:<id>` entry is posted in `conn`'s
        transaction: the report shrinks exactly when the charge exists)."""
        for part in _chunks(list(record_ids)):
            await conn.execute(delete(unpriced).where(unpriced.c.record_id.in_(list(part))))

    async def usage_charges(self, tenant: str, since: datetime, until: datetime
                            ) -> dict[str, tuple[Decimal, str]]:
        """Usage record id -> (what its `usage:<id>` entry charged the tenant, the region of the SKU it was rated
        with), for records in [since, until)."""
        t = transactions
        stmt = (select(t.c.key, t.c.details, postings.c.amount_micros)
                .select_from(t.join(postings, postings.c.transaction_id == t.c.id))
                .where(and_(t.c.tenant == tenant, t.c.kind == "usage", t.c.occurred_at >= since,
                            t.c.occurred_at < until, postings.c.account == wallet(tenant))))
        async with self.engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return {str(r.key).removeprefix("usage:"): (from_micros(-int(r.amount_micros)),
                                                     str((r.details or {}).get("geo") or "")) for r in rows}

    async def rerated(self, tenant: str) -> dict[str, Decimal]:
        """Usage record id -> the sum of what re-rating adjustments added to its charge so far."""
        t = transactions
        stmt = select(t.c.details).where(and_(t.c.tenant == tenant, t.c.kind == "adjustment",
                                              t.c.key.startswith(RERATE_PREFIX, autoescape=True)))
        out: dict[str, Decimal] = {}
        async with self.engine.connect() as conn:
            for (details,) in (await conn.execute(stmt)).all():
                for rid, delta in ((details or {}).get("records") or {}).items():
                    out[str(rid)] = out.get(str(rid), Decimal(0)) + parse_signed(str(delta))
        return out

    # -- the rater's cursor --------------------------------------------------------------------------------

    async def cursor(self, name: str) -> tuple[datetime, str] | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(cursor.c.received_at, cursor.c.record_id)
                                      .where(cursor.c.name == name))).first()
        return (row.received_at, str(row.record_id)) if row is not None else None

    async def set_cursor(self, name: str, received_at: datetime, record_id: str, conn: AsyncConnection) -> None:
        ins = _insert(conn, cursor)
        values = {"received_at": received_at, "record_id": record_id, "updated_at": self._now()}
        await conn.execute(ins.values(name=name, **values).on_conflict_do_update(index_elements=["name"],
                                                                                 set_=values))

    # -- reading -------------------------------------------------------------------------------------------

    async def known(self, keys: Sequence[str]) -> set[str]:
        """Which of `keys` are recorded (as entries, or as unpriced usage `usage:<id>`)."""
        out: set[str] = set()
        async with self.engine.connect() as conn:
            for part in _chunks(list(keys)):
                res = await conn.execute(select(transactions.c.key).where(transactions.c.key.in_(list(part))))
                out.update(str(r[0]) for r in res)
                ids = [k.removeprefix("usage:") for k in part if k.startswith("usage:")]
                if ids:
                    res = await conn.execute(select(unpriced.c.record_id).where(unpriced.c.record_id.in_(ids)))
                    out.update(f"usage:{r[0]}" for r in res)
        return out

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
        rerating = and_(t.c.kind == "adjustment", t.c.key.startswith(RERATE_PREFIX, autoescape=True))
        conds = [postings.c.account == wallet(tenant), postings.c.occurred_at >= since,
                 or_(postings.c.kind == "usage", rerating)]
        if until is not None:
            conds.append(postings.c.occurred_at < until)
        stmt = (select(func.sum(postings.c.amount_micros))
                .select_from(postings.join(t, postings.c.transaction_id == t.c.id)).where(and_(*conds)))
        async with self.engine.connect() as conn:
            micros = (await conn.execute(stmt)).scalar()
        return from_micros(-int(micros or 0))

    async def spend_by_key(self, tenant: str, since: datetime, until: datetime) -> dict[str, Decimal]:
        """What rated usage cost the tenant for records in [since, until), per API key id (the rated line's
        `keyId`; "" for tokens and for lines rated before keys were recorded). Budgets with a key selector."""
        t = transactions
        key_id = func.coalesce(t.c.details["keyId"].as_string(), "")
        stmt = (select(key_id.label("key_id"), func.sum(postings.c.amount_micros))
                .select_from(t.join(postings, postings.c.transaction_id == t.c.id))
                .where(and_(t.c.tenant == tenant, t.c.kind == "usage", t.c.occurred_at >= since,
                            t.c.occurred_at < until, postings.c.account == wallet(tenant)))
                .group_by(key_id))
        async with self.engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return {str(k or ""): from_micros(-int(m or 0)) for k, m in rows}

    async def claim_firings(self, budget: str, keys: Sequence[str], at: datetime,
                            notify: Mapping[str, Notice] | None = None) -> tuple[set[str], dict[str, datetime]]:
        """Record budget firings by natural key; returns the keys this call inserted (it alone notifies them:
        two controllers racing never both win) and when each of `keys` fired. The `notify` notices of the keys
        won are recorded in the same transaction (the psp-connector delivers them), so a firing claimed always
        has its webhook to deliver, and only one."""
        if not keys:
            return set(), {}
        async with self.engine.begin() as conn:
            stmt = _insert(conn, firings).on_conflict_do_nothing(index_elements=["key"]).returning(firings.c.key)
            res = await conn.execute(stmt, [{"key": k, "budget": budget, "fired_at": at} for k in keys])
            won = {str(r.key) for r in res}
            rows = [{"key": k, "event_id": n.event_id, "budget": budget, "tenant": n.tenant, "data": n.data,
                     "state": "pending", "attempts": 0, "created_at": at, "next_attempt_at": at}
                    for k, n in (notify or {}).items() if k in won]
            if rows:
                await conn.execute(_insert(conn, notices).on_conflict_do_nothing(index_elements=["key"]), rows)
            stored = await conn.execute(select(firings.c.key, firings.c.fired_at)
                                        .where(firings.c.key.in_(list(keys))))
            return won, {str(r.key): r.fired_at for r in stored}

    async def due_notices(self, tenant: str, now: datetime, limit: int = 20) -> list[PendingNotice]:
        """The tenant's budget notices not delivered yet whose next attempt is due, oldest first."""
        n = notices
        stmt = (select(n.c.key, n.c.event_id, n.c.budget, n.c.data, n.c.attempts)
                .where(and_(n.c.tenant == tenant, n.c.state == "pending", n.c.next_attempt_at <= now))
                .order_by(n.c.created_at, n.c.key).limit(limit))
        async with self.engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return [PendingNotice(str(r.key), str(r.event_id), str(r.budget), str(r.data), int(r.attempts)) for r in rows]

    async def take_notice(self, key: str, now: datetime, lease_until: datetime) -> bool:
        """Take a due notice for one delivery attempt (its next attempt moves to `lease_until`): two connector
        replicas never POST it at once; if the taker dies, it is due again when the lease ends (same event id)."""
        n = notices
        async with self.engine.begin() as conn:
            res = await conn.execute(update(n).where(and_(n.c.key == key, n.c.state == "pending",
                                                          n.c.next_attempt_at <= now))
                                     .values(next_attempt_at=lease_until))
            return bool(res.rowcount)

    async def settle_notice(self, key: str, state: str, at: datetime) -> bool:
        """Mark a pending notice `sent` or `skipped` (the connector is not a webhook); False if it was not pending."""
        async with self.engine.begin() as conn:
            res = await conn.execute(update(notices).where(and_(notices.c.key == key, notices.c.state == "pending"))
                                     .values(state=state, settled_at=at))
            return bool(res.rowcount)

    async def notice_failed(self, key: str, reason: str, retry_at: datetime) -> int:
        """Count a failed delivery attempt (the reason is a fixed word, never a secret); the attempts so far."""
        async with self.engine.begin() as conn:
            await conn.execute(update(notices).where(and_(notices.c.key == key, notices.c.state == "pending"))
                               .values(attempts=notices.c.attempts + 1, last_failure=reason[:64],
                                       next_attempt_at=retry_at))
            found = (await conn.execute(select(notices.c.attempts).where(notices.c.key == key))).scalar()
            return int(found or 0)

    async def notice_states(self, budget: str) -> dict[str, tuple[str, int, str | None]]:
        """Firing key -> (state, attempts, last failure) of a budget's notices."""
        n = notices
        async with self.engine.connect() as conn:
            rows = (await conn.execute(select(n.c.key, n.c.state, n.c.attempts, n.c.last_failure)
                                       .where(n.c.budget == budget))).all()
        return {str(r.key): (str(r.state), int(r.attempts), r.last_failure) for r in rows}

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


"""The budget book: the budgets' bookkeeping beside the ledger, in the same database, and not money.

- firings (`billing_budget_firings`): one row per budget threshold fired in a period, by natural key; whoever
  inserts it notifies, so a retry, a restart or two replicas never notify twice;
- notices (`billing_budget_notices`): the outbox of the signed webhooks of those firings, recorded in the claim's
  transaction by the billing controller and delivered by the psp-connector (taken under a lease, settled once).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from maasctl.billing.ledger.db import dialect_insert
from maasctl.billing.ledger.schema import firings, notices

__all__ = ["BudgetBook", "Notice", "PendingNotice"]


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


class BudgetBook:
    """Budget firings and their notice outbox, on the ledger's database (its schema is the ledger's:
    `Ledger.ensure_schema` migrates it)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def claim_firings(self, budget: str, keys: Sequence[str], at: datetime,
                            notify: Mapping[str, Notice] | None = None) -> tuple[set[str], dict[str, datetime]]:
        """Record budget firings by natural key; returns the keys this call inserted (it alone notifies them:
        two controllers racing never both win) and when each of `keys` fired. The `notify` notices of the keys
        won are recorded in the same transaction (the psp-connector delivers them), so a firing claimed always
        has its webhook to deliver, and only one."""
        if not keys:
            return set(), {}
        async with self.engine.begin() as conn:
            stmt = (dialect_insert(conn, firings).on_conflict_do_nothing(index_elements=["key"])
                    .returning(firings.c.key))
            res = await conn.execute(stmt, [{"key": k, "budget": budget, "fired_at": at} for k in keys])
            won = {str(r.key) for r in res}
            rows = [{"key": k, "event_id": n.event_id, "budget": budget, "tenant": n.tenant, "data": n.data,
                     "state": "pending", "attempts": 0, "created_at": at, "next_attempt_at": at}
                    for k, n in (notify or {}).items() if k in won]
            if rows:
                await conn.execute(dialect_insert(conn, notices).on_conflict_do_nothing(index_elements=["key"]),
                                   rows)
            stored = await conn.execute(select(firings.c.key, firings.c.fired_at)
                                        .where(firings.c.key.in_(list(keys))))
            return won, {str(r.key): r.fired_at for r in stored}

    # -- the notice outbox (the psp-connector's side) --------------------------------------------------------

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

"""The payment book of the psp-connector: reload attempts, applied events and webhook deliveries, on the
ledger's database. Every operation that can move money runs in one database transaction that first writes the
tenant's lock row, so the operations of one tenant are serialised across processes and replicas.

- `begin_reload` re-checks the in-flight guard, `maxReloadsPerDay` and `monthlyCapAmount` inside that
  transaction and records a `pending` attempt (a partial unique index allows one per tenant): concurrent
  triggers start at most one reload and never pass a limit. The attempt id is the PSP idempotency key, so a
  crash between recording and asking the PSP is retried with the same key (`resume_reload`).
- `apply` records an inbound event once (`<connector>:<event id>`; a redelivery is a duplicate and changes
  nothing) and does what it means: a corroborated success settles the attempt and credits the wallet
  (ledger key `psp:reload:<attempt>`, in the same transaction: credited once, whatever is redelivered), a failure
  settles it as failed, disputes are recorded. A success that does not match what we asked for (unknown
  attempt, another tenant, intent, amount or currency) is never credited: it is recorded as
  `corroboration_failed`.
- `facts` derives what the TenantAccount status shows: the pending intent, consecutive failures since the last
  success, open disputes, the latest corroboration failure.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final

import structlog
from sqlalchemy import and_, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from maasctl.billing.connector.schema import (
    create_schema_sync,
    events,
    invoices,
    locks,
    reloads,
    usage_pushes,
    webhooks,
)
from maasctl.billing.ledger import Ledger, Posting, Transaction, credit, wallet
from maasctl.billing.ledger.db import create_tables, dialect_insert
from maasctl.billing.ledger.entries import FUNDING, from_micros, to_micros
from maasctl.billing.rules.psp_events import Inbound
from maasctl.billing.rules.reload import DAY, month_start

__all__ = ["Applied", "Attempt", "Limits", "PaymentFacts", "Payments", "UsageBook"]

log = structlog.get_logger("maasctl.billing.connector")
ACTOR: Final = "psp-connector"


@dataclass(frozen=True)
class Attempt:
    id: str
    tenant: str
    connector: str
    amount: Decimal
    currency: str
    state: str
    intent_id: str | None
    created_at: datetime


@dataclass(frozen=True)
class Limits:
    threshold: Decimal
    reload_amount: Decimal
    monthly_cap: Decimal
    max_per_day: int  # 0: no limit


@dataclass(frozen=True)
class Applied:
    outcome: str  # accepted, duplicate, corroboration_failed, unknown_tenant, ignored
    tenant: str | None
    message: str = ""


@dataclass(frozen=True)
class PaymentFacts:
    pending: Attempt | None
    month_reloaded: Decimal
    attempts_24h: tuple[datetime, ...]
    consecutive_failures: int
    last_failure_at: datetime | None
    dispute_open: bool
    dispute_code: str | None
    corroboration_failed_at: datetime | None


def _attempt(row: Any) -> Attempt:
    return Attempt(str(row.id), str(row.tenant), str(row.connector), from_micros(int(row.amount_micros)),
                   str(row.currency), str(row.state), row.intent_id, row.created_at)


class Payments:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._ready = False

    @property
    def engine(self) -> Any:
        return self.ledger.engine

    async def ensure_schema(self) -> None:
        if self._ready:
            return
        await self.ledger.ensure_schema()
        await create_tables(self.engine, create_schema_sync)  # the connector and a test (or a second replica) race
        self._ready = True

    async def _lock(self, conn: AsyncConnection, tenant: str, now: datetime) -> None:
        ins = dialect_insert(conn, locks)
        await conn.execute(ins.values(tenant=tenant, touched_at=now)
                           .on_conflict_do_update(index_elements=["tenant"], set_={"touched_at": now}))

    # -- reloads -------------------------------------------------------------------------------------------

    async def _usage_of_limits(self, conn: AsyncConnection, tenant: str, now: datetime
                               ) -> tuple[Decimal, list[datetime], Attempt | None]:
        r = reloads
        month = await conn.execute(select(func.sum(r.c.amount_micros)).where(and_(
            r.c.tenant == tenant, r.c.created_at >= month_start(now), r.c.state.in_(("pending", "succeeded")))))
        recent = await conn.execute(select(r.c.created_at).where(and_(r.c.tenant == tenant,
                                                                      r.c.created_at > now - DAY)))
        pending = (await conn.execute(select(r).where(and_(r.c.tenant == tenant, r.c.state == "pending")))).first()
        return (from_micros(int(month.scalar() or 0)), [row[0] for row in recent],
                _attempt(pending) if pending is not None else None)

    async def begin_reload(self, tenant: str, connector: str, limits: Limits, currency: str, now: datetime
                           ) -> tuple[Attempt | None, str]:
        """Record a pending attempt if every guard still holds; (attempt, "") or (None, why not)."""
        attempt_id = f"maasctl-reload-{uuid.uuid4().hex}"
        try:
            async with self.engine.begin() as conn:
                await self._lock(conn, tenant, now)
                month, recent, pending = await self._usage_of_limits(conn, tenant, now)
                if pending is not None:
                    return None, "ReloadInFlight"
                if limits.max_per_day and len(recent) >= limits.max_per_day:
                    return None, "DailyLimitReached"
                if month + limits.reload_amount > limits.monthly_cap:
                    return None, "MonthlyCapReached"
                await conn.execute(reloads.insert().values(
                    id=attempt_id, tenant=tenant, connector=connector, amount_micros=to_micros(limits.reload_amount),
                    currency=currency, state="pending", intent_id=None, created_at=now))
        except IntegrityError:  # another process recorded a pending attempt first
            return None, "ReloadInFlight"
        return Attempt(attempt_id, tenant, connector, limits.reload_amount, currency, "pending", None, now), ""

    async def record_intent(self, attempt_id: str, intent_id: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(update(reloads).where(and_(reloads.c.id == attempt_id, reloads.c.intent_id.is_(None)))
                               .values(intent_id=intent_id))

    async def fail_attempt(self, attempt: Attempt, code: str, now: datetime) -> None:
        """The PSP refused the payment when asked (a declined card): a failure, like a failure webhook."""
        async with self.engine.begin() as conn:
            await self._lock(conn, attempt.tenant, now)
            res = await conn.execute(update(reloads).where(and_(reloads.c.id == attempt.id,
                                                                reloads.c.state == "pending"))
                                     .values(state="failed", settled_at=now, failure_code=code[:64]))
            if res.rowcount:
                await conn.execute(events.insert().values(
                    key=f"{attempt.connector}:declined:{attempt.id}", connector=attempt.connector,
                    tenant=attempt.tenant, type="reload.declined", effect="payment_failed",
                    reference=attempt.intent_id, code=code[:64], received_at=now))

    async def pending(self, tenant: str) -> Attempt | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(reloads).where(and_(reloads.c.tenant == tenant,
                                                                 reloads.c.state == "pending")))).first()
        return _attempt(row) if row is not None else None

    async def attempts(self, tenant: str) -> list[Attempt]:
        async with self.engine.connect() as conn:
            rows = (await conn.execute(select(reloads).where(reloads.c.tenant == tenant)
                                       .order_by(reloads.c.created_at))).all()
        return [_attempt(r) for r in rows]

    # -- inbound events --------------------------------------------------------------------------------------

    async def _find_attempt(self, conn: AsyncConnection, inbound: Inbound) -> Attempt | None:
        if inbound.attempt is not None:
            row = (await conn.execute(select(reloads).where(reloads.c.id == inbound.attempt))).first()
            if row is not None:
                return _attempt(row)
        if inbound.intent is not None:
            row = (await conn.execute(select(reloads).where(reloads.c.intent_id == inbound.intent)
                                      .order_by(reloads.c.created_at.desc()))).first()
            if row is not None:
                return _attempt(row)
        return None

    async def apply(self, connector: str, inbound: Inbound, now: datetime, claimed_tenant: str | None = None
                    ) -> Applied:
        """Apply a verified event once. An event touches the tenant of a reload this connector started, else
        `claimed_tenant`: the tenant the event names, passed only when the caller checked that it is one of this
        connector's tenants (its TenantAccount names the connector). A connector's secret never reaches another
        connector's tenants."""
        key = f"{connector}:{inbound.event_id}"
        async with self.engine.connect() as conn:
            seen = (await conn.execute(select(events.c.id).where(events.c.key == key))).first()
            attempt = await self._find_attempt(conn, inbound)
        if seen is not None:
            return Applied("duplicate", None)
        ours = attempt if attempt is not None and attempt.connector == connector else None
        if inbound.effect == "ignored":
            tenant = None
        elif inbound.invoice or ours is None:
            tenant = claimed_tenant
        else:
            tenant = ours.tenant
        if inbound.effect != "ignored" and tenant is None:
            outcome, effect = "unknown_tenant", "ignored"
        else:
            outcome, effect = "accepted", inbound.effect
        try:
            async with self.engine.begin() as conn:
                if tenant is not None:
                    await self._lock(conn, tenant, now)
                if (await conn.execute(select(events.c.id).where(events.c.key == key))).first() is not None:
                    return Applied("duplicate", None)
                message = ""
                if effect == "payment_succeeded" and not inbound.invoice:
                    assert tenant is not None
                    ok, message = await self._settle_success(conn, connector, tenant, inbound, now)
                    if not ok:
                        outcome, effect = "corroboration_failed", "corroboration_failed"
                elif effect == "payment_failed" and not inbound.invoice:
                    settled = 0
                    if ours is not None:
                        res = await conn.execute(update(reloads).where(and_(
                            reloads.c.id == ours.id, reloads.c.state != "succeeded")).values(
                            state="failed", settled_at=now, failure_code=(inbound.code or "failed")[:64]))
                        settled = res.rowcount
                    if not settled:  # not a reload of ours, or a stale failure of a settled one
                        outcome, effect = "ignored", "ignored"
                elif effect == "dispute_closed" and inbound.code == "lost":
                    message = await self._debit_lost_dispute(conn, ours, inbound, now)
                await conn.execute(events.insert().values(
                    key=key, connector=connector, tenant=tenant, type=inbound.type, effect=effect,
                    reference=inbound.reference, code=inbound.code, received_at=now))
        except IntegrityError:  # the same event applied concurrently by another delivery
            return Applied("duplicate", None)
        return Applied(outcome, tenant, message)

    async def _settle_success(self, conn: AsyncConnection, connector: str, tenant: str, inbound: Inbound,
                              now: datetime) -> tuple[bool, str]:
        """Credit a confirmed reload once, if the event is exactly what we asked for."""
        row = None
        if inbound.attempt is not None:
            row = (await conn.execute(select(reloads).where(reloads.c.id == inbound.attempt))).first()
        elif inbound.intent is not None:
            row = (await conn.execute(select(reloads).where(reloads.c.intent_id == inbound.intent))).first()
        if row is None:
            return False, "the payment does not match any reload this connector started"
        attempt = _attempt(row)
        problems = []
        if attempt.connector != connector:
            problems.append("another connector's reload")
        if inbound.tenant is not None and inbound.tenant != attempt.tenant:
            problems.append("another tenant")
        if attempt.intent_id is not None and inbound.intent is not None and inbound.intent != attempt.intent_id:
            problems.append("another payment intent")
        if inbound.amount != attempt.amount or inbound.currency != attempt.currency:
            problems.append(f"amount {inbound.amount} {inbound.currency}, expected {attempt.amount} {attempt.currency}")
        if problems:
            return False, "the payment confirmation does not match reload " + attempt.id + ": " + ", ".join(problems)
        values: dict[str, Any] = {"state": "succeeded", "settled_at": now}
        if attempt.intent_id is None and inbound.intent is not None:
            values["intent_id"] = inbound.intent
        await conn.execute(update(reloads).where(reloads.c.id == attempt.id).values(**values))
        tx = credit(f"reload:{attempt.id}", attempt.tenant, now, attempt.amount, currency=attempt.currency,
                    reason=f"auto-reload confirmed by the PSP (event {inbound.event_id})", actor=ACTOR, kind="payment")
        await self.ledger.post([tx], conn=conn)
        return True, ""

    async def _debit_lost_dispute(self, conn: AsyncConnection, reload: Attempt | None, inbound: Inbound,
                                  now: datetime) -> str:
        """A lost dispute of a reload this connector confirmed takes that money back out of the wallet: at most
        the reload's amount, once per reload (whatever the dispute ids). Anything else is recorded, not debited:
        the wallet was never credited through this connector for it."""
        if reload is None:
            return "the dispute does not concern a reload this connector started: nothing debited"
        state = (await conn.execute(select(reloads.c.state).where(reloads.c.id == reload.id))).scalar_one()
        if state != "succeeded":
            return f"reload {reload.id} was never credited ({state}): nothing debited"
        if inbound.currency != reload.currency:
            return f"the dispute is in {inbound.currency}, reload {reload.id} in {reload.currency}: nothing debited"
        amount = min(inbound.amount or reload.amount, reload.amount)
        tx = Transaction(key=f"psp:dispute-lost:{reload.id}", kind="payment", tenant=reload.tenant, occurred_at=now,
                         currency=reload.currency, actor=ACTOR,
                         reason=f"payment dispute {inbound.reference or inbound.event_id} of reload {reload.id} lost: "
                                "the disputed amount is returned",
                         postings=(Posting(wallet(reload.tenant), -amount), Posting(FUNDING, amount)))
        await self.ledger.post([tx], conn=conn)
        return ""

    async def tenant_of_intent(self, intent: str) -> str | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(reloads.c.tenant).where(reloads.c.intent_id == intent))).first()
        return str(row[0]) if row is not None else None

    # -- what the status shows -----------------------------------------------------------------------------

    async def facts(self, tenant: str, now: datetime) -> PaymentFacts:
        async with self.engine.connect() as conn:
            month, recent, pending = await self._usage_of_limits(conn, tenant, now)
            e = events
            last_success = (await conn.execute(select(func.max(e.c.id)).where(and_(
                e.c.tenant == tenant, e.c.effect == "payment_succeeded")))).scalar()
            since = int(last_success or 0)
            failures = (await conn.execute(select(func.count(), func.max(e.c.received_at)).where(and_(
                e.c.tenant == tenant, e.c.effect == "payment_failed", e.c.id > since)))).first()
            dispute = (await conn.execute(select(e.c.effect, e.c.code).where(and_(
                e.c.tenant == tenant, e.c.effect.in_(("dispute_opened", "dispute_closed"))))
                .order_by(e.c.id.desc()).limit(1))).first()
            corroboration = (await conn.execute(select(func.max(e.c.received_at)).where(and_(
                e.c.tenant == tenant, e.c.effect == "corroboration_failed", e.c.id > since)))).scalar()
        count, last_failure = (int(failures[0]), failures[1]) if failures is not None else (0, None)
        return PaymentFacts(pending, month, tuple(recent), count, last_failure,
                            dispute is not None and dispute.effect == "dispute_opened",
                            str(dispute.code) if dispute is not None and dispute.code else None, corroboration)

    # -- webhook deliveries ----------------------------------------------------------------------------------

    async def log_delivery(self, connector: str, outcome: str, now: datetime) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(webhooks.insert().values(connector=connector, received_at=now, outcome=outcome))

    async def delivery_stats(self, connector: str, now: datetime) -> tuple[int, int]:
        """(deliveries, signature failures) in the last 24 hours."""
        w = webhooks
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(
                func.count(), func.count().filter(w.c.outcome == "signature_failure"))
                .where(and_(w.c.connector == connector, w.c.received_at > now - timedelta(hours=24))))).first()
        return (int(row[0]), int(row[1])) if row is not None else (0, 0)


class UsageBook:
    """What rated usage of a tenant was pushed to the PSP for invoicing: ledger usage entries by id, pushed in
    whole minor units with the remainder carried (never pushed twice: the push key names the last entry)."""

    def __init__(self, payments: Payments) -> None:
        self.payments = payments

    async def unpushed(self, tenant: str) -> tuple[int, int, int, Decimal]:
        """(last pushed entry id, newest usage entry id, records since, amount due: usage since the first entry
        minus everything pushed, micro-exact)."""
        async with self.payments.engine.connect() as conn:
            cursor = int((await conn.execute(select(func.max(usage_pushes.c.upto_entry_id)).where(
                usage_pushes.c.tenant == tenant))).scalar() or 0)
            pushed = int((await conn.execute(select(func.sum(usage_pushes.c.amount_micros)).where(
                usage_pushes.c.tenant == tenant))).scalar() or 0)
        upto, records, used = await self.payments.ledger.usage_after(tenant, cursor)
        return cursor, upto, records, used - from_micros(pushed)

    async def record(self, key: str, connector: str, tenant: str, upto: int, records: int, amount: Decimal,
                     currency: str, external_id: str, now: datetime) -> None:
        async with self.payments.engine.begin() as conn:
            await conn.execute(dialect_insert(conn, usage_pushes).values(
                key=key, connector=connector, tenant=tenant, upto_entry_id=upto, records=records,
                amount_micros=to_micros(amount), currency=currency, external_id=external_id, at=now)
                .on_conflict_do_nothing(index_elements=["key"]))

    async def record_invoice(self, key: str, connector: str, tenant: str, invoice_id: str, now: datetime) -> bool:
        """False when this period's invoice was already recorded."""
        async with self.payments.engine.begin() as conn:
            res = await conn.execute(dialect_insert(conn, invoices).values(
                key=key, connector=connector, tenant=tenant, invoice_id=invoice_id, status="finalized", at=now)
                .on_conflict_do_nothing(index_elements=["key"]))
            return bool(res.rowcount)

    async def pushed_since_invoice(self, tenant: str) -> int:
        """Micro-units pushed after the tenant's last invoice."""
        async with self.payments.engine.connect() as conn:
            last = (await conn.execute(select(func.max(invoices.c.at)).where(invoices.c.tenant == tenant))).scalar()
            cond = [usage_pushes.c.tenant == tenant] + ([usage_pushes.c.at > last] if last is not None else [])
            return int((await conn.execute(select(func.sum(usage_pushes.c.amount_micros)).where(and_(*cond))))
                       .scalar() or 0)

    async def invoiced(self, key: str) -> bool:
        async with self.payments.engine.connect() as conn:
            return (await conn.execute(select(invoices.c.key).where(invoices.c.key == key))).first() is not None

"""The payment book on SQLite and a real PostgreSQL: concurrent triggers start one reload and never pass a
limit; a confirmation credits the wallet exactly once (redelivered, replayed or raced), and only when it matches
the reload; failures count until a success; disputes are recorded and a lost one is debited."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from maasctl.billing.connector.payments import Limits, Payments
from maasctl.billing.ledger import Ledger
from maasctl.billing.rules.psp_events import parse_stripe, parse_webhook

NOW = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
T = "ns/ten-helix"
C = "ns/stripe"
LIMITS = Limits(Decimal(5), Decimal(25), Decimal(60), 2)


@pytest.fixture
async def payments(ledger: Ledger) -> AsyncIterator[Payments]:
    pay = Payments(ledger)
    await pay.ensure_schema()
    yield pay


def event(event_id: str, type_: str = "payment_intent.succeeded", **obj: Any) -> bytes:
    data: dict[str, Any] = {"id": "pi_1", "amount": 2500, "amount_received": 2500, "currency": "usd",
                            "metadata": {}}
    data.update(obj)
    return json.dumps({"id": event_id, "type": type_, "data": {"object": data}}).encode()


async def started(payments: Payments, intent: str, at: datetime = NOW) -> str:
    attempt, why = await payments.begin_reload(T, C, LIMITS, "USD", at)
    assert attempt is not None, why
    await payments.record_intent(attempt.id, intent)
    return attempt.id


async def confirm(payments: Payments, event_id: str, attempt: str, intent: str, amount: int = 2500,
                  at: datetime = NOW) -> str:
    body = event(event_id, id=intent, amount_received=amount,
                 metadata={"maasctl_reload": attempt, "maasctl_tenant": T})
    return (await payments.apply(C, parse_stripe(body), at)).outcome


async def test_concurrent_triggers_start_exactly_one_reload(payments: Payments) -> None:
    results = await asyncio.gather(*(payments.begin_reload(T, C, LIMITS, "USD", NOW) for _ in range(12)))
    started_ = [a for a, _ in results if a is not None]
    assert len(started_) == 1, results
    assert {why for a, why in results if a is None} == {"ReloadInFlight"}
    assert len(await payments.attempts(T)) == 1
    facts = await payments.facts(T, NOW)
    assert facts.pending is not None and facts.pending.id == started_[0].id


async def test_the_daily_limit_and_the_monthly_cap_hold_under_concurrency(payments: Payments, ledger: Ledger) -> None:
    for i in range(2):  # two reloads confirmed: 50 of the 60 cap used, 2 of 2 a day
        attempt = await started(payments, f"pi_{i}", NOW + timedelta(minutes=i))
        assert await confirm(payments, f"evt_{i}", attempt, f"pi_{i}") == "accepted"
    assert await ledger.balance(T) == Decimal(50)
    results = await asyncio.gather(*(payments.begin_reload(T, C, LIMITS, "USD", NOW + timedelta(hours=1))
                                     for _ in range(8)))
    assert all(a is None for a, _ in results) and {w for _, w in results} == {"DailyLimitReached"}
    # A day later the daily limit lifts, but 50 + 25 would pass the monthly cap of 60.
    later = NOW + timedelta(days=1, minutes=5)
    assert (await payments.begin_reload(T, C, LIMITS, "USD", later)) == (None, "MonthlyCapReached")
    # A new month: the cap starts afresh.
    december = datetime(2026, 12, 1, 0, 1, tzinfo=UTC)
    attempt, _ = await payments.begin_reload(T, C, LIMITS, "USD", december)
    assert attempt is not None


async def test_a_confirmation_credits_once_whatever_is_redelivered(payments: Payments, ledger: Ledger) -> None:
    attempt = await started(payments, "pi_a")
    outcomes = await asyncio.gather(*(confirm(payments, "evt_a", attempt, "pi_a") for _ in range(6)))
    assert sorted(outcomes) == ["accepted"] + ["duplicate"] * 5
    # The same payment confirmed again under another event id (Stripe can send several): still one credit.
    assert await confirm(payments, "evt_b", attempt, "pi_a") == "accepted"
    assert await ledger.balance(T) == Decimal(25)
    entries = await ledger.entries(T)
    assert [(e.kind, e.key, e.amount, e.actor) for e in entries] == [
        ("payment", f"psp:reload:{attempt}", Decimal(25), "psp-connector")]
    facts = await payments.facts(T, NOW)
    assert facts.pending is None and facts.consecutive_failures == 0
    assert await ledger.verify() == []


@pytest.mark.parametrize(("change", "why"), [
    ({"amount_received": 2499}, "amount"),
    ({"currency": "eur", "amount_received": 2500}, "amount"),
    ({"id": "pi_other"}, "another payment intent"),
    ({"metadata": {"maasctl_reload": "maasctl-reload-unknown"}}, "does not match any reload"),
    ({"metadata": {"maasctl_tenant": "ns/someone-else"}, "id": "pi_c"}, "another tenant"),
])
async def test_a_confirmation_that_does_not_match_is_never_credited(
        payments: Payments, ledger: Ledger, change: dict[str, Any], why: str) -> None:
    attempt = await started(payments, "pi_c")
    obj: dict[str, Any] = {"id": "pi_c", "amount_received": 2500,
                           "metadata": {"maasctl_reload": attempt, "maasctl_tenant": T}}
    for k, v in change.items():
        if k == "metadata":
            obj["metadata"] = {**obj["metadata"], **v}
        else:
            obj[k] = v
    applied = await payments.apply(C, parse_stripe(event("evt_x", **obj)), NOW)
    assert applied.outcome in ("corroboration_failed", "unknown_tenant"), applied
    if applied.outcome == "corroboration_failed":
        assert why in applied.message
    assert await ledger.balance(T) == Decimal(0)
    facts = await payments.facts(T, NOW)
    assert facts.pending is not None  # still in flight: never settled by a confirmation that does not match
    if applied.tenant == T:
        assert facts.corroboration_failed_at == NOW


async def test_failures_count_until_a_success_resets_them(payments: Payments, ledger: Ledger) -> None:
    for i in range(3):
        attempt = await started(payments, f"pi_f{i}", NOW + timedelta(hours=25 * i))
        body = event(f"evt_f{i}", "payment_intent.payment_failed", id=f"pi_f{i}",
                     metadata={"maasctl_reload": attempt, "maasctl_tenant": T},
                     last_payment_error={"code": "card_declined", "decline_code": "insufficient_funds"})
        assert (await payments.apply(C, parse_stripe(body), NOW)).outcome == "accepted"
        assert (await payments.facts(T, NOW)).consecutive_failures == i + 1
    assert [a.state for a in await payments.attempts(T)] == ["failed"] * 3
    # A failure for a PaymentIntent that is not ours counts nothing (even naming a tenant of this connector).
    stray = event("evt_stray", "payment_intent.payment_failed", id="pi_stray", metadata={"maasctl_tenant": T})
    assert (await payments.apply(C, parse_stripe(stray), NOW, T)).outcome == "ignored"
    assert (await payments.facts(T, NOW)).consecutive_failures == 3
    attempt = await started(payments, "pi_ok", NOW + timedelta(days=4))
    assert await confirm(payments, "evt_ok", attempt, "pi_ok") == "accepted"
    assert (await payments.facts(T, NOW + timedelta(days=4))).consecutive_failures == 0
    assert await ledger.balance(T) == Decimal(25)


async def test_disputes_open_close_and_a_lost_one_is_debited(payments: Payments, ledger: Ledger) -> None:
    attempt = await started(payments, "pi_d")
    assert await confirm(payments, "evt_d", attempt, "pi_d") == "accepted"
    opened = event("evt_do", "charge.dispute.created", id="dp_1", payment_intent="pi_d", amount=2500,
                   reason="fraudulent")
    assert (await payments.apply(C, parse_stripe(opened), NOW)).tenant == T
    facts = await payments.facts(T, NOW)
    assert facts.dispute_open and facts.dispute_code == "fraudulent"
    closed = event("evt_dc", "charge.dispute.closed", id="dp_1", payment_intent="pi_d", amount=2500, status="lost")
    assert (await payments.apply(C, parse_stripe(closed), NOW)).outcome == "accepted"
    assert (await payments.apply(C, parse_stripe(closed), NOW)).outcome == "duplicate"
    facts = await payments.facts(T, NOW)
    assert not facts.dispute_open and facts.dispute_code == "lost"
    assert await ledger.balance(T) == Decimal(0)
    assert await ledger.verify() == []


def webhook(event_id: str, type_: str, **data: Any) -> bytes:
    return json.dumps({"id": event_id, "type": type_, "data": {"currency": "USD", "amount": "25.00", **data}}).encode()


VICTIM = "other/ten-victim"
EVIL = "evil/mine"  # a connector that does not serve VICTIM; its secret holder signs what it likes


@pytest.mark.parametrize("data", [
    {"tenant": VICTIM, "disputeId": "dp_x", "amount": "1000.00", "code": "lost"},  # names the victim
    {"tenant": VICTIM, "disputeId": "dp_y", "intentId": "pi_v", "amount": "1000.00", "code": "lost"},  # its payment
    {"reloadId": "{reload}", "disputeId": "dp_z", "amount": "25.00", "code": "lost"},  # another connector's reload
    {"tenant": VICTIM, "reloadId": "{reload}", "intentId": "pi_v", "code": "lost"},  # all of it at once
])
async def test_a_connector_cannot_touch_another_connectors_tenant(payments: Payments, ledger: Ledger,
                                                                 data: dict[str, Any]) -> None:
    attempt, _ = await payments.begin_reload(VICTIM, C, LIMITS, "USD", NOW)
    assert attempt is not None
    await payments.record_intent(attempt.id, "pi_v")
    ok = event("evt_v", id="pi_v", metadata={"maasctl_reload": attempt.id, "maasctl_tenant": VICTIM})
    assert (await payments.apply(C, parse_stripe(ok), NOW)).outcome == "accepted"
    assert await ledger.balance(VICTIM) == Decimal(25)
    data = {k: (attempt.id if v == "{reload}" else v) for k, v in data.items()}
    # The receiver passes a claimed tenant only when its TenantAccount names the connector: not here (None).
    for i, type_ in enumerate(("dispute.opened", "dispute.closed", "reload.failed", "reload.succeeded")):
        applied = await payments.apply(EVIL, parse_webhook(webhook(f"evt_e{i}", type_, **data)), NOW, None)
        assert applied.outcome in ("unknown_tenant", "ignored", "corroboration_failed"), (type_, applied)
        assert applied.tenant != VICTIM
    assert await ledger.balance(VICTIM) == Decimal(25)
    facts = await payments.facts(VICTIM, NOW)
    assert not facts.dispute_open and facts.dispute_code is None and facts.consecutive_failures == 0
    assert [a.state for a in await payments.attempts(VICTIM)] == ["succeeded"]
    assert await ledger.verify() == []


async def test_a_lost_dispute_takes_back_at_most_the_reload_once(payments: Payments, ledger: Ledger) -> None:
    attempt = await started(payments, "pi_m")
    assert await confirm(payments, "evt_m", attempt, "pi_m") == "accepted"
    # The connector's own tenant, its own reload: several lost disputes, each claiming more than was paid.
    for i in range(3):
        body = webhook(f"evt_l{i}", "dispute.closed", reloadId=attempt, disputeId=f"dp_{i}", amount="900.00",
                       code="lost")
        assert (await payments.apply(C, parse_webhook(body), NOW, T)).outcome == "accepted"
    assert await ledger.balance(T) == Decimal(0)  # 25 credited, 25 taken back: not 2,700
    # A lost dispute of no reload of ours (an invoice payment, a stray intent) is recorded, never debited.
    stray = webhook("evt_l9", "dispute.closed", tenant=T, disputeId="dp_9", amount="50.00", code="lost")
    applied = await payments.apply(C, parse_webhook(stray), NOW, T)
    assert (applied.outcome, applied.tenant) == ("accepted", T) and "nothing debited" in applied.message
    assert await ledger.balance(T) == Decimal(0)
    # Nor is one of a reload that was never credited.
    failed = await started(payments, "pi_n", NOW + timedelta(days=2))
    await payments.fail_attempt((await payments.pending(T)) or pytest.fail("no pending reload"), "declined", NOW)
    body = webhook("evt_ln", "dispute.closed", reloadId=failed, disputeId="dp_n", amount="25.00", code="lost")
    assert "never credited" in (await payments.apply(C, parse_webhook(body), NOW, T)).message
    assert await ledger.balance(T) == Decimal(0)
    assert await ledger.verify() == []


async def test_deliveries_are_counted_per_connector(payments: Payments) -> None:
    for outcome in ("accepted", "signature_failure", "signature_failure", "duplicate"):
        await payments.log_delivery(C, outcome, NOW - timedelta(hours=1))
    await payments.log_delivery(C, "signature_failure", NOW - timedelta(hours=25))
    await payments.log_delivery("ns/other", "accepted", NOW)
    assert await payments.delivery_stats(C, NOW) == (4, 2)

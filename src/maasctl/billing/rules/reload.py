"""Auto-reload of a Prepaid wallet: whether to start a reload now, as a pure function of the facts.

A reload is one PaymentIntent for `reloadAmount`. It is started only when all of these hold (checked in this
order; the first that fails is the answer, with the time it lifts when there is one):

1. the tenant is Prepaid with `reloadPolicy.enabled`, a `billingConnectorRef` and a `pspCustomerSecretRef`;
2. no reload is in flight (`pendingReloadIntentID`: at most one at a time, whatever triggers it);
3. the balance is below `thresholdAmount`;
4. payments have not failed `DUNNING_LIMIT` times in a row since the payment method last changed (a Frozen
   tenant's card is not retried forever; a new payment method starts over);
5. the payment method did not change within the cooldown (`cooldown`, default one hour: a freshly attached
   card is not charged at once, a common fraud pattern) and the PSP says it is valid;
6. after a failed payment, `retry_after` has passed since it (dunning retries are spaced out);
7. fewer than `maxReloadsPerDay` attempts (any outcome) in the last 24 hours (0 = no limit);
8. this calendar month's reloads (succeeded or in flight) plus `reloadAmount` stay within `monthlyCapAmount`
   (all or nothing: a reload is never cut down to fit, and the cap is never exceeded).

The store re-checks 2, 7 and 8 inside the database transaction that records the attempt, so concurrent triggers
(two replicas, a webhook and a resync) can never start two reloads or pass a limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Final

from maasctl.billing import money
from maasctl.billing.api.tenant import BillingMode, ReloadPolicy
from maasctl.billing.rules.wallet import DUNNING_LIMIT

__all__ = ["COOLDOWN", "DAY", "RETRY_AFTER", "Decision", "Facts", "decide", "month_start", "next_month"]

COOLDOWN: Final = timedelta(hours=1)
RETRY_AFTER: Final = timedelta(hours=1)
DAY: Final = timedelta(hours=24)


def month_start(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_month(now: datetime) -> datetime:
    start = month_start(now)
    return start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)


@dataclass(frozen=True)
class Facts:
    """What is known about the tenant's payments now."""

    mode: BillingMode
    policy: ReloadPolicy | None
    has_connector: bool
    has_customer: bool
    balance: Decimal
    pending: bool
    month_reloaded: Decimal  # succeeded and in-flight reloads this calendar month
    attempts_24h: tuple[datetime, ...]  # start times of every attempt in the last 24 h
    consecutive_failures: int
    last_failure_at: datetime | None
    payment_method_changed_at: datetime | None
    payment_method_valid: bool | None  # None: not checked yet
    now: datetime


@dataclass(frozen=True)
class Decision:
    start: bool
    reason: str
    message: str
    retry_at: datetime | None = None  # when the blocking limit lifts (requeue then)


def _no(reason: str, message: str, retry_at: datetime | None = None) -> Decision:
    return Decision(False, reason, message, retry_at)


def decide(f: Facts, *, cooldown: timedelta = COOLDOWN, retry_after: timedelta = RETRY_AFTER) -> Decision:
    """Whether to start a reload now (see the module docstring for the rules, in order)."""
    p = f.policy
    if f.mode != BillingMode.PREPAID or p is None or not p.enabled:
        return _no("ReloadDisabled", "auto-reload is off (Prepaid with reloadPolicy.enabled only)")
    if not f.has_connector or not f.has_customer:
        return _no("NotConfigured", "auto-reload needs billingConnectorRef and pspCustomerSecretRef")
    if f.pending:
        return _no("ReloadInFlight", "a reload is in flight: the wallet is credited when the PSP confirms it")
    if f.balance >= p.threshold_amount:
        return _no("AboveThreshold", f"balance {money.quantize(f.balance)} is not below {p.threshold_amount}")
    if f.consecutive_failures >= DUNNING_LIMIT:
        return _no("PaymentsFailing", f"{f.consecutive_failures} consecutive payment failures: no more reloads "
                   "until the payment method changes")
    if f.payment_method_changed_at is not None and f.now < f.payment_method_changed_at + cooldown:
        until = f.payment_method_changed_at + cooldown
        return _no("PaymentMethodCooldown", f"the payment method changed recently: reloads resume at "
                   f"{until.strftime('%Y-%m-%dT%H:%M:%SZ')}", until)
    if f.payment_method_valid is False:
        return _no("PaymentMethodInvalid", "the PSP says the payment method cannot be charged")
    if f.consecutive_failures and f.last_failure_at is not None and f.now < f.last_failure_at + retry_after:
        return _no("RetryLater", "the last payment failed: the next attempt waits", f.last_failure_at + retry_after)
    if p.max_reloads_per_day and len(f.attempts_24h) >= p.max_reloads_per_day:
        lifts = min(f.attempts_24h) + DAY
        return _no("DailyLimitReached", f"{len(f.attempts_24h)} reload attempt(s) in 24 h (maxReloadsPerDay "
                   f"{p.max_reloads_per_day})", lifts)
    after = money.CONTEXT.add(f.month_reloaded, p.reload_amount)
    if after > p.monthly_cap_amount:
        return _no("MonthlyCapReached", f"reloading {p.reload_amount} would bring this month's reloads to {after}, "
                   f"over monthlyCapAmount {p.monthly_cap_amount}", next_month(f.now))
    return Decision(True, "BelowThreshold", f"balance {money.quantize(f.balance)} is below {p.threshold_amount}: "
                    f"reloading {p.reload_amount}")

"""The TenantAccount wallet: its state as a pure function of the ledger's facts, the spec and the last state.

States (seed 002) and how each is reached, most decisive first:

- **Closed** (final): the account was closed (annotation `billing.opendatahub.io/closed: <reason>`). Enforced.
- **Suspended**: an operator suspended it (annotation `billing.opendatahub.io/suspended: <reason>`; a payment
  dispute will use it too). Enforced. Lifting the annotation returns to the state the facts give.
- **Pending**: the ledger has not been read yet, or a Prepaid wallet has never had an entry.
- **Frozen**: a Prepaid balance below `-graceAmount` (the request that crossed zero completed; the next one is
  refused), or `DUNNING_LIMIT` consecutive payment failures (Prepaid or Invoiced). Enforced.
- **Dunning**: at least one payment failed since the last success (driven by the connector). Advisory.
- **Grace**: a Prepaid balance below zero, within `graceAmount`. Requests are still served.
- **Warning**: a Prepaid balance at or below `warningThreshold`. Advisory.
- **Active**: otherwise.

`ShowbackOnly` is rated and never enforced (only Suspended/Closed, which are administrative, stop it);
`Invoiced` accrues (a negative balance is normal) and only payment failures move it. Credit added to a Frozen
Prepaid wallet returns it to whatever its new balance says, with no hysteresis.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_FLOOR, Decimal
from typing import Final

from maasctl.billing import money
from maasctl.billing.api.tenant import BillingMode, TenantState
from maasctl.contract import billing_terms

__all__ = [
    "ALLOWANCE_WINDOW",
    "CLOSED_ANNOTATION",
    "CUTOFF_SLACK",
    "DUNNING_LIMIT",
    "ENFORCED",
    "EPOCH",
    "MALFORMED_EPOCH",
    "MAX_CAP",
    "RUNWAY_WINDOW_DAYS",
    "SUSPENDED_ANNOTATION",
    "Decision",
    "Facts",
    "Policy",
    "allowance_tokens",
    "caps_in_force",
    "decide",
    "denial_message",
    "epoch_allowance",
    "epoch_name",
    "epoch_starts",
    "published_cap",
    "runway_days",
    "runway_series",
]

DUNNING_LIMIT: Final = 3
ENFORCED: Final = frozenset(TenantState(s) for s in billing_terms.ENFORCED_STATES)  # shared with maas-api
SUSPENDED_ANNOTATION: Final = "billing.opendatahub.io/suspended"
CLOSED_ANNOTATION: Final = "billing.opendatahub.io/closed"


@dataclass(frozen=True)
class Policy:
    """What the spec says about the wallet."""

    mode: BillingMode
    grace_amount: Decimal = Decimal(0)
    warning_threshold: Decimal | None = None


@dataclass(frozen=True)
class Facts:
    """What is known now: the ledger balance (None: not read yet), whether the wallet has any entry, payment
    failures since the last success, and the administrative reasons (None when not set)."""

    balance: Decimal | None
    has_entries: bool = True
    payment_failures: int = 0
    suspended: str | None = None
    closed: str | None = None


@dataclass(frozen=True)
class Decision:
    state: TenantState
    reason: str
    message: str

    @property
    def enforced(self) -> bool:
        return self.state in ENFORCED


def _balance_state(policy: Policy, balance: Decimal) -> Decision:
    shown = money.quantize(balance)
    if balance < -policy.grace_amount:
        return Decision(TenantState.FROZEN, "BalanceExhausted",
                        f"balance {shown} is below the grace amount (-{policy.grace_amount}): requests are refused "
                        "until the wallet is credited")
    if balance < 0:
        return Decision(TenantState.GRACE, "InGrace",
                        f"balance {shown} is below zero, within the grace amount of {policy.grace_amount}")
    if policy.warning_threshold is not None and balance <= policy.warning_threshold:
        return Decision(TenantState.WARNING, "BelowWarningThreshold",
                        f"balance {shown} is at or below the warning threshold {policy.warning_threshold}")
    return Decision(TenantState.ACTIVE, "BalanceHealthy", f"balance {shown}")


def decide(previous: TenantState | None, policy: Policy, facts: Facts) -> Decision:
    """The wallet's state now (see the module docstring)."""
    if previous == TenantState.CLOSED or facts.closed is not None:
        return Decision(TenantState.CLOSED, "AccountClosed", f"the account is closed: {facts.closed or 'closed'}")
    if facts.suspended is not None:
        return Decision(TenantState.SUSPENDED, "SuspendedByOperator", f"suspended: {facts.suspended}")
    if facts.balance is None:
        return Decision(TenantState.PENDING, "LedgerNotRead", "the ledger has not been read yet")
    if policy.mode == BillingMode.SHOWBACK_ONLY:
        return Decision(TenantState.ACTIVE, "ShowbackOnly", "usage is rated and shown, never enforced")
    if facts.payment_failures >= DUNNING_LIMIT:
        return Decision(TenantState.FROZEN, "PaymentFailed",
                        f"{facts.payment_failures} consecutive payment failures (limit {DUNNING_LIMIT})")
    if policy.mode == BillingMode.PREPAID:
        if not facts.has_entries:
            return Decision(TenantState.PENDING, "NotFunded", "the prepaid wallet has no entry yet")
        by_balance = _balance_state(policy, facts.balance)
        if by_balance.state == TenantState.FROZEN or facts.payment_failures == 0:
            return by_balance
    elif facts.payment_failures == 0:
        return Decision(TenantState.ACTIVE, "Invoiced", "usage accrues and is invoiced; the balance is not enforced")
    return Decision(TenantState.DUNNING, "PaymentFailing",
                    f"{facts.payment_failures} consecutive payment failure(s); frozen at {DUNNING_LIMIT}")


def denial_message(tenant: str, organization: str, state: TenantState) -> str:
    """What a refused request is told: which tenant, why, how to fix it (stable per state: no amounts, so the
    generated policy does not change with every charge)."""
    who = f"billing tenant {tenant} (organization {organization})"
    if state == TenantState.FROZEN:
        return (f"{who} is Frozen: its prepaid balance is exhausted (or payments keep failing). Access returns "
                "as soon as the wallet is credited (an operator: maasctl billing ledger credit)")
    if state == TenantState.SUSPENDED:
        return f"{who} is Suspended by an operator: ask your billing administrator to lift the suspension"
    return f"{who} is Closed: requests are no longer accepted; ask your billing administrator"


def allowance_tokens(policy: Policy, balance: Decimal, price_per_token: Decimal | None) -> Decimal | None:
    """Tokens the wallet can still pay for (balance plus grace, at the highest token price of the tenant's
    PriceBook), rounded down; None when not enforced or nothing is priced per token."""
    if policy.mode != BillingMode.PREPAID or price_per_token is None or price_per_token <= 0:
        return None
    room = money.CONTEXT.add(balance, policy.grace_amount)
    if room <= 0:
        return Decimal(0)
    return money.CONTEXT.divide_int(room, price_per_token)


EPOCH: Final = timedelta(days=1)
"""An allowance epoch: a UTC day. The gateway counts a Prepaid tenant's tokens per epoch (see below)."""
ALLOWANCE_WINDOW: Final = "48h"
"""The window of an epoch's counter: it starts at the epoch's first hit (at or after the epoch's start), so it
outlives the epoch that follows, during which the previous epoch's limit still applies."""
CUTOFF_SLACK: Final = timedelta(minutes=1)
"""Usage in the first minute of an epoch counts against the wallet twice (in the ledger balance and in the
epoch's counter): room for the new epoch's limit to reach the gateway, so no usage escapes both."""


MAX_CAP: Final = 2**63 - 1
"""The largest cap (a TokenRateLimitPolicy limit and the status field are 64-bit integers)."""


def epoch_starts(now: datetime) -> tuple[datetime, datetime]:
    """The start of the current epoch and of the previous one."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day, day - EPOCH


def epoch_name(start: datetime) -> str:
    """An epoch's name (its UTC date, YYYY-MM-DD): part of its limit's name, so its counter is its own."""
    return start.astimezone(UTC).strftime("%Y-%m-%d")


def epoch_allowance(policy: Policy, balance: Decimal, rated_tokens: int, price_per_token: Decimal | None
                    ) -> int | None:
    """The cap of one epoch's counter: the tokens the ledger has rated for records since the epoch's cutoff
    (its start plus `CUTOFF_SLACK`), plus the tokens the wallet can still pay for at the highest token price.

    Why this bounds the overspend in money whatever the rater's lag: the counter holds every token served since
    the epoch started, rated or not; the rated ones are added back here and paid for in `balance` at their real
    price, so what the gateway admits beyond them is the unrated usage, which may reach at most
    `(balance + grace) / price` tokens, each worth at most `price`. Rating a token moves it from the second term
    to the first at no more than its price, so the cap never grows while the rater catches up on usage at the
    highest price; at a cheaper price it grows by what the wallet really has left. A caught-up rater leaves the
    cap above the counter by what the wallet can pay, so the ledger crosses zero (and the tenant is Frozen)
    first, and the request that crosses it completes."""
    if policy.mode != BillingMode.PREPAID or price_per_token is None or price_per_token <= 0:
        return None
    room = money.CONTEXT.divide(money.CONTEXT.add(balance, policy.grace_amount), price_per_token)
    # Not clamped at zero before adding: a wallet past its grace lowers the cap below what was rated, so the
    # gateway refuses until the freeze arrives, and the cap does not move while the rater catches up.
    cap = max(0, rated_tokens) + int(room.to_integral_value(rounding=ROUND_FLOOR, context=money.CONTEXT))
    return min(max(0, cap), MAX_CAP)


EPOCH_NAME: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
MALFORMED_EPOCH: Final = "0000-00-00"
"""Where an unreadable `status.allowanceLimits` entry goes: a cap of 0 on a counter of its own, so the tenant is
refused (429) until the controller writes the status again, never served without a cap."""


def caps_in_force(raw: object) -> tuple[tuple[str, int], ...]:
    """The (epoch, tokens) caps of a Prepaid tenant's `status.allowanceLimits`, failing closed on what admission
    should have refused (the CRD requires a YYYY-MM-DD epoch, a non-negative int64 and unique epochs): an entry
    with an unreadable epoch is a 0 cap under `MALFORMED_EPOCH`, unreadable tokens are a 0 cap, an epoch named
    twice keeps the lower cap, and a cap is at most `MAX_CAP`. Absent (None): no cap."""
    if raw is None:
        return ()
    items = raw if isinstance(raw, list | tuple) else [raw]
    caps: dict[str, int] = {}
    for item in items:
        epoch = item.get("epoch") if isinstance(item, Mapping) else None
        tokens = item.get("tokens") if isinstance(item, Mapping) else None
        cap = min(tokens, MAX_CAP) if type(tokens) is int and tokens >= 0 else 0  # not bool, float or text
        if not isinstance(epoch, str) or not EPOCH_NAME.fullmatch(epoch):
            epoch, cap = MALFORMED_EPOCH, 0
        caps[epoch] = min(cap, caps.get(epoch, cap))
    return tuple(sorted(caps.items()))


def published_cap(previous: int | None, cap: int, rated_tokens: int) -> int:
    """The cap to publish for an epoch, given the one in force (`previous`): a lower cap at once; a higher one
    only once it adds at least half of what the cap in force still leaves above the rated tokens. Keeping the
    lower cap is always safe (it refuses earlier), and it cannot strand a tenant: once its rated usage reaches
    the cap in force, any higher cap is published. So the Plan's policy changes about log2 times while a wallet
    drains on usage cheaper than the highest price, instead of at every charge."""
    if previous is None or cap <= previous:
        return cap
    return cap if 2 * (cap - previous) >= previous - rated_tokens else previous


RUNWAY_WINDOW_DAYS: Final = 7  # the runway is the balance over the average daily spend of this many days


def runway_series(balances: Sequence[Decimal], daily_spend: Sequence[Decimal], days: int) -> list[Decimal | None]:
    """The runway at the end of each day, as `runway_days` gives it then: `balances[i]` over the spend of the
    `days` days ending with day i (`daily_spend` starts `days - 1` days before the first balance)."""
    if len(daily_spend) != len(balances) + days - 1:
        raise ValueError(f"{len(balances)} balances need {len(balances) + days - 1} days of spend")
    return [runway_days(b, sum(daily_spend[i:i + days], Decimal(0)), days) for i, b in enumerate(balances)]


def runway_days(balance: Decimal, recent_spend: Decimal, days: int) -> Decimal | None:
    """Days the balance lasts at the average daily spend of the last `days` days (None: no spend; 0: empty)."""
    if recent_spend <= 0 or days <= 0:
        return None
    if balance <= 0:
        return Decimal(0)
    per_day = money.CONTEXT.divide(recent_spend, Decimal(days))
    return money.CONTEXT.divide(balance, per_day).quantize(Decimal("0.1"), context=money.CONTEXT)

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

from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from maasctl.billing import money
from maasctl.billing.api.tenant import BillingMode, TenantState

__all__ = [
    "CLOSED_ANNOTATION",
    "DUNNING_LIMIT",
    "ENFORCED",
    "SUSPENDED_ANNOTATION",
    "Decision",
    "Facts",
    "Policy",
    "allowance_bucket",
    "allowance_tokens",
    "decide",
    "denial_message",
    "runway_days",
]

DUNNING_LIMIT: Final = 3
ENFORCED: Final = frozenset({TenantState.FROZEN, TenantState.SUSPENDED, TenantState.CLOSED})
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


def allowance_bucket(allowance: Decimal | None) -> int | None:
    """The largest power of two at most `allowance` (None below one token): what the gateway limit uses, so the
    generated policy changes about log2 times while a wallet drains instead of at every charge."""
    if allowance is None or allowance < 1:
        return None
    return 1 << (int(allowance).bit_length() - 1)


def runway_days(balance: Decimal, recent_spend: Decimal, days: int) -> Decimal | None:
    """Days the balance lasts at the average daily spend of the last `days` days (None: no spend; 0: empty)."""
    if recent_spend <= 0 or days <= 0:
        return None
    if balance <= 0:
        return Decimal(0)
    per_day = money.CONTEXT.divide(recent_spend, Decimal(days))
    return money.CONTEXT.divide(balance, per_day).quantize(Decimal("0.1"), context=money.CONTEXT)

"""What the ledger records, as pure values: transactions of balanced postings, each with a natural key.

Double entry: a transaction moves money between accounts and its postings sum to zero. Amounts are signed
`Decimal`s quantized to the ledger's precision (6 places, `money.quantize`); positive adds to an account's
balance. The accounts:

- `wallet:<namespace>/<tenant>`: the tenant's wallet; its balance is the TenantAccount's balance;
- `revenue:usage`: what rated usage earned (a charge moves money from the wallet to it);
- `external:funding`: money that came from outside (operator credits, PSP payments);
- `equity:adjustments`: manual corrections (an adjustment moves money between it and the wallet).

Natural keys make every entry idempotent: `usage:<usage record id>`, `credit:<id>`, `adjustment:<id>`,
`psp:<event id>`, `reservation:<namespace>/<name>:<period>`, `adjustment:rerate:<tenant>:<digest>` (a
re-rating: what a corrected PriceBook changes of already charged usage), `adjustment:rerate-fee:<tenant>:<digest>`
(the same for committed-use fees). Posting the same key twice records it once;
posting it with different content is a conflict, reported and never applied.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Final, Literal

from maasctl.billing import money

__all__ = [
    "ADJUSTMENTS",
    "COMMITMENTS",
    "FUNDING",
    "MICROS",
    "RERATE_FEE_PREFIX",
    "RERATE_PREFIX",
    "RESERVATIONS",
    "REVENUE",
    "Kind",
    "Posting",
    "Transaction",
    "adjustment",
    "balances",
    "commitment_fee",
    "credit",
    "from_micros",
    "rerate_adjustment",
    "rerate_fee_adjustment",
    "reservation_fee",
    "to_micros",
    "usage_charge",
    "wallet",
]

Kind = Literal["usage", "credit", "adjustment", "payment", "reservation", "commitment"]
COMMITMENTS: Final = "revenue:commitments"
RESERVATIONS: Final = "revenue:reservations"
REVENUE: Final = "revenue:usage"
FUNDING: Final = "external:funding"
ADJUSTMENTS: Final = "equity:adjustments"
MICROS: Final = 10**money.PLACES
MAX_REASON: Final = 1024


def wallet(tenant: str) -> str:
    """The wallet account of tenant `namespace/name`."""
    return f"wallet:{tenant}"


def to_micros(amount: Decimal) -> int:
    """`amount` (at most 6 places) as integer micro-units, exactly. Raises ValueError when it is not exact."""
    scaled = amount.scaleb(money.PLACES, context=money.CONTEXT)
    if scaled != scaled.to_integral_value():
        raise ValueError(f"{amount} has more than {money.PLACES} decimal places")
    return int(scaled)


def from_micros(micros: int) -> Decimal:
    """Integer micro-units back to a Decimal with exactly 6 places."""
    return money.quantize(Decimal(micros).scaleb(-money.PLACES, context=money.CONTEXT))


@dataclass(frozen=True)
class Posting:
    account: str
    amount: Decimal  # signed, at most 6 places

    def __post_init__(self) -> None:
        to_micros(self.amount)  # refuse sub-micro amounts at construction


@dataclass(frozen=True)
class Transaction:
    """One balanced ledger entry. `details` holds strings, ints and bools only (a rated line, an audit note)."""

    key: str
    kind: Kind
    tenant: str  # namespace/name of the TenantAccount
    occurred_at: datetime
    postings: tuple[Posting, ...]
    currency: str = "USD"
    actor: str = ""
    reason: str = ""
    tokens: int = 0
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.key or len(self.key) > 300:
            raise ValueError("a transaction needs a natural key of 1 to 300 characters")
        if self.occurred_at.tzinfo is None:
            raise ValueError("occurred_at must be timezone-aware")
        if len(self.postings) < 2:
            raise ValueError("a transaction has at least two postings")
        total = sum((p.amount for p in self.postings), Decimal(0))
        if total != 0:
            raise ValueError(f"transaction {self.key} does not balance: postings sum to {total}")
        if len(self.reason) > MAX_REASON:
            raise ValueError(f"reason is longer than {MAX_REASON} characters")

    def amount_of(self, account: str) -> Decimal:
        return sum((p.amount for p in self.postings if p.account == account), Decimal(0))

    def digest(self) -> str:
        """A stable hash of the intent (not `occurred_at`: a manual entry retried later is the same entry, and a
        usage record's time is fixed by its id): same key and digest, same entry."""
        payload = {
            "key": self.key, "kind": self.kind, "tenant": self.tenant, "currency": self.currency,
            "tokens": self.tokens, "actor": self.actor,
            "reason": self.reason, "details": self.details,
            "postings": sorted([p.account, to_micros(p.amount)] for p in self.postings),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str).encode()
                              ).hexdigest()


def usage_charge(key: str, tenant: str, occurred_at: datetime, amount: Decimal, *, currency: str, tokens: int,
                 details: Mapping[str, Any]) -> Transaction:
    """Rated usage: `amount` (>= 0) from the tenant's wallet to revenue."""
    if amount < 0:
        raise ValueError("a usage charge is never negative")
    return Transaction(key=key, kind="usage", tenant=tenant, occurred_at=occurred_at, currency=currency,
                       tokens=tokens, details=dict(details), actor="rater",
                       postings=(Posting(wallet(tenant), -amount), Posting(REVENUE, amount)))


def commitment_fee(tenant: str, tier: str, month: str, occurred_at: datetime, amount: Decimal, *,
                   currency: str, book: str) -> Transaction:
    """A committed-use tier's monthly price, charged once per tenant, tier and month (`YYYY-MM`)."""
    return Transaction(key=f"commitment:{tenant}:{tier}:{month}", kind="commitment", tenant=tenant,
                       occurred_at=occurred_at, currency=currency, actor="rater",
                       reason=f"committed use {tier} for {month}", details={"tier": tier, "priceBook": book},
                       postings=(Posting(wallet(tenant), -amount), Posting(COMMITMENTS, amount)))


def reservation_fee(reservation: str, tenant: str, month: str, occurred_at: datetime, amount: Decimal, *,
                    currency: str, details: Mapping[str, Any]) -> Transaction:
    """A Reservation's (prorated) monthly price for one UTC month `YYYY-MM`, charged once:
    `reservation:<namespace>/<name>:<month>`."""
    if amount < 0:
        raise ValueError("a reservation fee is never negative")
    return Transaction(key=f"reservation:{reservation}:{month}", kind="reservation", tenant=tenant,
                       occurred_at=occurred_at, currency=currency, actor="reservations",
                       reason=f"reservation {reservation} for {month}", details=dict(details),
                       postings=(Posting(wallet(tenant), -amount), Posting(RESERVATIONS, amount)))


def _reasoned(reason: str, actor: str) -> None:
    if not reason.strip():
        raise ValueError("a manual entry needs a reason")
    if not actor.strip():
        raise ValueError("a manual entry needs the actor who made it")


def credit(entry_id: str, tenant: str, occurred_at: datetime, amount: Decimal, *, reason: str, actor: str,
           currency: str = "USD", kind: Kind = "credit") -> Transaction:
    """Money added to the wallet from outside (an operator credit, a PSP payment)."""
    _reasoned(reason, actor)
    if amount <= 0:
        raise ValueError("a credit is a positive amount")
    prefix = "psp" if kind == "payment" else "credit"
    return Transaction(key=f"{prefix}:{entry_id}", kind=kind, tenant=tenant, occurred_at=occurred_at,
                       currency=currency, actor=actor, reason=reason,
                       postings=(Posting(wallet(tenant), amount), Posting(FUNDING, -amount)))


def adjustment(entry_id: str, tenant: str, occurred_at: datetime, amount: Decimal, *, reason: str, actor: str,
               currency: str = "USD") -> Transaction:
    """A manual correction of the wallet by `amount` (signed, non-zero), against equity:adjustments."""
    _reasoned(reason, actor)
    if amount == 0:
        raise ValueError("an adjustment of zero changes nothing")
    return Transaction(key=f"adjustment:{entry_id}", kind="adjustment", tenant=tenant, occurred_at=occurred_at,
                       currency=currency, actor=actor, reason=reason,
                       postings=(Posting(wallet(tenant), amount), Posting(ADJUSTMENTS, -amount)))


RERATE_PREFIX: Final = "adjustment:rerate:"
RERATE_FEE_PREFIX: Final = "adjustment:rerate-fee:"


def rerate_adjustment(tenant: str, occurred_at: datetime, deltas: Mapping[str, Decimal], *, book: str,
                      generation: int, since: datetime, until: datetime, currency: str, reason: str,
                      actor: str, key_id: str = "") -> Transaction:
    """A re-rating: what charging `deltas` (usage record id -> corrected charge minus what the ledger charged it
    so far; signed) changes, between the wallet and revenue:usage (it corrects usage revenue, it is not a
    goodwill adjustment). The ledger rows of the charges are never touched. The key is a digest of what it
    corrects, so the same correction posted twice (a retry, two operators) is recorded once; who, when and why
    are in the entry (`actor`, `recorded_at`, `reason`, `details`). The records are all of one API key,
    `key_id`, kept as `keyId` the way a usage charge keeps it, so a budget with a key selector counts it."""
    return _rerating(RERATE_PREFIX, "records", REVENUE, tenant, occurred_at, deltas, book=book,
                     generation=generation, since=since, until=until, currency=currency, reason=reason, actor=actor,
                     extra={"keyId": key_id})


def rerate_fee_adjustment(tenant: str, occurred_at: datetime, deltas: Mapping[str, Decimal], *, book: str,
                          generation: int, since: datetime, until: datetime, currency: str, reason: str,
                          actor: str) -> Transaction:
    """A re-rating of committed-use fees: `deltas` (fee entry key `commitment:...` -> corrected fee minus what
    the ledger charged for it so far; signed) between the wallet and revenue:commitments. Its own key prefix
    (`adjustment:rerate-fee:`): a fee is not usage, so its correction is not spend either."""
    return _rerating(RERATE_FEE_PREFIX, "fees", COMMITMENTS, tenant, occurred_at, deltas, book=book,
                     generation=generation, since=since, until=until, currency=currency, reason=reason, actor=actor)


def _rerating(prefix: str, what: str, account: str, tenant: str, occurred_at: datetime,
              deltas: Mapping[str, Decimal], *, book: str, generation: int, since: datetime, until: datetime,
              currency: str, reason: str, actor: str, extra: Mapping[str, str] | None = None) -> Transaction:
    _reasoned(reason, actor)
    total = sum(deltas.values(), Decimal(0))
    corrected = {k: _signed(d) for k, d in sorted(deltas.items())}
    extra = dict(extra or {})
    digest = hashlib.sha256(json.dumps([tenant, book, generation, *extra.values(), corrected],
                                       separators=(",", ":")).encode()).hexdigest()[:32]
    return Transaction(key=f"{prefix}{tenant}:{digest}", kind="adjustment", tenant=tenant,
                       occurred_at=occurred_at, currency=currency, actor=actor, reason=reason,
                       details={"rerate": True, "priceBook": book, "generation": generation,
                                "from": since.isoformat(), "to": until.isoformat(), **extra,
                                what: corrected, "total": _signed(total)},
                       postings=(Posting(wallet(tenant), -total), Posting(account, total)))


def _signed(amount: Decimal) -> str:
    return money.fmt(amount) if amount >= 0 else "-" + money.fmt(-amount)


def balances(transactions: Sequence[Transaction]) -> dict[str, Decimal]:
    """Every account's balance after `transactions` (a pure reference the store's SQL must agree with)."""
    out: dict[str, Decimal] = {}
    for tx in transactions:
        for p in tx.postings:
            out[p.account] = out.get(p.account, Decimal(0)) + p.amount
    return out

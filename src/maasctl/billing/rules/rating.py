"""Rating: a pure function from one usage record, the PriceBook in force and the tenant's context to a rated
line (or the reason nothing prices it). No clock, no database, no cluster: re-rating is reproducible.

The rule, in order (docs/billing.md, "Rating"):

1. **SKU.** The SKU whose `sku` is the record's model (`namespace/name`), else its name alone; among those,
   the one of the request's region (`geo`), else the default (`geo: ""`). None: `Unpriced`.
2. **Quantities** per dimension: `prompt_tokens` = input tokens less cached ones when the SKU prices
   `cached_tokens` (cached tokens are part of the prompt), `cached_tokens`; `completion_tokens` = output
   tokens less reasoning ones when the SKU prices `reasoning_tokens`, `reasoning_tokens`; `requests` = 1;
   `gpu_seconds` from the record. A dimension the SKU does not price costs nothing; a rate for a dimension
   rating does not know (e.g. `images`) has quantity 0.
3. **Unit.** Token rates are per `per-<n>[K|M|B]-tokens` (`per-1M-tokens`: rate per million) or `per-token`;
   `gpu_seconds` per `per-gpu-second|minute|hour`; `requests` always per request. Another unit: `Unpriced`.
4. **Pass-through.** A SKU with `passThrough` takes each dimension's rate from the provider's cost Secret
   (same unit) plus `markupPct`; dimensions the Secret lacks keep the SKU's rate. A missing Secret, or one that
   declares another `unit`: `Unpriced`.
5. **Fault policies.** `termination: upstream_error` (or an upstream 5xx) follows `providerFaultPolicy`,
   `client_disconnect` follows `clientDisconnectPolicy`: `zero_charge` makes the line 0, `bill_partial` rates
   what was recorded. `refused` (the gateway answered itself) is never charged.
6. **Committed use.** A tenant on a `committedUse` tier has `tokensPerSecond` x seconds-in-the-month tokens
   included (its `monthlyPrice` is charged once a month, separately): the part of the record that fits in what
   is left this month makes the token dimensions free pro rata.
7. **Volume tiers.** The largest `discountPct` among tiers whose `thresholdTokens` the tenant's month-to-date
   tokens (before this record) have reached applies to the line.
8. **Rounding (the one rule).** Every step is exact `Decimal` arithmetic (`money.CONTEXT`); the line's amount
   is rounded once, half-even to 6 places (`money.quantize`). The ledger sums rounded lines.

Estimated records (the gateway charged a conservative estimate) are rated as recorded and keep the flag.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from maasctl.billing import money
from maasctl.billing.api.pricebook import SKU, ClientDisconnectPolicy, PriceBookSpec, ProviderFaultPolicy

__all__ = [
    "COST_KEYS",
    "COST_UNIT_KEY",
    "DIMENSIONS",
    "Book",
    "Component",
    "Context",
    "CostDataError",
    "RatedLine",
    "Unpriced",
    "Usage",
    "committed_fee",
    "cost_data",
    "cost_unit",
    "find_sku",
    "rate",
    "unit_divisors",
]

TOKEN_DIMENSIONS: Final = ("prompt_tokens", "cached_tokens", "completion_tokens", "reasoning_tokens")
DIMENSIONS: Final = (*TOKEN_DIMENSIONS, "requests", "gpu_seconds")
ROUNDING: Final = "exact Decimal per line, rounded once half-even to 6 places"
_HUNDRED: Final = Decimal(100)
_TOKENS_UNIT: Final = re.compile(r"^per-(?:(\d{1,12})([KMB]?)-)?tokens?$")
_GPU_UNIT: Final = re.compile(r"^per-(?:gpu-)?(second|minute|hour)s?$")
_REQUEST_UNIT: Final = re.compile(r"^per-requests?$")
_SCALE: Final = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9}
_GPU_SCALE: Final = {"second": 1, "minute": 60, "hour": 3600}


@dataclass(frozen=True)
class Usage:
    """What rating needs of one (immutable) usage record."""

    record_id: str
    time: datetime
    model: str  # namespace/name of the MaaSModelRef
    status: int = 200
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0
    gpu_seconds: Decimal = Decimal(0)
    estimated: bool = False
    estimate_reason: str = ""
    termination: str = "complete"

    @property
    def tokens(self) -> int:
        return max(self.total_tokens, self.input_tokens + self.output_tokens)


@dataclass(frozen=True)
class Book:
    """The PriceBook in force: its name, the generation rated with, and its spec."""

    name: str
    generation: int
    spec: PriceBookSpec


@dataclass(frozen=True)
class Context:
    """The tenant-side inputs: the request's region, month-to-date tokens before the record, the committed-use
    tier and the pass-through providers' costs (cost Secret name -> dimension -> rate)."""

    geo: str = ""
    month_tokens_before: int = 0
    committed_tier: str | None = None
    provider_costs: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)
    provider_units: Mapping[str, str] = field(default_factory=dict)  # cost Secret name -> its declared unit


@dataclass(frozen=True)
class Component:
    dimension: str
    quantity: Decimal
    rate: Decimal
    per: int  # the rate is per this many units
    amount: Decimal  # exact
    source: str = "rate"  # or passThrough:<provider>
    cost: Decimal | None = None  # pass-through: the provider's rate read from the cost Secret
    markup_pct: Decimal | None = None  # pass-through: the SKU's markupPct (rate = cost x (1 + markupPct/100))


@dataclass(frozen=True)
class RatedLine:
    record_id: str
    model: str
    book: str
    generation: int
    currency: str
    sku: str
    geo: str
    unit: str
    components: tuple[Component, ...]
    subtotal: Decimal  # exact, before policies, committed use and discounts
    exact: Decimal  # exact, after them
    amount: Decimal  # `exact` rounded (the ledger's amount)
    tokens: int
    policy: str = ""
    committed_tokens: int = 0
    discount_pct: Decimal = Decimal(0)
    estimated: bool = False
    estimate_reason: str = ""
    termination: str = "complete"

    def details(self) -> dict[str, Any]:
        """The line as the ledger keeps it (strings for every amount: JSON never sees a float)."""
        out: dict[str, Any] = {
            "record": self.record_id, "model": self.model, "priceBook": self.book, "generation": self.generation,
            "sku": self.sku, "geo": self.geo, "unit": self.unit, "termination": self.termination,
            "estimated": self.estimated, "subtotal": str(self.subtotal), "exact": str(self.exact),
            "amount": money.fmt(self.amount), "rounding": ROUNDING,
            "components": {c.dimension: _component(c) for c in self.components},
        }
        if self.estimate_reason:
            out["estimateReason"] = self.estimate_reason
        if self.policy:
            out["policy"] = self.policy
        if self.committed_tokens:
            out["committedTokens"] = self.committed_tokens
        if self.discount_pct:
            out["discountPct"] = str(self.discount_pct)
        return out


def _component(c: Component) -> dict[str, Any]:
    out: dict[str, Any] = {"quantity": str(c.quantity), "rate": str(c.rate), "per": c.per, "amount": str(c.amount),
                           "source": c.source}
    if c.cost is not None and c.markup_pct is not None:  # the cost in force when rated: re-rating reads it back
        out.update(cost=str(c.cost), markupPct=str(c.markup_pct))
    return out


@dataclass(frozen=True)
class Unpriced:
    record_id: str
    model: str
    book: str
    reason: str


COST_KEYS: Final = DIMENSIONS
"""The rate keys a pass-through cost Secret may hold: one per dimension, the provider's rate in the SKU's unit."""
COST_UNIT_KEY: Final = "unit"
"""The optional key naming the unit the Secret's rates are in; when present it must be the SKU's `unit`."""


class CostDataError(ValueError):
    """A cost Secret whose data is not the documented format (docs/billing.md, "Pass-through")."""


def cost_data(data: Mapping[str, str]) -> dict[str, Decimal]:
    """The provider's rates from a cost Secret's (decoded) data: each key a dimension of `COST_KEYS`, each value a
    decimal string (`money.MONEY_PATTERN`; one trailing newline, as `kubectl create secret --from-file` leaves,
    is dropped). Raises CostDataError naming the offending key (never its value: a cost can be confidential)."""
    unit = data.get(COST_UNIT_KEY)
    if unit is not None and unit_divisors(unit.rstrip("\r\n")) is None:
        raise CostDataError(f"key {COST_UNIT_KEY!r} is not a unit rating knows (per-<n>[K|M|B]-tokens, "
                            "per-token, per-gpu-second|minute|hour, per-request)")
    data = {k: v for k, v in data.items() if k != COST_UNIT_KEY}
    if not data:
        raise CostDataError(f"holds no rate: give one key per dimension ({', '.join(COST_KEYS)})")
    unknown = sorted(k for k in data if k not in COST_KEYS)
    if unknown:
        raise CostDataError(f"key(s) {', '.join(repr(k[:63]) for k in unknown[:5])} are not dimensions "
                            f"({', '.join(COST_KEYS)})")
    out: dict[str, Decimal] = {}
    for key in sorted(data):
        value = data[key]
        value = value[:-2] if value.endswith("\r\n") else value[:-1] if value.endswith("\n") else value
        if not money.is_money(value):
            raise CostDataError(f"key {key!r} is not a non-negative decimal string of at most {money.MAX_DIGITS} "
                                f"digits and {money.PLACES} decimals (e.g. \"2.50\")")
        out[key] = money.parse(value)
    return out


def cost_unit(data: Mapping[str, str]) -> str | None:
    """The unit a cost Secret declares (key `unit`), or None."""
    unit = data.get(COST_UNIT_KEY)
    return unit.rstrip("\r\n") if unit is not None else None


def unit_divisors(unit: str) -> tuple[int, int] | None:
    """(token divisor, gpu-second divisor) of a SKU unit, or None when the unit is not understood."""
    m = _TOKENS_UNIT.match(unit)
    if m:
        n = int(m.group(1) or 1)
        return n * _SCALE[m.group(2) or ""], 1
    m = _GPU_UNIT.match(unit)
    if m:
        return 1, _GPU_SCALE[m.group(1)]
    if _REQUEST_UNIT.match(unit):
        return 1, 1
    return None


def find_sku(spec: PriceBookSpec, model: str, geo: str) -> SKU | None:
    """The SKU pricing `model` (namespace/name, or the name alone) in region `geo` (else the default region)."""
    name = model.rsplit("/", 1)[-1]
    for wanted in (model, name):
        same = [s for s in spec.skus if s.sku == wanted]
        for region in ((geo, "") if geo else ("",)):
            for s in same:
                if s.geo == region:
                    return s
    return None


def _quantities(usage: Usage, sku: SKU) -> dict[str, Decimal]:
    priced = sku.rates.keys() | set()
    cached = min(usage.cached_tokens, usage.input_tokens)
    reasoning = min(usage.reasoning_tokens, usage.output_tokens)
    q = {
        "prompt_tokens": usage.input_tokens - (cached if "cached_tokens" in priced else 0),
        "cached_tokens": cached,
        "completion_tokens": usage.output_tokens - (reasoning if "reasoning_tokens" in priced else 0),
        "reasoning_tokens": reasoning,
        "requests": 1,
    }
    out = {k: Decimal(v) for k, v in q.items()}
    out["gpu_seconds"] = usage.gpu_seconds
    return out


def _div(a: Decimal, b: Decimal | int) -> Decimal:
    return money.CONTEXT.divide(a, Decimal(b))


def _policy(usage: Usage, spec: PriceBookSpec) -> tuple[bool, str]:
    """(charge?, which policy decided) for how the request ended."""
    if usage.termination == "refused":
        return False, "refused by the gateway: never charged"
    if usage.termination == "upstream_error" or usage.status >= 500:
        fault = spec.provider_fault_policy
        return fault == ProviderFaultPolicy.BILL_PARTIAL, f"providerFaultPolicy={fault.value}"
    if usage.termination == "client_disconnect":
        disconnect = spec.client_disconnect_policy
        return disconnect == ClientDisconnectPolicy.BILL_PARTIAL, f"clientDisconnectPolicy={disconnect.value}"
    return True, ""


def seconds_in_month(when: datetime) -> int:
    t = when.astimezone(UTC)
    return calendar.monthrange(t.year, t.month)[1] * 86400


def committed_fee(spec: PriceBookSpec, tier: str) -> Decimal | None:
    """The monthly price of committed-use tier `tier`, or None when the book has no such tier."""
    for t in spec.committed_use or ():
        if t.name == tier:
            return t.monthly_price
    return None


def rate(usage: Usage, book: Book, ctx: Context | None = None) -> RatedLine | Unpriced:
    """Rate one usage record against `book` (see the module docstring for the rule)."""
    ctx = ctx or Context()
    spec = book.spec
    sku = find_sku(spec, usage.model, ctx.geo)
    if sku is None:
        where = f" in region {ctx.geo!r} or the default region" if ctx.geo else ""
        return Unpriced(usage.record_id, usage.model, book.name,
                        f"no SKU of PriceBook {book.name} prices model {usage.model!r}{where}")
    divisors = unit_divisors(sku.unit)
    if divisors is None:
        return Unpriced(usage.record_id, usage.model, book.name,
                        f"SKU {sku.sku} of PriceBook {book.name} has unit {sku.unit!r}, which rating does not know "
                        "(per-<n>[K|M|B]-tokens, per-token, per-gpu-second|minute|hour, per-request)")
    rates: dict[str, tuple[Decimal, str]] = {d: (r, "rate") for d, r in sku.rates.items()}
    costs: Mapping[str, Decimal] = {}
    if sku.pass_through is not None:
        pt = sku.pass_through
        read = ctx.provider_costs.get(pt.cost_secret_ref.name)
        if read is None:
            return Unpriced(usage.record_id, usage.model, book.name,
                            f"SKU {sku.sku} passes through {pt.provider}'s cost, but its cost Secret "
                            f"{pt.cost_secret_ref.name} is missing or unreadable")
        declared = ctx.provider_units.get(pt.cost_secret_ref.name)
        if declared is not None and declared != sku.unit:
            return Unpriced(usage.record_id, usage.model, book.name,
                            f"SKU {sku.sku} is priced {sku.unit}, but its cost Secret {pt.cost_secret_ref.name} "
                            f"gives rates {declared}")
        factor = money.CONTEXT.add(Decimal(1), _div(pt.markup_pct, _HUNDRED))
        costs = read
        for dim, cost in costs.items():
            rates[dim] = (money.CONTEXT.multiply(cost, factor), f"passThrough:{pt.provider}")
    markup = sku.pass_through.markup_pct if sku.pass_through is not None else None
    quantities = _quantities(usage, sku)
    token_div, gpu_div = divisors
    components = []
    for dim in sorted(rates):
        rate_, source = rates[dim]
        per = token_div if dim in TOKEN_DIMENSIONS else gpu_div if dim == "gpu_seconds" else 1
        quantity = quantities.get(dim, Decimal(0))
        amount = _div(money.CONTEXT.multiply(quantity, rate_), per)
        components.append(Component(dim, quantity, rate_, per, amount, source,
                                    costs.get(dim), markup if dim in costs else None))
    subtotal = sum((c.amount for c in components), Decimal(0))
    charge, policy = _policy(usage, spec)
    tokens = usage.tokens
    exact = subtotal if charge else Decimal(0)
    committed = 0
    if charge and ctx.committed_tier is not None:
        tier = next((t for t in spec.committed_use or () if t.name == ctx.committed_tier), None)
        if tier is not None and tokens > 0:
            included = tier.tokens_per_second * seconds_in_month(usage.time)
            committed = max(0, min(tokens, included - ctx.month_tokens_before))
            token_part = sum((c.amount for c in components if c.dimension in TOKEN_DIMENSIONS), Decimal(0))
            covered = _div(money.CONTEXT.multiply(token_part, Decimal(committed)), tokens)
            exact = money.CONTEXT.subtract(exact, covered)
    discount = max((t.discount_pct for t in spec.volume_tiers or ()
                    if t.threshold_tokens <= ctx.month_tokens_before), default=Decimal(0))
    if discount:
        exact = money.CONTEXT.multiply(exact, money.CONTEXT.subtract(Decimal(1), _div(discount, _HUNDRED)))
    return RatedLine(
        record_id=usage.record_id, model=usage.model, book=book.name, generation=book.generation,
        currency=spec.currency.value, sku=sku.sku, geo=sku.geo, unit=sku.unit, components=tuple(components),
        subtotal=subtotal, exact=exact, amount=money.quantize(exact), tokens=tokens, policy=policy,
        committed_tokens=committed, discount_pct=discount, estimated=usage.estimated,
        estimate_reason=usage.estimate_reason, termination=usage.termination)

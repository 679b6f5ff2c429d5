"""TenantAccount reconciler: the wallet's status mirrors the ledger; the state comes from `wallet.decide`.

Per reconcile: read the balance, month-to-date and recent spend and the unpriced records from the ledger;
decide the state (pure); work out `allowanceTokens` (balance plus grace at the highest token price of the book
in force), the gateway's caps of the current and previous allowance epochs (`allowanceLimits`,
`wallet.epoch_allowance`) and `runwayDays` (last 7 days' spend); write status and conditions (`BalanceHealthy`,
`BalanceStale`, `ReconcileDrift`, `UsagePriced`); an Event when the state changes. The rater enqueues the
tenants it charged, so a balance crossing zero reaches the status within one reconcile; the ledger watch
enqueues a tenant whose wallet got any other entry (a credit) within about a second; a resync every
`wallet_resync_seconds` (and at each epoch's start) catches the rest. When the ledger cannot be read the status
keeps its last balance and says `BalanceStale`.
Enforcement is not done here: the Plan reconciler turns an enforced state into a deny rule of the Plan's
AuthPolicy (and a Kueue stopPolicy), which the gateway enforces.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from maasctl.api import parse
from maasctl.billing import money
from maasctl.billing.api import TenantAccount
from maasctl.billing.api.kinds import TENANT_ACCOUNT
from maasctl.billing.api.tenant import BillingMode, TenantState
from maasctl.billing.controller.reconcilers.context import BillingContext, log
from maasctl.billing.ledger import Ledger
from maasctl.billing.ledger.rating_book import RatingBook
from maasctl.billing.rules import identity, rating, wallet
from maasctl.billing.rules.catalog import Catalog, TenantRef, month_start
from maasctl.runtime import Request, Result, set_condition, thaw
from maasctl.runtime.objects import FrozenObject

__all__ = ["RUNWAY_DAYS", "TenantReconciler", "cap_price", "highest_token_price"]

BALANCE_HEALTHY, BALANCE_STALE, RECONCILE_DRIFT, USAGE_PRICED = (
    "BalanceHealthy", "BalanceStale", "ReconcileDrift", "UsagePriced")
OWN_CONDITIONS = frozenset({BALANCE_HEALTHY, BALANCE_STALE, RECONCILE_DRIFT, USAGE_PRICED})
_OWN_FIELDS = ("state", "balance", "balanceObservedAt", "mtdSpend", "runwayDays", "allowanceTokens", "allowanceLimits",
               "observedGeneration")
RUNWAY_DAYS = wallet.RUNWAY_WINDOW_DAYS
_RETRY_SECONDS = 5


def highest_token_price(book: rating.Book | None) -> Decimal | None:
    """The highest price of one token among the book's SKUs (what `allowanceTokens` divides by)."""
    if book is None:
        return None
    best: Decimal | None = None
    for sku in book.spec.skus:
        divisors = rating.unit_divisors(sku.unit)
        if divisors is None:
            continue
        for dim, rate in sku.rates.items():
            if dim in rating.TOKEN_DIMENSIONS:
                price = money.CONTEXT.divide(rate, Decimal(divisors[0]))
                best = price if best is None or price > best else best
    return best


def cap_price(catalog: Catalog, ref: TenantRef | None, times: tuple[datetime, ...]) -> Decimal | None:
    """The highest token price of the books in force for `ref` at any of `times` (the epochs' starts and now):
    a cap in tokens must never value a token below what it may have been charged since the epoch started."""
    prices = [p for t in times if ref is not None and (p := highest_token_price(catalog.book_for(ref, t)))]
    return max(prices) if prices else None


def _signed(amount: Decimal) -> str:
    return format(money.quantize(amount), "f")


class TenantReconciler:
    def __init__(self, ctx: BillingContext, ledger: Ledger, catalog: Callable[[], Catalog]) -> None:
        self.ctx = ctx
        self.ledger = ledger
        self.book = RatingBook(ledger.engine)  # the unpriced usage it reports
        self.catalog = catalog
        self._written: dict[str, str] = {}  # the balance we last wrote, per tenant (to notice edits of the mirror)

    async def reconcile(self, req: Request) -> Result:
        ctx = self.ctx
        obj = ctx.cache.get(TENANT_ACCOUNT, req.name, req.namespace)
        if obj is None:
            self._written.pop(req.key, None)
            return Result.done()
        try:
            tenant = parse(TenantAccount, thaw(obj))
        except ValidationError as exc:
            await ctx.event(obj, "Warning", "InvalidTenantAccount", f"cannot read this TenantAccount: {exc}"[:1024])
            return Result.done()
        key = f"{req.namespace}/{req.name}"
        now = ctx.clock.now()
        old = obj.get("status") or {}
        try:
            await self.ledger.ensure_schema()
            # The rated tokens before the balance: a charge committed in between then lowers the cap (its cost
            # is in the balance, its tokens not yet added back) instead of raising it.
            starts = wallet.epoch_starts(now)
            rated = [await self.ledger.tokens(key, start + wallet.CUTOFF_SLACK) for start in starts]
            balance = await self.ledger.balance(key)
            has_entries = await self.ledger.count(key) > 0
            mtd = await self.ledger.spend(key, month_start(now))
            recent = await self.ledger.spend(key, now - timedelta(days=RUNWAY_DAYS))
            unpriced, latest = await self.book.unpriced(key, limit=1)
        except (SQLAlchemyError, OSError) as exc:
            log.warning("ledger unavailable", tenant=key, error=str(exc)[:300])
            await ctx.apply_status(obj, self.stale(obj, str(exc), now))
            return Result.requeue_after(_RETRY_SECONDS)
        spec = tenant.spec
        grace = spec.grace_policy
        policy = wallet.Policy(spec.billing_mode, grace.grace_amount if grace else Decimal(0),
                               grace.warning_threshold if grace else None)
        annotations = tenant.metadata.annotations or {}
        previous = TenantState(old["state"]) if old.get("state") in set(TenantState) else None
        facts = wallet.Facts(balance, has_entries, int(old.get("consecutivePaymentFailures") or 0),
                             annotations.get(wallet.SUSPENDED_ANNOTATION), annotations.get(wallet.CLOSED_ANNOTATION))
        decision = wallet.decide(previous, policy, facts)
        catalog = self.catalog()
        ref = catalog.tenants.get(identity.tenant_id(obj))
        ref = ref if ref is not None and ref.key == key else None
        price = cap_price(catalog, ref, (*starts, now))
        allowance = wallet.allowance_tokens(policy, balance, price)
        in_force = dict(wallet.caps_in_force(old.get("allowanceLimits")))
        caps = [{"epoch": name, "tokens": wallet.published_cap(in_force.get(name), cap, tokens)}
                for start, tokens in zip(starts, rated, strict=True)
                if (cap := wallet.epoch_allowance(policy, balance, tokens, price)) is not None
                and (name := wallet.epoch_name(start))]
        runway = wallet.runway_days(balance, recent, RUNWAY_DAYS) if spec.billing_mode == BillingMode.PREPAID else None
        drift = self._drift(key, old)
        status: dict[str, Any] = {
            "state": decision.state.value,
            "balance": _signed(balance),
            "balanceObservedAt": ctx.now_rfc3339(),
            "mtdSpend": money.fmt(money.quantize(mtd)),
            "runwayDays": money.fmt(runway) if runway is not None else None,
            "allowanceTokens": money.fmt(allowance) if allowance is not None else None,
            "allowanceLimits": caps or None,
            "observedGeneration": int(obj["metadata"].get("generation", 0)),
            "conditions": self.conditions(obj, decision, drift, unpriced, latest[0].reason if latest else ""),
        }
        await ctx.apply_status(obj, {k: v for k, v in status.items() if v is not None})
        self._written[key] = status["balance"]
        if previous != decision.state:
            enforced = decision.state in wallet.ENFORCED
            await ctx.event(obj, "Warning" if enforced else "Normal", decision.state.value,
                            f"{previous.value if previous else 'new'} -> {decision.state.value}: {decision.message}")
            log.info("tenant state", tenant=key, state=decision.state.value,
                     previous=previous.value if previous else None, balance=status["balance"])
        next_epoch = int((starts[0] + wallet.EPOCH - now).total_seconds()) + 1  # just past the epoch's start
        return Result.requeue_after(max(1, min(ctx.settings.wallet_resync_seconds, next_epoch)))

    def _drift(self, key: str, old: dict[str, Any]) -> str | None:
        """A message when the mirror in status is not what this controller last wrote (someone edited it)."""
        found, ours = old.get("balance"), self._written.get(key)
        if ours is None or found is None or found == ours:
            return None
        return f"status.balance was {found}, but the ledger said {ours} when it was last written: rewritten"

    def conditions(self, obj: FrozenObject, decision: wallet.Decision, drift: str | None, unpriced: int,
                   example: str) -> Any:
        generation = int(obj["metadata"].get("generation", 0))
        now = self.ctx.now_rfc3339()

        def cond(conds: Any, type_: str, status: str, reason: str, message: str) -> Any:
            return set_condition(conds, type_=type_, status=status, reason=reason, message=message[:4096],
                                 observed_generation=generation, now=now)

        healthy = decision.state in (TenantState.ACTIVE,)
        # Only this controller's conditions: the psp-connector applies its own (PaymentMethodValid, ...) with its
        # field manager, and applying a copy of them here would take them over and revert its updates.
        mine = [c for c in (obj.get("status") or {}).get("conditions") or () if c.get("type") in OWN_CONDITIONS]
        c = cond(mine, BALANCE_HEALTHY, "True" if healthy else "False",
                 decision.reason, decision.message)
        c = cond(c, BALANCE_STALE, "False", "BalanceFresh", "the balance mirrors the ledger")
        c = cond(c, RECONCILE_DRIFT, "True" if drift else "False", "MirrorEdited" if drift else "InSync",
                 drift or "the status balance matches the ledger")
        c = cond(c, USAGE_PRICED, "False" if unpriced else "True", "UnpricedUsage" if unpriced else "AllPriced",
                 f"{unpriced} usage record(s) could not be priced and were not charged; latest: {example}"
                 if unpriced else "every usage record was priced")
        return c

    def stale(self, obj: FrozenObject, error: str, now: datetime) -> dict[str, Any]:
        """The status while the ledger cannot be read: the last observation kept, and `BalanceStale` True once it
        is older than `balance_stale_seconds` (a blip of the database is retried, not reported as stale; it is
        named in the condition's message meanwhile)."""
        generation = int(obj["metadata"].get("generation", 0))
        old = obj.get("status") or {}
        mine = [c for c in old.get("conditions") or () if c.get("type") in OWN_CONDITIONS]
        observed = _observed_at(old)
        window = timedelta(seconds=self.ctx.settings.balance_stale_seconds)
        if observed is not None and now - observed < window:
            status, reason = "False", "LedgerRetrying"
            message = (f"the ledger could not be read at {_stamp(now)}; the balance as of {_stamp(observed)} is "
                       f"reported stale from {_stamp(observed + window)} if it still cannot be: {error}")
        else:
            status, reason = "True", "LedgerUnavailable"
            message = f"the ledger cannot be read; balance as of {old.get('balanceObservedAt')}: {error}"
        conditions = set_condition(mine, type_=BALANCE_STALE, status=status, reason=reason, message=message[:1024],
                                   observed_generation=generation, now=self.ctx.now_rfc3339())
        # A server-side apply removes the fields it no longer names: keep the last state and balance (an
        # unreadable ledger must not lift a Frozen tenant's enforcement), and the connector's conditions its own.
        kept = {k: old[k] for k in _OWN_FIELDS if k in old}
        return {**kept, "conditions": conditions}


def _observed_at(status: dict[str, Any]) -> datetime | None:
    """When the balance in `status` was last read from the ledger (None: never, or unreadable)."""
    try:
        when = datetime.fromisoformat(str(status["balanceObservedAt"]))
    except (KeyError, ValueError):
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

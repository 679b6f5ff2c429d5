"""PriceBook reconciler: lifecycle state, tenants and grandfathering in status; a requeue at the next transition.

Thin by design: the books and tenants of the namespace come from the cache, `lifecycle.evaluate` decides,
the status is applied (no write when nothing changed), a state change is an Event, and `Timers` requeues
the book exactly when time alone would change the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from maasctl.api import parse
from maasctl.billing.api import Plan, PriceBook, PriceBookState, TenantAccount
from maasctl.billing.api.kinds import PLAN, PRICE_BOOK, TENANT_ACCOUNT
from maasctl.billing.controller.reconcilers.context import BillingContext, log
from maasctl.billing.controller.reconcilers.costs import (
    COST_RECHECK_SECONDS,
    CostState,
    ProviderCosts,
    cost_secret_names,
    unit_mismatches,
)
from maasctl.billing.controller.timers import Timers
from maasctl.billing.rules import lifecycle
from maasctl.runtime import Request, Result, remove_condition, set_condition, thaw
from maasctl.runtime.objects import FrozenObject

NOTICE_VALID = "NoticeValid"
COST_DATA_VALID = "CostDataValid"  # only on books with pass-through SKUs
_EVENTS = {
    PriceBookState.ANNOUNCED: "Announced",
    PriceBookState.ACTIVE: "Activated",
    PriceBookState.SUPERSEDED: "Superseded",
    PriceBookState.RETIRED: "Retired",
}


def book_facts(obj: Mapping[str, Any]) -> lifecycle.Book:
    model = parse(PriceBook, thaw(obj))
    status = model.status
    created = model.metadata.creation_timestamp
    if created is None:
        raise ValueError("creationTimestamp is not set")
    return lifecycle.Book(
        name=str(model.metadata.name),
        created=created,
        effective_from=model.spec.effective_from,
        notice_days=model.spec.notice_days,
        supersedes=model.spec.supersedes,
        state=status.state if status is not None else None,
    )


def tenant_uses(tenants: list[FrozenObject], plans: list[FrozenObject]) -> list[lifecycle.TenantUse]:
    """Pins and Plan price books of the namespace's tenants (unparseable objects are skipped)."""
    plan_books: dict[str, str | None] = {}
    for obj in plans:
        try:
            plan = parse(Plan, thaw(obj))
        except ValidationError:
            continue
        plan_books[str(plan.metadata.name)] = plan.spec.price_book_ref
    out = []
    for obj in tenants:
        try:
            tenant = parse(TenantAccount, thaw(obj))
        except ValidationError:
            continue
        out.append(lifecycle.TenantUse(
            name=str(tenant.metadata.name),
            pin=tenant.spec.price_book_pin,
            plan_book=plan_books.get(tenant.spec.plan_ref.name),
        ))
    return out


class PriceBookReconciler:
    def __init__(self, ctx: BillingContext, timers: Timers, costs: ProviderCosts | None = None) -> None:
        self.ctx = ctx
        self.timers = timers
        self.costs = costs

    async def reconcile(self, req: Request) -> Result:
        ctx = self.ctx
        obj = ctx.cache.get(PRICE_BOOK, req.name, req.namespace)
        if obj is None:
            self.timers.forget(req)
            return Result.done()
        books = []
        for other in ctx.cache.list(PRICE_BOOK, req.namespace):
            try:
                books.append(book_facts(other))
            except (ValidationError, ValueError) as exc:
                if other["metadata"]["name"] == req.name:
                    await ctx.event(obj, "Warning", "InvalidPriceBook", f"cannot read this PriceBook: {exc}"[:1024])
                    log.warning("invalid PriceBook", request=req.key, error=str(exc)[:500])
                    return self.timers.after(req, None)
        tenants = tenant_uses(ctx.cache.list(TENANT_ACCOUNT, req.namespace), ctx.cache.list(PLAN, req.namespace))
        now = ctx.clock.now()
        life = lifecycle.evaluate(req.name, books, tenants, now)
        previous = (obj.get("status") or {}).get("state")
        status = self.status(obj, life)
        cost_problem = await self._cost_condition(obj, status)
        await ctx.apply_status(obj, status)
        if cost_problem is not None:
            await ctx.event(obj, "Warning", cost_problem[0], cost_problem[1][:1024])
        if previous != life.state:
            if not life.notice_valid and previous is None:
                await ctx.event(obj, "Warning", "NoticeTooShort", life.message)
            elif life.state in _EVENTS:
                await ctx.event(obj, "Normal", _EVENTS[life.state], life.message)
            log.info("pricebook state", request=req.key, state=str(life.state), previous=previous)
        result = self.timers.after(req, life.next_transition)
        if self.costs is not None and cost_secret_names(obj) and (result.after is None
                                                                  or result.after > COST_RECHECK_SECONDS):
            return Result.requeue_after(COST_RECHECK_SECONDS)  # no watch on Secrets: look again
        return result

    async def _cost_condition(self, obj: FrozenObject, status: dict[str, Any]) -> tuple[str, str] | None:
        """Read the book's cost Secrets; set CostDataValid in `status`. Returns (reason, message) of an Event
        to record when the condition turns False (or its reason changes), else None."""
        names = sorted(cost_secret_names(obj))
        if self.costs is None:
            return None
        if not names:  # (a Draft edited to drop its pass-through SKUs keeps no stale condition)
            status["conditions"] = remove_condition(status["conditions"], COST_DATA_VALID)
            return None
        ns = str(obj["metadata"].get("namespace") or "")
        states = [await self.costs.read(ns, n, notify=False) for n in names]
        for i, (name, state) in enumerate(zip(names, states, strict=True)):
            skus = unit_mismatches(obj, name, state.unit) if state.valid else []
            if skus:
                states[i] = CostState(None, "UnitMismatch", f"cost Secret {name} gives rates {state.unit}, but SKU(s) "
                                      f"{', '.join(skus)} naming it are priced in another unit")
        bad = [s for s in states if not s.valid]
        before = next((c for c in (obj.get("status") or {}).get("conditions") or ()
                       if c.get("type") == COST_DATA_VALID), None)
        if bad:
            reason = bad[0].reason
            message = ("; ".join(s.message for s in bad) +
                       ": the pass-through SKUs naming it are not charged (usage reported unpriced)")
        else:
            reason, message = "Valid", "; ".join(s.message for s in states)
        status["conditions"] = set_condition(
            status["conditions"], type_=COST_DATA_VALID, status="False" if bad else "True", reason=reason,
            message=message, observed_generation=status["observedGeneration"], now=self.ctx.now_rfc3339())
        if bad and (before is None or before.get("status") != "False" or before.get("reason") != reason):
            log.warning("pricebook cost data invalid", book=f"{ns}/{obj['metadata']['name']}", reason=reason)
            return "InvalidCostData", message
        return None

    def status(self, obj: FrozenObject, life: lifecycle.Lifecycle) -> dict[str, Any]:
        generation = int(obj["metadata"].get("generation", 0))
        conditions = set_condition(
            (obj.get("status") or {}).get("conditions"),
            type_=NOTICE_VALID,
            status="True" if life.notice_valid else "False",
            reason="NoticeGiven" if life.notice_valid else "NoticeTooShort",
            message="effectiveFrom respects noticeDays" if life.notice_valid else life.message,
            observed_generation=generation,
            now=self.ctx.now_rfc3339(),
        )
        return {
            "state": str(life.state),
            "activeTenants": life.active_tenants,
            "grandfatheredTenants": list(life.grandfathered),
            "observedGeneration": generation,
            "conditions": conditions,
        }

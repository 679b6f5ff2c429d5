"""BudgetPolicy reconciler: spend from the ledger, thresholds decided by `budget.evaluate` (pure), firings
claimed once, status written; enforcement is the Plan's (it reads the `ThresholdFired` condition).

Per reconcile: find the TenantAccount; for each cap read its period's spend (the tenant's usage charges, or
those of the API keys the selector covers: the ledger's per-key spend, keys matched against maas-api's key
labels); evaluate; claim the new firings in the ledger database (`billing_budget_firings`, natural key per
budget, cap, threshold and period: whichever controller inserts a firing is the only one to notify it, so a
retry, a restart or two replicas never fire twice); write status (`currentSpend`, `capPeriodEnds`,
`firedThresholds`, conditions `Evaluating`, `WithinBudget`, `ThresholdFired`); then notify each claimed firing
(Events `BudgetNotify`, plus `BudgetThrottle`/`BudgetFreeze`). When the tenant has a `billingConnectorRef`,
each firing's signed webhook (`budget_notice`) is recorded with its claim, in the same transaction; the
psp-connector delivers it (this controller never reads Secrets) and never holds up enforcement. The
`ThresholdFired` reason says what is in force (`Frozen`, `Throttled`, `Notified`, `NoneFired`) and, when
Frozen, its message is the text refused requests read; the Plan reconciler turns it into the Plan's
AuthPolicy rule or TokenRateLimitPolicy limit. The budget is evaluated again when the rater charges its
tenant, at its next period end (timers: a ManualClock jump re-queues it) and every `budget_resync_seconds`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from maasctl.api import parse
from maasctl.billing import money
from maasctl.billing.api import BudgetPolicy
from maasctl.billing.api.budget import ThresholdAction
from maasctl.billing.api.kinds import BUDGET_POLICY, PLAN, TENANT_ACCOUNT
from maasctl.billing.controller.reconcilers.context import BillingContext, log
from maasctl.billing.controller.spend import selected_spend
from maasctl.billing.controller.timers import Timers, seconds_until
from maasctl.billing.controller.usage_source import UsageReader
from maasctl.billing.ledger import Ledger
from maasctl.billing.ledger.budget_book import BudgetBook, Notice
from maasctl.billing.rules import budget, budget_notice, identity
from maasctl.runtime import Request, Result, set_condition, thaw
from maasctl.runtime.informer import Event, EventType
from maasctl.runtime.objects import FrozenObject

__all__ = ["BUDGET_TENANT_INDEX", "BudgetReconciler", "budget_tenant_key", "enforcement_changed", "fired_condition"]

EVALUATING, WITHIN_BUDGET, THRESHOLD_FIRED = "Evaluating", "WithinBudget", "ThresholdFired"
INVALID_AMOUNT, INVALID_SPEC = "InvalidAmount", "InvalidSpec"
BUDGET_TENANT_INDEX = "billing.budget-tenant"
_RETRY_SECONDS = 5


def budget_tenant_key(obj: FrozenObject) -> list[str]:
    """Index: the `namespace/name` of the TenantAccount a BudgetPolicy names."""
    ref = ((obj.get("spec") or {}).get("tenantRef") or {}).get("name")
    return [f"{obj['metadata'].get('namespace')}/{ref}"] if ref else []


def fired_condition(obj: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """(reason, message) of a BudgetPolicy's ThresholdFired condition: what is in force, and its 403 text."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == THRESHOLD_FIRED:
            return c.get("reason"), c.get("message")
    return None, None


def enforcement_changed(event: Event) -> bool:
    """What the Plan compiles from a budget changed: what is in force (and its text), selector or tenant."""
    if event.type is not EventType.UPDATED or event.old is None:
        return True
    return bool(fired_condition(event.old) != fired_condition(event.obj)
                or (event.old.get("spec") or {}) != (event.obj.get("spec") or {}))


def _rfc3339(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


class BudgetReconciler:
    def __init__(self, ctx: BillingContext, ledger: Ledger, keys: UsageReader | None, timers: Timers) -> None:
        self.ctx = ctx
        self.ledger = ledger
        self.book = BudgetBook(ledger.engine)  # firings and their notices: the ledger's database
        self.keys = keys
        self.timers = timers

    async def reconcile(self, req: Request) -> Result:
        ctx = self.ctx
        obj = ctx.cache.get(BUDGET_POLICY, req.name, req.namespace)
        if obj is None:
            self.timers.forget(req)
            return Result.done()
        try:
            # The status is rewritten below: one this code cannot read (an older CRD's) must not stop evaluation.
            policy = parse(BudgetPolicy, {**thaw(obj), "status": None})
        except ValidationError as exc:
            await self.unreadable(obj, req, exc)
            return Result.done()
        spec = policy.spec
        tenant_obj = ctx.cache.get(TENANT_ACCOUNT, spec.tenant_ref.name, req.namespace)
        if tenant_obj is None:
            await self.not_evaluated(obj, "TenantNotFound",
                                     f"TenantAccount {req.namespace}/{spec.tenant_ref.name} does not exist")
            return Result.requeue_after(ctx.settings.budget_resync_seconds)
        tenant = f"{req.namespace}/{spec.tenant_ref.name}"
        selector = dict((spec.selector.key_labels or {}) if spec.selector else {})
        if selector and self.keys is None:
            await self.not_evaluated(obj, "KeyLabelsUnavailable",
                                     "selector.keyLabels needs maas-api's database (--usage-database-url) to know "
                                     "which API keys carry the labels")
            return Result.requeue_after(ctx.settings.budget_resync_seconds)
        now = ctx.clock.now()
        try:
            await self.ledger.ensure_schema()
            spends = [await self.spend(tenant, selector, *budget.period_bounds(cap.period, now)) for cap in spec.caps]
        except (SQLAlchemyError, OSError) as exc:
            log.warning("budget spend unavailable", budget=req.key, error=str(exc)[:300])
            await self.not_evaluated(obj, "SpendUnavailable", f"the ledger cannot be read: {exc}"[:1024])
            return Result.requeue_after(_RETRY_SECONDS)
        ev = budget.evaluate(spec.caps, spends, now, budget.fired_of_status(obj.get("status")))
        keys = {budget.firing_key(req.key, c.index, pct, c.period_start): (c, pct) for c, pct in ev.new}
        notify = self.notices(req, tenant, tenant_obj, keys)
        try:
            won, times = await self.book.claim_firings(req.key, list(keys), now, notify)
        except (SQLAlchemyError, OSError) as exc:
            await self.not_evaluated(obj, "SpendUnavailable", f"the ledger cannot be written: {exc}"[:1024])
            return Result.requeue_after(_RETRY_SECONDS)
        fired = list(ev.kept) + [budget.Fired(c.index, pct, times.get(k, now)) for k, (c, pct) in keys.items()]
        name = str(tenant_obj["metadata"]["name"])
        status = {
            "currentSpend": money.fmt(money.quantize(ev.current_spend)),
            "capPeriodEnds": [{"capIndex": c.index, "periodEnd": _rfc3339(c.period_end)} for c in ev.caps],
            "firedThresholds": [{"capIndex": f.cap_index, "pct": f.pct, "firedAt": _rfc3339(f.fired_at)}
                                for f in sorted(fired, key=lambda f: (f.cap_index, f.pct))],
            "observedGeneration": int(obj["metadata"].get("generation", 0)),
            "conditions": self.conditions(obj, ev, bool(fired), req, name, selector),
        }
        await ctx.apply_status(obj, status)
        for key, (cap, pct) in keys.items():
            if key in won:
                await self.notify(obj, cap, pct, name, identity.tenant_id(tenant_obj))
        result = self.timers.after(req, ev.next_transition)
        if seconds_until(now, ev.next_transition) > ctx.settings.budget_resync_seconds:
            return Result.requeue_after(ctx.settings.budget_resync_seconds)
        return result

    @staticmethod
    def notices(req: Request, tenant: str, tenant_obj: FrozenObject,
                keys: Mapping[str, tuple[budget.CapEvaluation, int]]) -> dict[str, Notice]:
        """The signed webhooks of these firings, when the tenant has a BillingConnector: recorded with the claim,
        delivered by the psp-connector if the connector is a `webhook` one (it alone reads the secret)."""
        if not ((tenant_obj.get("spec") or {}).get("billingConnectorRef") or {}).get("name"):
            return {}
        out = {}
        for key, (cap, pct) in keys.items():
            data = budget_notice.threshold_fired(
                namespace=str(req.namespace), budget=req.name, tenant=tenant, cap_index=cap.index,
                period=cap.cap.period.value, period_start=cap.period_start, period_end=cap.period_end, pct=pct,
                actions=[a.value for a in cap.actions(pct)], spend=cap.spend, cap=cap.cap.amount)
            out[key] = Notice(tenant, budget_notice.event_id(key), json.dumps(data, separators=(",", ":")))
        return out

    async def spend(self, tenant: str, selector: Mapping[str, str], since: datetime, until: datetime) -> Decimal:
        spent = await selected_spend(self.ledger, self.keys, tenant, selector, since, until)
        assert spent is not None  # a selector without key labels was refused before
        return spent

    def conditions(self, obj: FrozenObject, ev: budget.Evaluation, fired: bool, req: Request, tenant: str,
                   selector: Mapping[str, str]) -> Any:
        generation = int(obj["metadata"].get("generation", 0))
        now = self.ctx.now_rfc3339()

        def cond(conds: Any, type_: str, status: str, reason: str, message: str) -> Any:
            return set_condition(conds, type_=type_, status=status, reason=reason, message=message[:4096],
                                 observed_generation=generation, now=now)

        spends = "; ".join(f"cap {c.index} ({c.cap.period.value} {money.fmt(c.cap.amount)}): spend "
                           f"{money.fmt(money.quantize(c.spend))}" + (f", reached {list(c.reached)}%" if c.reached
                                                                      else "") for c in ev.caps)
        c = cond((obj.get("status") or {}).get("conditions"), EVALUATING, "True", "SpendEvaluated",
                 f"spend of {budget.selector_text(selector)} read from the ledger at {now}")
        reached = any(x.reached for x in ev.caps)
        c = cond(c, WITHIN_BUDGET, "False" if reached else "True", "ThresholdReached" if reached else "BelowThresholds",
                 spends)
        reason = budget.ENFORCEMENT_REASONS[ev.severity if ev.severity else
                                            (budget.Severity.NOTIFY if fired else budget.Severity.NONE)]
        if ev.severity == budget.Severity.FREEZE:
            message = budget.freeze_message(str(req.namespace), req.name, tenant, ev.caps)
        elif ev.severity == budget.Severity.THROTTLE:
            rate = budget.throttled_tokens_per_minute(self.plan_tokens_per_minute(obj, tenant))
            message = (f"{budget.selector_text(selector)} of tenant {tenant}: throttled to {rate} tokens per minute "
                       "together until the period ends or the cap is raised")
        elif fired:
            message = "thresholds fired this period: notified"
        else:
            message = "no threshold reached this period"
        return cond(c, THRESHOLD_FIRED, "True" if fired or ev.severity else "False", reason, message)

    def plan_tokens_per_minute(self, obj: FrozenObject, tenant: str) -> int | None:
        ns = obj["metadata"].get("namespace")
        tenant_obj = self.ctx.cache.get(TENANT_ACCOUNT, tenant, ns) or {}
        plan_name = ((tenant_obj.get("spec") or {}).get("planRef") or {}).get("name")
        plan = self.ctx.cache.get(PLAN, str(plan_name), ns) if plan_name else None
        value = (((plan or {}).get("spec") or {}).get("limits") or {}).get("tokensPerMinute")
        return int(value) if value is not None else None

    async def notify(self, obj: FrozenObject, cap: budget.CapEvaluation, pct: int, tenant: str, org: str) -> None:
        """A firing's notifications: always Notify; Throttle or Freeze as well when that is the action."""
        what = (f"cap {cap.index} ({cap.cap.period.value}, {money.fmt(cap.cap.amount)}) of tenant {tenant} "
                f"(organization {org}) reached {pct}%: spend {money.fmt(money.quantize(cap.spend))} in the period "
                f"ending {_rfc3339(cap.period_end)}")
        for action in cap.actions(pct):
            enforcing = action != ThresholdAction.NOTIFY
            note = what + (f"; {action.value} is in force for the keys it covers" if enforcing else "")
            await self.ctx.event(obj, "Warning" if enforcing else "Normal", f"Budget{action.value}", note)
        log.info("budget threshold fired", budget=f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}",
                 cap=cap.index, pct=pct, spend=money.fmt(money.quantize(cap.spend)))

    async def unreadable(self, obj: FrozenObject, req: Request, exc: ValidationError) -> None:
        """A spec this code cannot evaluate (stored before admission refused it, e.g. a cap of more digits than
        `money.MAX_DIGITS`): said in the Evaluating condition, an Event and the log, never silently skipped."""
        errors = exc.errors(include_url=False, include_input=False)
        reason = INVALID_AMOUNT if any(e["type"] == "billing_money" for e in errors) else INVALID_SPEC
        detail = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors)
        message = f"cannot evaluate this BudgetPolicy: {detail}"
        log.warning("budget not evaluated", budget=req.key, reason=reason, error=message[:500])
        await self.ctx.event(obj, "Warning", reason, message[:1024])
        await self.not_evaluated(obj, reason, message[:4096])

    async def not_evaluated(self, obj: FrozenObject, reason: str, message: str) -> None:
        generation = int(obj["metadata"].get("generation", 0))
        conditions = set_condition((obj.get("status") or {}).get("conditions"), type_=EVALUATING, status="False",
                                   reason=reason, message=message, observed_generation=generation,
                                   now=self.ctx.now_rfc3339())
        await self.ctx.apply_status(obj, {"conditions": conditions})

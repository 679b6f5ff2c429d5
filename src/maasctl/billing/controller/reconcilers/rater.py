"""The rater as a controller: one key (`rater`), one worker, leader only. Each reconcile is one pass of
`Rater.run_once` (after re-reading the pass-through cost Secrets PriceBooks name), then
`Rater.revisit_unpriced` (records left unpriced that a PriceBook now prices); the tenants it charged are
enqueued on the TenantAccount controller so their status (and so enforcement) follows within one reconcile. It
runs again every `rate_interval_seconds`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from maasctl.billing.api.kinds import PRICE_BOOK
from maasctl.billing.controller.rater import Rater
from maasctl.billing.controller.reconcilers.context import BillingContext
from maasctl.billing.controller.reconcilers.costs import ProviderCosts
from maasctl.runtime import Request, Result

__all__ = ["RATER_KEY", "RaterReconciler"]

RATER_KEY: Final = Request(None, "rater")


class RaterReconciler:
    def __init__(self, ctx: BillingContext, rater: Rater, costs: ProviderCosts | None = None) -> None:
        self.ctx = ctx
        self.rater = rater
        self.costs = costs

    async def reconcile(self, req: Request) -> Result:
        if req != RATER_KEY:
            return Result.done()
        await self.rater.ledger.ensure_schema()
        if self.costs is not None:  # the cost Secrets as they are now: a changed Secret prices later records
            await self.costs.refresh(self.ctx.cache.list(PRICE_BOOK))
        await self.rater.run_once()
        await self.rater.revisit_unpriced(self.ctx.clock.now())
        await self.rater.charge_commitments(self.ctx.clock.now())
        return Result.requeue_after(self.ctx.settings.rate_interval_seconds)


def tenant_enqueuer(add: Callable[[Request], None]) -> Callable[[set[str]], None]:
    def enqueue(tenants: set[str]) -> None:
        for key in tenants:
            ns, _, name = key.partition("/")
            add(Request(ns, name))

    return enqueue

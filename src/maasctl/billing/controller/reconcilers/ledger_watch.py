"""The ledger watch: one key, one worker, leader only. Every `ledger_watch_seconds` it reads the tenants that
got a ledger entry since its last look and enqueues them on the TenantAccount controller.

Why: a credit is written straight into the ledger by whichever process takes it (`maasctl billing ledger
credit`, the portal API's credits on any replica, the psp-connector's webhook, an adjustment), none of which can
reach this process's work queue, and
the periodic resync (`wallet_resync_seconds`) took up to a minute to notice. Polling the newest entry id is one
indexed query a second; a wallet change then reaches the status, the Plan's policies and the gateway in about
a second. The first look only records where the ledger is: at start every tenant is reconciled anyway."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from sqlalchemy.exc import SQLAlchemyError

from maasctl.billing.controller.reconcilers.context import BillingContext, log
from maasctl.billing.ledger import Ledger
from maasctl.runtime import Request, Result

__all__ = ["LEDGER_WATCH_KEY", "LedgerWatch"]

LEDGER_WATCH_KEY: Final = Request(None, "ledger-watch")


class LedgerWatch:
    def __init__(self, ctx: BillingContext, ledger: Ledger, enqueue: Callable[[set[str]], None]) -> None:
        self.ctx = ctx
        self.ledger = ledger
        self.enqueue = enqueue
        self._last: int | None = None

    async def reconcile(self, req: Request) -> Result:
        if req != LEDGER_WATCH_KEY:
            return Result.done()
        try:
            await self.ledger.ensure_schema()
            if self._last is None:
                self._last = await self.ledger.last_id()
            else:
                self._last, tenants = await self.ledger.tenants_after(self._last)
                if tenants:
                    self.enqueue(tenants)
        except (SQLAlchemyError, OSError) as exc:
            log.warning("ledger watch: ledger unavailable", error=str(exc)[:300])
        return Result.requeue_after(self.ctx.settings.ledger_watch_seconds)

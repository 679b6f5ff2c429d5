"""A billing administrator credits a tenant's wallet from its page (docs/billing-console.md, "Credits").

The console only relays: the billing operator's portal API records the credit in the ledger, with the signed-in
user's own credential (`contract.billing_portal`, "Credits": it checks `create tenantaccounts/credits` itself),
so the console holds no right to move money. Each rendered form carries its own idempotency id (`credit_id`,
drawn by the tenant page), so a form submitted twice (a double click, a reload, the back button) records one
credit. The role is checked here first, before the form is read: anyone but a billing administrator gets 403.
"""

from __future__ import annotations

from typing import Annotated

import structlog
from fastapi import APIRouter, HTTPException, Path, Request
from fastapi.responses import Response

from maasctl.console.billing import money
from maasctl.console.billing.pages import MAX_REASON, NAME, NS, Biller, _portal_api, _reason
from maasctl.console.billing.portal_client import PortalError
from maasctl.console.web import flash, q, redirect
from maasctl.contract.billing_console import at_least

__all__ = ["router"]

log = structlog.get_logger("maasctl.console.billing")
router = APIRouter()


@router.post("/billing/tenants/{namespace}/{name}/credit")
async def credit(request: Request, user: Biller, namespace: Annotated[str, Path(pattern=NS)],
                 name: Annotated[str, Path(pattern=NAME)]) -> Response:
    if not at_least(user.role, "admin"):  # before anything of the form is read
        log.warning("billing credit refused", user=user.identity.username, role=user.role,
                    tenant=f"{namespace}/{name}")
        raise HTTPException(403, f"Your billing role ({user.role}) cannot credit wallets: that is for billing "
                                 "administrators.")
    api = _portal_api(request, user)
    if api is None:
        raise HTTPException(409, "This console has no billing operator API (--billing-api-url): credit the wallet "
                                 "with `maasctl billing ledger credit`.")
    form = await request.form()
    amount, reason_text, credit_id = (str(form.get(k) or "") for k in ("amount", "reason", "credit_id"))
    page = f"/billing/tenants/{q(namespace)}/{q(name)}"
    reason = _reason(reason_text)
    if reason is None:
        flash(request, "error", f"Not credited: say why (1 to {MAX_REASON} characters, one line).")
        return redirect(page)
    try:
        answer = await api.credit(namespace, name, credit_id, amount.strip(), reason)
    except PortalError as exc:
        flash(request, "error", f"Not credited: {exc.message}")
        return redirect(page)
    if answer.get("duplicate"):
        flash(request, "success", "That credit was already recorded (once).")
    else:
        log.info("billing wallet credited", user=user.identity.username, tenant=f"{namespace}/{name}",
                 amount=answer.get("amount"), currency=answer.get("currency"))
        flash(request, "success", f"Credited {money.amount(answer.get('amount'), answer.get('currency'))} to "
                                  f"{namespace}/{name}.")
    return redirect(page)

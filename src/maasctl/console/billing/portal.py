"""The tenant portal, `/portal` (docs/billing-console.md, "The tenant portal"): a tenant's own users read their
wallet, spend (by day, model and API-key label), budgets, reservations, invoices (each with the ledger entries it
invoiced) and the ledger entries behind each charge, and export them as CSV. Served only with `--tenant-portal`
(the BillingConsole's `tenantPortal.enabled`); 404 otherwise.

Every read goes to the billing operator's portal API with the signed-in user's own credential: the API decides
which tenants are the user's (`contract.billing_portal`), and answers 404 for any other. The console takes the
tenant from the page's path only and passes nothing else that names a tenant: query strings and form fields
are read by name (`before`, `kind`, `days`, `from`, `to`), validated, and everything else is dropped.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Annotated, Any, Final, TypeVar

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import Response, StreamingResponse

from maasctl.console.billing import portal_views as views
from maasctl.console.billing.portal_client import PortalApi, PortalError
from maasctl.console.billing.settings import BillingPagesSettings
from maasctl.console.sessions import Identity
from maasctl.console.web import console, current_user, redirect, render
from maasctl.contract.billing_portal import ENTRY_KINDS, INVOICE_KEY, SPEND_DAYS, spend_days

router = APIRouter()
_NS: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_ID: Final = re.compile(r"^[1-9][0-9]{0,17}$")
_DAY: Final = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
T = TypeVar("T")


@dataclass(frozen=True)
class PortalUser:
    identity: Identity
    api: PortalApi


async def portal_user(request: Request) -> PortalUser:
    """The portal is there only when enabled (404 before anything else), then for any signed-in user."""
    settings: BillingPagesSettings = console(request).settings.billing
    if not settings.tenant_portal:
        raise HTTPException(404)
    identity = await current_user(request)
    if not settings.api_url:
        raise HTTPException(503, "The tenant portal is on, but this console was not told where the billing "
                                 "operator's portal API is (--billing-api-url).")
    return PortalUser(identity, PortalApi(settings.api_url, identity.credential))


Tenant = Annotated[PortalUser, Depends(portal_user)]


async def _ask(call: Awaitable[T]) -> T:
    """The API's answer; its 404 (not the user's tenant, or none) is the console's plain 404, nothing more."""
    try:
        return await call
    except PortalError as exc:
        if exc.status == 404:
            raise HTTPException(404) from exc
        raise HTTPException(exc.status if exc.status in (400, 503) else 502, exc.message) from exc


def _path(namespace: str, name: str) -> None:
    if not (_NS.match(namespace) and _NAME.match(name)):
        raise HTTPException(404)


@router.get("/portal")
async def portal_home(request: Request, user: Tenant) -> Response:
    tenants = await _ask(user.api.tenants())
    if len(tenants) == 1:
        return redirect(f"/portal/{tenants[0]['namespace']}/{tenants[0]['name']}")
    return render(request, "portal/index.html", title="Tenant portal", tenants=tenants)


@router.get("/portal/{namespace}/{name}")
async def tenant_page(request: Request, user: Tenant, namespace: str, name: str) -> Response:
    _path(namespace, name)
    days = spend_days(request.query_params.get("days")) or 30
    tenant = await _ask(user.api.tenant(namespace, name))
    errors: list[str] = []
    spend: dict[str, Any] | None = None
    recent: list[dict[str, str]] = []
    invoices: list[dict[str, str]] | None = None
    try:
        spend = views.spend_view(await user.api.spend(namespace, name, days))
        recent = views.entry_rows((await user.api.entries(namespace, name, {"limit": "10"})).get("entries") or [])
        invoices = views.invoice_rows((await user.api.invoices(namespace, name, {"limit": "12"})).get("invoices")
                                      or [])
    except PortalError as exc:
        errors.append(exc.message)
    return render(request, "portal/tenant.html", title=tenant.get("displayName") or name, t=tenant,
                  w=views.wallet(tenant), budgets=views.budget_rows(tenant),
                  reservations=views.reservation_rows(tenant), spend=spend, recent=recent, days=days,
                  invoices=invoices, no_invoices=views.no_invoices(str(tenant.get("billingMode") or "")),
                  ranges=SPEND_DAYS, base=f"/portal/{namespace}/{name}", errors=errors)


@router.get("/portal/{namespace}/{name}/ledger")
async def ledger_page(request: Request, user: Tenant, namespace: str, name: str) -> Response:
    _path(namespace, name)
    q = request.query_params
    params = {"limit": "50"}
    before, kind = q.get("before", ""), q.get("kind", "")
    if before:
        if not _ID.match(before):
            raise HTTPException(400, "That is not a page of the ledger.")
        params["before"] = before
    if kind:
        if kind not in ENTRY_KINDS:
            raise HTTPException(400, "There is no such kind of entry.")
        params["kind"] = kind
    tenant = await _ask(user.api.tenant(namespace, name))
    page = await _ask(user.api.entries(namespace, name, params))
    return render(request, "portal/ledger.html", title=f"Ledger · {tenant.get('displayName') or name}", t=tenant,
                  rows=views.entry_rows(page.get("entries") or []), next=page.get("next"), kind=kind,
                  kinds=ENTRY_KINDS, base=f"/portal/{namespace}/{name}")


@router.get("/portal/{namespace}/{name}/ledger/{entry_id}")
async def entry_page(request: Request, user: Tenant, namespace: str, name: str, entry_id: str) -> Response:
    _path(namespace, name)
    if not _ID.match(entry_id):
        raise HTTPException(404)
    tenant = await _ask(user.api.tenant(namespace, name))
    entry = await _ask(user.api.entry(namespace, name, entry_id))
    (row,) = views.entry_rows([entry])
    return render(request, "portal/entry.html", title=f"Entry {row['id']}", t=tenant, e=entry, row=row,
                  components=views.entry_components(entry), base=f"/portal/{namespace}/{name}")


@router.get("/portal/{namespace}/{name}/invoices/{key}")
async def invoice_page(request: Request, user: Tenant, namespace: str, name: str, key: str) -> Response:
    """One invoice and the ledger usage entries it invoiced (the entries behind the charge)."""
    _path(namespace, name)
    if not INVOICE_KEY.match(key):
        raise HTTPException(404)
    before = request.query_params.get("before", "")
    if before and not _ID.match(before):
        raise HTTPException(400, "That is not a page of this invoice.")
    tenant = await _ask(user.api.tenant(namespace, name))
    page = await _ask(user.api.invoice(namespace, name, key, {"limit": "50", **({"before": before} if before
                                                                                else {})}))
    (row,) = views.invoice_rows([page.get("invoice") or {}])
    return render(request, "portal/invoice.html", title=f"Invoice {row['id']}", t=tenant, inv=row,
                  rows=views.entry_rows(page.get("entries") or []), next=page.get("next"),
                  base=f"/portal/{namespace}/{name}")


@router.get("/portal/{namespace}/{name}/export.csv")
async def export_csv(request: Request, user: Tenant, namespace: str, name: str) -> Response:
    _path(namespace, name)
    since, until = request.query_params.get("from", ""), request.query_params.get("to", "")
    if not (_DAY.match(since) and _DAY.match(until)):
        raise HTTPException(400, "Give the first and last day to export (YYYY-MM-DD).")
    stack = contextlib.AsyncExitStack()
    try:
        upstream = await stack.enter_async_context(user.api.export(namespace, name, {"from": since, "to": until}))
    except PortalError as exc:
        await stack.aclose()
        if exc.status == 404:
            raise HTTPException(404) from exc
        raise HTTPException(exc.status if exc.status in (400, 503) else 502, exc.message) from exc

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.aiter_bytes():
                yield chunk
        finally:
            await stack.aclose()

    headers = {"Content-Disposition": upstream.headers.get("content-disposition",
                                                           'attachment; filename="ledger.csv"'),
               "Cache-Control": "no-store"}
    return StreamingResponse(body(), media_type="text/csv; charset=utf-8", headers=headers)

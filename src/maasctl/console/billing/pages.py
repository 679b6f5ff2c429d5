"""Billing -> Tenants, Budgets, Reservations, Connectors, Metering health (docs/billing-console.md).

Every page needs a billing role (`contract.billing_console.role_of` over the user's groups and the
`--billing-*-group` flags); every write (freeze, unfreeze) needs operator or admin and is refused by the server
for anyone else, whatever the form says. Reads and writes go to the API server as the signed-in user, so their
RBAC applies as well (docs/billing-console.md, "Who may do what").
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Final

import httpx
import structlog
from fastapi import APIRouter, Depends, Form, HTTPException, Path, Request
from fastapi.responses import Response

from maasctl.console.billing import portal_views, views
from maasctl.console.billing.portal_client import PortalApi, PortalError
from maasctl.console.billing.settings import BillingPagesSettings
from maasctl.console.kube import KubeError, Resource, UserKube
from maasctl.console.sessions import Identity
from maasctl.console.web import User, console, flash, kube_as, q, redirect, render
from maasctl.contract.billing_console import Role, at_least
from maasctl.contract.billing_portal import SPEND_DAYS, spend_days
from maasctl.tls import default_tls

log = structlog.get_logger("maasctl.console.billing")
router = APIRouter()

BILLING: Final = "billing.opendatahub.io/v1alpha1"
TENANT = Resource(BILLING, "tenantaccounts", "TenantAccount")
PLAN = Resource(BILLING, "plans", "Plan")
PRICE_BOOK = Resource(BILLING, "pricebooks", "PriceBook")
BUDGET = Resource(BILLING, "budgetpolicies", "BudgetPolicy")
RESERVATION = Resource(BILLING, "reservations", "Reservation")
CONNECTOR = Resource(BILLING, "billingconnectors", "BillingConnector")
EVENT = Resource("events.k8s.io/v1", "events", "Event")
NS: Final = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
NAME: Final = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
MAX_REASON: Final = 500
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")
METRICS_TRIES: Final = 4  # the Service may answer from a standby replica: ask again for the leader


@dataclass(frozen=True)
class BillingUser:
    identity: Identity
    role: Role


def pages_settings(request: Request) -> BillingPagesSettings:
    billing: BillingPagesSettings = console(request).settings.billing
    return billing


async def billing_user(request: Request, identity: User) -> BillingUser:
    role = pages_settings(request).role(identity.groups)
    if role is None:
        raise HTTPException(403, "The billing pages are for the billing console's roles (groups mapped to admin, "
                                 "operator or viewer in the BillingConsole's auth.roles).")
    return BillingUser(identity, role)


Biller = Annotated[BillingUser, Depends(billing_user)]


def _render(request: Request, template: str, user: BillingUser, status: int = 200, **context: Any) -> Response:
    return render(request, template, status, billing_role=user.role, can_write=at_least(user.role, "operator"),
                  **context)


async def _list(kube: UserKube, resource: Resource, errors: list[str]) -> list[dict[str, Any]]:
    """Every object of a kind the user may list (all namespaces); a refusal is shown, never hidden."""
    try:
        return await kube.list(resource)
    except KubeError as exc:
        errors.append(f"{resource.kind}: {exc.message}")
        return []


async def _currencies(kube: UserKube, tenants: list[dict[str, Any]], errors: list[str]) -> dict[str, str | None]:
    return views.tenant_currencies(tenants, await _list(kube, PLAN, errors), await _list(kube, PRICE_BOOK, errors))


@router.get("/billing")
async def billing_home(user: Biller) -> Response:
    return redirect("/billing/tenants")


async def _tenant_rows(request: Request, user: BillingUser, errors: list[str]) -> list[views.Row]:
    """Every tenant the user may list, with its amounts in its PriceBook's currency."""
    kube = kube_as(request, user.identity)
    tenants = await _list(kube, TENANT, errors)
    return views.tenant_rows(tenants, await _currencies(kube, tenants, errors))


@router.get("/billing/tenants")
async def tenants_page(request: Request, user: Biller) -> Response:
    errors: list[str] = []
    rows = await _tenant_rows(request, user, errors)
    dunning = [r for r in rows if r.cells["state"] == "Dunning"]
    return _render(request, "billing/tenants.html", user, title="Tenants", rows=rows, dunning=dunning, errors=errors,
                   mtd_charts=views.mtd_charts(rows))


@router.get("/billing/tenants/{namespace}/{name}")
async def tenant_page(request: Request, user: Biller, namespace: Annotated[str, Path(pattern=NS)],
                      name: Annotated[str, Path(pattern=NAME)]) -> Response:
    kube = kube_as(request, user.identity)
    errors: list[str] = []
    try:
        tenant = await kube.find(TENANT, name, namespace)
    except KubeError as exc:
        raise HTTPException(exc.status if exc.status in (401, 403) else 502, exc.message) from exc
    if tenant is None:
        raise HTTPException(404, "There is no such tenant.")
    (row,) = views.tenant_rows([tenant], await _currencies(kube, [tenant], errors))
    events = await _events(kube, namespace, name, errors)
    days = spend_days(request.query_params.get("days")) or 30
    charts = await _charts(request, user, namespace, name, days, errors)
    # The credit form (credits.py) for administrators when the portal API is there; its id is drawn per render, so
    # one rendered form submitted twice records one credit.
    can_credit = at_least(user.role, "admin") and bool(pages_settings(request).api_url)
    return _render(request, "billing/tenant.html", user, title=row.cells["display"], row=row, errors=errors,
                   events=events, max_reason=MAX_REASON, charts=charts, days=days, ranges=SPEND_DAYS,
                   base=f"/billing/tenants/{namespace}/{name}",
                   credit_id=secrets.token_urlsafe(18) if can_credit else None)


def _portal_api(request: Request, user: BillingUser) -> PortalApi | None:
    url = pages_settings(request).api_url
    return PortalApi(url, user.identity.credential) if url else None


async def _charts(request: Request, user: BillingUser, namespace: str, name: str, days: int,
                  errors: list[str]) -> dict[str, Any] | None:
    """The tenant's spend over time (per day and model), balance, each budget's burn against its caps and its
    latest invoices, from the billing operator's portal API, as the user (their role's `get
    tenantaccounts/ledger`)."""
    api = _portal_api(request, user)
    if api is None:
        return None
    try:
        tenant = await api.tenant(namespace, name)
        spend = await api.spend(namespace, name, days)
        invoices = (await api.invoices(namespace, name, {"limit": "12"})).get("invoices") or []
    except PortalError as exc:
        errors.append(f"Charts: {exc.message}")
        return None
    return {"spend": portal_views.spend_view(spend), "budgets": portal_views.budget_rows(tenant),
            "invoices": portal_views.invoice_rows(invoices),
            "no_invoices": portal_views.no_invoices(str(tenant.get("billingMode") or ""))}


async def _events(kube: UserKube, namespace: str, name: str, errors: list[str]) -> list[dict[str, str]]:
    """The tenant's Events, newest first: state changes (the operator), freezes and unfreezes (this console)."""
    try:
        items = await kube.list(EVENT, namespace)
    except KubeError as exc:
        errors.append(f"Events: {exc.message}")
        return []
    out = []
    for e in items:
        regarding = e.get("regarding") or {}
        if regarding.get("kind") == "TenantAccount" and regarding.get("name") == name:
            out.append({"time": str(e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp") or ""),
                        "type": str(e.get("type") or ""), "reason": str(e.get("reason") or ""),
                        "note": str(e.get("note") or ""), "by": str(e.get("reportingController") or "")})
    return sorted(out, key=lambda e: e["time"], reverse=True)[:50]


def _reason(text: str) -> str | None:
    reason = " ".join(text.split())
    if not reason or len(reason) > MAX_REASON or _CONTROL.search(reason):
        return None
    return reason


async def _record(kube: UserKube, tenant: dict[str, Any], user: Identity, reason: str, note: str) -> None:
    """An Event on the tenant, written as the user: who did what and why stays with the tenant's history."""
    meta = tenant["metadata"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000000Z")
    event = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
             "metadata": {"generateName": f"{meta['name']}-", "namespace": meta["namespace"]},
             "eventTime": now, "reportingController": "maasctl.io/billing-console",
             "reportingInstance": "billing-console", "action": reason, "reason": reason, "type": "Normal",
             "note": note[:1024],
             "regarding": {"apiVersion": BILLING, "kind": "TenantAccount", "name": meta["name"],
                           "namespace": meta["namespace"], "uid": meta.get("uid")}}
    await kube.create(EVENT, event)


async def _change(request: Request, user: BillingUser, namespace: str, name: str, reason_text: str,
                  freeze: bool) -> Response:
    if not at_least(user.role, "operator"):  # the server decides, not the buttons
        log.warning("billing write refused", user=user.identity.username, role=user.role, tenant=f"{namespace}/{name}")
        raise HTTPException(403, f"Your billing role ({user.role}) cannot change tenants: freezing and unfreezing "
                                 "is for operators and administrators.")
    page = f"/billing/tenants/{q(namespace)}/{q(name)}"
    reason = _reason(reason_text)
    if reason is None:
        flash(request, "error", f"Say why (1 to {MAX_REASON} characters, one line).")
        return redirect(page)
    kube = kube_as(request, user.identity)
    who = f"{user.identity.username} at {datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"
    annotations: dict[str, str | None] = (
        {views.SUSPENDED_ANNOTATION: reason, views.SUSPENDED_BY_ANNOTATION: who} if freeze
        else {views.SUSPENDED_ANNOTATION: None, views.SUSPENDED_BY_ANNOTATION: None})
    try:
        tenant = await kube.merge_patch(TENANT, name, namespace, {"metadata": {"annotations": annotations}})
    except KubeError as exc:
        flash(request, "error", f"Not changed: {exc.message}")
        return redirect(page)
    try:
        await _record(kube, tenant, user.identity, "FrozenByOperator" if freeze else "UnfrozenByOperator",
                      f"{user.identity.username}: {reason}")
    except KubeError as exc:  # the change is made; say that its record is missing rather than hide it
        flash(request, "warning", f"The tenant was {'frozen' if freeze else 'unfrozen'}, but its Event could not "
                                  f"be recorded: {exc.message}")
    log.info("billing tenant " + ("frozen" if freeze else "unfrozen"), user=user.identity.username,
             tenant=f"{namespace}/{name}")
    flash(request, "success", f"{name} {'frozen' if freeze else 'unfrozen'}: {reason}")
    return redirect(page)


@router.post("/billing/tenants/{namespace}/{name}/freeze")
async def freeze(request: Request, user: Biller, namespace: Annotated[str, Path(pattern=NS)],
                 name: Annotated[str, Path(pattern=NAME)], reason: Annotated[str, Form()] = "") -> Response:
    return await _change(request, user, namespace, name, reason, freeze=True)


@router.post("/billing/tenants/{namespace}/{name}/unfreeze")
async def unfreeze(request: Request, user: Biller, namespace: Annotated[str, Path(pattern=NS)],
                   name: Annotated[str, Path(pattern=NAME)], reason: Annotated[str, Form()] = "") -> Response:
    return await _change(request, user, namespace, name, reason, freeze=False)


async def _priced_page(request: Request, user: BillingUser, resource: Resource,
                      rows: Callable[[list[dict[str, Any]], dict[str, str | None]], list[views.Row]],
                      template: str, title: str, burn: bool = False) -> Response:
    """A page of objects whose amounts are in their tenant's currency (budgets, with their burn; reservations)."""
    kube = kube_as(request, user.identity)
    errors: list[str] = []
    tenants = await _list(kube, TENANT, errors)
    found = rows(await _list(kube, resource, errors), await _currencies(kube, tenants, errors))
    burns = await _burn(request, user, found, errors) if burn else {}
    return _render(request, template, user, title=title, rows=found, errors=errors, burn=burns)


@router.get("/billing/budgets")
async def budgets_page(request: Request, user: Biller) -> Response:
    return await _priced_page(request, user, BUDGET, views.budget_rows, "billing/budgets.html", "Budgets",
                              burn=True)


async def _burn(request: Request, user: BillingUser, rows: list[views.Row], errors: list[str]
                ) -> dict[str, dict[int, dict[str, Any]]]:
    """`ns/budget` -> cap index -> the cap's spend in its period and how close it is (the portal API, which
    evaluates each cap's own period: a budget's status carries the last cap's spend only)."""
    api = _portal_api(request, user)
    out: dict[str, dict[int, dict[str, Any]]] = {}
    if api is None:
        return out
    for ns, tenant in sorted({(r.namespace, r.cells["tenant"]) for r in rows}):
        try:
            answer = await api.tenant(ns, tenant)
        except PortalError as exc:
            if exc.status != 404:
                errors.append(f"Budget burn of {ns}/{tenant}: {exc.message}")
            continue
        for b in portal_views.budget_rows(answer):
            out[f"{ns}/{b['name']}"] = {c["index"]: c for c in b["caps"]}
    return out


@router.get("/billing/reservations")
async def reservations_page(request: Request, user: Biller) -> Response:
    return await _priced_page(request, user, RESERVATION, views.reservation_rows, "billing/reservations.html",
                              "Reservations")


@router.get("/billing/connectors")
async def connectors_page(request: Request, user: Biller) -> Response:
    errors: list[str] = []
    rows = views.connector_rows(await _list(kube_as(request, user.identity), CONNECTOR, errors))
    return _render(request, "billing/connectors.html", user, title="Connectors", rows=rows, errors=errors)


async def _rater(url: str | None) -> tuple[views.RaterFigures | None, str | None]:
    """The rater's figures from the billing operator's /metrics, from its leader (a standby does not rate)."""
    if not url:
        return None, "no --billing-metrics-url: the rater's figures are not available here"
    figures = None
    try:
        async with httpx.AsyncClient(timeout=3, follow_redirects=False, verify=default_tls()) as http:
            for _ in range(METRICS_TRIES):
                resp = await http.get(url)
                if resp.status_code != 200:
                    return None, f"the billing operator's metrics answered HTTP {resp.status_code}"
                figures = views.rater_figures(views.parse_metrics(resp.text[:4_000_000]))
                if figures.leader:
                    return figures, None
    except httpx.HTTPError as exc:
        return None, f"the billing operator's metrics cannot be reached ({type(exc).__name__})"
    return None, f"no answer from the leading billing operator in {METRICS_TRIES} tries (standby replicas do not rate)"


@router.get("/billing/health")
async def health_page(request: Request, user: Biller) -> Response:
    errors: list[str] = []
    rows = await _tenant_rows(request, user, errors)
    rater, rater_error = await _rater(pages_settings(request).metrics_url)
    return _render(request, "billing/health.html", user, title="Metering health", health=views.health(rows),
                   rater=rater, rater_error=rater_error, condition_text=views.condition_text, errors=errors)

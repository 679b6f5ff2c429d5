"""Billing -> PriceBooks and Plans, and the administrators' forms for PriceBooks, Plans, TenantAccounts and
BudgetPolicies (docs/billing-console.md, "Authoring").

Every role reads the lists; only billing administrators get the forms, and the server refuses every other role's
form and write (403, nothing written), whatever the page offered. A save is a server-side apply, as the user,
under the console's own field manager (`authoring.FIELD_MANAGER`) of exactly the fields the form shows: fields it
does not show (a PriceBook's volume tiers, a tenant's GPU freeze mode, labels, anything newer) stay as they are.
The API server's refusals are shown next to the field they name.

PriceBooks follow their lifecycle: a new book is announced by creating it (it stays Draft while its notice is too
short); a Draft or Announced book can be edited; an Active, Superseded or Retired one never is (the API server
refuses it too): it is replaced by a new book that supersedes it, prefilled from it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final

import structlog
from fastapi import APIRouter, HTTPException, Path, Request
from fastapi.responses import Response

from maasctl.console.billing import authoring, walkthrough
from maasctl.console.billing.pages import (
    BUDGET,
    NAME,
    NS,
    PLAN,
    PRICE_BOOK,
    TENANT,
    Biller,
    BillingUser,
    _list,
    _render,
)
from maasctl.console.forms import FORM, kube_errors
from maasctl.console.kube import MODEL_REF, SUBSCRIPTION, KubeError, Resource
from maasctl.console.web import console, flash, kube_as, redirect
from maasctl.contract.billing_console import at_least
from maasctl.contract.billing_terms import tenant_id

log = structlog.get_logger("maasctl.console.billing")
router = APIRouter()
RESOURCES: Final = {"pricebooks": PRICE_BOOK, "plans": PLAN, "tenantaccounts": TENANT, "budgetpolicies": BUDGET}
LISTS: Final = {"tenantaccounts": "/billing/tenants", "budgetpolicies": "/billing/budgets"}  # else /billing/<plural>
LOCKED: Final = frozenset({"Active", "Superseded", "Retired"})  # a PriceBook's spec is final in these states


def _admin(user: BillingUser) -> None:
    if not at_least(user.role, "admin"):
        log.warning("billing authoring refused", user=user.identity.username, role=user.role)
        raise HTTPException(403, f"Your billing role ({user.role}) cannot write PriceBooks, Plans, tenants or "
                                 "budgets: that is for billing administrators.")


def _form(plural: str) -> tuple[authoring.Form, Resource]:
    form = authoring.FORMS.get(plural)
    if form is None:
        raise HTTPException(404)
    return form, RESOURCES[plural]


def _meta(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


@router.get("/billing/pricebooks")
async def pricebooks_page(request: Request, user: Biller) -> Response:
    errors: list[str] = []
    kube = kube_as(request, user.identity)
    books = await _list(kube, PRICE_BOOK, errors)
    rows = [{"namespace": _meta(b)[0], "name": _meta(b)[1], "state": (b.get("status") or {}).get("state") or "Draft",
             "currency": (b.get("spec") or {}).get("currency"), "effective": (b.get("spec") or {}).get("effectiveFrom"),
             "notice": (b.get("spec") or {}).get("noticeDays"), "supersedes": (b.get("spec") or {}).get("supersedes"),
             "tenants": (b.get("status") or {}).get("activeTenants", 0),
             "grandfathered": ", ".join((b.get("status") or {}).get("grandfatheredTenants") or ()),
             "why": next((c.get("message") for c in (b.get("status") or {}).get("conditions") or ()
                          if c.get("status") == "False"), "")} for b in books]
    return _render(request, "billing/pricebooks.html", user, title="PriceBooks", errors=errors,
                   rows=sorted(rows, key=lambda r: (r["namespace"], r["name"])), locked=LOCKED,
                   is_billing_admin=at_least(user.role, "admin"))


@router.get("/billing/plans")
async def plans_page(request: Request, user: Biller) -> Response:
    errors: list[str] = []
    plans = await _list(kube_as(request, user.identity), PLAN, errors)
    rows = [{"namespace": _meta(p)[0], "name": _meta(p)[1], "spec": p.get("spec") or {},
             "compiled": next((f"{c.get('status')} {c.get('reason')}" for c in (p.get("status") or {}).get(
                 "conditions") or () if c.get("type") == "Compiled"), "")} for p in plans]
    return _render(request, "billing/plans.html", user, title="Plans", errors=errors,
                   rows=sorted(rows, key=lambda r: (r["namespace"], r["name"])),
                   is_billing_admin=at_least(user.role, "admin"))


def _valid(namespace: str, name: str) -> bool:
    return re.match(NS, namespace) is not None and re.match(NAME, name) is not None


async def _supersede(request: Request, user: BillingUser, ref: str) -> tuple[dict[str, str], dict[str, Any]]:
    """A new book prefilled from the one it supersedes, and who moves to it and who stays (grandfathered)."""
    ns, _, name = ref.partition("/")
    if not _valid(ns, name):
        raise HTTPException(404)
    kube = kube_as(request, user.identity)
    old = await _find(request, user, PRICE_BOOK, ns, name)
    values = authoring.values_of(authoring.FORMS["pricebooks"], old)
    notice = int((old.get("spec") or {}).get("noticeDays") or 0)
    start = (datetime.now(UTC) + timedelta(days=notice + 1)).replace(hour=0, minute=0, second=0, microsecond=0)
    values.update(name=f"{name}-next", supersedes=name, effectiveFrom=start.strftime("%Y-%m-%dT%H:%M:%SZ"))
    errors: list[str] = []
    plans = {_meta(p)[1] for p in await _list(kube, PLAN, errors) if _meta(p)[0] == ns
             and (p.get("spec") or {}).get("priceBookRef") == name}
    tenants = [t for t in await _list(kube, TENANT, errors) if _meta(t)[0] == ns]
    moving = sorted(_meta(t)[1] for t in tenants if not (t.get("spec") or {}).get("priceBookPin")
                    and ((t.get("spec") or {}).get("planRef") or {}).get("name") in plans)
    staying = sorted(_meta(t)[1] for t in tenants if (t.get("spec") or {}).get("priceBookPin") == name)
    return values, {"old": name, "moving": moving, "staying": staying, "notice": notice}


@router.get("/billing/edit/{plural}/new")
async def new_form(request: Request, user: Biller, plural: str) -> Response:
    _admin(user)
    form, _ = _form(plural)
    values = {f.name: "" for f in form.fields}
    supersede: dict[str, Any] | None = None
    ref = request.query_params.get("supersedes")
    if plural == "pricebooks" and ref:
        values, supersede = await _supersede(request, user, ref)
    values["namespace"] = values.get("namespace") or request.query_params.get("namespace", "")
    guide = request.query_params.get("guide") == "1" and supersede is None
    if guide:
        values.update(await _guided(request, user, plural))
    return _edit_page(request, user, form, values, {}, mode="new", supersede=supersede, guide=guide)


async def _guided(request: Request, user: BillingUser, plural: str) -> dict[str, str]:
    """A walkthrough step's prefilled values (`walkthrough.defaults`); what the user may not list is left out."""
    kube = kube_as(request, user.identity)
    ignored: list[str] = []
    books = await _list(kube, PRICE_BOOK, ignored) if plural == "plans" else []
    plans = await _list(kube, PLAN, ignored) if plural == "tenantaccounts" else []
    models = await _list(kube, MODEL_REF, ignored) if plural == "pricebooks" else []
    return walkthrough.defaults(plural, console(request).settings.default_gateway, books, plans, models,
                                request.query_params)


@router.get("/billing/start")
async def start_page(request: Request, user: Biller) -> Response:
    """Get started: where the administrator stands on the way to a tenant whose users' calls are charged."""
    _admin(user)
    kube = kube_as(request, user.identity)
    errors: list[str] = []
    books, plans, tenants = (await _list(kube, PRICE_BOOK, errors), await _list(kube, PLAN, errors),
                             await _list(kube, TENANT, errors))
    settings = console(request).settings
    try:  # MaaS honours subscriptions of its subscription namespace only
        subscriptions = await kube.list(SUBSCRIPTION, settings.subscription_namespace)
    except KubeError as exc:
        errors.append(f"MaaSSubscription: {exc.message}")
        subscriptions = []
    found = walkthrough.chain(books, plans, tenants, subscriptions)
    steps = walkthrough.steps(found)
    return _render(request, "billing/start.html", user, title="Get started", errors=errors, steps=steps,
                   ready=all(s.done for s in steps), chain=found, gateway_urls=settings.gateway_urls,
                   organization=tenant_id(found.tenant) if found.tenant else "")


@router.get("/billing/edit/{plural}/{namespace}/{name}")
async def edit_form(request: Request, user: Biller, plural: str, namespace: Annotated[str, Path(pattern=NS)],
                    name: Annotated[str, Path(pattern=NAME)]) -> Response:
    _admin(user)
    form, res = _form(plural)
    obj = await _find(request, user, res, namespace, name)
    state = (obj.get("status") or {}).get("state")
    return _edit_page(request, user, form, authoring.values_of(form, obj), {}, mode="edit",
                      locked=plural == "pricebooks" and state in LOCKED, state=state)


async def _find(request: Request, user: BillingUser, res: Resource, namespace: str, name: str) -> dict[str, Any]:
    try:
        obj = await kube_as(request, user.identity).find(res, name, namespace)
    except KubeError as exc:
        raise HTTPException(exc.status if exc.status in (401, 403) else 502, exc.message) from exc
    if obj is None:
        raise HTTPException(404)
    return obj


def _edit_page(request: Request, user: BillingUser, form: authoring.Form, values: dict[str, str],
               errors: dict[str, str], *, mode: str, status: int = 200, **context: Any) -> Response:
    now = datetime.now(UTC)
    return _render(request, "billing/edit.html", user, status=status, title=f"{form.title}", form=form,
                   values=values, errors=errors, mode=mode, plural=form.plural, now=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                   **{"locked": False, "state": None, "supersede": None, "guide": False, **context})


@router.post("/billing/edit/{plural}")
async def save(request: Request, user: Biller, plural: str) -> Response:
    _admin(user)  # before reading anything of the form
    form, res = _form(plural)
    data = await request.form()
    values = {f.name: str(data.get(f.name) or "") for f in form.fields}
    mode = "edit" if data.get("mode") == "edit" else "new"
    guide = data.get("guide") == "1"

    def page(values: dict[str, str], errors: dict[str, str], **context: Any) -> Response:
        return _edit_page(request, user, form, values, errors, guide=guide, **context)

    applied = dict(values)  # what is built: an empty effectiveFrom stands for the earliest the notice allows
    if plural == "pricebooks" and not values["effectiveFrom"].strip():
        applied["effectiveFrom"] = authoring.earliest_effective(datetime.now(UTC), values["noticeDays"]) or ""
    kube = kube_as(request, user.identity)
    ns, name = values["namespace"].strip(), values["name"].strip()
    bad = {k: "Lowercase letters, digits and dashes." for k, v, rule in (("namespace", ns, NS), ("name", name, NAME))
           if v and re.match(rule, v) is None}
    if bad:
        return page(values, bad, mode=mode, status=400)
    try:
        old = await kube.find(res, name, ns) if ns and name else None
    except KubeError as exc:
        return page(values, {FORM: exc.message}, mode=mode, status=502)
    if mode == "new" and old is not None:
        return page(values, {"name": f"{form.title} {ns}/{name} exists already."}, mode=mode, status=409)
    if mode == "edit" and old is None:
        return page(values, {FORM: "It was deleted meanwhile."}, mode=mode, status=409)
    state = ((old or {}).get("status") or {}).get("state")
    if plural == "pricebooks" and state in LOCKED:
        return page(values, {FORM: f"This PriceBook is {state}: its prices are final. "
                                   "Publish a new PriceBook that supersedes it."},
                    mode=mode, status=409, locked=True, state=state)
    try:
        obj = authoring.build(form, applied, old)
    except authoring.FormError as exc:
        return page(values, exc.errors, mode=mode, status=400)
    if plural == "pricebooks" and mode == "new" and obj["spec"].get("supersedes"):
        try:
            prior = await kube.find(PRICE_BOOK, obj["spec"]["supersedes"], ns)
        except KubeError:
            prior = None  # the API server judges `supersedes` itself
        for key in ("volumeTiers", "committedUse"):  # the form does not show them: carried over
            if prior is not None and (prior.get("spec") or {}).get(key):
                obj["spec"][key] = prior["spec"][key]
    try:
        await kube.apply(res, obj, authoring.FIELD_MANAGER)
    except KubeError as exc:
        return page(values, kube_errors(exc, form.field_map()), mode=mode,
                    status=exc.status if exc.status in (400, 403, 409, 422) else 502)
    log.info("billing object written", kind=form.kind, object=f"{ns}/{name}", user=user.identity.username)
    flash(request, "success", f"{form.title} {ns}/{name} saved.")
    if guide:
        return redirect("/billing/start")
    return redirect(f"/billing/tenants/{ns}/{name}" if plural == "tenantaccounts" else
                    LISTS.get(plural, f"/billing/{plural}"))

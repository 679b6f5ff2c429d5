"""The tenant portal's API (docs/billing-console.md, "The tenant portal"): one tenant's wallet, budgets,
reservations, spend and ledger entries, as JSON (CSV for the export), on `--portal-api-bind-address`, on every
replica (the cache and the ledger database are the same on each); and one write, a billing administrator's
credit to a tenant's wallet (`credit`: idempotent by the client's id, so any replica may take it).

**Who is asking is decided here, never taken from the caller.** Every request carries the signed-in user's own
credential (`Authorization: Bearer`, the token or OIDC ID token the console holds for them); the API server
says who it is (TokenReview). A tenant is answered only to its members (`contract.billing_portal`: a
MaaSSubscription of the subscription namespace naming the user or a group of theirs, for the tenant's
organization) or to a user the API server allows `get tenantaccounts/ledger` in the tenant's namespace (the
billing console's roles). To anyone else every tenant identifier is 404, as for a tenant that does not exist:
the path, an entry id, a cursor, a query string, an export. A credit needs, beyond that, `create
tenantaccounts/credits` in the tenant's namespace (SubjectAccessReview, asked afresh each time: a write
permission is never answered from a cache). GET, and POST of credits only; bounded inputs; one error body.

Why the user's credential and not the console's ServiceAccount plus "the tenant it resolved": with the
ServiceAccount, the console would hold a standing right to read every tenant's ledger, and any slip in the
console (a tenant taken from a query string, a forged form) would be a leak; with the user's credential the
console can read nothing the user could not, and this API decides membership itself.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, Final, Literal

import structlog
from aiohttp import web
from kubernetes_asyncio import client as k8s
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from maasctl.billing import money
from maasctl.billing.api import GROUP
from maasctl.billing.api.budget import BudgetPeriod
from maasctl.billing.api.kinds import BUDGET_POLICY, RESERVATION, TENANT_ACCOUNT
from maasctl.billing.controller.portal_credits import CreditError, parse_credit
from maasctl.billing.controller.spend import selected_spend
from maasctl.billing.controller.usage_source import UsageReader, api_key_labels
from maasctl.billing.ledger import Ledger, credit
from maasctl.billing.ledger.invoice_book import Invoice, InvoiceBook
from maasctl.billing.ledger.statements import Statements
from maasctl.billing.ledger.store import Entry
from maasctl.billing.rules import budget, wallet
from maasctl.billing.rules.catalog import Catalog, month_start
from maasctl.contract.billing_portal import (
    API_PREFIX,
    CREDITS_SUBRESOURCE,
    ENTRY_KINDS,
    INVOICE_KEY,
    LEDGER_SUBRESOURCE,
    MAX_CREDIT_BODY,
    MAX_PAGE,
    SPEND_DAYS,
    member_organizations,
    spend_days,
    tenants_of,
)
from maasctl.contract.billing_terms import tenant_id
from maasctl.httpguard import start_aiohttp
from maasctl.runtime import Cache, GroupVersionKind, thaw

__all__ = ["MAAS_SUBSCRIPTION", "PROVIDER_ONLY", "Authenticator", "Caller", "PortalApi", "tenant_details"]

log = structlog.get_logger("maasctl.billing.portal")

MAAS_SUBSCRIPTION: Final = GroupVersionKind("maas.opendatahub.io", "v1alpha1", "MaaSSubscription")
_NS: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_NAME: Final = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_ID: Final = re.compile(r"^[1-9][0-9]{0,17}$")
_DAY: Final = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
MAX_EXPORT_DAYS: Final = 366
MAX_EXPORT_ROWS: Final = 100_000
NOT_FOUND: Final = "no such tenant"
_FORMULA: Final = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class Caller:
    username: str
    groups: tuple[str, ...]


class Unavailable(Exception):
    """The API server could not be asked (TokenReview, SubjectAccessReview)."""


class Authenticator:
    """TokenReview for the caller's credential; SubjectAccessReview for `get tenantaccounts/ledger` and `create
    tenantaccounts/credits`. Positive answers of the first two are kept a few seconds (keyed by a hash, never by
    the token); the credit permission is asked each time (a write: revoked means revoked)."""

    def __init__(self, api: k8s.ApiClient, cache_seconds: int = 10, max_entries: int = 4096) -> None:
        self._authn = k8s.AuthenticationV1Api(api)
        self._authz = k8s.AuthorizationV1Api(api)
        self._ttl = cache_seconds
        self._max = max_entries
        self._seen: dict[str, tuple[int, Any]] = {}

    def _get(self, key: str) -> Any:
        hit = self._seen.get(key)
        if hit is None or hit[0] < time.monotonic_ns():
            self._seen.pop(key, None)
            return None
        return hit[1]

    def _put(self, key: str, value: Any) -> None:
        if len(self._seen) >= self._max:
            self._seen.clear()
        self._seen[key] = (time.monotonic_ns() + self._ttl * 1_000_000_000, value)

    async def authenticate(self, token: str) -> Caller | None:
        key = "t:" + hashlib.sha256(token.encode()).hexdigest()
        cached = self._get(key)
        if isinstance(cached, Caller):
            return cached
        try:
            review = await self._authn.create_token_review(k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token)))
        except k8s.ApiException as exc:
            raise Unavailable(f"TokenReview: {exc.status}") from exc
        status = review.status
        if status is None or not status.authenticated or status.user is None or not status.user.username:
            return None
        caller = Caller(str(status.user.username), tuple(status.user.groups or ()))
        self._put(key, caller)
        return caller

    async def may_read_ledger(self, caller: Caller, namespace: str, name: str) -> bool:
        key = "a:" + hashlib.sha256("\x00".join((caller.username, *caller.groups, "|", namespace, name))
                                    .encode()).hexdigest()
        if self._get(key) is True:
            return True
        allowed = await self._review(caller, "get", LEDGER_SUBRESOURCE, namespace, name)
        if allowed:
            self._put(key, True)
        return allowed

    async def may_credit(self, caller: Caller, namespace: str, name: str) -> bool:
        """`create tenantaccounts/credits` on the tenant: never cached."""
        return await self._review(caller, "create", CREDITS_SUBRESOURCE, namespace, name)

    async def _review(self, caller: Caller, verb: str, subresource: str, namespace: str, name: str) -> bool:
        attrs = k8s.V1ResourceAttributes(group=GROUP, resource="tenantaccounts", subresource=subresource,
                                         verb=verb, namespace=namespace, name=name)
        try:
            review = await self._authz.create_subject_access_review(k8s.V1SubjectAccessReview(
                spec=k8s.V1SubjectAccessReviewSpec(user=caller.username, groups=list(caller.groups),
                                                   resource_attributes=attrs)))
        except k8s.ApiException as exc:
            raise Unavailable(f"SubjectAccessReview: {exc.status}") from exc
        return bool(review.status and review.status.allowed)


Access = Literal["member", "reader"]


PROVIDER_ONLY: Final = ("cost", "markupPct")
"""What a pass-through component keeps for re-rating that the tenant is not shown: the provider's cost (the
cost Secret's value, which can be confidential) and the markup (with the rate shown, it would give the cost)."""


def tenant_details(details: Mapping[str, Any]) -> dict[str, Any]:
    """A ledger entry's details as its tenant sees them: the rated line without `PROVIDER_ONLY` keys."""
    out = dict(details)
    components = details.get("components")
    if isinstance(components, Mapping):
        out["components"] = {dim: ({k: v for k, v in c.items() if k not in PROVIDER_ONLY}
                                   if isinstance(c, Mapping) else c) for dim, c in components.items()}
    return out


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status, headers={"Cache-Control": "no-store"})


def _json(body: Any) -> web.Response:
    return web.json_response(body, headers={"Cache-Control": "no-store"})


def _amount(value: Decimal) -> str:
    """A signed decimal string, six places at most (the ledger's unit)."""
    return format(money.quantize(value), "f")


def _iso(when: datetime | None) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if when else ""


class PortalApi:
    def __init__(self, cache: Cache, authn: Authenticator, subscription_namespace: str,
                 ledger: Ledger | None, usage: UsageReader | None, catalog: Callable[[], Catalog],
                 now: Callable[[], datetime]) -> None:
        self.cache = cache
        self.authn = authn
        self.subscription_namespace = subscription_namespace
        self.ledger = ledger
        self.statements = Statements(ledger.engine) if ledger is not None else None
        self.invoice_book = InvoiceBook(ledger.engine) if ledger is not None else None
        self.usage = usage
        self.catalog = catalog
        self.now = now
        self.runner: web.AppRunner | None = None
        self.port: int | None = None

    # -- serving -------------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_CREDIT_BODY)
        p = API_PREFIX
        app.router.add_get(f"{p}/tenants", self.tenants)
        app.router.add_get(p + "/tenants/{ns}/{name}", self.tenant)
        app.router.add_get(p + "/tenants/{ns}/{name}/entries", self.entries)
        app.router.add_get(p + "/tenants/{ns}/{name}/entries/{id}", self.entry)
        app.router.add_get(p + "/tenants/{ns}/{name}/spend", self.spend)
        app.router.add_get(p + "/tenants/{ns}/{name}/invoices", self.invoices)
        app.router.add_get(p + "/tenants/{ns}/{name}/invoices/{key}", self.invoice)
        app.router.add_get(p + "/tenants/{ns}/{name}/export.csv", self.export)
        app.router.add_post(p + "/tenants/{ns}/{name}/credits", self.credit)
        return app

    async def start(self, bind: str) -> int:
        self.runner, self.port = await start_aiohttp(self.app(), bind)
        return self.port

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    # -- who --------------------------------------------------------------------------------------------------

    async def _caller(self, request: web.Request) -> Caller | web.Response:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or len(token) > 16384:
            return _error(401, "a bearer token is required")
        try:
            caller = await self.authn.authenticate(token)
        except Unavailable as exc:
            log.warning("portal authentication unavailable", error=str(exc))
            return _error(503, "the API server could not be asked who you are; try again")
        return caller if caller is not None else _error(401, "the token was not accepted")

    def _organizations(self, caller: Caller) -> frozenset[str]:
        return member_organizations(caller.username, caller.groups,
                                    (thaw(o) for o in self.cache.list(MAAS_SUBSCRIPTION, self.subscription_namespace)),
                                    self.subscription_namespace)

    async def _tenant(self, request: web.Request) -> tuple[Caller, dict[str, Any], Access] | web.Response:
        """The caller and the tenant of the path, when the caller may see it; else the answer (401, 404)."""
        caller = await self._caller(request)
        if isinstance(caller, web.Response):
            return caller
        ns, name = request.match_info["ns"], request.match_info["name"]
        obj = self.cache.get(TENANT_ACCOUNT, name, ns) if _NS.match(ns) and _NAME.match(name) else None
        if obj is None:
            return _error(404, NOT_FOUND)
        tenant = thaw(obj)
        if tenant_id(tenant) in self._organizations(caller):
            return caller, tenant, "member"
        try:
            if await self.authn.may_read_ledger(caller, ns, name):
                return caller, tenant, "reader"
        except Unavailable as exc:
            log.warning("portal authorization unavailable", error=str(exc))
            return _error(503, "the API server could not be asked; try again")
        log.info("portal tenant refused", user=caller.username, tenant=f"{ns}/{name}")
        return _error(404, NOT_FOUND)

    def _currency(self, tenant: Mapping[str, Any]) -> str | None:
        catalog = self.catalog()
        ref = catalog.tenant_for(tenant_id(tenant))
        meta = tenant.get("metadata") or {}
        if ref is None or (ref.namespace, ref.name) != (meta.get("namespace"), meta.get("name")):
            return None
        book = catalog.book_for(ref, self.now())
        return str(book.spec.currency) if book is not None else None

    # -- the routes -------------------------------------------------------------------------------------------

    async def credit(self, request: web.Request) -> web.Response:
        """A billing administrator's credit to the path's tenant (`contract.billing_portal`, "Credits")."""
        found = await self._tenant(request)
        if isinstance(found, web.Response):
            return found
        caller, tenant, _ = found
        ns, name = str(tenant["metadata"]["namespace"]), str(tenant["metadata"]["name"])
        try:
            allowed = await self.authn.may_credit(caller, ns, name)
        except Unavailable as exc:
            log.warning("portal authorization unavailable", error=str(exc))
            return _error(503, "the API server could not be asked what you may do; try again")
        if not allowed:
            log.warning("portal credit refused", user=caller.username, tenant=f"{ns}/{name}")
            return _error(403, f"you may not credit this tenant's wallet (create tenantaccounts/{CREDITS_SUBRESOURCE}"
                               f" in {ns}: billing administrators)")
        try:
            asked = parse_credit(await request.read())
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"a credit's body is at most {MAX_CREDIT_BODY} bytes")
        except CreditError as exc:
            return _error(400, f"{exc.field}: {exc.message}")
        currency = self._currency(tenant)
        if currency is None:
            return _error(409, "no PriceBook in force for this tenant yet: its currency is unknown")
        if self.ledger is None or self.statements is None:
            return _error(503, "this billing operator keeps no ledger (--ledger-url)")
        wallet = f"{ns}/{name}"
        tx = credit(f"console-{asked.id}", wallet, self.now(), asked.amount, reason=asked.reason,
                    actor=caller.username, currency=currency)
        try:
            result = await self.ledger.post([tx])
            entry = await self.statements.entry_id(wallet, tx.key) if not result.conflicts else None
        except (SQLAlchemyError, OSError) as exc:
            log.warning("portal credit: ledger unavailable", error=str(exc)[:300], tenant=wallet)
            return _error(503, "the ledger could not be written; try again (the same id is recorded once)")
        if result.conflicts:
            log.warning("portal credit refused: id reused", user=caller.username, tenant=wallet, key=tx.key)
            return _error(409, "this id was already used for a different credit: nothing recorded")
        duplicate = not result.inserted
        log.info("portal credit", user=caller.username, tenant=wallet, amount=money.fmt(asked.amount),
                 currency=currency, key=tx.key, entry=entry, duplicate=duplicate)
        return web.json_response({"entry": entry, "amount": money.fmt(asked.amount), "currency": currency,
                                  "duplicate": duplicate}, status=200 if duplicate else 201,
                                 headers={"Cache-Control": "no-store"})

    async def tenants(self, request: web.Request) -> web.Response:
        caller = await self._caller(request)
        if isinstance(caller, web.Response):
            return caller
        orgs = self._organizations(caller)
        out = []
        for ns, name in tenants_of(orgs, (thaw(o) for o in self.cache.list(TENANT_ACCOUNT))):
            obj = thaw(self.cache.get(TENANT_ACCOUNT, name, ns) or {})
            out.append({"namespace": ns, "name": name, "organization": tenant_id(obj),
                        "displayName": str((obj.get("spec") or {}).get("displayName") or name)})
        return _json({"user": caller.username, "tenants": out})

    async def tenant(self, request: web.Request) -> web.Response:
        found = await self._tenant(request)
        if isinstance(found, web.Response):
            return found
        _, tenant, access = found
        meta, spec, status = tenant["metadata"], tenant.get("spec") or {}, tenant.get("status") or {}
        ns, name = str(meta["namespace"]), str(meta["name"])
        conditions = {str(c.get("type")): c for c in status.get("conditions") or ()}
        payment = conditions.get("PaymentMethodValid") or {}
        body = {
            "namespace": ns, "name": name, "access": access, "organization": tenant_id(tenant),
            "displayName": str(spec.get("displayName") or name), "plan": str((spec.get("planRef") or {})
                                                                             .get("name") or ""),
            "billingMode": spec.get("billingMode"), "currency": self._currency(tenant),
            "state": status.get("state") or "Pending", "balance": status.get("balance"),
            "balanceObservedAt": status.get("balanceObservedAt"), "runwayDays": status.get("runwayDays"),
            "mtdSpend": status.get("mtdSpend"), "allowanceTokens": status.get("allowanceTokens"),
            "consecutivePaymentFailures": int(status.get("consecutivePaymentFailures") or 0),
            "reloadPolicy": spec.get("reloadPolicy"), "gracePolicy": spec.get("gracePolicy"),
            "reloadPending": bool(status.get("pendingReloadIntentID")),
            "paymentMethod": {"configured": bool(spec.get("pspCustomerSecretRef")),
                              "connector": bool(spec.get("billingConnectorRef")),
                              "status": payment.get("status"), "reason": payment.get("reason"),
                              "message": payment.get("message"),
                              "changedAt": status.get("paymentMethodChangedAt")},
            "conditions": [{k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
                           for c in status.get("conditions") or ()],
            "budgets": await self._budgets(ns, name),
            "reservations": self._reservations(ns, name),
        }
        return _json(body)

    async def _budgets(self, ns: str, name: str) -> list[dict[str, Any]]:
        out = []
        now = self.now()
        for obj in self.cache.list(BUDGET_POLICY, ns):
            b = thaw(obj)
            spec, status = b.get("spec") or {}, b.get("status") or {}
            if (spec.get("tenantRef") or {}).get("name") != name:
                continue
            selector = dict((spec.get("selector") or {}).get("keyLabels") or {})
            fired = {(int(f.get("capIndex", 0)), int(f.get("pct", 0))): f.get("firedAt")
                     for f in status.get("firedThresholds") or ()}
            caps = []
            for i, cap in enumerate(spec.get("caps") or ()):
                start, end = budget.period_bounds(BudgetPeriod(cap.get("period")), now)
                spend = await self._cap_spend(f"{ns}/{name}", selector, start, end)
                amount = money.parse(cap.get("amount"))
                caps.append({
                    "amount": cap.get("amount"), "period": cap.get("period"), "periodStart": _iso(start),
                    "periodEnd": _iso(end), "spend": _amount(spend) if spend is not None else None,
                    "percent": str(int(spend * 100 // amount)) if spend is not None and amount > 0 else None,
                    "thresholds": [{"pct": int(t.get("pct", 0)), "action": t.get("action"),
                                    "firedAt": fired.get((i, int(t.get("pct", 0))))}
                                   for t in cap.get("thresholds") or ()]})
            enforced = next((c.get("reason") for c in status.get("conditions") or ()
                             if c.get("type") == "ThresholdFired"), None)
            out.append({"name": b["metadata"]["name"], "keyLabels": selector, "caps": caps, "enforced": enforced})
        return sorted(out, key=lambda b: str(b["name"]))

    async def _cap_spend(self, tenant: str, selector: Mapping[str, str], start: datetime, end: datetime
                         ) -> Decimal | None:
        if self.ledger is None:
            return None
        return await selected_spend(self.ledger, self.usage, tenant, selector, start, end)

    def _reservations(self, ns: str, name: str) -> list[dict[str, Any]]:
        out = []
        for obj in self.cache.list(RESERVATION, ns):
            r = thaw(obj)
            spec, status = r.get("spec") or {}, r.get("status") or {}
            if spec.get("tenantRef") != name:
                continue
            window, check = spec.get("window") or {}, status.get("capacityCheck") or {}
            out.append({"name": r["metadata"]["name"], "state": status.get("state") or "Requested",
                        "class": spec.get("class"), "sku": spec.get("sku"), "count": spec.get("count"),
                        "geo": spec.get("geo"), "start": window.get("start"), "end": window.get("end"),
                        "monthlyPrice": spec.get("monthlyPrice"),
                        "capacityAvailable": check.get("available") if check else None})
        return sorted(out, key=lambda r: str(r["name"]))

    def _entry_json(self, e: Entry) -> dict[str, Any]:
        details = e.details
        return {"id": e.id, "key": e.key, "kind": e.kind, "currency": e.currency, "amount": _amount(e.amount),
                "occurredAt": _iso(e.occurred_at), "recordedAt": _iso(e.recorded_at), "actor": e.actor,
                "reason": e.reason, "tokens": e.tokens, "model": str(details.get("model") or ""),
                "sku": str(details.get("sku") or ""), "priceBook": str(details.get("priceBook") or ""),
                "details": tenant_details(details)}

    async def _ledger_of(self, request: web.Request) -> tuple[str, Mapping[str, Any], Statements, Ledger
                                                                ] | web.Response:
        """The path's tenant (`ns/name`, its object) when the caller may see it, with the ledger's readers."""
        found = await self._tenant(request)
        if isinstance(found, web.Response):
            return found
        if self.statements is None or self.ledger is None:
            return _error(503, "this billing operator keeps no ledger (--ledger-url)")
        meta = found[1]["metadata"]
        return f"{meta['namespace']}/{meta['name']}", found[1], self.statements, self.ledger

    async def entries(self, request: web.Request) -> web.Response:
        found = await self._ledger_of(request)
        if isinstance(found, web.Response):
            return found
        tenant, _, statements, _ = found
        q = request.query
        before, limit, kind = q.get("before"), q.get("limit", "50"), q.get("kind") or None
        if (before is not None and not _ID.match(before)) or not limit.isdigit() or \
                not 1 <= int(limit) <= MAX_PAGE or (kind is not None and kind not in ENTRY_KINDS):
            return _error(400, f"before is an entry id, limit 1 to {MAX_PAGE}, kind one of {', '.join(ENTRY_KINDS)}")
        rows = await statements.page(tenant, before=int(before) if before else None, limit=int(limit) + 1,
                                          kind=kind)
        more = len(rows) > int(limit)
        rows = rows[:int(limit)]
        return _json({"entries": [self._entry_json(e) for e in rows],
                      "next": str(rows[-1].id) if more and rows else None})

    async def entry(self, request: web.Request) -> web.Response:
        found = await self._ledger_of(request)
        if isinstance(found, web.Response):
            return found
        tenant, _, statements, _ = found
        raw = request.match_info["id"]
        e = await statements.entry(tenant, int(raw)) if _ID.match(raw) else None
        return _json(self._entry_json(e)) if e is not None else _error(404, "no such entry")

    @staticmethod
    def _invoice_json(i: Invoice) -> dict[str, Any]:
        """An invoice as its tenant sees it: `amount` is the usage pushed for it (before any tax the PSP adds),
        null with `amountUnknown` saying why when it cannot be derived exactly."""
        return {"key": i.key, "invoiceId": i.invoice_id, "status": i.status, "at": _iso(i.at),
                "periodStart": _iso(i.period_start) or None, "records": i.records,
                "amount": _amount(i.amount) if i.amount is not None else None, "currency": i.currency,
                "amountUnknown": i.unknown or None}

    async def invoices(self, request: web.Request) -> web.Response:
        """The tenant's invoices, newest first; `before` (an invoice key of the tenant's) pages on."""
        found = await self._ledger_of(request)
        if isinstance(found, web.Response):
            return found
        tenant, book = found[0], self.invoice_book
        assert book is not None  # with the ledger
        before, limit = request.query.get("before"), request.query.get("limit", "50")
        if (before is not None and not INVOICE_KEY.match(before)) or not limit.isdigit() or \
                not 1 <= int(limit) <= MAX_PAGE:
            return _error(400, f"before is an invoice key, limit 1 to {MAX_PAGE}")
        rows = await book.page(tenant, before=before, limit=int(limit) + 1)
        if rows is None:
            return _error(404, "no such invoice")
        more, rows = len(rows) > int(limit), rows[:int(limit)]
        return _json({"invoices": [self._invoice_json(i) for i in rows],
                      "next": rows[-1].key if more and rows else None})

    async def invoice(self, request: web.Request) -> web.Response:
        """One of the tenant's invoices with the ledger usage entries behind it, newest first (`before`, an entry
        id, pages on)."""
        found = await self._ledger_of(request)
        if isinstance(found, web.Response):
            return found
        tenant, statements, book = found[0], found[2], self.invoice_book
        assert book is not None
        raw, q = request.match_info["key"], request.query
        before, limit = q.get("before"), q.get("limit", "50")
        if (before is not None and not _ID.match(before)) or not limit.isdigit() or not 1 <= int(limit) <= MAX_PAGE:
            return _error(400, f"before is an entry id, limit 1 to {MAX_PAGE}")
        inv = await book.invoice(tenant, raw) if INVOICE_KEY.match(raw) else None
        if inv is None:
            return _error(404, "no such invoice")
        upto = inv.entries_upto + 1 if before is None else min(int(before), inv.entries_upto + 1)
        rows = [e for e in await statements.page(tenant, before=upto, limit=int(limit) + 1, kind="usage")
                if e.id > inv.entries_after]
        more, rows = len(rows) > int(limit), rows[:int(limit)]
        return _json({"invoice": self._invoice_json(inv), "entries": [self._entry_json(e) for e in rows],
                      "next": str(rows[-1].id) if more and rows else None})

    async def spend(self, request: web.Request) -> web.Response:
        found = await self._ledger_of(request)
        if isinstance(found, web.Response):
            return found
        tenant, tenant_obj, statements, ledger = found
        days = spend_days(request.query.get("days", "30"))
        if days is None:
            return _error(400, f"days is one of {', '.join(str(d) for d in SPEND_DAYS)}")
        now = self.now().astimezone(UTC)
        today = now.replace(hour=0, minute=0, second=0, microsecond=0)
        edges = [today - timedelta(days=days - 1 - i) for i in range(days)] + [today + timedelta(days=1)]
        buckets = await statements.usage_by_bucket(tenant, edges)
        models = sorted({m for _, m in buckets})
        per_day = [sum((a for (b, _), a in buckets.items() if b == i), Decimal(0)) for i in range(days)]
        by_model = {m: sum((a for (_, mm), a in buckets.items() if mm == m), Decimal(0)) for m in models}
        balances = await statements.balances_at(tenant, [*edges[1:-1], now])
        runway = await self._runway(tenant, tenant_obj, edges, balances, statements, ledger, now)
        since = edges[0]
        return _json({
            "currency": self._currency(tenant_obj), "days": [
                {"date": edges[i].date().isoformat(), "total": _amount(per_day[i]),
                 "byModel": {m: _amount(buckets[(i, m)]) for m in models if (i, m) in buckets}}
                for i in range(days)],
            "byModel": [{"model": m, "amount": _amount(a)} for m, a in sorted(by_model.items(), key=lambda x: -x[1])],
            "byLabel": await self._by_label(tenant, since, edges[-1]),
            "monthToDate": _amount(await ledger.spend(tenant, month_start(now), now + timedelta(seconds=1))),
            "balances": [{"at": _iso(at), "balance": _amount(b)}
                         for at, b in zip([*edges[1:-1], now], balances, strict=True)],
            "runway": None if runway is None else [
                {"at": _iso(at), "days": None if r is None else format(r, "f")}
                for at, r in zip([*edges[1:-1], now], runway, strict=True)]})

    async def _runway(self, tenant: str, tenant_obj: Mapping[str, Any], edges: list[datetime],
                      balances: list[Decimal], statements: Statements, ledger: Ledger, now: datetime
                      ) -> list[Decimal | None] | None:
        """A Prepaid wallet's runway at the end of each day of the range (None for other modes), as the operator
        writes `runwayDays`: the balance over the average daily spend of the window before; the last point is
        the operator's figure now (its window ends now, not at midnight)."""
        if (tenant_obj.get("spec") or {}).get("billingMode") != "Prepaid":
            return None
        window = wallet.RUNWAY_WINDOW_DAYS
        before = [edges[0] - timedelta(days=k) for k in range(window - 1, 0, -1)]
        daily = await statements.spend_by_bucket(tenant, [*before, *edges])
        series = wallet.runway_series(balances, daily, window)
        series[-1] = wallet.runway_days(balances[-1], await ledger.spend(tenant, now - timedelta(days=window)),
                                        window)
        return series

    async def _by_label(self, tenant: str, since: datetime, until: datetime) -> list[dict[str, Any]] | None:
        """Usage charges per API-key label `name=value` in [since, until) (a key with two labels counts in both;
        keys without labels under "" ); None without maas-api's database (labels live there)."""
        if self.ledger is None or self.usage is None:
            return None
        by_key = await self.ledger.spend_by_key(tenant, since, until)
        ids = sorted(k for k in by_key if k)
        labels: dict[str, list[str]] = {}
        t = api_key_labels
        for i in range(0, len(ids), 500):
            async with self.usage.engine.connect() as conn:
                rows = (await conn.execute(select(t.c.key_id, t.c.name, t.c.value)
                                           .where(t.c.key_id.in_(ids[i:i + 500])))).all()
            for r in rows:
                labels.setdefault(str(r.key_id), []).append(f"{r.name}={r.value}")
        totals: dict[str, Decimal] = {}
        for key, amount in by_key.items():
            for label in labels.get(key) or [""]:
                totals[label] = totals.get(label, Decimal(0)) + amount
        return [{"label": k, "amount": _amount(v)} for k, v in sorted(totals.items(), key=lambda x: (-x[1], x[0]))]

    async def export(self, request: web.Request) -> web.StreamResponse:
        found = await self._ledger_of(request)
        if isinstance(found, web.Response):
            return found
        tenant, tenant_obj, statements, _ = found
        q = request.query
        try:
            since, until = _day(q.get("from", "")), _day(q.get("to", "")) + timedelta(days=1)
        except ValueError:
            return _error(400, "from and to are dates (YYYY-MM-DD)")
        if not timedelta(days=1) <= until - since <= timedelta(days=MAX_EXPORT_DAYS):
            return _error(400, f"to is on or after from, at most {MAX_EXPORT_DAYS} days")
        meta = tenant_obj["metadata"]
        response = web.StreamResponse(headers={
            "Content-Type": "text/csv; charset=utf-8", "Cache-Control": "no-store",
            "Content-Disposition": f'attachment; filename="{meta["name"]}-ledger-{since.date()}-'
                                   f'{(until - timedelta(days=1)).date()}.csv"'})
        await response.prepare(request)
        await response.write(_csv_row(["id", "occurred_at", "recorded_at", "kind", "key", "amount", "currency",
                                       "tokens", "model", "sku", "price_book", "actor", "reason"]))
        before: int | None = None
        written = 0
        while written < MAX_EXPORT_ROWS:
            rows = await statements.page(tenant, before=before, limit=1000, since=since, until=until)
            for e in rows:
                d = e.details
                await response.write(_csv_row([str(e.id), _iso(e.occurred_at), _iso(e.recorded_at), e.kind, e.key,
                                               _amount(e.amount), e.currency, str(e.tokens),
                                               str(d.get("model") or ""), str(d.get("sku") or ""),
                                               str(d.get("priceBook") or ""), e.actor, e.reason], amounts=(5,)))
            written += len(rows)
            if len(rows) < 1000:
                break
            before = rows[-1].id
        await response.write_eof()
        return response


def _day(text: str) -> datetime:
    if not _DAY.match(text):
        raise ValueError(text)
    return datetime.combine(date.fromisoformat(text), datetime.min.time(), UTC)


def _csv_row(cells: list[str], amounts: tuple[int, ...] = ()) -> bytes:
    """One CSV line; a text cell starting like a formula is prefixed with ' (spreadsheet formula injection)."""
    safe = [f"'{c}" if i not in amounts and c.startswith(_FORMULA) else c for i, c in enumerate(cells)]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\r\n").writerow(safe)
    return buf.getvalue().encode()

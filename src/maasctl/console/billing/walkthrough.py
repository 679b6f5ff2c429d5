"""Billing -> Get started, pure: where a billing administrator stands on the way from nothing to a tenant whose
users' calls are charged (a PriceBook in force, a Plan on the MaaS Gateway that uses it, a TenantAccount on the
Plan, money in its wallet, a MaaSSubscription of its organization), and what each step's form is prefilled with.

Each step is judged from the objects as the API server returns them to the administrator, following one chain:
the newest book, the newest Plan on it, the newest tenant on that Plan. Nothing here writes: every step ends on
one of the console's ordinary forms (the authoring forms, the tenant page's credit form), so the walkthrough adds
no way of writing that the rest of the console does not have.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final
from urllib.parse import urlencode

from maasctl.console.billing.money import amount
from maasctl.contract.billing_terms import ORGANIZATION_LABEL, tenant_id

__all__ = ["ORGANIZATION_LABEL", "Chain", "Step", "chain", "defaults", "steps"]

EXAMPLE_RATES: Final = "per-1M-tokens prompt_tokens=1.00 completion_tokens=2.00"
WALLET_MODES: Final = frozenset({"Prepaid"})  # the modes whose calls need money in the wallet first


@dataclass(frozen=True)
class Step:
    key: str
    title: str
    done: bool
    detail: str  # where it stands (the object, its state and why)
    href: str = ""  # the form that does it ("" when there is nothing to do yet, or it is done)
    action: str = ""


@dataclass(frozen=True)
class Chain:
    book: Mapping[str, Any] | None
    plan: Mapping[str, Any] | None
    tenant: Mapping[str, Any] | None
    subscription: Mapping[str, Any] | None


def _meta(obj: Mapping[str, Any] | None) -> tuple[str, str]:
    meta = (obj or {}).get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _key(obj: Mapping[str, Any] | None) -> str:
    return "/".join(_meta(obj))


def _newest(objs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The most recently created (creationTimestamp is RFC 3339 in UTC: it sorts as text), then by name."""
    return max(objs, key=lambda o: (str((o.get("metadata") or {}).get("creationTimestamp") or ""), _key(o)),
               default=None)


def _live(objs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Without the objects being deleted."""
    return [o for o in objs if not (o.get("metadata") or {}).get("deletionTimestamp")]


def _spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("spec") or {}


def _status(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("status") or {}


def chain(books: Sequence[Mapping[str, Any]], plans: Sequence[Mapping[str, Any]],
          tenants: Sequence[Mapping[str, Any]], subscriptions: Sequence[Mapping[str, Any]]) -> Chain:
    """The objects the walkthrough follows: the newest tenant with a Plan that exists, that Plan, its book; with
    no such tenant, the newest Plan on an existing book (else the newest Plan) and the newest book."""
    books, plans, tenants = _live(books), _live(plans), _live(tenants)
    plan_by_key = {_key(p): p for p in plans}
    book_by_key = {_key(b): b for b in books}

    def plan_of(tenant: Mapping[str, Any]) -> Mapping[str, Any] | None:
        ref = str((_spec(tenant).get("planRef") or {}).get("name") or "")
        return plan_by_key.get(f"{_meta(tenant)[0]}/{ref}")

    def book_of(plan: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        return book_by_key.get(f"{_meta(plan)[0]}/{_spec(plan).get('priceBookRef') or ''}") if plan else None

    tenant = _newest([t for t in tenants if plan_of(t) is not None])
    plan = plan_of(tenant) if tenant is not None else (
        _newest([p for p in plans if book_of(p) is not None]) or _newest(plans))
    book = book_of(plan) or _newest(books)
    org = tenant_id(tenant) if tenant is not None else None
    subscription = _newest([s for s in _live(subscriptions)
                            if org and str((_spec(s).get("organization") or {}).get("id") or "") == org])
    return Chain(book, plan, tenant, subscription)


def _condition(obj: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any]:
    return next((c for c in _status(obj).get("conditions") or () if c.get("type") == type_), {})


def _why_not(obj: Mapping[str, Any] | None) -> str:
    """The first False condition's message (why a book is not in force, a Plan not compiled)."""
    cond = next((c for c in _status(obj).get("conditions") or () if c.get("status") == "False"), None)
    return str(cond.get("message") or cond.get("reason") or "") if cond else ""


def _positive(text: Any) -> bool:
    """A balance written as a decimal string above zero (read exactly: never a float)."""
    if not isinstance(text, str):
        return False
    try:
        return Decimal(text) > 0
    except InvalidOperation:
        return False


def _link(path: str, **params: str) -> str:
    return f"{path}?{urlencode({'guide': '1', **params})}"


def steps(c: Chain) -> list[Step]:
    out = []
    book_state = str(_status(c.book).get("state") or "Draft") if c.book else ""
    book_ok = book_state == "Active"
    if c.book is None:
        out.append(Step("pricebook", "A PriceBook in force", False, "No PriceBook yet.",
                        _link("/billing/edit/pricebooks/new"), "Create the first PriceBook"))
    else:
        why = "" if book_ok else _why_not(c.book) or (
            f"in force from {_spec(c.book).get('effectiveFrom')}" if book_state == "Announced" else "")
        out.append(Step("pricebook", "A PriceBook in force", book_ok,
                        f"{_key(c.book)}: {book_state}" + (f" ({why})" if why else ""),
                        "" if book_ok else f"/billing/edit/pricebooks/{_key(c.book)}",
                        "" if book_ok or book_state != "Draft" else "Fix its dates"))
    compiled = _condition(c.plan, "Compiled")
    plan_ok = c.plan is not None and compiled.get("status") == "True"
    if c.plan is None:
        out.append(Step("plan", "A Plan on the MaaS Gateway that uses it", False, "No Plan yet.",
                        _link("/billing/edit/plans/new", book=_key(c.book)) if c.book else "",
                        "Create the first Plan" if c.book else ""))
    else:
        target = _spec(c.plan).get("targetRef") or {}
        detail = (f"{_key(c.plan)} on {target.get('kind', '')} {target.get('name', '')}, PriceBook "
                  f"{_spec(c.plan).get('priceBookRef') or '(none)'}: "
                  + ("compiled" if plan_ok else str(compiled.get("message") or compiled.get("reason")
                                                    or "not compiled yet")))
        out.append(Step("plan", "A Plan on the MaaS Gateway that uses it", plan_ok, detail,
                        "" if plan_ok else f"/billing/edit/plans/{_key(c.plan)}", "" if plan_ok else "Edit it"))
    if c.tenant is None:
        out.append(Step("tenant", "A tenant on the Plan", False, "No tenant on it yet.",
                        _link("/billing/edit/tenantaccounts/new", plan=_key(c.plan)) if c.plan else "",
                        "Create the first tenant" if c.plan else ""))
        return [*out, Step("wallet", "Money in its wallet", False, "Once there is a tenant."),
                Step("subscription", "Its users' subscription", False, "Once there is a tenant.")]
    spec, status = _spec(c.tenant), _status(c.tenant)
    mode, org = str(spec.get("billingMode") or ""), tenant_id(c.tenant)
    out.append(Step("tenant", "A tenant on the Plan", True,
                    f"{_key(c.tenant)} ({spec.get('displayName') or _meta(c.tenant)[1]}), organization {org}, "
                    f"{mode}: {status.get('state') or 'Pending'}"))
    page = f"/billing/tenants/{_key(c.tenant)}"
    if mode in WALLET_MODES:
        funded = _positive(status.get("balance"))
        currency = _spec(c.book).get("currency")
        balance = amount(status["balance"], str(currency) if currency else None) if status.get(
            "balance") is not None else "(not read yet)"
        out.append(Step("wallet", "Money in its wallet", funded,
                        f"Balance {balance}: a Prepaid tenant is frozen (its "
                        "users refused) once its balance falls below its grace; credit it before they call.",
                        "" if funded else f"{page}#credit",
                        "" if funded else "Credit its wallet"))
    else:
        out.append(Step("wallet", "Money in its wallet", True, f"{mode}: no wallet to fund (it is invoiced or "
                                                                "shown its spend)."))
    sub = c.subscription
    out.append(Step("subscription", "Its users' subscription", sub is not None,
                    f"MaaSSubscription {_key(sub)}: its users' API keys are charged to {_key(c.tenant)}." if sub else
                    f"No MaaSSubscription of organization {org} yet: create one with Organization id {org} "
                    "(MaaS console, Subscriptions) for the users who call; their API keys are then charged here.",
                    "" if sub else "/admin/subscriptions/new", "" if sub else "New subscription"))
    return out


def defaults(plural: str, gateway: str, books: Sequence[Mapping[str, Any]], plans: Sequence[Mapping[str, Any]],
             models: Sequence[Mapping[str, Any]], params: Mapping[str, str]) -> dict[str, str]:
    """A guided form's prefilled values: the MaaS Gateway's namespace, the book or Plan the previous step made,
    and for a first PriceBook one example SKU line per published model (the rates are examples to change)."""
    gateway_ns, _, gateway_name = gateway.partition("/")
    if plural == "pricebooks":
        names = sorted({_meta(m)[1] for m in models if _meta(m)[1]})
        return {"namespace": gateway_ns, "name": "standard", "currency": "USD", "noticeDays": "0",
                "effectiveFrom": "", "skus": "\n".join(f"{n} {EXAMPLE_RATES}" for n in names)
                or f"MODEL-NAME {EXAMPLE_RATES}"}
    if plural == "plans":
        book_ns, _, book = params.get("book", "").partition("/")
        if not book:
            newest = _newest(books)
            book_ns, book = _meta(newest) if newest else (gateway_ns, "")
        return {"namespace": book_ns or gateway_ns, "name": "standard", "targetKind": "Gateway",
                "targetName": gateway_name, "priceBookRef": book, "tokensPerMinute": "100000"}
    if plural == "tenantaccounts":
        plan_ns, _, plan = params.get("plan", "").partition("/")
        if not plan:
            newest = _newest(plans)
            plan_ns, plan = _meta(newest) if newest else (gateway_ns, "")
        return {"namespace": plan_ns or gateway_ns, "planRef": plan, "billingMode": "Prepaid"}
    return {}

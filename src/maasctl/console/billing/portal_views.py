"""What the tenant portal shows, pure: the portal API's JSON (`contract.billing_portal`) turned into cells and
chart points. Amounts stay the decimal strings the API answers, shown with their currency (`money.amount`);
chart bars are integer micro-units moved from those strings (`money.micros`), never a float."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from maasctl.console.billing.money import amount, from_micros, micros, quantity

__all__ = ["Chart", "DaysChart", "budget_rows", "entry_components", "entry_rows", "invoice_rows", "no_invoices",
           "reservation_rows", "spend_view", "wallet"]


_EXACT: Final = re.compile(r"^-?[0-9]{1,30}(\.[0-9]{1,40})?$")


def _exact(value: Any, currency: str | None) -> str:
    """A rated line's exact (unrounded) amount: every digit as the ledger kept it."""
    shown = amount(value, currency)
    if shown == "(unreadable)" and isinstance(value, str) and _EXACT.match(value):
        return f"{value} {currency}" if currency else value
    return shown


def _s(value: Any) -> str:
    return "" if value is None else str(value)


def wallet(t: Mapping[str, Any]) -> dict[str, str]:
    """The wallet's facts as the tenant reads them."""
    cur = t.get("currency")
    reload = t.get("reloadPolicy") or {}
    pay = t.get("paymentMethod") or {}
    if reload:
        caps = f"; at most {amount(reload.get('monthlyCapAmount'), cur)} a month"
        per_day = reload.get("maxReloadsPerDay")
        caps += f", {per_day} reloads a day" if per_day else ""
        reload_text = (("on" if reload.get("enabled") else "off") + f": {amount(reload.get('reloadAmount'), cur)} "
                       f"when the balance falls below {amount(reload.get('thresholdAmount'), cur)}{caps}")
    else:
        reload_text = "no automatic reload"
    if not pay.get("configured"):
        pay_text = "no payment method on file"
    elif pay.get("status") == "True":
        pay_text = "valid"
    elif pay.get("status") == "False":
        pay_text = f"not valid: {_s(pay.get('reason'))}" + (f" ({pay['message']})" if pay.get("message") else "")
    else:
        pay_text = "on file, not checked yet"
    grace = t.get("gracePolicy") or {}
    return {
        "display": _s(t.get("displayName")), "state": _s(t.get("state")), "mode": _s(t.get("billingMode")),
        "plan": _s(t.get("plan")), "currency": _s(cur), "balance": amount(t.get("balance"), cur),
        "balance_at": _s(t.get("balanceObservedAt")),
        "runway": "—" if not t.get("runwayDays") else f"{quantity(t.get('runwayDays'))} days",
        "mtd": amount(t.get("mtdSpend"), cur), "allowance": quantity(t.get("allowanceTokens")),
        "reload": reload_text, "reload_pending": "yes" if t.get("reloadPending") else "no",
        "payment": pay_text, "failures": str(int(t.get("consecutivePaymentFailures") or 0)),
        "grace": amount(grace.get("graceAmount"), cur) if grace.get("graceAmount") else "—",
        "warning": amount(grace.get("warningThreshold"), cur) if grace.get("warningThreshold") else "—",
    }


def budget_rows(t: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each budget's caps: spend against the cap, how close (whole percent), thresholds fired."""
    cur = t.get("currency")
    out = []
    for b in t.get("budgets") or ():
        caps = []
        for i, cap in enumerate(b.get("caps") or ()):
            pct = _s(cap.get("percent"))
            caps.append({
                "index": i, "amount": amount(cap.get("amount"), cur), "period": _s(cap.get("period")),
                "ends": _s(cap.get("periodEnd")), "spend": amount(cap.get("spend"), cur),
                "percent": pct, "meter": str(min(int(pct), 100)) if pct.isdigit() else "0",
                "thresholds": [{"pct": int(th.get("pct") or 0), "action": _s(th.get("action")),
                                "fired": _s(th.get("firedAt"))} for th in cap.get("thresholds") or ()]})
        labels = b.get("keyLabels") or {}
        out.append({"name": _s(b.get("name")), "caps": caps, "enforced": _s(b.get("enforced")),
                    "scope": ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "all API keys"})
    return out


def reservation_rows(t: Mapping[str, Any]) -> list[dict[str, str]]:
    cur = t.get("currency") or "USD"
    return [{"name": _s(r.get("name")), "state": _s(r.get("state")), "class": _s(r.get("class")),
             "what": f"{_s(r.get('count'))} x {_s(r.get('sku'))} in {_s(r.get('geo'))}",
             "start": _s(r.get("start")), "end": _s(r.get("end")), "price": amount(r.get("monthlyPrice"), cur),
             "capacity": {True: "confirmed", False: "not available"}.get(r.get("capacityAvailable"), "not checked")}
            for r in t.get("reservations") or ()]


@dataclass(frozen=True)
class Chart:
    """Bars in integer micro-units, and how to write one (the chart's axis and tooltips)."""

    points: list[tuple[str, int]]
    currency: str | None

    def fmt(self, value: int) -> str:
        return amount(from_micros(value), self.currency)


@dataclass(frozen=True)
class DaysChart:
    """Bars of days (a runway), in integer micro-days moved from the API's decimal strings."""

    points: list[tuple[str, int]]

    def fmt(self, value: int) -> str:
        return f"{quantity(from_micros(value))} days"


def _points(rows: Sequence[tuple[str, Any]]) -> list[tuple[str, int]]:
    return [(label, micros(value) or 0) for label, value in rows]


def spend_view(spend: Mapping[str, Any]) -> dict[str, Any]:
    """The spend page's charts and tables from the API's `/spend`."""
    cur = spend.get("currency")
    days = list(spend.get("days") or ())
    models = [m["model"] for m in spend.get("byModel") or ()]
    return {
        "currency": cur,
        "daily": Chart(_points([(str(d.get("date"))[5:], d.get("total")) for d in days]), cur),
        "balance": Chart(_points([(str(b.get("at"))[5:10], b.get("balance")) for b in spend.get("balances") or ()]),
                         cur),
        "balances": [{"at": _s(b.get("at")), "balance": amount(b.get("balance"), cur)}
                     for b in spend.get("balances") or ()],
        # Prepaid only (the API answers none for other modes); a day without spend has no runway: no bar.
        "runway": DaysChart(_points([(str(r.get("at"))[5:10], r.get("days")) for r in spend.get("runway") or ()])),
        "runways": [{"at": _s(r.get("at")), "days": "—" if r.get("days") is None else f"{quantity(r.get('days'))} days"}
                    for r in spend.get("runway") or ()],
        "per_model": {m: Chart(_points([(str(d.get("date"))[5:], (d.get("byModel") or {}).get(m, "0"))
                                        for d in days]), cur) for m in models},
        "by_model": [{"model": _s(m.get("model")) or "(unnamed)", "amount": amount(m.get("amount"), cur)}
                     for m in spend.get("byModel") or ()],
        "by_label": None if spend.get("byLabel") is None else [
            {"label": _s(m.get("label")) or "(keys without labels)", "amount": amount(m.get("amount"), cur)}
            for m in spend.get("byLabel") or ()],
        "days": [{"date": _s(d.get("date")), "total": amount(d.get("total"), cur)} for d in days],
        "total": amount(from_micros(sum(micros(d.get("total")) or 0 for d in days)), cur),
        "mtd": amount(spend.get("monthToDate"), cur),
    }


def entry_rows(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    return [{"id": _s(e.get("id")), "when": _s(e.get("occurredAt")), "kind": _s(e.get("kind")),
             "amount": amount(e.get("amount"), _s(e.get("currency")) or None), "tokens": quantity(_s(e.get("tokens"))),
             "model": _s(e.get("model")), "sku": _s(e.get("sku")), "book": _s(e.get("priceBook")),
             "by": _s(e.get("actor")), "reason": _s(e.get("reason"))} for e in entries]


def entry_components(e: Mapping[str, Any]) -> list[dict[str, str]]:
    """A usage charge's rated line: each dimension's quantity x rate per unit = amount (as the ledger kept it)."""
    details = e.get("details") or {}
    cur = _s(e.get("currency")) or None
    comps = details.get("components") or {}
    return [{"dimension": str(dim), "quantity": quantity(_s(c.get("quantity"))),
             "rate": amount(_s(c.get("rate")), cur), "per": quantity(_s(c.get("per"))),
             "amount": _exact(_s(c.get("amount")), cur), "source": _s(c.get("source"))}
            for dim, c in sorted(comps.items()) if isinstance(c, Mapping)]


def invoice_rows(invoices: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Each invoice: its period, the PSP's id, status, date and the usage invoiced (before any tax the PSP adds),
    or why that amount is not known."""
    return [{"key": _s(i.get("key")), "id": _s(i.get("invoiceId")) or "(none)", "status": _s(i.get("status")),
             "at": _s(i.get("at")), "from": _s(i.get("periodStart")),
             "amount": amount(i.get("amount"), _s(i.get("currency")) or None) if i.get("amount") is not None
             else "not known", "unknown": _s(i.get("amountUnknown")), "records": quantity(_s(i.get("records")))}
            for i in invoices]


def no_invoices(mode: str) -> str:
    """Why a tenant has no invoice."""
    if mode == "Invoiced":
        return ("No invoices yet: an Invoiced tenant's usage is pushed to the payment provider by its "
                "BillingConnector and invoiced once per invoicing period, when there was usage.")
    return (f"No invoices: this tenant is {mode or 'Prepaid'}, its wallet pays for its usage as it goes. Invoiced "
            "tenants are invoiced by their BillingConnector, once per its invoiceInterval.")

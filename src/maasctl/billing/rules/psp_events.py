"""Inbound PSP events (a verified webhook body) as what they mean for a tenant's payments. Pure.

Both providers map onto the same `Inbound` value:

| Stripe event type | generic webhook type | effect |
|---|---|---|
| `payment_intent.succeeded` | `reload.succeeded` | `payment_succeeded`: credit the reload (once corroborated) |
| `payment_intent.payment_failed` | `reload.failed` | `payment_failed`: dunning |
| `invoice.paid` | `invoice.paid` | `payment_succeeded` (an invoice) |
| `invoice.payment_failed` | `invoice.payment_failed` | `payment_failed` (an invoice) |
| `charge.dispute.created` | `dispute.opened` | `dispute_opened` |
| `charge.dispute.closed` | `dispute.closed` | `dispute_closed` (won/lost in `code`) |
| anything else | anything else | `ignored` (acknowledged, counted) |

A body that is not an event (no id, no type, wrong shapes) raises `BadEvent`; codes and ids from the PSP are
kept only when they look like identifiers, so nothing an attacker sends reaches a status or a log verbatim.
Our reload attempt and tenant travel in the PaymentIntent's metadata (`maasctl_reload`, `maasctl_tenant`) and
in the generic provider's `reloadId`/`tenant`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, Literal

from maasctl.billing import money
from maasctl.billing.rules.psp_amounts import MINOR_DIGITS, from_minor

__all__ = ["ATTEMPT_KEY", "TENANT_KEY", "BadEvent", "Effect", "Inbound", "parse_stripe", "parse_webhook"]

Effect = Literal["payment_succeeded", "payment_failed", "dispute_opened", "dispute_closed", "ignored"]
ATTEMPT_KEY: Final = "maasctl_reload"
TENANT_KEY: Final = "maasctl_tenant"
MAX_BODY: Final = 256 * 1024
_ID = re.compile(r"^[A-Za-z0-9_\-.:/]{1,255}$")
_CODE = re.compile(r"^[a-z0-9_]{1,64}$")

_STRIPE: Final[dict[str, Effect]] = {
    "payment_intent.succeeded": "payment_succeeded",
    "payment_intent.payment_failed": "payment_failed",
    "invoice.paid": "payment_succeeded",
    "invoice.payment_failed": "payment_failed",
    "charge.dispute.created": "dispute_opened",
    "charge.dispute.closed": "dispute_closed",
}
_WEBHOOK: Final[dict[str, Effect]] = {
    "reload.succeeded": "payment_succeeded",
    "reload.failed": "payment_failed",
    "invoice.paid": "payment_succeeded",
    "invoice.payment_failed": "payment_failed",
    "dispute.opened": "dispute_opened",
    "dispute.closed": "dispute_closed",
}


class BadEvent(ValueError):
    """The body is not an event we can read."""


@dataclass(frozen=True)
class Inbound:
    event_id: str
    type: str
    effect: Effect
    attempt: str | None = None  # our reload attempt id
    tenant: str | None = None  # namespace/name, as we sent it
    reference: str | None = None  # the PSP object: PaymentIntent, dispute or invoice id
    intent: str | None = None  # the PaymentIntent a dispute or payment concerns
    amount: Decimal | None = None
    currency: str | None = None
    code: str | None = None  # failure code, dispute reason or outcome
    invoice: bool = False


def _load(body: bytes) -> dict[str, Any]:
    if len(body) > MAX_BODY:
        raise BadEvent("body too large")
    try:
        doc = json.loads(body, parse_float=Decimal)  # never a float, even from a hostile body
    except (ValueError, RecursionError) as exc:
        raise BadEvent("not JSON") from exc
    if not isinstance(doc, dict):
        raise BadEvent("not an object")
    return doc


def _ident(value: Any) -> str | None:
    return value if isinstance(value, str) and _ID.match(value) else None


def _code(value: Any) -> str | None:
    return value if isinstance(value, str) and _CODE.match(value) else None


def _event_head(doc: dict[str, Any]) -> tuple[str, str]:
    event_id, type_ = _ident(doc.get("id")), doc.get("type")
    if event_id is None or not isinstance(type_, str) or not re.match(r"^[a-z_.]{1,64}$", type_):
        raise BadEvent("an event needs an id and a type")
    return event_id, type_


def parse_stripe(body: bytes) -> Inbound:
    """A Stripe event (https://docs.stripe.com/api/events/object)."""
    doc = _load(body)
    event_id, type_ = _event_head(doc)
    effect = _STRIPE.get(type_, "ignored")
    data = doc.get("data")
    obj = data.get("object") if isinstance(data, dict) else None
    if not isinstance(obj, dict):
        raise BadEvent("an event needs data.object")
    if effect == "ignored":
        return Inbound(event_id, type_, effect)
    currency = obj.get("currency")
    if not isinstance(currency, str) or currency.upper() not in MINOR_DIGITS:
        raise BadEvent("unsupported or missing currency")
    currency = currency.upper()
    meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
    if type_.startswith("payment_intent."):
        amount = obj.get("amount_received") if effect == "payment_succeeded" else obj.get("amount")
        error: dict[str, Any] = obj["last_payment_error"] if isinstance(obj.get("last_payment_error"), dict) else {}
        return Inbound(event_id, type_, effect, attempt=_ident(meta.get(ATTEMPT_KEY)),
                       tenant=_ident(meta.get(TENANT_KEY)), reference=_ident(obj.get("id")),
                       intent=_ident(obj.get("id")), amount=_minor(amount, currency), currency=currency,
                       code=_code(error.get("decline_code")) or _code(error.get("code")))
    if type_.startswith("invoice."):
        amount = obj.get("amount_paid") if effect == "payment_succeeded" else obj.get("amount_due")
        return Inbound(event_id, type_, effect, tenant=_ident(meta.get(TENANT_KEY)), reference=_ident(obj.get("id")),
                       amount=_minor(amount, currency), currency=currency, invoice=True)
    # charge.dispute.*: the dispute names the PaymentIntent; its outcome is `status` (won, lost, ...)
    code = _code(obj.get("status")) if effect == "dispute_closed" else _code(obj.get("reason"))
    return Inbound(event_id, type_, effect, reference=_ident(obj.get("id")), intent=_ident(obj.get("payment_intent")),
                   amount=_minor(obj.get("amount"), currency), currency=currency, code=code)


def _minor(value: Any, currency: str) -> Decimal:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0 or value > 10**15:
        raise BadEvent("amount must be a non-negative integer of minor units")
    return from_minor(value, currency)


def parse_webhook(body: bytes) -> Inbound:
    """A generic webhook confirmation: `{"id", "type", "data": {"reloadId", "tenant", "intentId", "amount":
    "25.00", "currency": "USD", "code"}}` (amounts as decimal strings)."""
    doc = _load(body)
    event_id, type_ = _event_head(doc)
    effect = _WEBHOOK.get(type_, "ignored")
    data = doc.get("data")
    if not isinstance(data, dict):
        raise BadEvent("an event needs data")
    if effect == "ignored":
        return Inbound(event_id, type_, effect)
    currency = data.get("currency")
    if not isinstance(currency, str) or currency.upper() not in MINOR_DIGITS:
        raise BadEvent("unsupported or missing currency")
    raw = data.get("amount")
    if not isinstance(raw, str) or not money.is_money(raw):
        raise BadEvent("amount must be a decimal string")
    intent = _ident(data.get("intentId"))
    return Inbound(event_id, type_, effect, attempt=_ident(data.get("reloadId")), tenant=_ident(data.get("tenant")),
                   reference=_ident(data.get("disputeId")) or _ident(data.get("invoiceId")) or intent, intent=intent,
                   amount=money.parse(raw), currency=currency.upper(), code=_code(data.get("code")),
                   invoice=type_.startswith("invoice."))

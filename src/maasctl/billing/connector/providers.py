"""The two payment service providers behind one interface: Stripe (the official SDK) and a generic webhook.

Credentials come from the BillingConnector's Secret (Stripe: `secretKey`, `webhookSecret`; webhook: `hmacSecret`
and `url`, where outbound events are POSTed). A tenant's customer comes from its `pspCustomerSecretRef` Secret
(`customerId`, `defaultPaymentMethodId`). None of these values is ever logged or written to a status, an Event
or an error: every PSP failure is reduced to a `Failure` with a fixed reason and, at most, the PSP's short error
code (PSP error messages can echo the key: stripe-mock's 401 does).
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, Protocol

import httpx
import stripe

from maasctl.billing import money
from maasctl.billing.connector.settings import STRIPE_API
from maasctl.billing.rules import signing
from maasctl.billing.rules.psp_amounts import to_minor
from maasctl.billing.rules.psp_events import ATTEMPT_KEY, TENANT_KEY, Inbound, parse_stripe, parse_webhook

__all__ = ["Credentials", "Customer", "Failure", "Provider", "StripeProvider", "WebhookProvider", "provider_for"]

_TIMEOUT: Final = 20


@dataclass(frozen=True)
class Credentials:
    """What the connector's Secret holds (repr hides the values)."""

    type: str
    secret_key: str = ""
    webhook_secret: str = ""
    url: str = ""

    def __repr__(self) -> str:
        return f"Credentials(type={self.type!r}, <redacted>)"


@dataclass(frozen=True)
class Customer:
    customer_id: str
    payment_method_id: str

    def __repr__(self) -> str:
        return "Customer(<redacted>)"


class Failure(Exception):
    """A PSP call failed. `reason` is one of a fixed set; `code` the PSP's short error code when it has one;
    `declined` when the PSP refused the payment itself (not a transient failure)."""

    def __init__(self, reason: str, code: str | None = None, *, declined: bool = False) -> None:
        self.reason, self.code, self.declined = reason, code, declined
        super().__init__(f"{reason}{f' ({code})' if code else ''}")


class Provider(Protocol):
    kind: str

    async def check_credentials(self) -> None:
        """Raise Failure when the credentials are not accepted."""

    async def check_payment_method(self, customer: Customer) -> None:
        """Raise Failure when the customer's payment method cannot be charged."""

    async def create_reload(self, attempt_id: str, tenant: str, amount: Decimal, currency: str,
                            customer: Customer) -> str:
        """Ask for the payment (idempotent by `attempt_id`); the PSP's intent id. Failure(declined=True) when
        refused at once. Never credits anything: only a confirmation does."""

    async def push_usage(self, key: str, tenant: str, minor: int, currency: str, records: int,
                         customer: Customer) -> str:
        """Add `minor` units of rated usage to the customer's next invoice (idempotent by `key`); an id."""

    async def create_invoice(self, key: str, tenant: str, customer: Customer, tax: bool) -> str:
        """Invoice what was pushed (idempotent by `key`); the invoice id."""

    def verify(self, body: bytes, header: str | None, now: int) -> str:
        """'Valid', or why the signature is refused."""

    def parse(self, body: bytes) -> Inbound: ...

    def signature_header_name(self) -> str: ...

    async def close(self) -> None: ...


_STRIPE_REASONS: Final = (
    (stripe.AuthenticationError, "AuthenticationFailed"),
    (stripe.PermissionError, "PermissionDenied"),
    (stripe.CardError, "Declined"),
    (stripe.RateLimitError, "RateLimited"),
    (stripe.IdempotencyError, "IdempotencyConflict"),
    (stripe.InvalidRequestError, "InvalidRequest"),
    (stripe.APIConnectionError, "Unreachable"),
)


def _stripe_failure(exc: stripe.StripeError) -> Failure:
    reason = next((r for cls, r in _STRIPE_REASONS if isinstance(exc, cls)), "PSPError")
    error = exc.error
    code = None
    if error is not None:
        code = getattr(error, "decline_code", None) or getattr(error, "code", None)
    code = code if isinstance(code, str) and code.replace("_", "").isalnum() and len(code) <= 64 else None
    return Failure(reason, code, declined=isinstance(exc, stripe.CardError))


class StripeProvider:
    """Stripe through the official SDK (`api_base` points it at stripe-mock in tests and `maasctl dev`)."""

    kind = "stripe"

    def __init__(self, credentials: Credentials, api_base: str = STRIPE_API) -> None:
        self._webhook_secret = credentials.webhook_secret
        self._client = stripe.StripeClient(
            credentials.secret_key, base_addresses={"api": api_base}, max_network_retries=2,
            http_client=stripe.HTTPXClient(timeout=_TIMEOUT))

    async def _call(self, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return await fn(*args, **kw)
        except stripe.StripeError as exc:
            raise _stripe_failure(exc) from None

    async def check_credentials(self) -> None:
        await self._call(self._client.v1.balance.retrieve_async)

    async def check_payment_method(self, customer: Customer) -> None:
        found = await self._call(self._client.v1.customers.retrieve_async, customer.customer_id)
        if found.to_dict().get("deleted"):
            raise Failure("CustomerDeleted")
        await self._call(self._client.v1.payment_methods.retrieve_async, customer.payment_method_id)

    async def create_reload(self, attempt_id: str, tenant: str, amount: Decimal, currency: str,
                            customer: Customer) -> str:
        params = {"amount": to_minor(amount, currency), "currency": currency.lower(),
                  "customer": customer.customer_id, "payment_method": customer.payment_method_id,
                  "confirm": True, "off_session": True, "description": "maasctl wallet auto-reload",
                  "metadata": {ATTEMPT_KEY: attempt_id, TENANT_KEY: tenant}}
        intent = await self._call(self._client.v1.payment_intents.create_async, params=params,
                                  options={"idempotency_key": attempt_id})
        return str(intent.id)

    async def push_usage(self, key: str, tenant: str, minor: int, currency: str, records: int,
                         customer: Customer) -> str:
        params = {"customer": customer.customer_id, "amount": minor, "currency": currency.lower(),
                  "description": f"Model usage ({records} rated record(s))",
                  "metadata": {TENANT_KEY: tenant, "maasctl_push": key}}
        item = await self._call(self._client.v1.invoice_items.create_async, params=params,
                                options={"idempotency_key": key})
        return str(item.id)

    async def create_invoice(self, key: str, tenant: str, customer: Customer, tax: bool) -> str:
        params = {"customer": customer.customer_id, "auto_advance": True, "collection_method": "charge_automatically",
                  "pending_invoice_items_behavior": "include", "automatic_tax": {"enabled": tax},
                  "metadata": {TENANT_KEY: tenant, "maasctl_invoice": key}}
        invoice = await self._call(self._client.v1.invoices.create_async, params=params,
                                   options={"idempotency_key": key})
        await self._call(self._client.v1.invoices.finalize_invoice_async, invoice.id,
                         options={"idempotency_key": f"{key}:finalize"})
        return str(invoice.id)

    def verify(self, body: bytes, header: str | None, now: int) -> str:
        if not header:
            return "MissingSignature"
        try:
            stripe.WebhookSignature.verify_header(body.decode("utf-8"), header, self._webhook_secret,
                                                  tolerance=signing.TOLERANCE_SECONDS)
        except stripe.SignatureVerificationError as exc:
            return "TimestampOutsideWindow" if "tolerance" in str(exc) else "SignatureMismatch"
        except (UnicodeDecodeError, ValueError):
            return "MalformedSignature"
        return "Valid"

    def parse(self, body: bytes) -> Inbound:
        return parse_stripe(body)

    def signature_header_name(self) -> str:
        return "Stripe-Signature"

    async def close(self) -> None:
        return None


class WebhookProvider:
    """The generic webhook: outbound events POSTed as JSON to the Secret's `url`, signed (`signing`) with
    `hmacSecret`; confirmations come back the same way. A 402 answer to a reload request is a decline."""

    kind = "webhook"

    def __init__(self, credentials: Credentials, http: httpx.AsyncClient | None = None) -> None:
        self._secret = credentials.webhook_secret
        self._url = credentials.url
        self._http = http or httpx.AsyncClient(timeout=_TIMEOUT)

    async def _post(self, event_type: str, event_id: str, data: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps({"id": event_id, "type": event_type, "created": int(time.time()), "data": data},
                          separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "Idempotency-Key": event_id,
                   signing.HEADER: signing.signature_header(self._secret, int(time.time()), body)}
        try:
            resp = await self._http.post(self._url, content=body, headers=headers)
        except httpx.HTTPError:
            raise Failure("Unreachable") from None
        if resp.status_code == 402:
            code = None
            with contextlib.suppress(ValueError):
                code = str(resp.json().get("code") or "") or None
            raise Failure("Declined", code if code and code.replace("_", "").isalnum() else None, declined=True)
        if resp.status_code in (401, 403):
            raise Failure("AuthenticationFailed")
        if resp.status_code >= 300:
            raise Failure("PSPError", f"http_{resp.status_code}")
        try:
            answer = resp.json() if resp.content else {}
        except ValueError:
            answer = {}
        return answer if isinstance(answer, dict) else {}

    async def check_credentials(self) -> None:
        if not self._secret or not self._url.startswith(("https://", "http://")):
            raise Failure("MissingCredentials")
        await self._post("connector.ping", f"ping-{int(time.time())}", {})

    async def check_payment_method(self, customer: Customer) -> None:
        if not customer.customer_id:
            raise Failure("MissingCustomer")

    async def create_reload(self, attempt_id: str, tenant: str, amount: Decimal, currency: str,
                            customer: Customer) -> str:
        answer = await self._post("reload.requested", attempt_id, {
            "reloadId": attempt_id, "tenant": tenant, "amount": money.fmt(amount), "currency": currency,
            "customerId": customer.customer_id, "paymentMethodId": customer.payment_method_id})
        intent = answer.get("intentId")
        return intent if isinstance(intent, str) and 0 < len(intent) <= 255 else attempt_id

    async def push_usage(self, key: str, tenant: str, minor: int, currency: str, records: int,
                         customer: Customer) -> str:
        await self._post("usage.pushed", key, {"tenant": tenant, "customerId": customer.customer_id,
                                               "amountMinor": minor, "currency": currency, "records": records})
        return key

    async def create_invoice(self, key: str, tenant: str, customer: Customer, tax: bool) -> str:
        answer = await self._post("invoice.requested", key, {"tenant": tenant, "customerId": customer.customer_id,
                                                             "taxMode": "psp" if tax else "none"})
        invoice = answer.get("invoiceId")
        return invoice if isinstance(invoice, str) and 0 < len(invoice) <= 255 else key

    async def send_event(self, event_type: str, event_id: str, data: dict[str, Any]) -> None:
        """POST a notification event (a budget firing), signed; Failure when the receiver does not take it."""
        await self._post(event_type, event_id, data)

    def verify(self, body: bytes, header: str | None, now: int) -> str:
        return signing.verify(self._secret, header, body, now).reason

    def parse(self, body: bytes) -> Inbound:
        return parse_webhook(body)

    def signature_header_name(self) -> str:
        return signing.HEADER

    async def close(self) -> None:
        await self._http.aclose()


def provider_for(credentials: Credentials, stripe_api: str = STRIPE_API) -> Provider:
    if credentials.type == "stripe":
        return StripeProvider(credentials, stripe_api)
    return WebhookProvider(credentials)

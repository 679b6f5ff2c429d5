"""The psp-connector's two controllers (thin: the rules are `rules.reload.decide` and `connector.payments`).

`BillingConnectorReconciler` (per BillingConnector): reads the credentials Secret, builds the provider and checks
the credentials with the PSP (`CredentialsValid`, `connected`), registers it with the webhook receiver, applies
the webhook Ingress for `webhookIngress.host` (TLS from `tlsSecretRef`; with a Service of its own when the
BillingConnector is outside the connector's namespace, `rules.webhook_route`) and checks the receiver answers
(`WebhookReachable`), reports `webhookStats` (last 24 h) and runs the usage/invoice sync when due
(`lastSync`, `SyncHealthy`).

`ConnectorSecretsReconciler` (per BillingConnector, every `secret_check_seconds`): notices a changed or new
credentials Secret and wakes the connector's reconcile, so a rotated key or webhook secret is used within seconds.

`TenantPaymentsReconciler` (per TenantAccount with a `billingConnectorRef`): notices a changed
`pspCustomerSecretRef` (`paymentMethodChangedAt`, `lastPSPCustomerSecretRef`, cooldown), asks the PSP whether the
payment method is valid (`PaymentMethodValid`), starts an auto-reload when `reload.decide` says so (through
`Payments.begin_reload`, which re-checks the guards in the database), and mirrors the payment facts into status:
`pendingReloadIntentID`, `consecutivePaymentFailures`, `PaymentDisputed`, `PaymentCorroborationFailed`.
Secrets' values never leave the provider: status, Events and logs carry reasons and our own ids only.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final, Literal

import httpx
import structlog
from prometheus_client import Counter
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from maasctl.api import parse
from maasctl.billing.api import GROUP, VERSION, BillingConnector, TenantAccount
from maasctl.billing.api.connector import ConnectorType, TaxMode
from maasctl.billing.api.kinds import PLAN, PRICE_BOOK, TENANT_ACCOUNT
from maasctl.billing.api.tenant import BillingMode
from maasctl.billing.connector.payments import Limits, Payments
from maasctl.billing.connector.providers import (
    Credentials,
    Customer,
    Failure,
    Provider,
    WebhookProvider,
    provider_for,
)
from maasctl.billing.connector.receiver import Receiver, Registered, Registry
from maasctl.billing.connector.settings import ConnectorSettings
from maasctl.billing.ledger.budget_book import BudgetBook
from maasctl.billing.rules import budget_notice, reload
from maasctl.billing.rules.clock import Clock
from maasctl.billing.rules.psp_amounts import to_minor
from maasctl.billing.rules.webhook_route import WebhookRoute, webhook_objects
from maasctl.runtime import (
    ApiError,
    Applier,
    Cache,
    Client,
    EventRecorder,
    GroupVersionKind,
    NotFound,
    Request,
    Result,
    set_condition,
    thaw,
)
from maasctl.runtime.objects import FrozenObject
from maasctl.tls import default_tls

__all__ = ["BILLING_CONNECTOR", "INGRESS", "SECRET", "BillingConnectorReconciler", "ConnectorContext",
           "ConnectorSecretsReconciler", "TenantPaymentsReconciler", "parse_interval"]

log = structlog.get_logger("maasctl.billing.connector")
BILLING_CONNECTOR: Final = GroupVersionKind(GROUP, VERSION, "BillingConnector")
SECRET: Final = GroupVersionKind("", "v1", "Secret")
INGRESS: Final = GroupVersionKind("networking.k8s.io", "v1", "Ingress")
CREDENTIALS_VALID, WEBHOOK_REACHABLE, SYNC_HEALTHY = "CredentialsValid", "WebhookReachable", "SyncHealthy"
PAYMENT_METHOD_VALID, PAYMENT_DISPUTED, CORROBORATION = (
    "PaymentMethodValid", "PaymentDisputed", "PaymentCorroborationFailed")
CONNECTOR_RESYNC: Final = 60
NOTICE_LEASE_SECONDS: Final = 120
BUDGET_WEBHOOKS: Final = Counter("maasctl_billing_budget_webhooks", "Budget webhook delivery attempts by outcome "
                                 "(sent, failed, skipped)", ["outcome"])
"""A budget webhook taken for delivery is not taken again (by another replica) for this long."""
_UNITS: Final = {"ms": 0, "s": 1, "m": 60, "h": 3600}


def parse_interval(text: str, default: int) -> int:
    """A Gateway API duration (`5m`, `1h30m`, `90s`) in whole seconds (at least 1); `default` when unreadable."""
    total, number = 0, ""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isdigit():
            number += ch
            i += 1
            continue
        unit = "ms" if text.startswith("ms", i) else ch
        if unit not in _UNITS or not number:
            return default
        total += int(number) * _UNITS[unit]
        number = ""
        i += len(unit)
    return max(total, 1) if not number and text else default


def _decode(data: Mapping[str, Any] | None, key: str) -> str:
    raw = (data or {}).get(key)
    if not isinstance(raw, str):
        return ""
    try:
        return base64.b64decode(raw, validate=True).decode().strip()
    except (binascii.Error, UnicodeDecodeError):
        return ""


@dataclass
class ConnectorContext:
    cache: Cache
    client: Client
    applier: Applier
    events: EventRecorder
    clock: Clock
    settings: ConnectorSettings
    payments: Payments
    registry: Registry
    receiver: Receiver
    enqueue_tenant: Callable[[str], None] = lambda _: None
    sync_state: dict[str, SyncState] = field(default_factory=dict)

    def now_rfc3339(self, when: datetime | None = None) -> str:
        return (when or self.clock.now()).strftime("%Y-%m-%dT%H:%M:%SZ")

    async def event(self, regarding: Mapping[str, Any], type_: Literal["Normal", "Warning"], reason: str,
                    note: str) -> None:
        await self.events.record(regarding, type_=type_, reason=reason, action=reason, note=note)

    async def apply_status(self, obj: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        await self.applier.apply_status({"apiVersion": obj["apiVersion"], "kind": obj["kind"],
                                         "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                                         "status": dict(status)})

    async def secret(self, namespace: str, name: str) -> FrozenObject | None:
        try:
            return await self.client.get(SECRET, name, namespace)
        except NotFound:
            return None

    def tenants_of(self, connector_key: str) -> list[FrozenObject]:
        ns, _, name = connector_key.partition("/")
        return [t for t in self.cache.list(TENANT_ACCOUNT, ns)
                if ((t.get("spec") or {}).get("billingConnectorRef") or {}).get("name") == name]

    def currency_of(self, tenant: FrozenObject) -> str:
        """The currency of the tenant's PriceBook (its pin, else its Plan's book); USD when there is none."""
        ns = tenant["metadata"].get("namespace")
        spec = tenant.get("spec") or {}
        book = spec.get("priceBookPin")
        if not book:
            plan = self.cache.get(PLAN, ((spec.get("planRef") or {}).get("name") or ""), ns)
            book = ((plan or {}).get("spec") or {}).get("priceBookRef")
        found = self.cache.get(PRICE_BOOK, book, ns) if book else None
        return str(((found or {}).get("spec") or {}).get("currency") or "USD")


@dataclass
class SyncState:
    next_usage: datetime | None = None
    next_invoice: datetime | None = None
    at: str | None = None
    pushed: int = 0
    failed: int = 0
    error: str | None = None


def _cond(conds: Any, generation: int, now: str, type_: str, ok: bool | None, reason: str, message: str) -> Any:
    status = "Unknown" if ok is None else ("True" if ok else "False")
    return set_condition(conds, type_=type_, status=status, reason=reason, message=message[:1024],
                         observed_generation=generation, now=now)


async def customer_of(ctx: ConnectorContext, tenant: TenantAccount) -> tuple[Customer | None, str]:
    """The tenant's PSP customer from its Secret, and the Secret's resourceVersion."""
    ref = tenant.spec.psp_customer_secret_ref
    if ref is None:
        return None, ""
    secret = await ctx.secret(tenant.metadata.namespace or "", ref.name)
    if secret is None:
        return None, ""
    data = secret.get("data") or {}
    customer = Customer(_decode(data, "customerId"), _decode(data, "defaultPaymentMethodId"))
    return (customer if customer.customer_id else None), str(secret["metadata"].get("resourceVersion", ""))


class BillingConnectorReconciler:
    def __init__(self, ctx: ConnectorContext, sync: Callable[[str, Provider, BillingConnector],
                                                             Awaitable[tuple[int, int]]] | None = None) -> None:
        self.ctx = ctx
        self.sync = sync

    async def reconcile(self, req: Request) -> Result:
        ctx = self.ctx
        key = req.key
        obj = ctx.cache.get(BILLING_CONNECTOR, req.name, req.namespace)
        if obj is None:
            await ctx.registry.drop(key)
            ctx.sync_state.pop(key, None)
            return Result.done()
        try:
            connector = parse(BillingConnector, thaw(obj))
        except ValidationError as exc:
            await ctx.event(obj, "Warning", "InvalidBillingConnector", f"cannot read it: {exc}"[:1024])
            return Result.done()
        await ctx.payments.ensure_schema()
        now = ctx.clock.now()
        generation = int(obj["metadata"].get("generation", 0))
        stamp = ctx.now_rfc3339(now)
        old = obj.get("status") or {}
        conds: Any = [c for c in old.get("conditions") or ()]

        # Credentials
        ok, reason, message = await self._credentials(key, connector)
        conds = _cond(conds, generation, stamp, CREDENTIALS_VALID, ok, reason, message)
        entry = ctx.registry.get(key) if ok else None
        if not ok:
            await ctx.registry.drop(key)

        # Webhook endpoint
        reach_ok, reach_reason, reach_message = await self._webhook(obj, connector, key)
        conds = _cond(conds, generation, stamp, WEBHOOK_REACHABLE, reach_ok, reach_reason, reach_message)
        received, failures = await ctx.payments.delivery_stats(key, now)

        # Usage and invoice sync
        state = ctx.sync_state.setdefault(key, SyncState())
        requeue = CONNECTOR_RESYNC
        if entry is not None and self.sync is not None:
            sync = connector.spec.sync
            usage_every = parse_interval(sync.usage_records_interval if sync else "5m", 300)
            if state.next_usage is None or now >= state.next_usage:
                try:
                    pushed, failed = await self.sync(key, entry.provider, connector)
                    state.pushed, state.failed, state.error = pushed, failed, None
                except Failure as exc:
                    state.failed, state.error = state.failed + 1, str(exc)
                state.at = stamp
                state.next_usage = now + timedelta(seconds=usage_every)
            requeue = max(1, min(requeue, int((state.next_usage - now).total_seconds()) + 1))
        if state.at is not None and entry is None and self.sync is not None:  # no sync runs while disconnected
            conds = _cond(conds, generation, stamp, SYNC_HEALTHY, False, "NotConnected",
                          f"no sync since {state.at}: the credentials are not accepted ({reason})")
        elif state.at is None:
            conds = _cond(conds, generation, stamp, SYNC_HEALTHY, None, "NotSyncedYet",
                          "usage and invoices are synced once the credentials are valid")
        elif state.error or state.failed:
            conds = _cond(conds, generation, stamp, SYNC_HEALTHY, False, "SyncFailed",
                          f"the last sync failed: {state.error or f'{state.failed} record(s) not pushed'}")
        else:
            conds = _cond(conds, generation, stamp, SYNC_HEALTHY, True, "Synced",
                          f"{state.pushed} record(s) pushed at {state.at}")
        status: dict[str, Any] = {
            "connected": bool(ok),
            "webhookStats": {"received24h": received, "signatureFailures": failures},
            "observedGeneration": generation,
            "conditions": conds,
        }
        if state.at is not None:
            status["lastSync"] = {"at": state.at, "pushedRecords": state.pushed, "failed": state.failed}
        await ctx.apply_status(obj, status)
        if old.get("connected") != bool(ok):
            await ctx.event(obj, "Normal" if ok else "Warning", "Connected" if ok else reason, message)
        return Result.requeue_after(requeue)

    async def _credentials(self, key: str, connector: BillingConnector) -> tuple[bool, str, str]:
        ctx = self.ctx
        ns = connector.metadata.namespace or ""
        ref = connector.spec.credentials_secret_ref.name
        secret = await ctx.secret(ns, ref)
        if secret is None:
            return False, "SecretNotFound", f"Secret {ref} (credentialsSecretRef) does not exist"
        data = secret.get("data") or {}
        version = f"{connector.spec.type.value}:{secret['metadata'].get('resourceVersion', '')}"
        if connector.spec.type == ConnectorType.STRIPE:
            creds = Credentials("stripe", secret_key=_decode(data, "secretKey"),
                                webhook_secret=_decode(data, "webhookSecret"))
            pairs = (("secretKey", creds.secret_key), ("webhookSecret", creds.webhook_secret))
            missing = [k for k, v in pairs if not v]
        else:
            creds = Credentials("webhook", webhook_secret=_decode(data, "hmacSecret"), url=_decode(data, "url"))
            missing = [k for k, v in (("hmacSecret", creds.webhook_secret), ("url", creds.url)) if not v]
        if missing:
            return False, "MissingKeys", f"Secret {ref} lacks {', '.join(missing)}"
        entry = ctx.registry.get(key)
        provider = entry.provider if entry is not None and entry.version == version else provider_for(
            creds, ctx.settings.stripe_api_base)
        try:
            await provider.check_credentials()
        except Failure as exc:
            if entry is None or entry.provider is not provider:
                await provider.close()
            return False, exc.reason, f"the PSP refused the credentials in Secret {ref}: {exc.reason}"
        await ctx.registry.put(Registered(key, provider, version))
        return True, "Authenticated", f"the {connector.spec.type.value} credentials in Secret {ref} are accepted"

    async def _webhook(self, obj: FrozenObject, connector: BillingConnector, key: str) -> tuple[bool, str, str]:
        ctx = self.ctx
        ingress = connector.spec.webhook_ingress
        path = f"/webhooks/{key}"
        if ingress is None:
            return False, "NoWebhookIngress", f"no webhookIngress: the PSP cannot deliver to {path}"
        tls = ingress.tls_secret_ref.name if ingress.tls_secret_ref is not None else None
        route = WebhookRoute(ctx.settings.service_namespace, ctx.settings.service_name, ctx.settings.service_port)
        for desired in webhook_objects(obj, ingress.host, tls, path, route):
            try:
                await ctx.applier.apply(desired)
            except ApiError as exc:
                kind = desired["kind"]
                return False, f"{kind}Failed", f"the webhook {kind} could not be applied: {exc.__class__.__name__}"
        if not ctx.receiver.serving or ctx.receiver.port is None:
            return False, "ReceiverNotServing", "the webhook receiver is not listening"
        try:
            async with httpx.AsyncClient(timeout=5, verify=default_tls()) as http:
                answer = await http.get(f"http://127.0.0.1:{ctx.receiver.port}/healthz")
            serving = answer.status_code == 200
        except httpx.HTTPError:
            serving = False
        if not serving:
            return False, "ReceiverNotServing", "the webhook receiver does not answer"
        scheme = "https" if ingress.tls_secret_ref is not None else "http"
        return True, "Serving", f"accepting deliveries at {scheme}://{ingress.host}{path}"


class ConnectorSecretsReconciler:
    """Watches the credentials Secret each BillingConnector names, with GET only.

    Why not a Kubernetes watch: RBAC cannot grant list/watch on chosen Secrets whose names it does not know in
    advance, so a watch needs list/watch on every Secret of the cluster (enumerating them all); the connector keeps
    `get` by name. Each connector's Secret is read every `secret_check_seconds` (2 by default: a few GETs a second
    for a handful of connectors); when its resourceVersion differs from the one the provider was built from, or
    from the last one seen (a Secret created or fixed while the credentials were refused), the connector is
    reconciled at once: new provider, new webhook secret, `CredentialsValid` re-checked."""

    def __init__(self, ctx: ConnectorContext, wake: Callable[[Request], None]) -> None:
        self.ctx = ctx
        self.wake = wake
        self._seen: dict[str, str] = {}

    async def reconcile(self, req: Request) -> Result:
        ctx = self.ctx
        obj = ctx.cache.get(BILLING_CONNECTOR, req.name, req.namespace)
        if obj is None:
            self._seen.pop(req.key, None)
            return Result.done()
        spec = obj.get("spec") or {}
        ref = str((spec.get("credentialsSecretRef") or {}).get("name") or "")
        if not ref:
            return Result.done()
        try:
            secret = await ctx.secret(req.namespace or "", ref)
        except ApiError as exc:  # e.g. Forbidden: reported by the connector's own reconcile; looked at again
            log.warning("connector credentials not readable", connector=req.key, credentials=ref,
                        error=type(exc).__name__)
            return Result.requeue_after(ctx.settings.secret_check_seconds)
        version = str(secret["metadata"].get("resourceVersion", "")) if secret is not None else "-"
        seen, self._seen[req.key] = self._seen.get(req.key), f"{ref}:{version}"
        entry = ctx.registry.get(req.key)
        loaded = entry is not None and entry.version != f"{spec.get('type')}:{version}"
        if loaded or (seen is not None and seen != self._seen[req.key]):
            log.info("connector credentials changed", connector=req.key, credentials=ref)
            self.wake(Request(req.namespace, req.name))
        return Result.requeue_after(ctx.settings.secret_check_seconds)


@dataclass
class _MethodCheck:
    version: str
    valid: bool
    reason: str
    at: datetime


class TenantPaymentsReconciler:
    def __init__(self, ctx: ConnectorContext) -> None:
        self.ctx = ctx
        self.notices = BudgetBook(ctx.payments.engine)  # the budget webhooks' outbox: the ledger's database
        self._checks: dict[str, _MethodCheck] = {}

    async def reconcile(self, req: Request) -> Result:
        ctx = self.ctx
        obj = ctx.cache.get(TENANT_ACCOUNT, req.name, req.namespace)
        if obj is None:
            self._checks.pop(req.key, None)
            return Result.done()
        try:
            tenant = parse(TenantAccount, thaw(obj))
        except ValidationError:
            return Result.done()
        ref = tenant.spec.billing_connector_ref
        if ref is None:
            return Result.done()
        key = req.key
        entry = ctx.registry.get(f"{req.namespace}/{ref.name}")
        if entry is None:  # the connector's credentials are not loaded (yet, or not valid)
            return Result.requeue_after(ctx.settings.reload_check_seconds)
        await ctx.payments.ensure_schema()
        now = ctx.clock.now()
        notices_retry = await self._notices(obj, entry.provider, key, now)
        old = obj.get("status") or {}
        settings = ctx.settings

        # Payment method: a changed Secret reference starts the cooldown.
        current = tenant.spec.psp_customer_secret_ref.name if tenant.spec.psp_customer_secret_ref else None
        last = old.get("lastPSPCustomerSecretRef")
        changed_at = _time(old.get("paymentMethodChangedAt"))
        if current and last and current != last:
            changed_at = now
            await ctx.event(obj, "Normal", "PaymentMethodChanged",
                            f"pspCustomerSecretRef changed: auto-reload pauses for "
                            f"{settings.payment_method_cooldown_seconds}s")
        customer, version = await customer_of(ctx, tenant)
        check = await self._method(key, entry.provider, customer, f"{current}:{version}", now)

        facts = await ctx.payments.facts(key, now)
        balance = await ctx.payments.ledger.balance(key)
        currency = ctx.currency_of(obj)
        retry_at: datetime | None = None
        if facts.pending is not None and facts.pending.intent_id is None and customer is not None and \
                now - facts.pending.created_at >= timedelta(seconds=settings.resume_after_seconds):
            await self._ask(obj, entry.provider, facts.pending.id, key, facts.pending.amount, currency, customer, now)
        elif customer is not None:
            policy = tenant.spec.reload_policy
            method_changed = changed_at if changed_at is not None and (
                facts.last_failure_at is None or changed_at > facts.last_failure_at) else None
            decision = reload.decide(reload.Facts(
                mode=tenant.spec.billing_mode, policy=policy, has_connector=True, has_customer=True,
                balance=balance, pending=facts.pending is not None, month_reloaded=facts.month_reloaded,
                attempts_24h=facts.attempts_24h,
                consecutive_failures=0 if method_changed else facts.consecutive_failures,
                last_failure_at=facts.last_failure_at, payment_method_changed_at=changed_at,
                payment_method_valid=check.valid if check else None, now=now),
                cooldown=timedelta(seconds=settings.payment_method_cooldown_seconds),
                retry_after=timedelta(seconds=settings.reload_retry_seconds))
            retry_at = decision.retry_at
            if decision.start and policy is not None:
                await self._start(obj, entry.provider, key, policy, currency, customer, now)
        facts = await ctx.payments.facts(key, now)
        await self._status(obj, tenant, facts, check, current, changed_at, now)
        wait = settings.reload_check_seconds
        for at in (retry_at, notices_retry):
            if at is not None:
                wait = max(1, min(wait, int((at - now).total_seconds()) + 1))
        return Result.requeue_after(wait)

    async def _notices(self, obj: FrozenObject, provider: Provider, key: str, now: datetime) -> datetime | None:
        """Deliver the tenant's due budget webhooks (`budget_notice`), signed, to a `webhook` connector; a Stripe
        connector has no such channel: its notices are settled `skipped`. A failure is counted, reported by a
        Warning Event (a fixed reason, never the secret or the URL) and retried with backoff; it never stops
        the payment work below, and enforcement (the billing controller's) never waits on it. Each attempt first
        takes the notice (a lease in the database), so replicas do not POST it at once. At least once: a crash
        between the POST and its record sends the same event id again when the lease ends. Returns the next
        retry time."""
        book = self.notices
        try:
            due = await book.due_notices(key, now)
        except (SQLAlchemyError, OSError) as exc:
            log.warning("budget notices unavailable", tenant=key, error=type(exc).__name__)
            return None
        retry: datetime | None = None
        for notice in due:
            try:
                if not isinstance(provider, WebhookProvider):
                    await book.settle_notice(notice.key, "skipped", now)
                    BUDGET_WEBHOOKS.labels("skipped").inc()
                    continue
                if not await book.take_notice(notice.key, now, now + timedelta(seconds=NOTICE_LEASE_SECONDS)):
                    continue  # another replica is delivering it
                try:
                    await provider.send_event(budget_notice.EVENT_TYPE, notice.event_id, json.loads(notice.data))
                except Failure as exc:
                    reason = str(exc)
                    at = now + timedelta(seconds=budget_notice.backoff_seconds(notice.attempts + 1))
                    attempts = await book.notice_failed(notice.key, reason, at)
                    BUDGET_WEBHOOKS.labels("failed").inc()
                    retry = at if retry is None else min(retry, at)
                    log.warning("budget webhook failed", tenant=key, budget=notice.budget, event_id=notice.event_id,
                                reason=reason, attempts=attempts)
                    await self.ctx.event(obj, "Warning", "BudgetWebhookFailed",
                                         f"the webhook of budget {notice.budget} (event {notice.event_id}) was not "
                                         f"accepted: {reason}; attempt {attempts}, retried at "
                                         f"{self.ctx.now_rfc3339(at)}")
                    continue
                await book.settle_notice(notice.key, "sent", now)
                BUDGET_WEBHOOKS.labels("sent").inc()
                log.info("budget webhook sent", tenant=key, budget=notice.budget, event_id=notice.event_id)
                await self.ctx.event(obj, "Normal", "BudgetWebhookSent",
                                     f"the webhook of budget {notice.budget} (event {notice.event_id}) was delivered")
            except (SQLAlchemyError, OSError) as exc:
                log.warning("budget notice not recorded", tenant=key, error=type(exc).__name__)
                return None
        return retry

    async def _method(self, key: str, provider: Provider, customer: Customer | None, version: str,
                      now: datetime) -> _MethodCheck | None:
        if customer is None:
            return _MethodCheck(version, False, "NoCustomer", now)
        known = self._checks.get(key)
        ttl = timedelta(seconds=self.ctx.settings.payment_method_check_seconds)
        if known is not None and known.version == version and now - known.at < ttl:
            return known
        try:
            await provider.check_payment_method(customer)
            check = _MethodCheck(version, True, "Chargeable", now)
        except Failure as exc:
            if exc.reason in ("Unreachable", "RateLimited", "PSPError"):
                return known  # no answer: keep what was known
            check = _MethodCheck(version, False, exc.reason, now)
        self._checks[key] = check
        return check

    async def _start(self, obj: FrozenObject, provider: Provider, key: str, policy: Any, currency: str,
                     customer: Customer, now: datetime) -> None:
        ctx = self.ctx
        try:
            to_minor(policy.reload_amount, currency)
        except ValueError as exc:
            await ctx.event(obj, "Warning", "ReloadAmountInvalid", str(exc))
            return
        connector = f"{obj['metadata']['namespace']}/{obj['spec']['billingConnectorRef']['name']}"
        limits = Limits(policy.threshold_amount, policy.reload_amount, policy.monthly_cap_amount,
                        int(policy.max_reloads_per_day or 0))
        attempt, why = await ctx.payments.begin_reload(key, connector, limits, currency, now)
        if attempt is None:
            log.info("reload not started", tenant=key, reason=why)
            return
        log.info("reload started", tenant=key, attempt=attempt.id, amount=str(attempt.amount), currency=currency)
        await self._ask(obj, provider, attempt.id, key, attempt.amount, currency, customer, now)

    async def _ask(self, obj: FrozenObject, provider: Provider, attempt_id: str, key: str, amount: Decimal,
                   currency: str, customer: Customer, now: datetime) -> None:
        ctx = self.ctx
        try:
            intent = await provider.create_reload(attempt_id, key, amount, currency, customer)
        except Failure as exc:
            if exc.declined:
                attempt = next(a for a in await ctx.payments.attempts(key) if a.id == attempt_id)
                await ctx.payments.fail_attempt(attempt, exc.code or "declined", now)
                await ctx.event(obj, "Warning", "ReloadDeclined", f"reload {attempt_id} was declined: {exc}")
            else:  # no answer: the attempt stays pending and is asked again with the same idempotency key
                log.warning("reload request failed", tenant=key, attempt=attempt_id, reason=exc.reason)
            return
        await ctx.payments.record_intent(attempt_id, intent)
        await ctx.event(obj, "Normal", "ReloadRequested",
                        f"reload of {amount} {currency} requested ({intent}); the wallet is credited when the PSP "
                        "confirms it")

    async def _status(self, obj: FrozenObject, tenant: TenantAccount, facts: Any, check: _MethodCheck | None,
                      current: str | None, changed_at: datetime | None, now: datetime) -> None:
        ctx = self.ctx
        generation = int(obj["metadata"].get("generation", 0))
        stamp = ctx.now_rfc3339(now)
        old = obj.get("status") or {}
        mine = [c for c in old.get("conditions") or ()
                if c.get("type") in (PAYMENT_METHOD_VALID, PAYMENT_DISPUTED, CORROBORATION)]
        conds = _cond(mine, generation, stamp, PAYMENT_METHOD_VALID, check.valid if check else None,
                      check.reason if check else "NotChecked",
                      "the PSP accepts the payment method" if check and check.valid else
                      f"the payment method cannot be used: {check.reason if check else 'not checked yet'}")
        conds = _cond(conds, generation, stamp, PAYMENT_DISPUTED, facts.dispute_open,
                      "DisputeOpen" if facts.dispute_open else ("Dispute" + (facts.dispute_code or "none").title()
                                                               .replace("_", "")),
                      f"a payment is disputed ({facts.dispute_code or 'no reason given'})" if facts.dispute_open
                      else "no open payment dispute")
        failed = facts.corroboration_failed_at is not None
        conds = _cond(conds, generation, stamp, CORROBORATION, failed, "Mismatch" if failed else "Corroborated",
                      f"a payment confirmation at {ctx.now_rfc3339(facts.corroboration_failed_at)} did not match the "
                      "reload it names and was not credited" if failed else "every confirmation matched its reload")
        status: dict[str, Any] = {
            "consecutivePaymentFailures": facts.consecutive_failures,
            "conditions": conds,
        }
        if facts.pending is not None:
            status["pendingReloadIntentID"] = facts.pending.intent_id or facts.pending.id
        if current:
            status["lastPSPCustomerSecretRef"] = current
        if changed_at is not None:
            status["paymentMethodChangedAt"] = ctx.now_rfc3339(changed_at)
        await ctx.apply_status(obj, status)
        before = int(old.get("consecutivePaymentFailures") or 0)
        if facts.consecutive_failures > before:
            await ctx.event(obj, "Warning", "PaymentFailed",
                            f"{facts.consecutive_failures} consecutive payment failure(s)")
        if tenant.spec.billing_mode == BillingMode.PREPAID and before and not facts.consecutive_failures:
            await ctx.event(obj, "Normal", "PaymentSucceeded", "a payment succeeded: payment failures reset")


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def tax_enabled(connector: BillingConnector) -> bool:
    return connector.spec.tax_mode == TaxMode.PSP

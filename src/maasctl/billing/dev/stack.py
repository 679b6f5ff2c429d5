"""The billing part of `maasctl dev`: install the billing CRDs, run the billing controller and the psp-connector
next to the MaaS controller (same stop signal) and apply the seed's sample PriceBooks, Plans, TenantAccounts and a
Stripe BillingConnector. Wallets and rating are on: the ledger is `billing-ledger.db` (SQLite) in the dev
directory and the rater reads maas-api's database.

Payments run against stripe-mock (Stripe's own API mock, `hack/stripe-mock`, started here), so the whole money flow
is visible without writing YAML: a call is rated into a charge on `ten-acme`'s wallet (the sample `premium`
subscription's organization), a balance below its reload threshold makes the psp-connector ask Stripe for a
PaymentIntent, and the payment's confirmation credits the wallet. stripe-mock is stateless and sends no webhooks,
so `StripeEventRelay` plays Stripe's event delivery for the sample connector: it confirms each PaymentIntent the
connector records with a `payment_intent.succeeded` event signed with the sample webhook secret, as `stripe listen
--forward-to` would. The connector verifies and applies it like any delivery (credited once, when confirmed).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Protocol

import httpx
import structlog
from kubernetes_asyncio import client as k8s

from maasctl.billing.api.install import install_billing_crds
from maasctl.billing.connector.app import run_connector
from maasctl.billing.connector.payments import Payments
from maasctl.billing.connector.settings import ConnectorSettings
from maasctl.billing.controller.app import run_billing
from maasctl.billing.controller.settings import BillingSettings
from maasctl.billing.dev import samples
from maasctl.billing.dev.samples import billing_samples
from maasctl.billing.ledger import Ledger, credit
from maasctl.billing.rules.psp_amounts import to_minor
from maasctl.runtime import Client
from maasctl.runtime.served import apply_all
from maasctl.testenv.controlplane import free_port
from maasctl.testenv.stripemock import StripeMock, StripeMockUnavailable, start_stripe_mock
from maasctl.tls import default_tls

log = structlog.get_logger("maasctl.billing.dev")
FIELD_MANAGER = "maasctl-dev"
RELAY_INTERVAL = 1  # seconds between looks at the payment book (no float in billing: tests/billing/test_no_float.py)


class _Options(Protocol):
    @property
    def database_url(self) -> str | None: ...


class Stack(Protocol):
    """What billing needs of the local stack (`maasctl.localstack.LocalStack`)."""

    @property
    def api(self) -> k8s.ApiClient: ...

    @property
    def directory(self) -> Path: ...

    @property
    def options(self) -> _Options: ...


@dataclass
class DevBilling:
    """What `start_billing` started: await `wait()` after `stop` is set. `hints` are the banner's billing lines."""

    tasks: list[asyncio.Task[int]]
    stripe: StripeMock | None
    ledger_url: str
    hints: str

    async def wait(self) -> None:
        try:
            for task in self.tasks:
                try:
                    await task
                except Exception:  # one part's failure must not keep the others (or stripe-mock) running
                    log.exception("billing part failed", part=task.get_name())
        finally:
            if self.stripe is not None:
                await asyncio.to_thread(self.stripe.stop)


class StripeEventRelay:
    """Stripe's webhook delivery for `maasctl dev` (stripe-mock sends none): each PaymentIntent the connector
    records for `tenants()` is confirmed once with a signed `payment_intent.succeeded` POSTed to the receiver."""

    def __init__(self, payments: Payments, url: str, webhook_secret: str, tenants: Callable[[], list[str]]) -> None:
        self.payments, self.url, self.secret, self.tenants = payments, url, webhook_secret, tenants
        self.sent: set[str] = set()

    async def run(self, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(timeout=10, verify=default_tls()) as http:
            while not stop.is_set():
                with contextlib.suppress(Exception):  # the tables appear with the connector; it may be restarting
                    await self.once(http)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), RELAY_INTERVAL)

    async def once(self, http: httpx.AsyncClient) -> None:
        for tenant in self.tenants():
            attempt = await self.payments.pending(tenant)
            if attempt is None or not attempt.intent_id or attempt.id in self.sent:
                continue
            minor = to_minor(attempt.amount, attempt.currency)
            body = json.dumps({"id": f"evt_dev_{uuid.uuid4().hex[:16]}", "object": "event",
                               "type": "payment_intent.succeeded", "data": {"object": {
                                   "id": attempt.intent_id, "object": "payment_intent", "amount": minor,
                                   "amount_received": minor, "currency": attempt.currency.lower(),
                                   "metadata": {"maasctl_reload": attempt.id, "maasctl_tenant": tenant}}}}).encode()
            at = int(time.time())
            mac = hmac.new(self.secret.encode(), f"{at}.".encode() + body, hashlib.sha256).hexdigest()
            answer = await http.post(self.url, content=body, headers={
                "Stripe-Signature": f"t={at},v1={mac}", "Content-Type": "application/json"})
            if answer.status_code == 200:
                self.sent.add(attempt.id)
                log.info("stripe-mock payment confirmed (dev relay)", tenant=tenant, reload=attempt.id,
                         amount=str(attempt.amount), currency=attempt.currency)


async def _stripe_mock() -> StripeMock | None:
    try:
        return await asyncio.to_thread(start_stripe_mock)
    except StripeMockUnavailable as exc:
        log.warning("stripe-mock unavailable: the psp-connector does not run (./hack/setup.sh builds it)",
                    error=str(exc)[:300])
        return None


async def welcome_credit(ledger_url: str, namespace: str, now: datetime) -> None:
    """The sample Prepaid tenant's first money (idempotent by key), so its first calls are charged to a funded
    wallet and the next low balance triggers a reload."""
    ledger = Ledger.from_url(ledger_url)
    try:
        await ledger.create_schema()
        await ledger.post([credit(f"dev-welcome-{samples.PAYING_TENANT}", f"{namespace}/{samples.PAYING_TENANT}",
                                  now, Decimal(samples.WELCOME_CREDIT), reason="maasctl dev welcome credit",
                                  actor="maasctl-dev")])
    finally:
        await ledger.close()


async def start_billing(stack: Stack, kubeconfig: str, gateway_namespace: str, gateway_name: str,
                        stop: asyncio.Event, *, samples_on: bool = True,
                        settings: BillingSettings | None = None, probe_address: str = "0",
                        payments: bool = True, portal_api_address: str = "0",
                        subscription_namespace: str = "models-as-a-service") -> DevBilling:
    """Install the billing CRDs, start `maasctl billing run` and (with `payments`, when stripe-mock can run) the
    psp-connector in this loop (until `stop`), and apply the samples. `portal_api_address` serves the tenant
    portal's read API (its members from the MaaSSubscriptions of `subscription_namespace`)."""
    await install_billing_crds(stack.api)
    ledger_url = f"sqlite+aiosqlite:///{stack.directory.joinpath('billing-ledger.db')}"
    usage_url = stack.options.database_url or f"sqlite+aiosqlite:///{stack.directory.joinpath('maas-api.db')}"
    base = settings or BillingSettings(ledger_url=ledger_url, usage_database_url=usage_url)
    settings = dataclasses.replace(base, kubeconfig=kubeconfig, metrics_bind_address=probe_address,
                                   health_probe_bind_address=probe_address, portal_api_bind_address=portal_api_address,
                                   portal_subscription_namespace=subscription_namespace)
    ledger_url = settings.ledger_url or ledger_url
    tasks = [asyncio.create_task(run_billing(settings, stop), name="billing controller")]
    stripe = await _stripe_mock() if payments else None
    try:
        hints = await _start_payments_and_samples(stack, tasks, stripe, ledger_url, kubeconfig, gateway_namespace,
                                                  gateway_name, stop, samples_on)
    except BaseException:
        stop.set()
        await DevBilling(tasks, stripe, ledger_url, "").wait()
        raise
    return DevBilling(tasks, stripe, ledger_url, hints)


async def _start_payments_and_samples(stack: Stack, tasks: list[asyncio.Task[int]], stripe: StripeMock | None,
                                      ledger_url: str, kubeconfig: str, gateway_namespace: str, gateway_name: str,
                                      stop: asyncio.Event, samples_on: bool) -> str:
    """The psp-connector and its Stripe relay (when stripe-mock runs), the samples, the welcome credit; the
    banner's billing lines."""
    ns = gateway_namespace
    hints = [f"  kubectl get pricebooks,plans,tenantaccounts,budgetpolicies,billingconnectors -n {ns}"]
    if stripe is not None:
        webhook_port = free_port()
        connector = ConnectorSettings(
            kubeconfig=kubeconfig, ledger_url=ledger_url, webhook_bind_address=f"127.0.0.1:{webhook_port}",
            stripe_api_base=stripe.url, metrics_bind_address="0", health_probe_bind_address="0",
            reload_check_seconds=2, reload_retry_seconds=30, payment_method_cooldown_seconds=0)
        tasks.append(asyncio.create_task(run_connector(connector, stop), name="psp-connector"))
        book = Payments(Ledger.from_url(ledger_url))
        relay = StripeEventRelay(book, f"http://127.0.0.1:{webhook_port}/webhooks/{ns}/{samples.DEV_CONNECTOR}",
                                 samples.DEV_WEBHOOK_SECRET, lambda: [f"{ns}/{samples.PAYING_TENANT}"])

        async def run_relay() -> int:
            try:
                await book.ensure_schema()
                await relay.run(stop)
            finally:
                await book.ledger.close()
            return 0

        tasks.append(asyncio.create_task(run_relay(), name="stripe event relay"))
        log.info("psp-connector running against stripe-mock", stripe=stripe.url, webhooks=webhook_port)
    if samples_on:
        client = Client(stack.api)
        objs = billing_samples(ns, gateway_name, datetime.now(UTC))
        if stripe is None:  # no PSP: the sample tenant keeps its wallet, without a connector to reload it
            objs = [samples.without_payments(o) for o in objs if o["kind"] != "BillingConnector"]
        await apply_all(client, [*objs, *(samples.payment_secrets(ns) if stripe else [])],
                        field_manager=FIELD_MANAGER)  # the kinds were installed a moment ago
        await welcome_credit(ledger_url, ns, datetime.now(UTC))
        show = f".venv/bin/maasctl billing ledger --ledger-url {ledger_url} show --tenant {ns}/{samples.PAYING_TENANT}"
        hints += [
            f"  # billing: each call of llm/gpt-x costs {samples.GPT_X_CALL} USD (llm/granite {samples.GRANITE_CALL}) "
            f"on {samples.PAYING_TENANT}'s wallet (alice's",
            f"  # premium subscription; pb-launch prices them from a minute after start). It starts with "
            f"{samples.WELCOME_CREDIT} USD; below {samples.RELOAD_THRESHOLD} the",
            f"  # psp-connector asks Stripe (stripe-mock) for {samples.RELOAD_AMOUNT}, and the confirmed payment "
            "credits the wallet:" if stripe else "  # (no psp-connector: stripe-mock is not built, ./hack/setup.sh)",
            f"  kubectl get tenantaccount {samples.PAYING_TENANT} -n {ns} -w     # STATE, BALANCE after each call",
            f"  kubectl get events -n {ns} --field-selector involvedObject.name={samples.PAYING_TENANT}"
            "   # ReloadRequested, ...",
            f"  {show}   # charges, reloads, credits",
        ]
        log.info("billing samples applied", namespace=ns, ledger=show)
    return "\n".join(hints)

"""Helpers of the psp-connector integration tests: a running connector (its manager and real webhook receiver)
on a ManualClock, acting as its own ServiceAccount with the RBAC of the install manifests, Stripe-signed
deliveries, and the objects the tests create."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import hmac
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx
from aiohttp import web
from kubernetes_asyncio import client as k8s

from maasctl.billing.connector.app import build_connector
from maasctl.billing.connector.reconcilers import ConnectorContext
from maasctl.billing.connector.settings import ConnectorSettings
from maasctl.billing.ledger import Ledger, credit
from maasctl.billing.rules.clock import ManualClock
from maasctl.runtime import Manager
from maasctl.testenv import ControlPlane
from maasctl.tls import default_tls
from tests.install.manifests import DEFAULT_SUBSCRIPTION_NS, apply_docs, identity_docs, service_account_api

from ..conftest import CONTROLLER_NS, Billing, RunningBilling, eventually

API = "billing.opendatahub.io/v1alpha1"
SECRET_KEY = "sk_test_51Hsecretkeyvalue0001"
WEBHOOK_SECRET = "whsec_testsecret0001"
CUSTOMER = "cus_SecretCustomer42"


@dataclasses.dataclass
class Connector:
    """One psp-connector replica run in the test's event loop."""

    manager: Manager
    ctx: ConnectorContext
    task: asyncio.Task[None]
    api: k8s.ApiClient

    async def stop(self) -> None:
        self.manager.stop()
        await asyncio.wait_for(self.task, 40)
        await self.ctx.receiver.stop()
        await self.ctx.registry.close()
        await self.ctx.payments.ledger.close()
        await self.api.close()


async def psp_connector_api(cp: ControlPlane) -> k8s.ApiClient:
    """Apply the psp-connector's RBAC from the default overlay; a client acting as its ServiceAccount."""
    await apply_docs(cp, identity_docs({"psp-connector"}, CONTROLLER_NS, DEFAULT_SUBSCRIPTION_NS))
    return await service_account_api(cp, CONTROLLER_NS, "psp-connector",
                                     ready_checks=[("list", "billingconnectors.billing.opendatahub.io", "-A"),
                                                   ("get", "secrets", "-A"), ("patch", "services", "-A")])


async def start_connector(cp: ControlPlane, ledger_url: str, clock: ManualClock, stripe_url: str) -> Connector:
    """A replica (no leader election: every replica reconciles and serves webhooks, as in production), as the
    psp-connector ServiceAccount: a permission missing from manifests/base/psp-connector fails the tests."""
    api = await psp_connector_api(cp)
    settings = ConnectorSettings(ledger_url=ledger_url, webhook_bind_address="127.0.0.1:0",
                                 stripe_api_base=stripe_url, metrics_bind_address="0",
                                 health_probe_bind_address="0", reload_check_seconds=1, reload_retry_seconds=1,
                                 payment_method_cooldown_seconds=3600, service_namespace=CONTROLLER_NS)
    manager, ctx = build_connector(api, settings, clock)
    await ctx.receiver.start(settings.webhook_bind_address)
    return Connector(manager, ctx, asyncio.create_task(manager.run()), api)


@dataclasses.dataclass
class Setup:
    billing: RunningBilling
    connector: Connector
    clock: ManualClock
    ledger: Ledger
    ledger_url: str
    cluster: ControlPlane
    stripe_url: str

    @property
    def ctx(self) -> ConnectorContext:
        return self.connector.ctx

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ctx.receiver.port}"

    def signed(self, body: bytes, secret_: str = WEBHOOK_SECRET, skew: int = 0) -> dict[str, str]:
        """Stripe's signature headers for `body`, timestamped by the connector's (manual) clock."""
        return stripe_signed(body, int(self.clock.now().timestamp()) + skew, secret_)


async def fund(setup: Setup, tenant: str, amount: Decimal) -> None:
    """A trial credit, once per tenant (ledger entries are idempotent by key)."""
    await setup.ledger.post([credit(f"trial-{tenant}", tenant, datetime.now(UTC), amount, reason="trial",
                                    actor="test")])


@contextlib.asynccontextmanager
async def loopback(path: str, handle: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> AsyncIterator[str]:
    """A real HTTP server on 127.0.0.1 (a free port) serving POST `path` with `handle`; its URL."""
    app = web.Application()
    app.router.add_post(path, handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}{path}"
    finally:
        await runner.cleanup()


def b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


async def secret(kube: k8s.ApiClient, ns: str, name: str, data: dict[str, str]) -> None:
    await k8s.CoreV1Api(kube).create_namespaced_secret(ns, k8s.V1Secret(
        metadata=k8s.V1ObjectMeta(name=name), data={k: b64(v) for k, v in data.items()}))


def stripe_signed(body: bytes, at: int, secret_: str = WEBHOOK_SECRET) -> dict[str, str]:
    """Headers signing `body` at `at` exactly as Stripe does: `t=<at>,v1=HMAC-SHA256(secret, "<at>.<body>")`."""
    mac = hmac.new(secret_.encode(), f"{at}.".encode() + body, hashlib.sha256).hexdigest()
    return {"Stripe-Signature": f"t={at},v1={mac}", "Content-Type": "application/json"}


def pi_event(type_: str, intent: str, attempt: str, tenant: str, amount: int, **extra: Any) -> bytes:
    obj = {"id": intent, "object": "payment_intent", "amount": amount, "amount_received": amount,
           "currency": "usd", "metadata": {"maasctl_reload": attempt, "maasctl_tenant": tenant}, **extra}
    return json.dumps({"id": f"evt_{uuid.uuid4().hex[:16]}", "object": "event", "type": type_,
                       "data": {"object": obj}}).encode()


async def deliver(setup: Setup, ns: str, body: bytes, headers: dict[str, str], connector: str = "stripe"
                  ) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10, verify=default_tls()) as http:
        return await http.post(f"{setup.url}/webhooks/{ns}/{connector}", content=body, headers=headers)


def tenant_obj(ns: str, name: str, secret_ref: str, per_day: int = 2, cap: str = "60", connector: str = "stripe"
               ) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "TenantAccount", "metadata": {"name": name, "namespace": ns},
            "spec": {"displayName": name, "planRef": {"name": "none"}, "billingMode": "Prepaid",
                     "pspCustomerSecretRef": {"name": secret_ref}, "billingConnectorRef": {"name": connector},
                     "reloadPolicy": {"enabled": True, "thresholdAmount": "5", "reloadAmount": "25",
                                      "monthlyCapAmount": cap, "maxReloadsPerDay": per_day}}}


async def status_of(billing: Billing, kind: str, name: str, ns: str) -> dict[str, Any]:
    obj = await billing.get(kind, name, ns)
    assert obj is not None
    return dict(obj.get("status") or {})


def conds(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or ()}


async def connector_ready(billing: Billing, ns: str, name: str = "stripe", *, webhook: bool = True) -> None:
    """Wait until BillingConnector `name` is connected (and serving its webhook endpoint when `webhook`)."""
    async def ready() -> bool:
        st = await status_of(billing, "BillingConnector", name, ns)
        c = conds(st)
        return bool(st.get("connected") and c.get("CredentialsValid", {}).get("status") == "True"
                    and (not webhook or c.get("WebhookReachable", {}).get("status") == "True"))

    await eventually(ready, 60)


async def stripe_connector(kube: k8s.ApiClient, billing: Billing, ns: str) -> None:
    """BillingConnector `stripe` with valid test credentials, once it is connected."""
    await secret(kube, ns, "stripe-credentials", {"secretKey": SECRET_KEY, "webhookSecret": WEBHOOK_SECRET})
    await billing.create({"apiVersion": API, "kind": "BillingConnector",
                          "metadata": {"name": "stripe", "namespace": ns},
                          "spec": {"type": "stripe", "credentialsSecretRef": {"name": "stripe-credentials"},
                                   "webhookIngress": {"host": "psp.example.com", "tlsSecretRef": {"name": "psp-tls"}},
                                   "taxMode": "psp"}})
    await connector_ready(billing, ns)

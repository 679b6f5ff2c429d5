"""The generic `webhook` provider against a real HTTP receiver run by the test: outbound events (credential
ping, reload request) arrive as JSON signed with `hmacSecret` over a timestamped body, with an idempotency key;
a confirmation signed the same way credits the wallet once, a replay or a foreign signature never does."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s

from maasctl.billing.rules import signing

from ..conftest import Billing, events_for, eventually
from .psp import API, Setup, b64, conds, connector_ready, deliver, fund, loopback, secret, status_of, tenant_obj

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
HMAC_SECRET = "hmac-secret-value-0042"
CUSTOMER_ID = "cust-orbit-secret-7"


@dataclass
class PSPReceiver:
    """The platform's own payment service: records every signed POST; answers reloads with an intent id."""

    url: str = ""
    seen: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.seen.append((dict(request.headers), body))
        doc = json.loads(body)
        if doc["type"] == "reload.requested":
            return web.json_response({"intentId": f"wh-{doc['data']['reloadId']}"})
        return web.json_response({})

    def of_type(self, type_: str) -> list[tuple[dict[str, str], dict[str, Any]]]:
        return [(h, json.loads(b)) for h, b in self.seen if json.loads(b)["type"] == type_]

    def all_signed(self) -> bool:
        return all(signing.verify(HMAC_SECRET, h.get(signing.HEADER), b, int(json.loads(b)["created"])).ok
                   for h, b in self.seen)


@pytest.fixture
async def receiver() -> AsyncIterator[PSPReceiver]:
    psp_service = PSPReceiver()
    async with loopback("/psp", psp_service.handle) as url:
        psp_service.url = url
        yield psp_service


async def pending_reload(psp: Setup, billing: Billing, kube: k8s.ApiClient, namespace: str, receiver: PSPReceiver,
                         tenant: str) -> tuple[str, str, dict[str, str], dict[str, Any]]:
    """A webhook connector `hooks` and a Prepaid tenant below its reload threshold: the tenant's key, the pending
    intent and the reload request the connector sent (headers, body)."""
    await secret(kube, namespace, "hooks-credentials", {"hmacSecret": HMAC_SECRET, "url": receiver.url})
    await billing.create({"apiVersion": API, "kind": "BillingConnector", "metadata": {"name": "hooks",
                                                                                      "namespace": namespace},
                          "spec": {"type": "webhook", "credentialsSecretRef": {"name": "hooks-credentials"}}})
    await connector_ready(billing, namespace, "hooks", webhook=False)
    assert receiver.of_type("connector.ping") and receiver.all_signed()

    await secret(kube, namespace, f"{tenant}-customer", {"customerId": CUSTOMER_ID})
    key = f"{namespace}/ten-{tenant}"
    await fund(psp, key, Decimal("1.00"))
    await billing.create(tenant_obj(namespace, f"ten-{tenant}", f"{tenant}-customer", connector="hooks"))

    async def pending() -> str | None:
        return (await status_of(billing, "TenantAccount", f"ten-{tenant}", namespace)).get("pendingReloadIntentID")

    intent = await eventually(pending, 60)
    [(headers, request)] = receiver.of_type("reload.requested")
    return key, str(intent), headers, request


async def test_webhook_provider_requests_reloads_and_takes_signed_confirmations(
        psp: Setup, billing: Billing, kube: k8s.ApiClient, namespace: str, receiver: PSPReceiver) -> None:
    key, intent, headers, request = await pending_reload(psp, billing, kube, namespace, receiver, "orbit")
    attempt = request["data"]["reloadId"]
    assert intent == f"wh-{attempt}" and headers["Idempotency-Key"] == attempt and receiver.all_signed()
    assert request["data"]["tenant"] == key and request["data"]["customerId"] == CUSTOMER_ID
    assert Decimal(request["data"]["amount"]) == Decimal(25) and request["data"]["currency"] == "USD"
    assert await psp.ledger.balance(key) == Decimal("1.000000")  # requested is not paid

    body = json.dumps({"id": f"conf-{attempt}", "type": "reload.succeeded", "data": {
        "reloadId": attempt, "tenant": key, "intentId": intent, "amount": "25.00", "currency": "USD"}}).encode()
    now = int(psp.clock.now().timestamp())

    def signed(secret_: str = HMAC_SECRET, at: int = now) -> dict[str, str]:
        return {signing.HEADER: signing.signature_header(secret_, at, body), "Content-Type": "application/json"}

    for refused in (signed("another-secret"), signed(at=now - 3600), {}):
        assert (await deliver(psp, namespace, body, refused, "hooks")).status_code == 400
    assert await psp.ledger.balance(key) == Decimal("1.000000")
    answer = await deliver(psp, namespace, body, signed(), "hooks")
    assert answer.status_code == 200 and answer.json()["outcome"] == "accepted"
    again = await deliver(psp, namespace, body, signed(), "hooks")
    assert again.json()["outcome"] == "duplicate"
    assert await psp.ledger.balance(key) == Decimal("26.000000")

    async def settled() -> dict[str, Any] | None:
        st = await status_of(billing, "TenantAccount", "ten-orbit", namespace)
        return st if "pendingReloadIntentID" not in st and st.get("balance") == "26.000000" else None

    await eventually(settled, 60)

    async def counted() -> dict[str, Any] | None:
        st = await status_of(billing, "BillingConnector", "hooks", namespace)
        stats = st.get("webhookStats") or {}
        return st if stats.get("signatureFailures") == 3 and stats.get("received24h") == 5 else None

    connector = await eventually(counted, 60)
    assert conds(connector)["WebhookReachable"]["reason"] == "NoWebhookIngress"
    shown = json.dumps(connector) + json.dumps(await status_of(billing, "TenantAccount", "ten-orbit", namespace)) + \
        json.dumps(await events_for(kube, namespace, "ten-orbit")) + json.dumps(await events_for(kube, namespace,
                                                                                               "hooks"))
    assert HMAC_SECRET not in shown and CUSTOMER_ID not in shown


async def test_a_signed_confirmation_with_an_amount_admission_would_refuse_credits_nothing(
        psp: Setup, billing: Billing, kube: k8s.ApiClient, namespace: str, receiver: PSPReceiver) -> None:
    """The webhook's amount goes through the one money parser: "200.00\\n" and its kin are 400, never a credit."""
    key, intent, _, request = await pending_reload(psp, billing, kube, namespace, receiver, "nl")
    attempt = request["data"]["reloadId"]
    now = int(psp.clock.now().timestamp())

    def confirmation(n: int, amount: str) -> tuple[bytes, dict[str, str]]:
        body = json.dumps({"id": f"conf-{n}-{attempt}", "type": "reload.succeeded", "data": {
            "reloadId": attempt, "tenant": key, "intentId": intent, "amount": amount, "currency": "USD"}}).encode()
        return body, {signing.HEADER: signing.signature_header(HMAC_SECRET, now, body),
                      "Content-Type": "application/json"}

    bad = ["25.00\n", "200.00\n", "25.00\r\n", "\n25.00", " 25.00", "25.00 ", "\u0662\u0665", "+25", "2.5e1",
           "25.", "1" * 25]
    for n, amount in enumerate(bad):
        answer = await deliver(psp, namespace, *confirmation(n, amount), "hooks")
        assert answer.status_code == 400, (amount, answer.status_code, answer.text)
    assert await psp.ledger.balance(key) == Decimal("1.000000")
    good = await deliver(psp, namespace, *confirmation(len(bad), "25.00"), "hooks")
    assert good.status_code == 200 and good.json()["outcome"] == "accepted"
    assert await psp.ledger.balance(key) == Decimal("26.000000")


async def test_a_webhook_connector_takes_its_url_from_the_secret(
        psp: Setup, billing: Billing, kube: k8s.ApiClient, namespace: str, receiver: PSPReceiver) -> None:
    """The receiver's URL is the Secret's key `url` (next to `hmacSecret`: such URLs often carry a token). Without it
    the connector says which key is missing; adding it to the Secret connects the connector within seconds."""
    await secret(kube, namespace, "hooks-no-url", {"hmacSecret": HMAC_SECRET})
    await billing.create({"apiVersion": API, "kind": "BillingConnector", "metadata": {"name": "hooks-no-url",
                                                                                      "namespace": namespace},
                          "spec": {"type": "webhook", "credentialsSecretRef": {"name": "hooks-no-url"}}})

    async def missing() -> dict[str, Any] | None:
        c = conds(await status_of(billing, "BillingConnector", "hooks-no-url", namespace)).get("CredentialsValid", {})
        return c if c.get("reason") == "MissingKeys" else None

    cond = await eventually(missing, 60)
    assert cond["status"] == "False" and cond["message"] == "Secret hooks-no-url lacks url"
    await k8s.CoreV1Api(kube).patch_namespaced_secret("hooks-no-url", namespace, {"data": {"url": b64(receiver.url)}})
    started = time.monotonic()
    await connector_ready(billing, namespace, "hooks-no-url", webhook=False)
    assert time.monotonic() - started < 10  # the Secret watch, not the 60 s resync
    assert receiver.of_type("connector.ping") and receiver.all_signed()

"""The psp-connector on the real control plane with Stripe's own mock behind the official SDK, a real PostgreSQL
ledger, the billing controller (wallet states) and the connector's real HTTP webhook receiver. stripe-mock
is stateless and sends no webhooks, so the test delivers Stripe events itself, signed with the webhook secret
exactly as Stripe signs them (`Stripe-Signature: t=..,v1=HMAC-SHA256(secret, "t.body")`)."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.billing.ledger import adjustment

from ..conftest import Billing, events_for, eventually
from .psp import (
    API,
    CUSTOMER,
    SECRET_KEY,
    WEBHOOK_SECRET,
    Setup,
    b64,
    conds,
    deliver,
    fund,
    pi_event,
    secret,
    status_of,
    stripe_connector,
    tenant_obj,
)

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


async def test_credentials_are_checked_with_the_psp_and_never_shown(
        psp: Setup, billing: Billing, kube: k8s.ApiClient, namespace: str) -> None:
    await stripe_connector(kube, billing, namespace)
    st = await status_of(billing, "BillingConnector", "stripe", namespace)
    assert conds(st)["WebhookReachable"]["message"] == \
        f"accepting deliveries at https://psp.example.com/webhooks/{namespace}/stripe"
    ingress = await k8s.NetworkingV1Api(kube).read_namespaced_ingress("psp-webhook-stripe", namespace)
    assert ingress.spec.tls[0].secret_name == "psp-tls" and ingress.spec.rules[0].host == "psp.example.com"
    # A key stripe-mock refuses (its error message echoes the key: it must not reach the status).
    await secret(kube, namespace, "bad-credentials", {"secretKey": "rk_live_leakme", "webhookSecret": "whsec_x"})
    await billing.create({"apiVersion": API, "kind": "BillingConnector", "metadata": {"name": "bad", "namespace":
                                                                                      namespace},
                          "spec": {"type": "stripe", "credentialsSecretRef": {"name": "bad-credentials"}}})

    async def refused() -> dict[str, Any] | None:
        bad = await status_of(billing, "BillingConnector", "bad", namespace)
        return bad if conds(bad).get("CredentialsValid", {}).get("reason") == "AuthenticationFailed" else None

    bad = await eventually(refused, 60)
    assert bad["connected"] is False and conds(bad)["WebhookReachable"]["reason"] == "NoWebhookIngress"
    shown = json.dumps(bad) + json.dumps(await events_for(kube, namespace, "bad"))
    assert "rk_live_leakme" not in shown and "whsec_x" not in shown


async def test_auto_reload_is_credited_only_when_stripe_confirms_it(
        psp: Setup, billing: Billing, kube: k8s.ApiClient, namespace: str) -> None:
    await stripe_connector(kube, billing, namespace)
    await secret(kube, namespace, "helix-stripe", {"customerId": CUSTOMER, "defaultPaymentMethodId": "pm_card_visa"})
    key = f"{namespace}/ten-helix"
    await fund(psp, key, Decimal("1.00"))
    await billing.create(tenant_obj(namespace, "ten-helix", "helix-stripe"))

    async def pending() -> str | None:
        st = await status_of(billing, "TenantAccount", "ten-helix", namespace)
        return st.get("pendingReloadIntentID")

    intent = await eventually(pending, 60)
    assert intent.startswith("pi_")  # stripe-mock's PaymentIntent, created through the SDK
    st = await status_of(billing, "TenantAccount", "ten-helix", namespace)
    assert conds(st)["PaymentMethodValid"]["status"] == "True"
    assert st["lastPSPCustomerSecretRef"] == "helix-stripe"
    # Requested is not paid: nothing is credited, and no second reload starts while it is in flight.
    await asyncio.sleep(3)
    assert await psp.ledger.balance(key) == Decimal("1.000000")
    attempts = await psp.ctx.payments.attempts(key)
    assert len(attempts) == 1 and attempts[0].intent_id == intent

    # Attacks: a bad signature, a body signed with another secret, a stale signature: refused and counted.
    body = pi_event("payment_intent.succeeded", intent, attempts[0].id, key, 2500)
    for headers in ({"Stripe-Signature": "t=1,v1=00", "Content-Type": "application/json"},
                    psp.signed(body, "whsec_wrong"), psp.signed(body, skew=-3600), {}):
        assert (await deliver(psp, namespace, body, headers)).status_code == 400
    assert (await deliver(psp, namespace, body.replace(b"2500", b"9500"), psp.signed(body))).status_code == 400
    assert await psp.ledger.balance(key) == Decimal("1.000000")

    # The signed confirmation credits the wallet once; replaying the same event changes nothing.
    signed = psp.signed(body)
    answer = await deliver(psp, namespace, body, signed)
    assert answer.status_code == 200 and answer.json()["outcome"] == "accepted"
    again = await deliver(psp, namespace, body, signed)
    assert again.status_code == 200 and again.json()["outcome"] == "duplicate"
    assert await psp.ledger.balance(key) == Decimal("26.000000")

    async def settled() -> dict[str, Any] | None:
        s = await status_of(billing, "TenantAccount", "ten-helix", namespace)
        return s if "pendingReloadIntentID" not in s and s.get("balance") == "26.000000" else None

    st = await eventually(settled, 60)
    assert st["consecutivePaymentFailures"] == 0 and st["state"] == "Active"

    async def stats() -> dict[str, Any] | None:
        s = await status_of(billing, "BillingConnector", "stripe", namespace)
        w = s.get("webhookStats") or {}
        return s if w.get("signatureFailures") == 5 and w.get("received24h") == 7 else None

    await eventually(stats, 60)

    # A dispute of that payment: PaymentDisputed.
    dispute = json.dumps({"id": "evt_dispute1", "type": "charge.dispute.created", "data": {"object": {
        "id": "dp_1", "payment_intent": intent, "amount": 2500, "currency": "usd", "reason": "fraudulent"}}}).encode()
    assert (await deliver(psp, namespace, dispute, psp.signed(dispute))).json()["outcome"] == "accepted"

    async def disputed() -> bool:
        c = conds(await status_of(billing, "TenantAccount", "ten-helix", namespace)).get("PaymentDisputed", {})
        return c.get("status") == "True" and "fraudulent" in c.get("message", "")

    await eventually(disputed, 60)
    # Secrets never show: not in any status, Event or log line of the connector.
    everything = json.dumps(await status_of(billing, "TenantAccount", "ten-helix", namespace)) + json.dumps(
        await status_of(billing, "BillingConnector", "stripe", namespace)) + json.dumps(
        await events_for(kube, namespace, "ten-helix")) + json.dumps(await events_for(kube, namespace, "stripe"))
    for value in (SECRET_KEY, WEBHOOK_SECRET, CUSTOMER):
        assert value not in everything


async def test_three_failed_payments_freeze_and_a_success_resets(
        psp: Setup, billing: Billing, kube: k8s.ApiClient, namespace: str) -> None:
    await stripe_connector(kube, billing, namespace)
    await secret(kube, namespace, "card-1", {"customerId": CUSTOMER, "defaultPaymentMethodId": "pm_card_declined"})
    await secret(kube, namespace, "card-2", {"customerId": CUSTOMER, "defaultPaymentMethodId": "pm_card_visa"})
    key = f"{namespace}/ten-acme"
    await fund(psp, key, Decimal("1.00"))
    await billing.create(tenant_obj(namespace, "ten-acme", "card-1", per_day=0))

    async def state() -> dict[str, Any]:
        return await status_of(billing, "TenantAccount", "ten-acme", namespace)

    for failures in (1, 2, 3):
        async def in_flight() -> str | None:
            return (await state()).get("pendingReloadIntentID")

        intent = await eventually(in_flight, 60)
        attempt = (await psp.ctx.payments.pending(key))
        assert attempt is not None
        body = pi_event("payment_intent.payment_failed", intent, attempt.id, key, 2500,
                        last_payment_error={"code": "card_declined", "decline_code": "insufficient_funds"})
        assert (await deliver(psp, namespace, body, psp.signed(body))).json()["outcome"] == "accepted"
        want = "Frozen" if failures == 3 else "Dunning"

        async def reached(want: str = want, failures: int = failures) -> bool:
            st = await state()
            return st.get("consecutivePaymentFailures") == failures and st.get("state") == want

        await eventually(reached, 60)
        psp.clock.advance(timedelta(seconds=2))  # past the dunning retry spacing (reload_retry_seconds=1)
    # Frozen by failures: the card is not retried.
    await asyncio.sleep(3)
    assert (await psp.ctx.payments.pending(key)) is None and len(await psp.ctx.payments.attempts(key)) == 3
    # A new payment method: the change is recorded, reloads wait for the cooldown, then one succeeds.
    await billing.patch("TenantAccount", "ten-acme", namespace, {"spec": {"pspCustomerSecretRef": {"name": "card-2"}}})

    async def changed() -> dict[str, Any] | None:
        st = await state()
        return st if st.get("lastPSPCustomerSecretRef") == "card-2" and st.get("paymentMethodChangedAt") else None

    await eventually(changed, 60)
    await asyncio.sleep(2)
    assert (await psp.ctx.payments.pending(key)) is None  # cooling down
    psp.clock.advance(timedelta(hours=1, seconds=5))

    async def in_flight_again() -> str | None:
        return (await state()).get("pendingReloadIntentID")

    intent = await eventually(in_flight_again, 60)
    attempt = await psp.ctx.payments.pending(key)
    assert attempt is not None
    body = pi_event("payment_intent.succeeded", intent, attempt.id, key, 2500)
    assert (await deliver(psp, namespace, body, psp.signed(body))).json()["outcome"] == "accepted"

    async def recovered() -> bool:
        st = await state()
        return st.get("consecutivePaymentFailures") == 0 and st.get("state") == "Active"

    await eventually(recovered, 60)
    assert await psp.ledger.balance(key) == Decimal("26.000000")
    # Spent down again: a second reload fits under monthlyCapAmount (25 + 25 <= 60), a third would not.
    await psp.ledger.post([adjustment(f"spend-1-{key}", key, datetime.now(UTC), Decimal("-25"), reason="spend",
                                      actor="test")])
    intent = await eventually(in_flight_again, 60)
    attempt = await psp.ctx.payments.pending(key)
    assert attempt is not None and attempt.amount == Decimal(25)
    body = pi_event("payment_intent.succeeded", intent, attempt.id, key, 2500)
    assert (await deliver(psp, namespace, body, psp.signed(body))).json()["outcome"] == "accepted"

    async def credited() -> bool:
        return await psp.ledger.balance(key) == Decimal("26.000000")

    await eventually(credited, 30)
    await psp.ledger.post([adjustment(f"spend-2-{key}", key, datetime.now(UTC), Decimal("-25"), reason="spend",
                                      actor="test")])
    psp.clock.advance(timedelta(seconds=2))
    await asyncio.sleep(4)
    assert (await psp.ctx.payments.pending(key)) is None  # 50 + 25 > 60: the cap holds
    assert [a.state for a in await psp.ctx.payments.attempts(key)].count("succeeded") == 2


async def test_a_changed_credentials_secret_takes_effect_within_seconds(
        psp: Setup, billing: Billing, kube: k8s.ApiClient, namespace: str) -> None:
    """Rotating the webhook secret in the connector's Secret (on the real control plane, the connector acting as its
    ServiceAccount, which may only GET Secrets): deliveries signed with the new secret are accepted, and with the old
    one refused, within a few seconds, not at the next resync (60 s)."""
    await stripe_connector(kube, billing, namespace)
    body = pi_event("payment_intent.succeeded", "pi_rotation", "rl_rotation", f"{namespace}/nobody", 100)
    assert (await deliver(psp, namespace, body, psp.signed(body))).status_code == 200
    rotated = "whsec_rotated0002"
    assert (await deliver(psp, namespace, body, psp.signed(body, rotated))).status_code == 400
    started = time.monotonic()
    await k8s.CoreV1Api(kube).patch_namespaced_secret("stripe-credentials", namespace, {"data": {
        "webhookSecret": b64(rotated)}})

    async def rotated_in_use() -> bool:
        return (await deliver(psp, namespace, body, psp.signed(body, rotated))).status_code == 200

    await eventually(rotated_in_use, 60, interval=0.1)
    took = time.monotonic() - started
    assert took < 6, f"the new webhook secret was used after {took:.1f}s"
    assert (await deliver(psp, namespace, body, psp.signed(body))).status_code == 400  # the old one no more
    st = await status_of(billing, "BillingConnector", "stripe", namespace)
    assert conds(st)["CredentialsValid"]["status"] == "True" and rotated not in json.dumps(st)

"""Auto-reload limits with Stripe (stripe-mock) under concurrent triggers: two connector replicas and twelve
simultaneous reconciles start exactly one PaymentIntent; `maxReloadsPerDay` holds until 24 hours have passed."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.billing.api.kinds import TENANT_ACCOUNT
from maasctl.billing.connector.reconcilers import TenantPaymentsReconciler
from maasctl.billing.ledger import adjustment
from maasctl.runtime import Request

from ..conftest import Billing, eventually
from .psp import (
    CUSTOMER,
    Setup,
    deliver,
    fund,
    pi_event,
    secret,
    start_connector,
    status_of,
    stripe_connector,
    tenant_obj,
)

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


async def spend(setup: Setup, tenant: str, name: str, amount: str) -> None:
    await setup.ledger.post([adjustment(f"{name}-{tenant}", tenant, datetime.now(UTC), -Decimal(amount),
                                        reason="spend", actor="test")])


async def test_concurrent_triggers_start_one_reload_and_the_daily_limit_holds(
        psp: Setup, billing: Billing, kube: k8s.ApiClient, namespace: str) -> None:
    await stripe_connector(kube, billing, namespace)
    await secret(kube, namespace, "nova-stripe", {"customerId": CUSTOMER, "defaultPaymentMethodId": "pm_card_visa"})
    key = f"{namespace}/ten-nova"
    await fund(psp, key, Decimal("30.00"))  # above the threshold: nothing to do yet
    await billing.create(tenant_obj(namespace, "ten-nova", "nova-stripe", per_day=1, cap="1000"))
    replica = await start_connector(psp.cluster, psp.ledger_url, psp.clock, psp.stripe_url)
    try:
        async def both_see_it() -> bool:
            return all(c.cache.get(TENANT_ACCOUNT, "ten-nova", namespace) is not None and
                       c.registry.get(f"{namespace}/stripe") is not None for c in (psp.ctx, replica.ctx))

        await eventually(both_see_it, 60)
        await asyncio.sleep(2)
        assert await psp.ctx.payments.attempts(key) == []
        # The balance drops below the threshold; both replicas poll it, and twelve more triggers race them.
        await spend(psp, key, "spend-1", "29")
        triggers = [TenantPaymentsReconciler(ctx) for ctx in (psp.ctx, replica.ctx) for _ in range(6)]
        await asyncio.gather(*(t.reconcile(Request(namespace, "ten-nova")) for t in triggers))
        await asyncio.sleep(3)
        attempts = await psp.ctx.payments.attempts(key)
        assert len(attempts) == 1 and attempts[0].state == "pending" and attempts[0].amount == Decimal(25)
        intent = attempts[0].intent_id
        assert intent is not None and intent.startswith("pi_")

        async def shown() -> bool:
            return (await status_of(billing, "TenantAccount", "ten-nova", namespace)).get(
                "pendingReloadIntentID") == intent

        await eventually(shown, 60)
        body = pi_event("payment_intent.succeeded", intent, attempts[0].id, key, 2500)
        assert (await deliver(psp, namespace, body, psp.signed(body))).json()["outcome"] == "accepted"
        assert await psp.ledger.balance(key) == Decimal("26.000000")

        # Spent down again the same day: maxReloadsPerDay 1 holds on every replica.
        await spend(psp, key, "spend-2", "25")
        await asyncio.gather(*(t.reconcile(Request(namespace, "ten-nova")) for t in triggers))
        await asyncio.sleep(3)
        assert len(await psp.ctx.payments.attempts(key)) == 1
        # A day later the limit lifts: one more reload, still only one.
        psp.clock.advance(timedelta(hours=24, seconds=5))

        async def second() -> bool:
            return len(await psp.ctx.payments.attempts(key)) >= 2

        await eventually(second, 60)
        await asyncio.gather(*(t.reconcile(Request(namespace, "ten-nova")) for t in triggers))
        await asyncio.sleep(2)
        later = await psp.ctx.payments.attempts(key)
        assert len(later) == 2 and sorted(a.state for a in later) == ["pending", "succeeded"]
    finally:
        await replica.stop()

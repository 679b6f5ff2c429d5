"""A budget firing's signed webhook, end to end: the billing controller (as its ServiceAccount, PostgreSQL ledger)
claims the firing and records its notice in the same transaction; the psp-connector POSTs it, signed with the
tenant's `webhook` connector's `hmacSecret`, to a real HTTP receiver run by the test. One POST per firing, none
again on later reconciles of the same period; a receiver answering 500 never holds up the Freeze, the failure is
counted and reported by an Event without the secret, and the delivery is retried with the same event id."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s
from prometheus_client import REGISTRY

from maasctl.billing.api.budget import BudgetPeriod
from maasctl.billing.ledger import Ledger, usage_charge
from maasctl.billing.ledger.budget_book import BudgetBook
from maasctl.billing.rules import budget, budget_notice, signing
from maasctl.billing.rules.clock import ManualClock
from maasctl.testenv import ControlPlane
from maasctl.testenv.postgres import PostgresServer

from ..conftest import SETTINGS, Billing, events_for, eventually, start_billing, wait_event
from .psp import API, Setup, connector_ready, loopback, secret, start_connector

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
HMAC_SECRET = "budget-hmac-secret-7731"


@dataclass
class Receiver:
    """The tenant's own endpoint: records every POST, answers `status`."""

    url: str = ""
    status: int = 200
    seen: list[tuple[int, dict[str, str], bytes]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.seen.append((self.status, dict(request.headers), body))
        return web.json_response({}, status=self.status)

    def fired(self, accepted_only: bool = True) -> list[tuple[dict[str, str], bytes]]:
        return [(h, b) for s, h, b in self.seen
                if json.loads(b)["type"] == budget_notice.EVENT_TYPE and (s < 300 or not accepted_only)]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rec = Receiver()
    async with loopback("/hook", rec.handle) as url:
        rec.url = url
        yield rec


@pytest.fixture(scope="module")
async def setup(billing_cluster: ControlPlane, billing_pg: PostgresServer) -> AsyncIterator[Setup]:
    url = await billing_pg.acreate_database(f"n_{uuid.uuid4().hex[:10]}")
    running = await start_billing(billing_cluster, dataclasses.replace(SETTINGS, ledger_url=url,
                                                                       budget_resync_seconds=1))
    clock = ManualClock(datetime.now(UTC).replace(microsecond=0))
    connector = await start_connector(billing_cluster, url, clock, "http://127.0.0.1:9")  # no Stripe here
    ledger = Ledger.from_url(url)
    await ledger.create_schema()
    try:
        yield Setup(running, connector, clock, ledger, url, billing_cluster, "http://127.0.0.1:9")
    finally:
        await connector.stop()
        await ledger.close()
        await running.stop()


def failed_count() -> float:
    return REGISTRY.get_sample_value("maasctl_billing_budget_webhooks_total", {"outcome": "failed"}) or 0.0


def fired_reason(obj: dict[str, Any] | None) -> str | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == "ThresholdFired":
            return str(c.get("reason"))
    return None


async def charge(setup: Setup, tenant: str, amount: str) -> None:
    at = setup.billing.clock.now()
    await setup.ledger.post([usage_charge(f"usage:{uuid.uuid4().hex}", tenant, at, Decimal(amount),
                                          currency="USD", tokens=1000, details={})])


def verified(headers: dict[str, str], body: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(body)
    verdict = signing.verify(HMAC_SECRET, headers.get(signing.HEADER), body, int(doc["created"]))
    assert verdict.ok, verdict
    assert headers.get("Idempotency-Key") == doc["id"]
    return doc


async def test_a_firing_is_posted_once_signed_and_a_failing_receiver_never_holds_up_the_freeze(
        setup: Setup, billing: Billing, kube: k8s.ApiClient, namespace: str, receiver: Receiver) -> None:
    await secret(kube, namespace, "hooks-credentials", {"hmacSecret": HMAC_SECRET, "url": receiver.url})
    await billing.create({"apiVersion": API, "kind": "BillingConnector",
                          "metadata": {"name": "hooks", "namespace": namespace},
                          "spec": {"type": "webhook", "credentialsSecretRef": {"name": "hooks-credentials"}}})
    await connector_ready(billing, namespace, "hooks", webhook=False)
    await billing.create({"apiVersion": API, "kind": "TenantAccount", "metadata": {"name": "ten-vega",
                                                                                   "namespace": namespace},
                          "spec": {"displayName": "Vega", "planRef": {"name": "none"}, "billingMode": "ShowbackOnly",
                                   "billingConnectorRef": {"name": "hooks"}}})
    await billing.create({"apiVersion": API, "kind": "BudgetPolicy", "metadata": {"name": "cap",
                                                                                  "namespace": namespace},
                          "spec": {"tenantRef": {"name": "ten-vega"}, "caps": [
                              {"amount": "1.00", "period": "Monthly", "thresholds": [
                                  {"pct": 50, "action": "Notify"}, {"pct": 100, "action": "Freeze"}]}]}})
    tenant = f"{namespace}/ten-vega"

    async def reason(want: str) -> dict[str, Any] | None:
        obj = await billing.get("BudgetPolicy", "cap", namespace)
        return obj if fired_reason(obj) == want else None

    await eventually(lambda: reason("NoneFired"))
    assert not receiver.fired(accepted_only=False)

    # 60 %: the Notify threshold fires; one signed POST arrives.
    await charge(setup, tenant, "0.60")
    await eventually(lambda: reason("Notified"))

    async def one_post() -> bool:
        return len(receiver.fired()) == 1

    await eventually(one_post, 60)
    doc = verified(*receiver.fired()[0])
    start, end = budget.period_bounds(BudgetPeriod.MONTHLY, setup.billing.clock.now())
    key = budget.firing_key(f"{namespace}/cap", 0, 50, start)
    assert doc["type"] == "budget.threshold_fired" and doc["id"] == budget_notice.event_id(key)
    assert doc["data"] == {
        "budget": {"namespace": namespace, "name": "cap"}, "tenant": f"{namespace}/ten-vega", "capIndex": 0,
        "period": "Monthly",
        "periodStart": start.strftime("%Y-%m-%dT%H:%M:%SZ"), "periodEnd": end.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "thresholdPct": 50, "action": "Notify", "actions": ["Notify"], "currentSpend": "0.600000", "cap": "1.00"}
    assert not signing.verify("another-secret", receiver.fired()[0][0].get(signing.HEADER), receiver.fired()[0][1],
                              int(doc["created"])).ok
    await wait_event(kube, namespace, "ten-vega", "BudgetWebhookSent")

    # Later reconciles of the same period (resync every second, the connector every second): no second POST.
    before = len(receiver.seen)
    setup.clock.advance(timedelta(minutes=10))  # the connector's clock: any retry would be due
    await charge(setup, tenant, "0.01")  # spend moves, nothing new is reached
    await eventually(lambda: _spend(billing, namespace, "0.610000"))
    await asyncio.sleep(4)  # a few reconciles of both controllers
    assert len(receiver.fired(accepted_only=False)) == 1 and len(receiver.seen) == before
    assert (await BudgetBook(setup.ledger.engine).notice_states(f"{namespace}/cap"))[key][:2] == ("sent", 0)

    # The receiver fails: 110 % freezes all the same, the failure is counted and reported, then retried.
    failed_before = failed_count()
    receiver.status = 500
    await charge(setup, tenant, "0.50")
    frozen = await eventually(lambda: reason("Frozen"))
    assert "billing budget" in next(c["message"] for c in frozen["status"]["conditions"]
                                    if c["type"] == "ThresholdFired")
    note = await wait_event(kube, namespace, "ten-vega", "BudgetWebhookFailed", "Warning")
    assert "PSPError (http_500)" in note and HMAC_SECRET not in note and receiver.url not in note
    key100 = budget.firing_key(f"{namespace}/cap", 0, 100, start)
    state, attempts, failure = (await BudgetBook(setup.ledger.engine).notice_states(f"{namespace}/cap"))[key100]
    assert state == "pending" and attempts >= 1 and failure == "PSPError (http_500)"
    assert failed_count() >= failed_before + 1
    refused = receiver.fired(accepted_only=False)[1:]
    assert refused and {json.loads(b)["id"] for _, b in refused} == {budget_notice.event_id(key100)}

    receiver.status = 200
    setup.clock.advance(timedelta(seconds=budget_notice.MAX_BACKOFF_SECONDS + 1))

    async def delivered() -> bool:
        return len(receiver.fired()) == 2

    await eventually(delivered, 60)
    doc = verified(*receiver.fired()[1])
    assert doc["id"] == budget_notice.event_id(key100)
    assert doc["data"]["action"] == "Freeze" and doc["data"]["actions"] == ["Notify", "Freeze"]
    assert doc["data"]["currentSpend"] == "1.110000" and doc["data"]["thresholdPct"] == 100

    async def settled() -> bool:  # the receiver sees the POST before the sender records its answer
        return (await BudgetBook(setup.ledger.engine).notice_states(f"{namespace}/cap"))[key100][0] == "sent"

    await eventually(settled, 30)
    for _type, _reason, text in await events_for(kube, namespace, "ten-vega"):
        assert HMAC_SECRET not in text


async def _spend(billing: Billing, namespace: str, want: str) -> bool:
    obj = await billing.get("BudgetPolicy", "cap", namespace)
    return bool(obj and (obj.get("status") or {}).get("currentSpend") == want)

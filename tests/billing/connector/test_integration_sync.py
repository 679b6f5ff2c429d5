"""The BillingConnector's usage and invoice sync against stripe-mock through the official SDK, with the billing
controller and a PostgreSQL ledger: an Invoiced tenant's rated usage is pushed as invoice items in whole cents
(the remainder carried), one invoice is created and finalized per `invoiceInterval` period, `taxMode: psp` asks
Stripe for automatic tax and `none` does not, `lastSync` and `SyncHealthy` report each run (a PSP outage is
`SyncFailed`, and the next run recovers), and `observedGeneration` follows an edited connector. A signed payment
confirmation that does not match its reload sets `PaymentCorroborationFailed` and credits nothing.

Between the connector and stripe-mock sits a recording pass-through proxy (it forwards every request unchanged
and can answer 503 for an API's outage): stripe-mock remembers nothing, the proxy shows what the SDK sent it."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s

from maasctl.billing.ledger import Ledger
from maasctl.billing.ledger.entries import usage_charge
from maasctl.billing.ledger.invoice_book import InvoiceBook
from maasctl.billing.rules.clock import ManualClock
from maasctl.runtime import Request
from maasctl.testenv import ControlPlane
from maasctl.testenv.postgres import PostgresServer
from maasctl.testenv.stripemock import StripeMock
from maasctl.tls import default_tls

from ..conftest import SETTINGS, Billing, eventually, start_billing
from .psp import (
    API,
    CUSTOMER,
    SECRET_KEY,
    WEBHOOK_SECRET,
    Setup,
    conds,
    connector_ready,
    deliver,
    fund,
    pi_event,
    secret,
    start_connector,
    status_of,
    tenant_obj,
)

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
# An hour boundary a little ahead of real time: invoice periods are counted on the connector's clock.
T0 = (datetime.now(UTC) + timedelta(hours=2)).replace(minute=10, second=0, microsecond=0)


@dataclasses.dataclass
class Recorder:
    """A pass-through proxy in front of stripe-mock: what the SDK sent (method, path, form); the paths in
    `failing` are answered 503 (an outage of that API)."""

    upstream: str
    seen: list[tuple[str, str, dict[str, list[str]]]] = dataclasses.field(default_factory=list)
    failing: set[str] = dataclasses.field(default_factory=set)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.path in self.failing:
            out = web.json_response({"error": {"type": "api_error", "message": "outage"}}, status=503)
        else:
            self.seen.append((request.method, request.path, parse_qs(body.decode())))
            headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
            async with httpx.AsyncClient(timeout=10, verify=default_tls()) as http:
                answer = await http.request(request.method, f"{self.upstream}{request.path_qs}", content=body,
                                            headers=headers)
            out = web.Response(body=answer.content, status=answer.status_code,
                               content_type=answer.headers.get("content-type", "application/json").split(";")[0])
        out.force_close()  # no keep-alive: no connection handler outlives the request (the tests count tasks)
        return out

    def calls(self, path: str, customer: str | None = None) -> list[dict[str, list[str]]]:
        return [form for method, p, form in self.seen
                if method == "POST" and p == path and customer in (None, *form.get("customer", ()))]


@pytest.fixture(scope="module")
async def synced(billing_cluster: ControlPlane, billing_pg: PostgresServer, stripe_mock: StripeMock
                 ) -> AsyncIterator[tuple[Setup, Recorder]]:
    recorder = Recorder(stripe_mock.url)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recorder.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    recorder.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    url = await billing_pg.acreate_database(f"y_{uuid.uuid4().hex[:10]}")
    running = await start_billing(billing_cluster, dataclasses.replace(SETTINGS, ledger_url=url,
                                                                       wallet_resync_seconds=2))
    running.clock.set(T0)
    clock = ManualClock(T0)
    connector = await start_connector(billing_cluster, url, clock, recorder.url)
    ledger = Ledger.from_url(url)
    await ledger.create_schema()
    try:
        yield Setup(running, connector, clock, ledger, url, billing_cluster, recorder.url), recorder
    finally:
        await connector.stop()
        await ledger.close()
        await running.stop()
        await runner.cleanup()


def connector_obj(ns: str, name: str, tax: str | None, invoice: str = "1h") -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "stripe", "credentialsSecretRef": {"name": "stripe-credentials"},
                            "sync": {"usageRecordsInterval": "1m", "invoiceInterval": invoice}}
    if tax is not None:
        spec["taxMode"] = tax
    return {"apiVersion": API, "kind": "BillingConnector", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def invoiced_tenant(ns: str, name: str, connector: str, customer_secret: str) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "TenantAccount", "metadata": {"name": name, "namespace": ns},
            "spec": {"displayName": name, "planRef": {"name": "none"}, "billingMode": "Invoiced",
                     "pspCustomerSecretRef": {"name": customer_secret}, "billingConnectorRef": {"name": connector}}}


def charge(tenant: str, amount: str) -> Any:
    return usage_charge(f"usage:{uuid.uuid4().hex}", tenant, T0, Decimal(amount), currency="USD", tokens=100,
                        details={"record": "test"})


def wake(setup: Setup, ns: str, name: str) -> None:
    ctl = next(c for c in setup.connector.manager.controllers if c.name == "billingconnector")
    ctl.queue.add(Request(ns, name))


async def test_invoiced_usage_is_pushed_and_invoiced_per_interval_with_either_tax_mode(
        synced: tuple[Setup, Recorder], billing: Billing, kube: k8s.ApiClient, namespace: str) -> None:
    setup, recorder = synced
    clock = setup.clock
    clock.set(T0)
    await secret(kube, namespace, "stripe-credentials", {"secretKey": SECRET_KEY, "webhookSecret": WEBHOOK_SECRET})
    customers = {"psp": f"cus_tax{uuid.uuid4().hex[:8]}", "none": f"cus_notax{uuid.uuid4().hex[:8]}"}
    for tax, customer in customers.items():
        await secret(kube, namespace, f"customer-{tax}", {"customerId": customer,
                                                          "defaultPaymentMethodId": "pm_card_visa"})
        await billing.create(connector_obj(namespace, f"stripe-{tax}", tax if tax == "psp" else None))
        await billing.create(invoiced_tenant(namespace, f"ten-{tax}", f"stripe-{tax}", f"customer-{tax}"))
        await setup.ledger.post([charge(f"{namespace}/ten-{tax}", "1.234567")])

    async def synced_status(name: str, at: datetime, pushed: int) -> dict[str, Any] | None:
        st = await status_of(billing, "BillingConnector", name, namespace)
        last = st.get("lastSync") or {}
        healthy = conds(st).get("SyncHealthy", {})
        return st if (last.get("at") == at.strftime("%Y-%m-%dT%H:%M:%SZ") and last.get("pushedRecords") == pushed
                      and healthy.get("status") == "True") else None

    # The first run pushes 1.23 (123 cents; 0.004567 carried) and invoices it, with or without automatic tax.
    for tax, customer in customers.items():
        await connector_ready(billing, namespace, f"stripe-{tax}", webhook=False)
        st = await eventually(lambda tax=tax: synced_status(f"stripe-{tax}", T0, 1), 60)
        assert st["lastSync"]["failed"] == 0 and conds(st)["SyncHealthy"]["reason"] == "Synced"
        items = recorder.calls("/v1/invoiceitems", customer)
        assert [(i["amount"], i["currency"]) for i in items] == [(["123"], ["usd"])]
        invoices = recorder.calls("/v1/invoices", customer)
        assert len(invoices) == 1
        assert invoices[0]["automatic_tax[enabled]"] == (["true"] if tax == "psp" else ["false"])
        assert invoices[0]["pending_invoice_items_behavior"] == ["include"]
        assert sum(p.startswith("/v1/invoices/") and p.endswith("/finalize") for _, p, _ in recorder.seen) >= 1

    # Within the same hour: the next usage run pushes the carried remainder with the new usage, no new invoice.
    await setup.ledger.post([charge(f"{namespace}/ten-psp", "0.005433")])  # + 0.004567 carried = 1 cent
    clock.set(T0 + timedelta(minutes=1, seconds=1))
    wake(setup, namespace, "stripe-psp")
    await eventually(lambda: synced_status("stripe-psp", T0 + timedelta(minutes=1, seconds=1), 1), 60)
    customer = customers["psp"]
    assert [i["amount"] for i in recorder.calls("/v1/invoiceitems", customer)] == [["123"], ["1"]]
    assert len(recorder.calls("/v1/invoices", customer)) == 1

    # Nothing new: a run pushes nothing; the cent pushed waits for the next period's invoice.
    clock.set(T0 + timedelta(minutes=45))
    wake(setup, namespace, "stripe-psp")
    await eventually(lambda: synced_status("stripe-psp", T0 + timedelta(minutes=45), 0), 60)
    assert len(recorder.calls("/v1/invoices", customer)) == 1

    # The next invoiceInterval period: what was pushed since the last invoice is invoiced, once.
    nxt = T0 + timedelta(minutes=51)
    clock.set(nxt)
    wake(setup, namespace, "stripe-psp")
    await eventually(lambda: synced_status("stripe-psp", nxt, 0), 60)
    assert len(recorder.calls("/v1/invoices", customer)) == 2
    # What the tenant portal shows of them (InvoiceBook): each invoice's usage, exactly what was pushed for it.
    shown = await InvoiceBook(setup.ledger.engine).page(f"{namespace}/ten-psp")
    assert shown is not None and [(i.at, i.amount, i.currency, i.records) for i in shown] == [
        (nxt, Decimal("0.01"), "USD", 1), (T0, Decimal("1.23"), "USD", 1)]

    async def accrued() -> dict[str, Any] | None:  # the wallet status follows the ledger (its watch, ~1 s)
        st = await status_of(billing, "TenantAccount", "ten-psp", namespace)
        return st if st.get("balance") == "-1.240000" else None

    st = await eventually(accrued, 30)
    assert st["state"] == "Active"  # Invoiced: accrues, never enforced
    assert "runwayDays" not in st

    # A PSP outage: the run fails (SyncFailed, records not pushed); the next run after it recovers pushes them.
    await setup.ledger.post([charge(f"{namespace}/ten-psp", "2.00")])
    recorder.failing.add("/v1/invoiceitems")
    try:
        clock.set(nxt + timedelta(minutes=2))
        wake(setup, namespace, "stripe-psp")

        async def failing() -> dict[str, Any] | None:
            st = await status_of(billing, "BillingConnector", "stripe-psp", namespace)
            return st if conds(st).get("SyncHealthy", {}).get("status") == "False" else None

        st = await eventually(failing, 60)
        assert conds(st)["SyncHealthy"]["reason"] == "SyncFailed" and st["lastSync"]["failed"] == 1
        assert SECRET_KEY not in json.dumps(st) and customer not in json.dumps(st)
    finally:
        recorder.failing.clear()
    clock.set(nxt + timedelta(minutes=4))
    wake(setup, namespace, "stripe-psp")
    await eventually(lambda: synced_status("stripe-psp", nxt + timedelta(minutes=4), 1), 60)
    assert [i["amount"] for i in recorder.calls("/v1/invoiceitems", customer)] == [["123"], ["1"], ["200"]]

    # Stripe unreachable altogether (the credentials check fails too): no sync runs, and none is reported healthy.
    recorder.failing.update({"/v1/balance", "/v1/invoiceitems", "/v1/invoices"})
    try:
        clock.set(nxt + timedelta(minutes=6))
        wake(setup, namespace, "stripe-psp")

        async def unsynced() -> dict[str, Any] | None:
            st = await status_of(billing, "BillingConnector", "stripe-psp", namespace)
            c = conds(st)
            return st if c.get("CredentialsValid", {}).get("status") == "False" else None

        st = await eventually(unsynced, 60)
        assert (conds(st)["SyncHealthy"]["status"], conds(st)["SyncHealthy"]["reason"]) == ("False", "NotConnected")
        assert st["lastSync"]["at"] == (nxt + timedelta(minutes=4)).strftime("%Y-%m-%dT%H:%M:%SZ")
    finally:
        recorder.failing.clear()

    # observedGeneration follows an edited connector (its conditions too).
    await billing.patch("BillingConnector", "stripe-none", namespace, {"spec": {"taxMode": "psp"}})

    async def observed() -> bool:
        obj = await billing.get("BillingConnector", "stripe-none", namespace)
        st = (obj or {}).get("status") or {}
        return bool(obj and obj["metadata"]["generation"] == 2 and st.get("observedGeneration") == 2
                    and all(c["observedGeneration"] == 2 for c in st["conditions"]))

    await eventually(observed, 60)


async def test_a_confirmation_that_does_not_match_its_reload_is_not_credited(
        synced: tuple[Setup, Recorder], billing: Billing, kube: k8s.ApiClient, namespace: str) -> None:
    setup, _ = synced
    setup.clock.set(T0)
    await secret(kube, namespace, "stripe-credentials", {"secretKey": SECRET_KEY, "webhookSecret": WEBHOOK_SECRET})
    await billing.create({"apiVersion": API, "kind": "BillingConnector", "metadata": {"name": "stripe",
                                                                                      "namespace": namespace},
                          "spec": {"type": "stripe", "credentialsSecretRef": {"name": "stripe-credentials"},
                                   "webhookIngress": {"host": "psp.example.com"}}})
    await connector_ready(billing, namespace)
    await secret(kube, namespace, "helix-stripe", {"customerId": CUSTOMER, "defaultPaymentMethodId": "pm_card_visa"})
    key = f"{namespace}/ten-helix"
    await fund(setup, key, Decimal("1.00"))
    await billing.create(tenant_obj(namespace, "ten-helix", "helix-stripe"))

    async def pending() -> str | None:
        return (await status_of(billing, "TenantAccount", "ten-helix", namespace)).get("pendingReloadIntentID")

    intent = await eventually(pending, 60)
    attempt = await setup.ctx.payments.pending(key)
    assert attempt is not None
    # Correctly signed, but 95.00 where the reload asked 25.00: not credited, reported.
    wrong = pi_event("payment_intent.succeeded", intent, attempt.id, key, 9500)
    answer = await deliver(setup, namespace, wrong, setup.signed(wrong))
    assert answer.status_code == 200 and answer.json()["outcome"] == "corroboration_failed"

    async def mismatch() -> dict[str, Any] | None:
        st = await status_of(billing, "TenantAccount", "ten-helix", namespace)
        c = conds(st).get("PaymentCorroborationFailed", {})
        return st if c.get("status") == "True" else None

    st = await eventually(mismatch, 60)
    assert conds(st)["PaymentCorroborationFailed"]["reason"] == "Mismatch"
    assert await setup.ledger.balance(key) == Decimal("1.000000")
    # The real confirmation credits the reload once and clears the condition.
    right = pi_event("payment_intent.succeeded", intent, attempt.id, key, 2500)
    assert (await deliver(setup, namespace, right, setup.signed(right))).json()["outcome"] == "accepted"

    async def corroborated() -> bool:
        st = await status_of(billing, "TenantAccount", "ten-helix", namespace)
        return conds(st).get("PaymentCorroborationFailed", {}).get("reason") == "Corroborated"

    await eventually(corroborated, 60)
    assert await setup.ledger.balance(key) == Decimal("26.000000")

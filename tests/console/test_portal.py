"""The tenant portal (`/portal`) on the console test world, with the real billing operator in its own process
serving the portal API (`--portal-api-bind-address`, the port the console was told), its ledger on SQLite and
maas-api's database for the API keys' labels.

Two tenants of two organizations: `ten-north` (organization portal-north: a subscription of the subscription
namespace names group north-team, so nora) and `ten-south` (portal-south: south-team, so sam). A third,
`ten-open`, answers to an organization whose subscription is open to everyone (`*`): nobody is its member. nora
reads her wallet, spend, budgets, reservations, invoices and ledger in Chromium; then every identifier of ten-south
is tried in URLs, query strings, forms and exports, in the browser and over plain HTTP (the console and the API
itself): each answer is the one a tenant that does not exist gets, and holds nothing of ten-south.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes_asyncio import client as k8s

from maasctl import samples
from maasctl.billing.connector.payments import Payments, UsageBook
from maasctl.billing.ledger import Ledger, credit, usage_charge
from maasctl.contract.billing_portal import API_PREFIX, MAX_CREDIT_BODY
from maasctl.runtime import Client
from maasctl.runtime.served import apply_all
from maasctl.tls import default_tls
from tests.billing.conftest import eventually
from tests.console import billing_world
from tests.console.browser import Browser
from tests.console.conftest import ConsoleWorld

NS = "portal-tests"
GROUP = "billing.opendatahub.io/v1alpha1"
ORG_LABEL = "billing.opendatahub.io/organization-id"
NOT_FOUND = "There is no such page."
NORTH_INVOICE, SOUTH_INVOICE = "maasctl-invoice-north-0001", "maasctl-invoice-south-0001"  # the connector's keys


@dataclass
class Portal:
    api: str  # the billing operator's portal API
    north_entries: list[int]
    south_entries: list[int]
    ledger_url: str  # the operator's ledger (SQLite): what a credit recorded, read beside it


def _objects(now: datetime, sub_ns: str) -> list[dict[str, Any]]:
    def obj(kind: str, name: str, spec: dict[str, Any], org: str | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "namespace": NS}
        if org:
            meta["labels"] = {ORG_LABEL: org}
        return {"apiVersion": GROUP, "kind": kind, "metadata": meta, "spec": spec}

    def subscription(name: str, org: str, owner: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSSubscription",
                "metadata": {"name": name, "namespace": sub_ns},
                "spec": {"owner": owner, "organization": {"id": org},
                         "modelRefs": [{"name": samples.EXTERNAL_MODEL, "namespace": samples.MODEL_NAMESPACE,
                                        "tokenRateLimits": [{"limit": 1000, "window": "1m"}]}]}}

    tenant = {"planRef": {"name": "basic"}, "billingMode": "Prepaid"}
    return [
        subscription("portal-north", "portal-north", {"groups": [{"name": "north-team"}]}),
        subscription("portal-south", "portal-south", {"groups": [{"name": "south-team"}]}),
        subscription("portal-open", "portal-open", {"users": ["*"]}),
        obj("PriceBook", "pb-eur", {"currency": "EUR", "effectiveFrom": (now + timedelta(seconds=5)).strftime(
            "%Y-%m-%dT%H:%M:%SZ"), "noticeDays": 0, "skus": [
            {"sku": "llm/gpt-x", "unit": "per-1M-tokens", "rates": {"prompt_tokens": "2.50"}}]}),
        obj("Plan", "basic", {"limits": {"tokensPerMinute": 100000}, "priceBookRef": "pb-eur",
                              "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                            "name": "nowhere"}}),
        obj("TenantAccount", "ten-north", {**tenant, "displayName": "North Labs", "reloadPolicy": {
            "enabled": True, "thresholdAmount": "5.00", "reloadAmount": "20.00", "monthlyCapAmount": "100.00"},
            "gracePolicy": {"graceAmount": "1.50"}}, org="portal-north"),
        obj("TenantAccount", "ten-south", {**tenant, "displayName": "South Foods"}, org="portal-south"),
        obj("TenantAccount", "ten-open", {**tenant, "displayName": "Open Bar"}, org="portal-open"),
        obj("BudgetPolicy", "north-monthly", {"tenantRef": {"name": "ten-north"}, "caps": [
            {"amount": "10.00", "period": "Monthly", "thresholds": [{"pct": 50, "action": "Notify"},
                                                                     {"pct": 100, "action": "Throttle"}]}]}),
        obj("BudgetPolicy", "south-secret-budget", {"tenantRef": {"name": "ten-south"}, "caps": [
            {"amount": "77.00", "period": "Monthly", "thresholds": [{"pct": 50, "action": "Notify"}]}]}),
        obj("Reservation", "north-gpus", {"tenantRef": "ten-north", "sku": "h200", "count": 2, "geo": "us-east",
                                          "window": {"start": (now + timedelta(days=40)).strftime(
                                              "%Y-%m-%dT00:00:00Z"), "end": (now + timedelta(days=70)).strftime(
                                              "%Y-%m-%dT00:00:00Z")},
                                          "class": "Guaranteed", "monthlyPrice": "1200.50"}),
        obj("Reservation", "south-gpus", {"tenantRef": "ten-south", "sku": "h100", "count": 8, "geo": "eu-west",
                                          "window": {"start": (now + timedelta(days=40)).strftime(
                                              "%Y-%m-%dT00:00:00Z"), "end": (now + timedelta(days=70)).strftime(
                                              "%Y-%m-%dT00:00:00Z")},
                                          "class": "Guaranteed", "monthlyPrice": "9999.00"}),
    ]


def _line(record: str, tokens: int, amount: str, key: str) -> dict[str, Any]:
    """A rated line as the rater keeps it (billing.rules.rating.RatedLine.details plus the key id)."""
    return {"record": record, "model": "llm/gpt-x", "priceBook": "pb-eur", "generation": 1, "sku": "llm/gpt-x",
            "geo": "", "unit": "per-1M-tokens", "termination": "complete", "estimated": False, "amount": amount,
            "subtotal": amount, "exact": amount, "rounding": "half-even",
            "components": {"prompt_tokens": {"quantity": str(tokens), "rate": "2.50", "per": 1000000,
                                             "amount": amount, "source": "rate"}}, "keyId": key}


@pytest.fixture(scope="module")
async def portal(world: ConsoleWorld) -> AsyncIterator[Portal]:
    stack = world.stack
    client = Client(stack.api)
    await billing_world.billing_namespace(stack, NS)
    now = datetime.now(UTC)
    earlier = max(now - timedelta(hours=1), now.replace(day=1, hour=0, minute=0, second=0, microsecond=0))
    sub_ns = stack.settings.subscription_namespace
    # The API keys' labels live in maas-api's database (set at mint): two of nora's keys, one of sam's.
    with sqlite3.connect(stack.directory / "maas-api.db") as db:
        db.executemany("INSERT INTO api_key_labels (key_id, name, value) VALUES (?, ?, ?)",
                       [("k-north-rag", "project", "rag"), ("k-north-chat", "project", "chat"),
                        ("k-south", "project", "south-secret-project")])
    with tempfile.TemporaryDirectory(prefix="maasctl-portal-") as tmp:
        ledger_url = f"sqlite+aiosqlite:///{Path(tmp) / 'ledger.db'}"
        ledger = Ledger.from_url(ledger_url)
        try:
            await ledger.create_schema()
            north, south = f"{NS}/ten-north", f"{NS}/ten-south"
            await ledger.post([
                credit("north-welcome", north, now - timedelta(days=2), Decimal("25.50"), reason="welcome",
                       actor="tests", currency="EUR"),
                usage_charge("usage:north-1", north, earlier, Decimal("5.000000"), currency="EUR",
                             tokens=2_000_000, details=_line("north-1", 2_000_000, "5.000000", "k-north-rag")),
                usage_charge("usage:north-2", north, now, Decimal("1.250000"), currency="EUR", tokens=500_000,
                             details=_line("north-2", 500_000, "1.250000", "k-north-chat")),
                credit("south-welcome", south, now, Decimal("4242.42"), reason="south private credit",
                       actor="tests", currency="EUR"),
                usage_charge("usage:south-1", south, now, Decimal("333.330000"), currency="EUR", tokens=133_332_000,
                             details=_line("south-1", 133_332_000, "333.330000", "k-south")),
            ])
            north_ids = [e.id for e in await ledger.entries(north)]
            south_ids = [e.id for e in await ledger.entries(south)]
            # What a psp-connector pushed for invoicing and the invoice it created, for each tenant, in its own
            # tables (its schema history): no ledger entry is added.
            payments = Payments(ledger)
            await payments.ensure_schema()
            usage = UsageBook(payments)
            ids = {e.key: e.id for e in [*await ledger.entries(north), *await ledger.entries(south)]}
            for key, tenant, upto, amount, when in [("north-1", north, "usage:north-1", "5.00", earlier),
                                                    ("north-2", north, "usage:north-2", "1.25", now),
                                                    ("south-1", south, "usage:south-1", "7777.77", now)]:
                await usage.record(f"maasctl-usage-{key}", f"{NS}/psp", tenant, ids[upto], 1, Decimal(amount),
                                   "EUR", f"ii_{key}", when)
            await usage.record_invoice(NORTH_INVOICE, f"{NS}/psp", north, "in_north_0001", now)
            await usage.record_invoice(SOUTH_INVOICE, f"{NS}/psp", south, "in_SOUTHINV_42", now)
        finally:
            await ledger.close()
        objs = _objects(now, sub_ns)
        await apply_all(client, objs[:5], field_manager="portal-tests")  # subscriptions, PriceBook, Plan
        operator = billing_world.billing_operator(
            stack, NS, ledger_url, Path(tmp), "--metrics-bind-address=0",
            f"--portal-api-bind-address=127.0.0.1:{billing_world.api_port()}",
            f"--portal-subscription-namespace={sub_ns}")
        operator.start()
        try:
            await eventually(lambda: _active(stack.api))
            await apply_all(client, objs[5:], field_manager="portal-tests")
            yield Portal(f"http://127.0.0.1:{billing_world.api_port()}", north_ids, south_ids, ledger_url)
        finally:
            print(operator.log_tail())  # shown with a failure
            await asyncio.to_thread(operator.stop)
            custom = k8s.CustomObjectsApi(stack.api)
            for name in ("portal-north", "portal-south", "portal-open"):
                await custom.delete_namespaced_custom_object("maas.opendatahub.io", "v1alpha1", sub_ns,
                                                            "maassubscriptions", name)
            await k8s.CoreV1Api(stack.api).delete_namespace(NS)
            with sqlite3.connect(stack.directory / "maas-api.db") as db:
                db.execute("DELETE FROM api_key_labels WHERE key_id LIKE 'k-north-%' OR key_id = 'k-south'")


async def _active(api: k8s.ApiClient) -> bool:
    obj = await k8s.CustomObjectsApi(api).get_namespaced_custom_object("billing.opendatahub.io", "v1alpha1", NS,
                                                                      "pricebooks", "pb-eur")
    return bool((obj.get("status") or {}).get("state") == "Active")


async def _status(api: k8s.ApiClient, name: str) -> dict[str, Any]:
    obj = await k8s.CustomObjectsApi(api).get_namespaced_custom_object("billing.opendatahub.io", "v1alpha1", NS,
                                                                      "tenantaccounts", name)
    return dict(obj.get("status") or {})


async def _balance(api: k8s.ApiClient, name: str) -> str | None:
    return (await _status(api, name)).get("balance")


SOUTH_SECRETS = ("South Foods", "4,242.42", "4242.42", "333.33", "south-secret", "h100", "9,999", "k-south",
                 "in_SOUTHINV_42", "7,777.77", "7777.77")


def _south_identifiers(portal: Portal) -> Iterator[str]:
    """Console paths naming ten-south (or its entries) every way: path, encodings, entry ids, query strings."""
    south_id, north_id = portal.south_entries[0], portal.north_entries[0]
    yield f"/portal/{NS}/ten-south"
    yield f"/portal/{NS}/%74en-south"  # percent-encoded letters
    yield f"/portal/{NS}/ten-north/../ten-south"
    yield f"/portal/{NS}/ten-north/%2E%2E/ten-south"
    yield f"/portal/{NS}%2Ften-south"
    yield f"/portal/{NS}/TEN-SOUTH"
    yield f"/portal/{NS}/ten-south/ledger"
    yield f"/portal/{NS}/ten-south/ledger?kind=credit"
    yield f"/portal/{NS}/ten-south/ledger/{south_id}"
    yield f"/portal/{NS}/ten-north/ledger/{south_id}"  # another tenant's entry under one's own tenant
    yield f"/portal/{NS}/ten-north/ledger/{south_id}?tenant=ten-south&namespace={NS}&name=ten-south"
    yield f"/portal/{NS}/ten-south/export.csv?from=2000-01-01&to=2000-12-31"
    yield f"/portal/{NS}/ten-south/ledger/{north_id}"  # one's own entry under another tenant
    yield f"/portal/{NS}/ten-south/invoices/{SOUTH_INVOICE}"
    yield f"/portal/{NS}/ten-north/invoices/{SOUTH_INVOICE}"  # another tenant's invoice under one's own tenant
    yield f"/portal/{NS}/ten-north/invoices/%6Daasctl-invoice-south-0001"  # percent-encoded letters
    yield f"/portal/{NS}/ten-north/invoices/{SOUTH_INVOICE}?tenant=ten-south&before=1"
    yield f"/portal/{NS}/ten-north/invoices/..%2F..%2Ften-south%2Finvoices%2F{SOUTH_INVOICE}"
    yield f"/portal/{NS}/ten-south/invoices/{NORTH_INVOICE}"  # one's own invoice under another tenant
    yield f"/portal/{NS}/ten-open"  # the organization open to everyone: nobody's tenant
    yield f"/portal/{NS}/no-such-tenant"  # the baseline: a tenant that does not exist


@contextlib.asynccontextmanager
async def _signed_in(world: ConsoleWorld, user: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=world.url, verify=default_tls()) as http:
        page = await http.get("/signin")
        match = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert match
        signed = await http.post("/signin", data={"token": world.token(user), "csrf_token": match.group(1)})
        assert signed.status_code == 303
        yield http


async def test_the_api_answers_a_tenant_to_its_members_only(world: ConsoleWorld, portal: Portal) -> None:
    """Plain HTTP at the billing operator's portal API: the API decides, whatever the caller says."""
    async with httpx.AsyncClient(base_url=portal.api + API_PREFIX, verify=default_tls()) as api:
        async def get(path: str, user: str | None = None, **headers: str) -> httpx.Response:
            auth = {"Authorization": f"Bearer {world.token(user)}"} if user else {}
            return await api.get(path, headers={**auth, **headers})

        mine = (await get("/tenants", "nora")).json()
        assert [(t["namespace"], t["name"]) for t in mine["tenants"]] == [(NS, "ten-north")]
        assert [t["name"] for t in (await get("/tenants", "sam")).json()["tenants"]] == ["ten-south"]
        assert (await get("/tenants", "alice")).json()["tenants"] == []  # `*` makes nobody a member
        north = (await get(f"/tenants/{NS}/ten-north", "nora")).json()
        assert north["access"] == "member" and north["displayName"] == "North Labs" and north["currency"] == "EUR"
        assert [b["name"] for b in north["budgets"]] == ["north-monthly"]
        assert [r["name"] for r in north["reservations"]] == ["north-gpus"]

        # Who is asking comes from the API server, never from the request.
        assert (await get(f"/tenants/{NS}/ten-north")).status_code == 401
        assert (await get(f"/tenants/{NS}/ten-north", Authorization="Bearer not-a-token")).status_code == 401
        assert (await get(f"/tenants/{NS}/ten-north", Authorization=f"Basic {world.token('nora')}")
                ).status_code == 401
        forged = await get(f"/tenants/{NS}/ten-north", "sam", **{
            "X-Remote-User": "nora", "Impersonate-User": "nora", "X-Remote-Group": "north-team"})
        assert forged.status_code == 404

        baseline = await get(f"/tenants/{NS}/no-such-tenant", "nora")
        assert baseline.status_code == 404
        south_id, north_id = portal.south_entries[0], portal.north_entries[0]
        attempts = [f"/tenants/{NS}/ten-south", f"/tenants/{NS}/ten-south/entries",
                    f"/tenants/{NS}/ten-south/entries/{south_id}", f"/tenants/{NS}/ten-south/entries/{north_id}",
                    f"/tenants/{NS}/ten-south/spend?days=30",
                    f"/tenants/{NS}/ten-south/export.csv?from=2000-01-01&to=2000-12-31",
                    f"/tenants/{NS}/%74en-south", f"/tenants/{NS}/ten-north/../ten-south",
                    f"/tenants/{NS}%2Ften-south", f"/tenants/{NS}/TEN-SOUTH", f"/tenants/{NS}/ten-south%00",
                    f"/tenants/{NS}/ten-open", f"/tenants/{NS}/ten-open/entries",
                    f"/tenants/{NS}/ten-north/entries/{south_id}",  # an entry id of another tenant: not found
                    f"/tenants/{NS}/ten-north/entries/{south_id}?tenant=ten-south",
                    f"/tenants/{NS}/ten-south/invoices", f"/tenants/{NS}/ten-south/invoices/{SOUTH_INVOICE}",
                    f"/tenants/{NS}/ten-north/invoices/{SOUTH_INVOICE}",  # another tenant's invoice: not found
                    f"/tenants/{NS}/ten-north/invoices/%6Daasctl-invoice-south-0001",
                    f"/tenants/{NS}/ten-north/invoices?before={SOUTH_INVOICE}",  # nor is it a cursor
                    f"/tenants/{NS}/ten-north/invoices/{SOUTH_INVOICE}%00", f"/tenants/{NS}/ten-open/invoices"]
        for path in attempts:
            resp = await get(path, "nora")
            assert resp.status_code in (400, 404), (path, resp.status_code)
            assert not any(s in resp.text for s in SOUTH_SECRETS), path
        # Cursors and filters only ever narrow one's own tenant.
        page = (await get(f"/tenants/{NS}/ten-north/entries?before={max(portal.south_entries) + 1}"
                          f"&tenant={NS}/ten-south", "nora")).json()
        assert {e["id"] for e in page["entries"]} == set(portal.north_entries)
        for bad in ("before=0", "before=-1", "before=1e3", "limit=100000", "limit=0", "kind=secret",
                    "before=1%20OR%201"):
            assert (await get(f"/tenants/{NS}/ten-north/entries?{bad}", "nora")).status_code == 400, bad
        # The invoices: north's one, its amount exactly the usage pushed for it, and the entries behind it.
        invoices = (await get(f"/tenants/{NS}/ten-north/invoices?tenant={NS}/ten-south", "nora")).json()
        assert [(i["key"], i["invoiceId"], Decimal(i["amount"]), i["currency"]) for i in invoices["invoices"]] == [
            (NORTH_INVOICE, "in_north_0001", Decimal("6.25"), "EUR")] and invoices["next"] is None
        detail = (await get(f"/tenants/{NS}/ten-north/invoices/{NORTH_INVOICE}", "nora")).json()
        assert [e["key"] for e in detail["entries"]] == ["usage:north-2", "usage:north-1"]
        for bad in ("limit=0", "limit=100000", "before=a/b", "before=%00"):
            assert (await get(f"/tenants/{NS}/ten-north/invoices?{bad}", "nora")).status_code == 400, bad
        for days in ("9" * 5000, "%EF%BC%93%EF%BC%90", "030", "-7", "7.0", ""):  # digits int() refuses, fullwidth
            assert (await get(f"/tenants/{NS}/ten-north/spend?days={days}", "nora")).status_code == 400, days
        too_long = await get(f"/tenants/{NS}/ten-north/export.csv?from=2000-01-01&to=2099-12-31", "nora")
        assert too_long.status_code == 400  # more than a year at once
        day = datetime.now(UTC).date()
        export = await get(f"/tenants/{NS}/ten-north/export.csv?from={day - timedelta(days=5)}&to={day}"
                           "&tenant=ten-south", "nora")
        assert export.status_code == 200 and export.text.count("\r\n") == 4  # header + the north's 3 entries
        assert "usage:north-1" in export.text and not any(s in export.text for s in SOUTH_SECRETS)
        # Writes are not a thing here.
        assert (await api.post(f"/tenants/{NS}/ten-north", headers={
            "Authorization": f"Bearer {world.token('nora')}"})).status_code == 405

        # A billing operator (RBAC: get tenantaccounts/ledger) reads any tenant; a role-less user none.
        assert (await get(f"/tenants/{NS}/ten-south", "ops")).json()["access"] == "reader"
        assert (await get(f"/tenants/{NS}/ten-south/entries", "alice")).status_code == 404
        assert (await get(f"/tenants/{NS}/ten-south/invoices/{SOUTH_INVOICE}", "alice")).status_code == 404

    # A tenant without invoices is told why (ops reads ten-open, a Prepaid tenant, as a ledger reader).
    async with _signed_in(world, "ops") as http:
        page = await http.get(f"/portal/{NS}/ten-open")
        assert page.status_code == 200 and "No invoices: this tenant is Prepaid" in page.text

    # The same through the console, over plain HTTP (its session, its own paths): the baseline's 404 each time.
    async with _signed_in(world, "nora") as http:
        assert (await http.get(f"/portal/{NS}/ten-north")).status_code == 200
        for days in ("9" * 5000, "%EF%BC%93%EF%BC%90", "-7"):  # the page falls back to 30 days
            assert "in the last 30 days" in (await http.get(f"/portal/{NS}/ten-north?days={days}")).text, days
        base = await http.get(f"/portal/{NS}/no-such-tenant")
        assert base.status_code == 404 and NOT_FOUND in base.text
        for path in _south_identifiers(portal):
            resp = await http.get(path)
            assert resp.status_code in (404, 400), (path, resp.status_code)
            assert not any(s in resp.text for s in SOUTH_SECRETS), path
        ledger = await http.get(f"/portal/{NS}/ten-north/ledger?tenant={NS}/ten-south&namespace={NS}&name=ten-south")
        assert ledger.status_code == 200 and "North Labs" in ledger.text
        assert not any(s in ledger.text for s in SOUTH_SECRETS)
        assert (await http.post(f"/portal/{NS}/ten-north", data={"tenant": "ten-south"})).status_code in (403, 405)


async def test_a_tenant_reads_its_wallet_spend_and_ledger_and_nothing_of_another(
        world: ConsoleWorld, browser: Browser, portal: Portal) -> None:
    await eventually(lambda: _has_balance(world))
    browser.sign_in_with_token(world.token("nora"))
    await browser.until(lambda: browser.all("#portal-link"), what="the portal's link")
    browser.click("#portal-link")  # one tenant: straight to it
    await browser.until(lambda: browser.path == f"/portal/{NS}/ten-north", what="north's page")
    wallet = browser.text("#portal-wallet")
    assert "19.25 EUR" in browser.text("#portal-wallet [data-cell='balance']")  # 25.50 - 5.00 - 1.25
    assert "20.00 EUR when the balance falls below 5.00 EUR; at most 100.00 EUR a month" in wallet
    assert "no payment method on file" in wallet and "1.50 EUR" in wallet
    budget = browser.text("#portal-budgets [data-budget='north-monthly']")
    assert "6.25 EUR of 10.00 EUR Monthly" in budget and "62%" in budget
    assert browser.text("#portal-by-model tr[data-model='llm/gpt-x']").endswith("6.25 EUR")
    assert browser.text("#portal-by-label tr[data-label='project=rag']").endswith("5.00 EUR")
    assert browser.text("#portal-by-label tr[data-label='project=chat']").endswith("1.25 EUR")
    assert browser.all("svg[aria-labelledby^='spend-chart-t']")
    # The runway at the end of each day: none before there was spend; now the operator's own runwayDays
    # (19.25 over 6.25 spent in 7 days: 21.6), the table being the chart's figures.
    runways = [r.get_attribute("textContent") or "" for r in browser.all("#portal-runways tbody tr")]
    assert len(runways) == 30 and all("—" in r for r in runways[:-2]) and "21.6 days" in runways[-1], runways
    assert browser.all("svg[aria-labelledby^='runway-chart-t']")
    assert (await _status(world.stack.api, "ten-north")).get("runwayDays") == "21.6"
    assert "1,200.50 EUR" in browser.text("#portal-reservations tr[data-reservation='north-gpus']")
    invoice = browser.text(f"#portal-invoices tr[data-invoice='{NORTH_INVOICE}']")
    assert "in_north_0001" in invoice and "finalized" in invoice and invoice.endswith("6.25 EUR")
    assert len(browser.all("#portal-invoices tr[data-invoice]")) == 1
    assert not any(s in browser.source() for s in SOUTH_SECRETS)
    browser.screenshot("portal-tenant")

    # The ledger entries an invoice invoiced.
    browser.click(f"#portal-invoices tr[data-invoice='{NORTH_INVOICE}'] a")
    await browser.until(lambda: browser.all("#portal-invoice"), what="an invoice's page")
    assert "6.25 EUR" in browser.text("#portal-invoice [data-cell='amount']")
    assert {r.get_attribute("data-entry") for r in browser.all("#portal-entries tr[data-entry]")} == {
        str(i) for i in portal.north_entries[:2]}
    assert not any(s in browser.source() for s in SOUTH_SECRETS)

    # The ledger entry behind a charge, with its rated line.
    browser.go(f"/portal/{NS}/ten-north/ledger")
    assert len(browser.all("#portal-entries tr[data-entry]")) == 3
    browser.click(f"#portal-entries tr[data-entry='{portal.north_entries[0]}'] a")  # the newest: usage:north-2
    await browser.until(lambda: browser.all("#portal-components"), what="an entry's rated line")
    assert "pb-eur" in browser.text("#portal-entry") and "2.50 EUR" in browser.text("#portal-components")
    browser.screenshot("portal-entry")

    # Every identifier of ten-south, as a browser sends it: each page is the one a missing tenant gets.
    for path in _south_identifiers(portal):
        browser.go(path)
        assert NOT_FOUND in browser.text() or "Error" in browser.text("h1"), path
        assert not any(s in browser.source() for s in SOUTH_SECRETS), path
    # Forms: the ledger filter and the export, submitted with fields naming ten-south added.
    browser.go(f"/portal/{NS}/ten-north/ledger")
    browser.run("""for (const [k, v] of [['tenant', arguments[0]], ['namespace', arguments[1]],
                                         ['name', 'ten-south']]) {
                     const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v;
                     document.getElementById('portal-ledger-filter').appendChild(i); }""", f"{NS}/ten-south", NS)
    browser.select("kind", "credit")
    browser.one("#portal-ledger-filter button").click()
    await browser.until(lambda: "kind=credit" in browser.path, what="the filtered ledger")
    assert "tenant=" in browser.path and len(browser.all("#portal-entries tr[data-entry]")) == 1
    assert "welcome" in browser.text("#portal-entries") and not any(s in browser.source() for s in SOUTH_SECRETS)
    browser.go(f"/portal/{NS}/ten-north")
    day = datetime.now(UTC).date()
    browser.fill("from", str(day - timedelta(days=5)))
    browser.fill("to", str(day))
    browser.run("document.getElementById('portal-export').action = arguments[0]", f"/portal/{NS}/ten-south/export.csv")
    browser.one("#portal-export button").click()
    await browser.until(lambda: NOT_FOUND in browser.text(), what="a forged export refused")
    browser.go(f"/portal/{NS}/ten-north")
    browser.fill("from", str(day - timedelta(days=5)))
    browser.fill("to", str(day))
    browser.one("#portal-export button").click()
    csv_file = await browser.until(lambda: next(iter(browser.downloads.glob("*.csv")), None), what="the export")
    text = csv_file.read_text()
    assert "usage:north-2" in text and not any(s in text for s in SOUTH_SECRETS)


async def _has_balance(world: ConsoleWorld) -> bool:
    return await _balance(world.stack.api, "ten-north") is not None


FORGE = """
const [path, fields] = arguments;
const done = arguments[arguments.length - 1];
fetch(path, {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'},
             body: new URLSearchParams(fields)}).then(r => r.text().then(t => done([r.status, t])));
"""


async def _book(world: ConsoleWorld, name: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = await k8s.CustomObjectsApi(world.stack.api).get_namespaced_custom_object(
            "billing.opendatahub.io", "v1alpha1", NS, "pricebooks", name)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return obj


async def test_a_billing_admin_authors_pricebooks_plans_and_tenants_as_the_lifecycle_allows(
        world: ConsoleWorld, browser: Browser, portal: Portal) -> None:
    custom = k8s.CustomObjectsApi(world.stack.api)
    # Fields the tenant form does not show, written by someone else: they must survive a save.
    await custom.patch_namespaced_custom_object(
        "billing.opendatahub.io", "v1alpha1", NS, "tenantaccounts", "ten-open",
        {"metadata": {"annotations": {"team": "bar"}}, "spec": {"gpuFreezeMode": "Preempt"}},
        _content_type="application/merge-patch+json")
    browser.sign_in_with_token(world.token("bea"))
    await browser.until(lambda: browser.all("#billing-role[data-role='admin']"), what="bea is a billing admin")

    # An Active PriceBook is superseded by a new one, prefilled from it; who moves and who stays is said.
    browser.go("/billing/pricebooks")
    assert "Active" in browser.text(f"tr[data-pricebook='{NS}/pb-eur'] [data-cell='state']")
    browser.button("Supersede")
    await browser.until(lambda: browser.all("#supersede-who"), what="the supersede form")
    assert "ten-north, ten-open, ten-south" in browser.text("#supersede-who")
    assert browser.one("#f-supersedes").get_attribute("value") == "pb-eur"
    assert "prompt_tokens=2.50" in browser.one("#f-skus").get_attribute("value")
    # Prefilled with the first midnight (UTC) that keeps the old book's notice (0 days): a run crossing
    # midnight would see the successor take effect mid-test, so the book starts well after the test.
    prefilled = datetime.strptime(browser.one("#f-effectiveFrom").get_attribute("value"), "%Y-%m-%dT%H:%M:%SZ")
    assert (prefilled.hour, prefilled.minute) == (0, 0)
    assert timedelta(0) < prefilled.replace(tzinfo=UTC) - datetime.now(UTC) <= timedelta(days=1, minutes=5)
    browser.fill("f-effectiveFrom", (datetime.now(UTC) + timedelta(days=30)).strftime("%Y-%m-%dT00:00:00Z"))
    browser.fill("f-skus", "llm/gpt-x per-1M-tokens prompt_tokens=2.00 completion_tokens=8.00")
    browser.run("document.getElementById('pricebook-lifecycle').scrollIntoView()")
    browser.screenshot("billing-pricebook-supersede")
    browser.button("Announce")
    await browser.until(lambda: "pb-eur-next saved" in browser.text(), what="the new book saved")
    nxt = await _book(world, "pb-eur-next")
    assert nxt is not None and nxt["spec"]["supersedes"] == "pb-eur" and nxt["spec"]["currency"] == "EUR"
    assert nxt["spec"]["skus"][0]["rates"] == {"prompt_tokens": "2.00", "completion_tokens": "8.00"}
    await browser.until(lambda: (browser.go("/billing/pricebooks"), "Announced" in browser.text(
        f"tr[data-pricebook='{NS}/pb-eur-next'] [data-cell='state']"))[1], what="announced")

    # An Active book is never edited: the page says so, and a forged save is refused (the spec unchanged).
    browser.go(f"/billing/edit/pricebooks/{NS}/pb-eur")
    assert "prices are final" in browser.text("#locked")
    before = (await _book(world, "pb-eur") or {})["spec"]
    csrf = browser.one("#billing-edit input[name=csrf_token]").get_attribute("value")
    status, text = browser.driver.execute_async_script(FORGE, "/billing/edit/pricebooks", {
        "csrf_token": csrf, "mode": "edit", "namespace": NS, "name": "pb-eur", "currency": "EUR",
        "effectiveFrom": "2020-01-01T00:00:00Z", "noticeDays": "0", "skus": "llm/gpt-x per-1M-tokens prompt_tokens=0"})
    assert status == 409 and "prices are final" in text
    assert (await _book(world, "pb-eur") or {})["spec"] == before
    for name in ("../pb-eur", "pb-eur/status", "PB-EUR", "pb%2Feur", "pb eur", "-pb"):  # odd names: refused
        status, text = browser.driver.execute_async_script(FORGE, "/billing/edit/pricebooks", {
            "csrf_token": csrf, "mode": "edit", "namespace": NS, "name": name, "currency": "EUR",
            "effectiveFrom": "2020-01-01T00:00:00Z", "noticeDays": "0",
            "skus": "llm/gpt-x per-1M-tokens prompt_tokens=0"})
        assert status == 400 and 'id="name-error"' in text, name
    assert (await _book(world, "pb-eur") or {})["spec"] == before

    # A notice too short leaves a new book Draft, and the list says why.
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT00:00:00Z")
    browser.go(f"/billing/edit/pricebooks/new?namespace={NS}")
    for field, value in (("f-name", "pb-short"), ("f-effectiveFrom", tomorrow), ("f-noticeDays", "30"),
                         ("f-skus", "llm/gpt-x per-1M-tokens prompt_tokens=9.00")):
        browser.fill(field, value)
    browser.button("Announce")
    await browser.until(lambda: (browser.go("/billing/pricebooks"), "NoticeTooShort" in browser.text(
        f"tr[data-pricebook='{NS}/pb-short']") or "notice" in browser.text(
        f"tr[data-pricebook='{NS}/pb-short']").lower())[1], what="a Draft with its reason")
    assert "Draft" in browser.text(f"tr[data-pricebook='{NS}/pb-short'] [data-cell='state']")

    # The API server's refusals next to their field; the form's own next to theirs; nothing written.
    browser.go(f"/billing/edit/pricebooks/new?namespace={NS}")
    for field, value in (("f-name", "pb-bad"), ("f-effectiveFrom", "next tuesday"), ("f-noticeDays", "0"),
                         ("f-skus", "llm/gpt-x per-1M-tokens prompt_tokens=2.5.0")):
        browser.fill(field, value)
    browser.button("Announce")
    await browser.until(lambda: browser.all(".field-error"), what="the API server's refusal")
    assert browser.all("#effectiveFrom-error") or browser.all("#skus-error")
    assert await _book(world, "pb-bad") is None
    browser.go("/billing/edit/tenantaccounts/new")
    browser.fill("f-namespace", NS)
    browser.fill("f-name", "ten-west")
    browser.fill("f-displayName", "West Ltd")
    browser.fill("f-planRef", "basic")
    browser.select("f-billingMode", "Prepaid")
    browser.fill("f-reloadThreshold", "five euros")
    browser.one("#f-reloadEnabled").click()
    browser.button("Save")
    await browser.until(lambda: browser.all("#reloadAmount-error"), what="a missing amount next to its field")
    assert browser.all("#reloadCap-error")
    browser.fill("f-reloadAmount", "20.00")
    browser.fill("f-reloadCap", "60.00")
    browser.button("Save")
    await browser.until(lambda: browser.all("#reloadThreshold-error"), what="the amount refused next to its field")
    browser.run("document.getElementById('f-reloadThreshold').scrollIntoView({block: 'center'})")
    browser.screenshot("billing-tenant-form-error")
    browser.fill("f-reloadThreshold", "5.00")
    browser.button("Save")
    await browser.until(lambda: "ten-west saved" in browser.text(), what="the new tenant")

    # An edit keeps what the form does not show (another manager's field, an annotation).
    browser.go(f"/billing/tenants/{NS}/ten-open")
    browser.click("#edit-tenant")
    browser.fill("f-displayName", "Open Bar & Grill")
    browser.button("Save")
    await browser.until(lambda: "ten-open saved" in browser.text(), what="the edit saved")
    edited = await custom.get_namespaced_custom_object("billing.opendatahub.io", "v1alpha1", NS, "tenantaccounts",
                                                       "ten-open")
    assert edited["spec"]["displayName"] == "Open Bar & Grill" and edited["spec"]["gpuFreezeMode"] == "Preempt"
    assert edited["metadata"]["annotations"]["team"] == "bar"
    assert edited["metadata"]["labels"][ORG_LABEL] == "portal-open"

    # A Plan.
    browser.go(f"/billing/edit/plans/new?namespace={NS}")
    for field, value in (("f-name", "pro"), ("f-targetName", "nowhere"), ("f-priceBookRef", "pb-eur"),
                         ("f-tokensPerMinute", "5000"), ("f-modelScopes", "llm/*")):
        browser.fill(field, value)
    browser.button("Save")
    await browser.until(lambda: browser.all(f"#billing-plans tr[data-plan='{NS}/pro']"), what="the new Plan")

    # A budget: an amount the API server refuses is said next to the caps, then it is written.
    browser.go("/billing/budgets")
    browser.click("#new-budget")
    for field, value in (("f-namespace", NS), ("f-name", "open-weekly"), ("f-tenant", "ten-open"),
                         ("f-keyLabels", "team=bar"), ("f-caps", "5,00 Weekly 80:Notify 100:Throttle")):
        browser.fill(field, value)
    browser.button("Save")
    await browser.until(lambda: browser.all("#caps-error"), what="the amount refused next to the caps")
    assert "decimal string" in browser.text("#caps-error")
    browser.fill("f-caps", "5.00 Weekly 80:Notify 100:Throttle")
    browser.button("Save")
    await browser.until(lambda: browser.all(f"#billing-budgets tr[data-budget='{NS}/open-weekly']"),
                        what="the new budget")
    budget = await custom.get_namespaced_custom_object("billing.opendatahub.io", "v1alpha1", NS, "budgetpolicies",
                                                       "open-weekly")
    assert budget["spec"]["caps"] == [{"amount": "5.00", "period": "Weekly", "thresholds": [
        {"pct": 80, "action": "Notify"}, {"pct": 100, "action": "Throttle"}]}]
    assert budget["spec"]["selector"] == {"keyLabels": {"team": "bar"}}

    # An operator sees the charts (read through the portal API by their role's get tenantaccounts/ledger).
    browser.driver.delete_all_cookies()
    browser.sign_in_with_token(world.token("ops"))
    await browser.until(lambda: browser.all("#billing-role[data-role='operator']"), what="ops signed in")
    browser.go(f"/billing/tenants/{NS}/ten-north")
    assert browser.all("svg[aria-labelledby^='spend-chart-t']")
    assert browser.all("svg[aria-labelledby^='balance-chart-t']")
    assert "62%" in browser.text("#portal-budgets [data-budget='north-monthly']")
    # Its invoices too, each opening in the tenant portal (which answers ledger readers as well as members).
    assert browser.text(f"#portal-invoices tr[data-invoice='{NORTH_INVOICE}']").endswith("6.25 EUR")
    link = browser.one(f"#portal-invoices tr[data-invoice='{NORTH_INVOICE}'] a").get_attribute("href") or ""
    assert link.startswith(f"{world.url}/portal/{NS}/ten-north/invoices/"), link
    browser.run("document.getElementById('portal-budgets').scrollIntoView()")
    browser.screenshot("billing-tenant-charts")
    browser.go(f"/billing/tenants/{NS}/ten-north?days={'9' * 5000}")
    assert "in the last 30 days" in browser.text()
    browser.go("/billing/budgets")
    assert "6.25 EUR spent (62%)" in browser.text(f"#billing-budgets tr[data-budget='{NS}/north-monthly']")
    browser.go("/billing/tenants")
    assert browser.all("svg[aria-labelledby^='mtd-chart-1-t']")

    # Operators and viewers read the lists; they get no form and the server refuses their writes.
    for user in ("ops", "bob"):
        browser.driver.delete_all_cookies()
        browser.sign_in_with_token(world.token(user))
        await browser.until(lambda: browser.all("#billing-role"), what=f"{user} signed in")
        browser.go("/billing/pricebooks")
        assert "Active" in browser.text(f"tr[data-pricebook='{NS}/pb-eur'] [data-cell='state']")
        assert not browser.all("#new-pricebook") and not browser.all("#billing-pricebooks .row-actions")
        browser.go("/billing/plans")
        assert browser.all(f"#billing-plans tr[data-plan='{NS}/pro']") and not browser.all("#new-plan")
        browser.go("/billing/budgets")
        assert browser.all(f"#billing-budgets tr[data-budget='{NS}/open-weekly']")
        assert not browser.all("#new-budget") and "Edit" not in browser.text("#billing-budgets")
        browser.go(f"/billing/edit/pricebooks/new?namespace={NS}")
        assert "for billing administrators" in browser.text()
        csrf = browser.one("form.who input[name=csrf_token]").get_attribute("value")
        status, _ = browser.driver.execute_async_script(FORGE, "/billing/edit/pricebooks", {
            "csrf_token": csrf, "mode": "new", "namespace": NS, "name": f"pb-{user}", "currency": "EUR",
            "effectiveFrom": tomorrow, "noticeDays": "0", "skus": "llm/gpt-x per-1M-tokens prompt_tokens=0"})
        assert status == 403 and await _book(world, f"pb-{user}") is None
        # an operator may patch a tenant's annotations (freeze) on the API server: the console refuses the rest
        status, _ = browser.driver.execute_async_script(FORGE, "/billing/edit/tenantaccounts", {
            "csrf_token": csrf, "mode": "edit", "namespace": NS, "name": "ten-open", "displayName": f"by {user}",
            "planRef": "basic", "billingMode": "Invoiced"})
        assert status == 403
        status, _ = browser.driver.execute_async_script(FORGE, "/billing/edit/budgetpolicies", {
            "csrf_token": csrf, "mode": "edit", "namespace": NS, "name": "open-weekly", "tenant": "ten-open",
            "caps": "500.00 Monthly 100:Notify"})
        assert status == 403
    assert (await custom.get_namespaced_custom_object("billing.opendatahub.io", "v1alpha1", NS, "budgetpolicies",
                                                      "open-weekly"))["spec"] == budget["spec"]
    tenant = await custom.get_namespaced_custom_object("billing.opendatahub.io", "v1alpha1", NS, "tenantaccounts",
                                                       "ten-open")
    assert tenant["spec"]["displayName"] == "Open Bar & Grill" and tenant["spec"]["billingMode"] == "Prepaid"


@contextlib.asynccontextmanager
async def _ledger(portal: Portal) -> AsyncIterator[Ledger]:
    ledger = Ledger.from_url(portal.ledger_url)
    try:
        yield ledger
    finally:
        await ledger.close()


async def test_a_billing_admin_credits_a_wallet_through_the_api_and_nobody_else_may(
        world: ConsoleWorld, portal: Portal) -> None:
    """Plain HTTP at the portal API's one write: who may (the API server says), what is read, recorded once."""
    north, path = f"{NS}/ten-north", f"/tenants/{NS}/ten-north/credits"
    async with (httpx.AsyncClient(base_url=portal.api + API_PREFIX, verify=default_tls()) as api,
                _ledger(portal) as ledger):
        async def post(user: str | None, body: Any = None, *, to: str = path, content: bytes | None = None
                       ) -> httpx.Response:
            auth = {"Authorization": f"Bearer {world.token(user)}"} if user else {}
            if content is not None:
                return await api.post(to, headers={**auth, "Content-Type": "application/json"}, content=content)
            return await api.post(to, headers=auth, json=body)

        count, balance = await ledger.count(north), await ledger.balance(north)
        body = {"id": "api-credit-000000001", "amount": "10.00", "reason": "goodwill for the outage"}
        # Nobody but a billing administrator, before anything of the body is read: a member, an operator (who
        # reads every ledger), another tenant's member and a role-less user (404, as for reads), no token.
        for user, status in (("nora", 403), ("ops", 403), ("sam", 404), ("alice", 404), (None, 401)):
            refused = await post(user, body)
            assert refused.status_code == status, (user, refused.text)
            assert set(refused.json()) == {"error"}
        assert await ledger.count(north) == count

        first = await post("bea", body)
        assert first.status_code == 201, first.text
        answer = first.json()
        assert answer["amount"] == "10.00" and answer["currency"] == "EUR" and answer["duplicate"] is False
        again = await post("bea", body)  # a retry: recorded once
        assert again.status_code == 200 and again.json() == {**answer, "duplicate": True}
        reused = await post("bea", {**body, "amount": "11.00"})  # the id with other content: refused
        assert reused.status_code == 409 and "different credit" in reused.json()["error"]
        assert await ledger.count(north) == count + 1
        assert await ledger.balance(north) == balance + Decimal("10.00")
        (entry,) = [e for e in await ledger.entries(north, kind="credit") if e.id == answer["entry"]]
        bea = (await api.get("/tenants", headers={"Authorization": f"Bearer {world.token('bea')}"})).json()["user"]
        assert (entry.key, entry.actor, entry.reason, entry.currency, entry.amount) == (
            "credit:console-api-credit-000000001", bea, "goodwill for the outage", "EUR", Decimal("10.00"))

        # What is read: each field's tricks refused (400, naming it), nothing recorded.
        fresh = {**body, "id": "api-credit-000000002"}
        for amount in (0, "0", "-1", "1e3", "NaN", "Infinity", "1.0000001", "\uff11\uff10", " 5", 5, 10**30, "",
                       "1000000.01"):
            resp = await post("bea", {**fresh, "amount": amount})
            assert resp.status_code == 400 and resp.json()["error"].startswith("amount"), (amount, resp.text)
        for credit_id in ("short", "a" * 16 + "/../x", "crédit-000000000001", "a" * 65):
            resp = await post("bea", {**fresh, "id": credit_id})
            assert resp.status_code == 400 and resp.json()["error"].startswith("id"), credit_id
        for raw in (b'{"id": "api-credit-000000002", "amount": NaN, "reason": "r"}', b"[1]",
                    b'{"id": "api-credit-000000002", "amount": "1", "amount": "900", "reason": "r"}'):
            assert (await post("bea", content=raw)).status_code == 400, raw
        resp = await post("bea", {**fresh, "tenant": f"{NS}/ten-south"})
        assert resp.status_code == 400 and "unknown field" in resp.json()["error"]
        big = await post("bea", content=b'{"id": "api-credit-000000002", "amount": "1.00", "reason": "'
                         + b"x" * MAX_CREDIT_BODY + b'"}')
        assert big.status_code == 413
        assert await ledger.count(north) == count + 1

        # A tenant whose Plan has no PriceBook: its currency is unknown, so nothing can be credited.
        await apply_all(Client(world.stack.api), [{
            "apiVersion": GROUP, "kind": "TenantAccount", "metadata": {"name": "ten-nobook", "namespace": NS},
            "spec": {"displayName": "No Book", "planRef": {"name": "no-such-plan"}, "billingMode": "Prepaid"}}],
            field_manager="portal-tests")
        bea_auth = {"Authorization": f"Bearer {world.token('bea')}"}
        await eventually(lambda: _visible(api, f"/tenants/{NS}/ten-nobook", bea_auth))
        nobook = await post("bea", fresh, to=f"/tenants/{NS}/ten-nobook/credits")
        assert nobook.status_code == 409 and "no PriceBook" in nobook.json()["error"]
        assert await ledger.count(f"{NS}/ten-nobook") == 0


async def _visible(api: httpx.AsyncClient, path: str, headers: dict[str, str]) -> bool:
    return (await api.get(path, headers=headers)).status_code == 200


async def test_a_billing_admin_credits_a_wallet_from_the_tenant_page(
        world: ConsoleWorld, browser: Browser, portal: Portal) -> None:
    north, page = f"{NS}/ten-north", f"/billing/tenants/{NS}/ten-north"
    async with _ledger(portal) as ledger:
        count, balance = await ledger.count(north), await ledger.balance(north)
        browser.driver.delete_all_cookies()
        browser.sign_in_with_token(world.token("bea"))
        await browser.until(lambda: browser.all("#billing-role[data-role='admin']"), what="bea is a billing admin")
        browser.go(page)
        assert "In EUR" in browser.text("#credit-form") and "ledger adjust" in browser.text("#credit-form")
        sent = {el.get_attribute("name"): el.get_attribute("value")
                for el in browser.all("#credit-form input[type=hidden]")}
        assert set(sent) == {"csrf_token", "credit_id"}
        browser.fill("credit-amount", "15.00")
        browser.fill("credit-reason", "support goodwill")
        browser.run("document.getElementById('credit').scrollIntoView()")
        browser.screenshot("billing-tenant-credit")
        browser.one("#credit-form button").click()
        await browser.until(lambda: f"Credited 15.00 EUR to {north}." in browser.text(), what="the credit's flash")
        expected = balance + Decimal("15.00")
        assert await ledger.balance(north) == expected and await ledger.count(north) == count + 1
        # The operator's ledger watch updates the status; the page shows the new balance.
        await eventually(lambda: _balance_is(world, expected))
        browser.go(page)
        assert f"{expected:,.2f} EUR" in browser.text("#tenant-summary [data-cell='balance']")

        # The same rendered form sent again (a double click, the back button): recorded once.
        status, text = browser.driver.execute_async_script(FORGE, f"{page}/credit", {
            **sent, "amount": "15.00", "reason": "support goodwill"})
        assert status == 200 and "That credit was already recorded (once)." in text
        assert await ledger.count(north) == count + 1

        # An operator and a viewer: no form, and their forged POSTs are refused before the form is read.
        for user in ("ops", "bob"):
            browser.driver.delete_all_cookies()
            browser.sign_in_with_token(world.token(user))
            await browser.until(lambda: browser.all("#billing-role"), what=f"{user} signed in")
            browser.go(page)
            assert not browser.all("#credit-form")
            csrf = browser.one("form.who input[name=csrf_token]").get_attribute("value")
            status, text = browser.driver.execute_async_script(FORGE, f"{page}/credit", {
                "csrf_token": csrf, "credit_id": f"forged-by-{user}-0000000", "amount": "999.00", "reason": "mine"})
            assert status == 403 and "billing administrators" in text, user
        assert await ledger.count(north) == count + 1


async def _balance_is(world: ConsoleWorld, expected: Decimal) -> bool:
    balance = await _balance(world.stack.api, "ten-north")
    return balance is not None and Decimal(balance) == expected

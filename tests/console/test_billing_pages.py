"""The billing pages in a real headless Chromium, on the console test world. The real billing operator (`maasctl
billing run` in its own process, its ledger on SQLite, rating maas-api's database, metrics on the port the console
was told) keeps TenantAccounts, BudgetPolicies and Reservations of a namespace of their own (a Plan on a Gateway
that does not exist: nothing reaches the MaaS gateway the other tests use). An operator reads every page and
freezes and unfreezes a tenant with a reason; a viewer (by token, and by OIDC group mapping at the real provider)
reads and is refused every write by the server; a user without a billing role sees none of it."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.billing.ledger import Ledger, credit, usage_charge
from maasctl.runtime import Client
from maasctl.runtime.served import apply_all
from tests.billing.conftest import eventually
from tests.console import billing_world
from tests.console.browser import Browser
from tests.console.conftest import ConsoleWorld
from tests.console.test_oidc import oidc_sign_in

NS = "billing-console-tests"
GROUP = "billing.opendatahub.io/v1alpha1"
SUSPENDED = "billing.opendatahub.io/suspended"


@dataclass
class BillingWorld:
    namespace: str
    ledger_url: str


def _objects(now: datetime) -> list[dict[str, Any]]:
    def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": GROUP, "kind": kind, "metadata": {"name": name, "namespace": NS}, "spec": spec}

    start = (now + timedelta(days=40)).strftime("%Y-%m-%dT00:00:00Z")
    return [
        obj("PriceBook", "pb-eur", {"currency": "EUR", "effectiveFrom": (now + timedelta(seconds=5)).strftime(
            "%Y-%m-%dT%H:%M:%SZ"), "noticeDays": 0, "skus": [
            {"sku": "llm/gpt-x", "unit": "per-1M-tokens", "rates": {"prompt_tokens": "2.50"}}]}),
        # A Gateway that does not exist: the Plan compiles nothing onto the gateway the other tests use.
        obj("Plan", "basic", {"limits": {"tokensPerMinute": 100000}, "priceBookRef": "pb-eur",
                              "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                            "name": "nowhere"}}),
        obj("TenantAccount", "ten-north", {"displayName": "North Labs", "planRef": {"name": "basic"},
                                           "billingMode": "Prepaid"}),
        obj("TenantAccount", "ten-south", {"displayName": "South Foods", "planRef": {"name": "basic"},
                                           "billingMode": "Invoiced"}),
        obj("TenantAccount", "ten-east", {"displayName": "East Shipping", "planRef": {"name": "basic"},
                                          "billingMode": "Invoiced"}),
        obj("BudgetPolicy", "north-monthly", {"tenantRef": {"name": "ten-north"}, "caps": [
            {"amount": "10.00", "period": "Monthly", "thresholds": [{"pct": 50, "action": "Notify"},
                                                                     {"pct": 100, "action": "Throttle"}]}]}),
        obj("Reservation", "north-gpus", {"tenantRef": "ten-north", "sku": "h200", "count": 2, "geo": "us-east",
                                          "window": {"start": start, "end": (now + timedelta(days=70)).strftime(
                                              "%Y-%m-%dT00:00:00Z")},
                                          "class": "Guaranteed", "monthlyPrice": "1200.50"}),
        obj("BillingConnector", "hooks", {"type": "webhook", "credentialsSecretRef": {"name": "hooks-keys"}}),
    ]


@pytest.fixture(scope="module")
async def billing(world: ConsoleWorld) -> AsyncIterator[BillingWorld]:
    stack = world.stack
    client = Client(stack.api)
    await billing_world.billing_namespace(stack, NS)
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="maasctl-billing-console-") as tmp:
        ledger_url = f"sqlite+aiosqlite:///{Path(tmp) / 'ledger.db'}"
        # The money first: a credit and a charge (as the rater would post one) for ten-north, in EUR.
        ledger = Ledger.from_url(ledger_url)
        try:
            await ledger.create_schema()
            await ledger.post([
                credit("north-welcome", f"{NS}/ten-north", now, Decimal("25.50"), reason="welcome", actor="tests"),
                usage_charge("usage:north-1", f"{NS}/ten-north", now, Decimal("6.250000"), currency="EUR",
                             tokens=2_500_000, details={})])
        finally:
            await ledger.close()
        objs = _objects(now)
        await apply_all(client, objs[:2], field_manager="billing-console-tests")  # the PriceBook and the Plan
        # Its own process, as installed: the console asks its /metrics while this test drives the browser.
        operator = billing_world.billing_operator(
            stack, NS, ledger_url, Path(tmp), f"--metrics-bind-address=127.0.0.1:{billing_world.metrics_port()}")
        operator.start()
        try:
            # The tenants once their PriceBook is in force (their allowance is priced from their first look).
            await eventually(lambda: _state(stack.api, "pricebooks", "pb-eur", "Active"))
            await apply_all(client, objs[2:], field_manager="billing-console-tests")
            # A payment failed (the psp-connector's field): ten-east is in the dunning queue.
            await k8s.CustomObjectsApi(stack.api).patch_namespaced_custom_object_status(
                "billing.opendatahub.io", "v1alpha1", NS, "tenantaccounts", "ten-east",
                {"status": {"consecutivePaymentFailures": 1}}, _content_type="application/merge-patch+json")
            yield BillingWorld(NS, ledger_url)
        finally:
            print(operator.log_tail())  # shown with a failure
            await asyncio.to_thread(operator.stop)
            await k8s.CoreV1Api(stack.api).delete_namespace(NS)


async def _state(api: k8s.ApiClient, plural: str, name: str, state: str) -> bool:
    obj = await k8s.CustomObjectsApi(api).get_namespaced_custom_object("billing.opendatahub.io", "v1alpha1", NS,
                                                                      plural, name)
    return bool((obj.get("status") or {}).get("state") == state)


async def tenant(world: ConsoleWorld, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = await k8s.CustomObjectsApi(world.stack.api).get_namespaced_custom_object(
        "billing.opendatahub.io", "v1alpha1", NS, "tenantaccounts", name)
    return obj


def role(browser: Browser) -> str | None:
    """The billing role the navigation shows (none: no billing section)."""
    found = browser.all("#billing-role")
    return found[0].get_attribute("data-role") if found else None


def cell(browser: Browser, table: str, key: str, name: str) -> str:
    return browser.text(f"#{table} tr[data-tenant='{key}'] [data-cell='{name}']")


async def test_an_operator_reads_every_page_and_freezes_a_tenant_with_a_reason(
        world: ConsoleWorld, browser: Browser, billing: BillingWorld) -> None:
    browser.sign_in_with_token(world.token("ops"))
    await browser.until(lambda: role(browser) == "operator", what="the billing section")
    north, east = f"{NS}/ten-north", f"{NS}/ten-east"

    def tenants_ready() -> bool:
        browser.go("/billing/tenants")
        return cell(browser, "billing-tenants", north, "balance") == "19.25 EUR" and \
            cell(browser, "billing-tenants", east, "state") == "Dunning"

    await browser.until(tenants_ready, timeout=90, what="the wallets mirrored from the ledger")
    assert cell(browser, "billing-tenants", north, "mtd") == "6.25 EUR"  # decimal strings, the book's currency
    assert cell(browser, "billing-tenants", north, "state") == "Active"
    assert cell(browser, "billing-tenants", north, "allowance") == "7,700,000"  # 19.25 EUR at 2.50 per 1M tokens
    assert "1 of 3" in browser.text("#billing-dunning")
    browser.screenshot("billing-tenants")

    browser.go("/billing/budgets")
    await browser.until(lambda: (browser.go("/billing/budgets"), "fired" in browser.text("#billing-budgets"))[1],
                        timeout=90, what="the budget's 50 % threshold fired")
    budget = browser.text(f"#billing-budgets tr[data-budget='{NS}/north-monthly']")
    assert "10.00 EUR Monthly" in budget and "6.25 EUR" in budget and "100% Throttle" in budget
    assert browser.all(f"tr[data-budget='{NS}/north-monthly'] .threshold.fired[data-threshold='50']")
    assert not browser.all(f"tr[data-budget='{NS}/north-monthly'] .threshold.fired[data-threshold='100']")
    browser.screenshot("billing-budgets")

    browser.go("/billing/reservations")
    row = browser.text(f"#billing-reservations tr[data-reservation='{NS}/north-gpus']")
    assert "1,200.50 EUR" in row and "2 x h200 in us-east" in row
    await browser.until(lambda: (browser.go("/billing/reservations"), "not available" in browser.text(
        "#billing-reservations"))[1], what="the capacity check (no node has GPUs)")

    browser.go("/billing/connectors")
    assert "webhook" in browser.text(f"#billing-connectors tr[data-connector='{NS}/hooks']")

    browser.go("/billing/health")
    await browser.until(lambda: (browser.go("/billing/health"), browser.all("#health-rater [data-cell='behind']"))[1],
                        what="the rater's figures from the operator's /metrics")
    assert "Every balance is fresh." in browser.text("#health-stale")
    assert "No balance mirror has drifted" in browser.text("#health-drift")
    browser.screenshot("billing-health")

    # Freeze with a reason: recorded on the tenant and its Events; the operator suspends it.
    browser.go(f"/billing/tenants/{NS}/ten-south")
    browser.fill("freeze-reason", "INC-7: card fraud suspected")
    browser.button("Freeze")
    await browser.until(lambda: "frozen: INC-7" in browser.text(), what="the freeze confirmed")
    obj = await tenant(world, "ten-south")
    assert obj["metadata"]["annotations"][SUSPENDED] == "INC-7: card fraud suspected"
    assert obj["metadata"]["annotations"]["billing.opendatahub.io/suspended-by"].startswith("ops at ")
    await browser.until(lambda: (browser.go(f"/billing/tenants/{NS}/ten-south"),
                                 "Suspended" in browser.text("#tenant-summary [data-cell='state']"))[1],
                        what="the operator's Suspended state")
    assert "FrozenByOperator" in browser.text("#tenant-events") and "ops: INC-7" in browser.text("#tenant-events")
    browser.screenshot("billing-tenant-frozen")
    browser.fill("unfreeze-reason", "INC-7 closed: false alarm")
    browser.button("Unfreeze")
    await browser.until(lambda: (browser.go(f"/billing/tenants/{NS}/ten-south"),
                                 "Suspended" not in browser.text("#tenant-summary [data-cell='state']"))[1],
                        what="unfrozen")
    assert SUSPENDED not in ((await tenant(world, "ten-south"))["metadata"].get("annotations") or {})
    assert "ops: INC-7 closed: false alarm" in browser.text("#tenant-events")
    # A reason is required (the server says so; nothing is written).
    browser.run("document.getElementById('freeze-reason').removeAttribute('required')")
    browser.button("Freeze")
    await browser.until(lambda: "Say why" in browser.text(), what="a reason required")
    assert SUSPENDED not in ((await tenant(world, "ten-south"))["metadata"].get("annotations") or {})


FORGE = """
const [path, csrf, reason] = arguments;
const done = arguments[arguments.length - 1];
fetch(path, {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'},
             body: new URLSearchParams({csrf_token: csrf, reason: reason})})
  .then(r => r.text().then(t => done([r.status, t])));
"""


async def test_viewers_read_and_every_write_is_refused_by_the_server(
        world: ConsoleWorld, browser: Browser, billing: BillingWorld) -> None:
    browser.sign_in_with_token(world.token("bob"))
    await browser.until(lambda: role(browser) == "viewer", what="bob is a billing viewer")
    await browser.until(lambda: (browser.go(f"/billing/tenants/{NS}/ten-north"),
                                 browser.text("#tenant-summary [data-cell='balance']").startswith("19.25 EUR"))[1],
                        timeout=90, what="the tenant page")
    assert not browser.all("#freeze-form") and not browser.all("#unfreeze-form")  # nothing offered ...
    csrf = browser.one("form.who input[name=csrf_token]").get_attribute("value")
    before = (await tenant(world, "ten-north"))["metadata"].get("annotations") or {}
    for action, target in (("freeze", "ten-north"), ("unfreeze", "ten-north"), ("freeze", "ten-south"),
                           ("freeze", "not-a-tenant")):
        status, text = browser.driver.execute_async_script(  # ... and a forged POST with a valid CSRF token
            FORGE, f"/billing/tenants/{NS}/{target}/{action}", csrf, "forged")
        assert status == 403 and "cannot change tenants" in text, (action, target, status)
    assert ((await tenant(world, "ten-north"))["metadata"].get("annotations") or {}) == before
    assert SUSPENDED not in ((await tenant(world, "ten-south"))["metadata"].get("annotations") or {})
    # The API server would refuse it too: viewers hold no write on the billing kinds.
    review = await k8s.AuthorizationV1Api(world.stack.api).create_subject_access_review(k8s.V1SubjectAccessReview(
        spec=k8s.V1SubjectAccessReviewSpec(user="bob", groups=["free-users"], resource_attributes=(
            k8s.V1ResourceAttributes(group="billing.opendatahub.io", resource="tenantaccounts", verb="patch",
                                     namespace=NS)))))
    assert review.status.allowed is False

    # A user without a billing role: no billing section, every billing page refused.
    browser.go("/signin")
    browser.sign_in_with_token(world.token("alice"))
    await browser.until(lambda: "alice" in browser.text("header"), what="alice signed in")
    assert not browser.all("#billing-role") and "BILLING" not in browser.text("header").upper()
    for path in ("/billing/tenants", "/billing/budgets", "/billing/health", f"/billing/tenants/{NS}/ten-north"):
        browser.go(path)
        assert "billing pages are for the billing console's roles" in browser.text(), path
    csrf = browser.one("form.who input[name=csrf_token]").get_attribute("value")
    status, _ = browser.driver.execute_async_script(FORGE, f"/billing/tenants/{NS}/ten-north/freeze", csrf, "x")
    assert status == 403

    # OIDC at the real provider: the groups claim (analysts) reaches the console as oidc:analysts -> viewer.
    browser.driver.delete_all_cookies()
    await oidc_sign_in(browser, "erin")
    await browser.until(lambda: role(browser) == "viewer", what="erin is a billing viewer")
    browser.go("/billing/tenants")
    assert "North Labs" in browser.text("#billing-tenants")
    assert not browser.all("#freeze-form")

"""Billing -> Get started in Chromium: a new billing administrator (bea) follows the walkthrough from no PriceBook
to a tenant whose users' calls are charged, on the console test world with the real billing operator in its own
process (watching the MaaS Gateway's namespace, rating maas-api's usage database into a SQLite ledger, serving the
portal API the console was told of). Each step is a prefilled ordinary form; the journey ends with alice calling
the model through the gateway with a key of the organization's subscription, and the tenant's wallet charged for
exactly those calls.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes_asyncio import client as k8s

from maasctl.tls import default_tls
from tests.billing.conftest import eventually
from tests.console import billing_world, objects
from tests.console.browser import Browser
from tests.console.conftest import SETTINGS, ConsoleWorld

BILLING = ("billing.opendatahub.io", "v1alpha1")
GW_NS, GW = SETTINGS.gateway_namespace, SETTINGS.gateway_name
TENANT = "ten-guide"
KINDS = ("tenantaccounts", "plans", "pricebooks")  # deleted in this order (a Plan's book last)


async def _live(api: k8s.ApiClient, plural: str) -> list[dict[str, Any]]:
    listed = await k8s.CustomObjectsApi(api).list_cluster_custom_object(*BILLING, plural)
    return [o for o in listed.get("items") or () if not o["metadata"].get("deletionTimestamp")]


async def _clean(api: k8s.ApiClient) -> bool:
    """No live billing object anywhere: the walkthrough starts from nothing (other modules' namespaces go). A
    kind just installed answers 429 while its storage initializes: not known to be clean yet."""
    try:
        return not any([await _live(api, p) for p in KINDS])
    except k8s.ApiException as exc:
        if exc.status in (404, 429):
            return False
        raise


@pytest.fixture(scope="module")
async def guide(world: ConsoleWorld) -> AsyncIterator[None]:
    stack = world.stack
    await billing_world.billing_namespace(stack, "guide-tests")  # the kinds and the console roles
    await eventually(lambda: _clean(stack.api), timeout=90)
    with tempfile.TemporaryDirectory(prefix="maasctl-guide-") as tmp:
        operator = billing_world.billing_operator(
            stack, GW_NS, f"sqlite+aiosqlite:///{Path(tmp) / 'ledger.db'}", Path(tmp), "--metrics-bind-address=0",
            f"--portal-api-bind-address=127.0.0.1:{billing_world.api_port()}",
            f"--portal-subscription-namespace={stack.settings.subscription_namespace}", "--rate-interval-seconds=1")
        operator.start()
        try:
            yield
        finally:
            print(operator.log_tail())  # shown with a failure
            custom = k8s.CustomObjectsApi(stack.api)
            for plural in KINDS:  # while the operator runs: it removes its finalizers and generated policies
                for obj in await _live(stack.api, plural):
                    await custom.delete_namespaced_custom_object(*BILLING, obj["metadata"]["namespace"], plural,
                                                                obj["metadata"]["name"])
            await eventually(lambda: _clean(stack.api), timeout=60)
            await asyncio.to_thread(operator.stop)
            await k8s.CoreV1Api(stack.api).delete_namespace("guide-tests")


async def _tenant(world: ConsoleWorld) -> dict[str, Any]:
    obj: dict[str, Any] = await k8s.CustomObjectsApi(world.stack.api).get_namespaced_custom_object(
        *BILLING, GW_NS, "tenantaccounts", TENANT)
    return obj


def _step(browser: Browser, key: str, done: bool) -> bool:
    browser.go("/billing/start")
    return bool(browser.all(f"li[data-step='{key}'][data-done='{'yes' if done else 'no'}']"))


async def _call(world: ConsoleWorld, ns: str, model: str, key: str) -> int:
    async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=30, verify=default_tls()) as http:
        resp = await http.post(f"/{ns}/{model}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                               json={"model": model, "messages": [{"role": "user", "content": "hello"}]})
    return resp.status_code


async def test_a_new_billing_admin_is_guided_to_a_tenant_whose_calls_are_charged(
        world: ConsoleWorld, browser: Browser, guide: None) -> None:
    ns, model, tag = await objects.namespace(world, "guide"), "guide-model", objects.suffix()
    sub, org = f"guide-{tag}", f"guide-org-{tag}"
    await objects.apply(world, objects.external_model(world, ns, model))  # a published model, no SKU yet
    browser.sign_in_with_token(world.token("bea"))
    await browser.until(lambda: browser.all("#billing-start"), what="Get started in bea's navigation")
    browser.go("/billing/start")
    assert [e.get_attribute("data-done") for e in browser.all("#walkthrough li")] == ["no"] * 5
    assert not browser.all("#step-plan")  # nothing to attach a Plan to yet: no link that would fail

    # 1. The first PriceBook: the Gateway's namespace, one SKU line per published model, in force once created.
    browser.click("#step-pricebook")
    await browser.until(lambda: browser.all("#guide-help"), what="the guided PriceBook form")
    assert browser.one("#f-namespace").get_attribute("value") == GW_NS
    assert browser.one("#f-effectiveFrom").get_attribute("value") == ""
    assert f"{model} per-1M-tokens prompt_tokens=1.00" in (browser.one("#f-skus").get_attribute("value") or "")
    browser.select("f-currency", "EUR")
    browser.fill("f-skus", f"{model} per-1M-tokens prompt_tokens=1000 completion_tokens=2000")  # 0.02 a call
    browser.button("Announce")
    await browser.until(lambda: browser.path == "/billing/start", what="back on Get started")
    await browser.until(lambda: _step(browser, "pricebook", True), what="the book in force")

    # 2. The first Plan: on the MaaS Gateway, with that book; compiled by the operator.
    browser.click("#step-plan")
    await browser.until(lambda: browser.all("#guide-help"), what="the guided Plan form")
    assert browser.one("#f-targetName").get_attribute("value") == GW
    assert browser.one("#f-priceBookRef").get_attribute("value") == "standard"
    browser.button("Save")
    await browser.until(lambda: _step(browser, "plan", True), what="the Plan compiled")

    # 3. The first tenant, answering to the organization of the subscription its users will call with.
    browser.click("#step-tenant")
    await browser.until(lambda: browser.all("#guide-help"), what="the guided tenant form")
    assert browser.one("#f-planRef").get_attribute("value") == "standard"
    browser.fill("f-name", TENANT)
    browser.fill("f-displayName", "Guide Co")
    browser.fill("f-organization", org)
    browser.button("Save")
    await browser.until(lambda: _step(browser, "tenant", True), what="the tenant")
    assert _step(browser, "wallet", False)

    # 4. Money in its wallet: the tenant page's credit form, in the PriceBook's currency.
    browser.click("#step-wallet")
    await browser.until(lambda: browser.all("#credit-form"), what="the credit form")
    browser.fill("credit-amount", "5.00")
    browser.fill("credit-reason", "opening credit (walkthrough)")
    browser.one("#credit-form button[type=submit]").click()
    await browser.until(lambda: _step(browser, "wallet", True), what="the wallet funded")
    assert org in browser.text("li[data-step='subscription']")
    assert not browser.all("#walkthrough-ready")

    # 5. The organization's subscription (the MaaS administrator's; applied here as kubectl would).
    access = objects.access(world, sub, ns, [model], ["alice"], [(10_000_000, "1m")])
    access[1]["spec"]["organization"] = {"id": org}
    await objects.apply(world, access)
    await browser.until(lambda: _step(browser, "subscription", True), what="the subscription found")
    assert browser.all("#walkthrough-ready") and TENANT in browser.text("#walkthrough-ready")
    browser.screenshot("billing-walkthrough")

    # The working state: alice's calls are served and charged to the tenant, 0.02 EUR each.
    async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=10, verify=default_tls()) as http:
        minted = await http.post("/v1/api-keys", headers={"Authorization": f"Bearer {world.token('alice')}"},
                                 json={"name": f"guide-{tag}", "subscription": sub})
    assert minted.status_code == 201, minted.text
    key = minted.json()["key"]
    calls = 0

    async def served() -> bool:
        nonlocal calls
        status = await _call(world, ns, model, key)
        calls += status == 200
        return calls >= 2

    await eventually(served, timeout=90)

    async def charged() -> bool:
        balance = (await _tenant(world)).get("status", {}).get("balance")
        return balance is not None and Decimal(balance) == Decimal("5.00") - Decimal("0.02") * calls

    await eventually(charged, timeout=90)

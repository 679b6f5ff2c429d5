"""Subscriptions pages in a real browser against the real API server: create for `*` with
"100M per Hour, 1000M per Day", the matching auth policy, edit, delete, and errors next to the field."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client as k8s

from tests.console import objects
from tests.console.browser import Browser
from tests.console.conftest import ConsoleWorld


async def _get(world: ConsoleWorld, plural: str, name: str) -> dict[str, Any] | None:
    api = k8s.CustomObjectsApi(world.stack.api)
    try:
        obj: dict[str, Any] = await api.get_namespaced_custom_object(
            "maas.opendatahub.io", "v1alpha1", world.stack.settings.subscription_namespace, plural, name)
        return obj
    except k8s.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def row_index(browser: Browser, ref: str) -> int:
    tr = browser.one(f"#subscription-form tr[data-model='{ref}']")
    return int(tr.find_element("css selector", "input[type=checkbox]").get_attribute("id").split("-")[1])


async def fill_subscription(browser: Browser, name: str | None, ref: str, tiers: str, users: str = "",
                            groups: str = "") -> None:
    if name is not None:
        browser.fill("name", name)
    browser.fill("users", users)
    browser.fill("groups", groups)
    i = row_index(browser, ref)
    box = browser.one(f"#model-{i}-include")
    if not box.is_selected():
        box.click()
    browser.fill(f"model-{i}-tiers", tiers)


async def test_create_edit_delete_a_subscription_for_everyone(world: ConsoleWorld, browser: Browser) -> None:
    ns = await objects.namespace(world, "subs")
    await objects.apply(world, objects.external_model(world, ns, "gpt-x"))
    name = f"everyone-{objects.suffix()}"
    browser.sign_in_with_token(world.token("ops"))
    await browser.until(lambda: "ops" in browser.text("header"))
    browser.go("/admin/subscriptions/new")
    await fill_subscription(browser, name, f"{ns}/gpt-x", "100M per Hour, 1000M per Day", users="*")
    browser.fill("display_name", "Everyone")
    browser.screenshot("admin-subscription-form")
    browser.button("Save")
    await browser.until(lambda: browser.path == "/admin/subscriptions", what="saved")

    sub = await _get(world, "maassubscriptions", name)
    assert sub is not None
    assert sub["spec"]["owner"] == {"users": ["*"]}
    assert sub["spec"]["modelRefs"] == [{"name": "gpt-x", "namespace": ns, "tokenRateLimits": [
        {"limit": 100_000_000, "window": "1h"}, {"limit": 1_000_000_000, "window": "24h"}]}]
    policy = await _get(world, "maasauthpolicies", name)
    assert policy is not None and policy["spec"] == {"modelRefs": [{"name": "gpt-x", "namespace": ns}],
                                                     "subjects": {"users": ["*"]}}

    def listed() -> str:
        browser.go("/admin/subscriptions")
        return browser.one(f"tr[data-subscription='{name}']").text

    await browser.until(lambda: "Active" in listed(), what="Active")
    row = listed()
    assert "100M tokens per Hour, 1B tokens per Day" in row and "All authenticated users (*)" in row
    browser.screenshot("admin-subscriptions")

    # Edit: priority, a group instead of everyone, one tier; shown back the way it was typed.
    browser.go(f"/admin/subscriptions/{name}/edit")
    i = row_index(browser, f"{ns}/gpt-x")
    assert browser.one(f"#model-{i}-tiers").get_attribute("value") == "100M per Hour, 1B per Day"
    browser.fill("priority", "5")
    await fill_subscription(browser, None, f"{ns}/gpt-x", "1.5M per Minute", groups="free-users")
    browser.button("Save")
    await browser.until(lambda: browser.path == "/admin/subscriptions", what="saved")
    sub = await _get(world, "maassubscriptions", name)
    assert sub is not None and sub["spec"]["priority"] == 5
    assert sub["spec"]["owner"] == {"groups": [{"name": "free-users"}]}
    assert sub["spec"]["modelRefs"][0]["tokenRateLimits"] == [{"limit": 1_500_000, "window": "1m"}]
    policy = await _get(world, "maasauthpolicies", name)
    assert policy is not None and policy["spec"]["subjects"] == {"groups": [{"name": "free-users"}]}

    browser.go(f"/admin/subscriptions/{name}/delete")
    browser.button("Delete")
    await browser.until(lambda: browser.path == "/admin/subscriptions", what="deleted")
    assert await _get(world, "maasauthpolicies", name) is None

    async def gone() -> bool:
        return await _get(world, "maassubscriptions", name) is None

    for _ in range(200):
        if await gone():
            break
        await asyncio.sleep(0.3)
    assert await gone()  # the controller's cleanup Job (run by the test stack) released the finalizer


async def test_limits_and_names_are_checked_next_to_the_field(world: ConsoleWorld, browser: Browser) -> None:
    ns = await objects.namespace(world, "suberr")
    await objects.apply(world, objects.external_model(world, ns, "gpt-x"))
    browser.sign_in_with_token(world.token("ops"))
    await browser.until(lambda: "ops" in browser.text("header"))
    browser.go("/admin/subscriptions/new")
    await fill_subscription(browser, "typo", f"{ns}/gpt-x", "100X per Hour", users="bob")
    browser.button("Save")
    # The answer is a new page: look the row up only once it has arrived (the old one goes stale).
    await browser.until(lambda: browser.all("[id$='-tiers-error']"), what="tier error")
    i = row_index(browser, f"{ns}/gpt-x")
    assert "unknown suffix" in browser.text(f"#model-{i}-tiers-error")
    await fill_subscription(browser, "typo", f"{ns}/gpt-x", "100M per Fortnight", users="bob")
    browser.button("Save")
    await browser.until(lambda: "not a window" in browser.text(f"#model-{i}-tiers-error"), what="window error")
    # A name only the API server checks: its message is shown next to the name field.
    await fill_subscription(browser, "Not_A_Name", f"{ns}/gpt-x", "100M per Hour", users="bob")
    browser.button("Save")
    await browser.until(lambda: browser.all("#name-error"), what="name error")
    assert "RFC 1123" in browser.text("#name-error")
    browser.screenshot("admin-subscription-errors")
    assert await _get(world, "maassubscriptions", "Not_A_Name") is None

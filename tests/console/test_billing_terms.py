"""The billing Plan limits and tenant state that also apply to a subscription, beside its own limits: My
Subscriptions and the Models page (from maas-api, for the developer's own subscriptions only) and the
administrators' subscription view (from the objects, with their own RBAC). No billing operator runs here: the
Plans and TenantAccounts are written as it would leave them (the tenant's state in its status)."""

from __future__ import annotations

from typing import Any

import httpx
from kubernetes_asyncio import client as k8s

from maasctl.tls import default_tls
from tests.billing.conftest import eventually
from tests.console import objects
from tests.console.browser import Browser
from tests.console.conftest import SETTINGS, ConsoleWorld

BILLING = "billing.opendatahub.io"


def _plan(name: str) -> dict[str, Any]:
    return {"apiVersion": f"{BILLING}/v1alpha1", "kind": "Plan",
            "metadata": {"name": name, "namespace": SETTINGS.gateway_namespace},
            "spec": {"limits": {"requestsPerMinute": 30, "tokensPerMinute": 20000}, "modelScopes": ["gpt-*"],
                     "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                   "name": SETTINGS.gateway_name}}}


def _tenant(name: str, org: str, plan: str) -> dict[str, Any]:
    return {"apiVersion": f"{BILLING}/v1alpha1", "kind": "TenantAccount",
            "metadata": {"name": name, "namespace": SETTINGS.gateway_namespace,
                         "labels": {f"{BILLING}/organization-id": org}},
            "spec": {"displayName": name, "planRef": {"name": plan}, "billingMode": "Invoiced"}}


async def _state(world: ConsoleWorld, tenant: str, state: str) -> None:
    await k8s.CustomObjectsApi(world.stack.api).patch_namespaced_custom_object_status(
        BILLING, "v1alpha1", SETTINGS.gateway_namespace, "tenantaccounts", tenant,
        {"status": {"state": state, "balance": "-987.654321"}},
        _content_type="application/merge-patch+json")  # type: ignore[call-arg]


async def _mint(world: ConsoleWorld, user: str, name: str, subscription: str) -> None:
    """A key of `subscription` for `user`, at maas-api (retried until the subscription may be minted for)."""
    async def minted() -> bool:
        async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=10, verify=default_tls()) as http:
            resp = await http.post("/v1/api-keys", headers={"Authorization": f"Bearer {world.token(user)}"},
                                   json={"name": name, "subscription": subscription})
        return resp.status_code == 201

    await eventually(minted, timeout=60, interval=1)


async def test_plan_limits_and_tenant_state_beside_a_subscriptions_limits(world: ConsoleWorld,
                                                                         browser: Browser) -> None:
    sfx = objects.suffix()
    ns = await objects.namespace(world, "billing")
    acme, helix = f"acme-{sfx}", f"helix-{sfx}"
    mine, theirs = objects.access(world, f"acme-{sfx}", ns, ["gpt-x"], ["alice"], [(1000, "1m")]), \
        objects.access(world, f"helix-{sfx}", ns, ["gpt-x"], ["bob"], [(1000, "1m")])
    mine[1]["spec"]["organization"] = {"id": acme}
    theirs[1]["spec"]["organization"] = {"id": helix}
    await objects.apply(world, [*objects.external_model(world, ns, "gpt-x"), *mine, *theirs,
                                _plan(f"basic-{sfx}"), _tenant(f"ten-{acme}", acme, f"basic-{sfx}"),
                                _tenant(f"ten-{helix}", helix, f"basic-{sfx}")])
    await _state(world, f"ten-{acme}", "Active")
    await _state(world, f"ten-{helix}", "Frozen")

    # A developer: My Subscriptions shows the Plan's limits and the tenant's state beside the subscription's own.
    browser.sign_in_with_token(world.token("alice"))
    await browser.until(lambda: "alice" in browser.text("header"), what="signed in as alice")

    def card() -> str:
        browser.go("/my/subscriptions")
        return next((c.text for c in browser.all("section.card") if f"acme-{sfx}" in c.text), "")

    await browser.until(lambda: f"ten-{acme}" in card(), what="the tenant beside the subscription's limits")
    text = card()
    assert "Active" in text and f"Plan basic-{sfx}" in text and "for models gpt-*" in text
    assert "30 requests per Minute" in text and "20k tokens per Minute" in text
    assert f"every subscription and user of {acme} shares them" in text
    page = browser.source()
    assert helix not in page and "987" not in page  # another organization's tenant, any balance: never shown
    browser.screenshot("my-subscriptions-billing")

    # The tenant is frozen: the page says its requests are refused.
    await _state(world, f"ten-{acme}", "Frozen")
    await browser.until(lambda: "requests are refused" in card(), what="the Frozen state shown")
    assert browser.all(f".billing-tenant.warning[data-tenant='{SETTINGS.gateway_namespace}/ten-{acme}']")

    # The Models page: the same terms beside the models the subscription reaches (for a key of it, chosen as a
    # user does: alice may hold keys of other subscriptions, minted by other tests of this world).
    await _mint(world, "alice", f"terms-{sfx}", f"acme-{sfx}")
    browser.models_for_key(f"terms-{sfx}")
    billing = browser.text("main")
    assert f"ten-{acme}" in billing and "30 requests per Minute" in billing and helix not in browser.source()
    browser.screenshot("models-billing")

    # An administrator's subscription view: from the objects, with the administrator's own RBAC.
    browser.button("Sign out", scope="header")
    await browser.until(lambda: browser.path.startswith("/signin"), what="signed out")
    browser.sign_in_with_token(world.token("ops"))
    await browser.until(lambda: "ops" in browser.text("header"), what="signed in as ops")
    browser.go(f"/admin/subscriptions/helix-{sfx}")
    view = browser.text("#billing")
    assert f"ten-{helix}" in view and "Frozen" in view and "requests are refused" in view
    assert f"Plan basic-{sfx}" in view and "30 requests per Minute" in view and "987" not in browser.source()
    browser.screenshot("subscription-billing")

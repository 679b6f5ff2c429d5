"""The money flow of `maasctl dev`'s own samples, against the dev stack itself (hack/e2e-dev.sh): a call of the
sample model `llm/gpt-x` becomes a charge on the sample tenant `ten-acme` (priced by the sample PriceBook
`pb-launch`), the balance falling below its reload threshold makes the dev stack's psp-connector ask Stripe
(stripe-mock) for a reload, and the reload's confirmed payment credits the wallet. Everything is read where a user
reads it: the TenantAccount's status and Events. The journey only adds a subscription of organization `acme` for
its own user (the cluster's groups are not the samples' in E2E_CLUSTER=external).

In E2E_CLUSTER=local the suite's stack has no billing of its own: the journey starts it as `maasctl dev` does
(`maasctl.billing.dev.stack.start_billing`: the billing controller, stripe-mock, the psp-connector, the samples and the
welcome credit, its own ledger) for this module, with the sample model `llm/gpt-x`, and removes them afterwards."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes_asyncio import client as k8s

from e2e.billing_operator import usage_url
from e2e.conftest import World
from e2e.target import Target
from e2e.waits import eventually
from maasctl import samples as maas_samples
from maasctl.billing.dev import samples
from maasctl.billing.dev.stack import start_billing
from maasctl.runtime import GroupVersionKind, NotFound
from maasctl.tls import default_tls

GROUP, VERSION = "billing.opendatahub.io", "v1alpha1"


@dataclass(frozen=True)
class _Database:
    database_url: str | None


@dataclass(frozen=True)
class _DevStack:
    """What `start_billing` needs of the stack: the suite's API client, a directory of its own, maas-api's DB."""

    api: k8s.ApiClient
    directory: Path
    options: _Database


@pytest.fixture(scope="module")
async def dev_billing(stack: Target) -> AsyncIterator[None]:
    """External: the cluster's own (`maasctl dev`'s). Local: started here as `maasctl dev` starts it."""
    if stack.local is None:
        yield
        return
    gw_ns, gw_name = stack.settings.gateway_namespace, stack.settings.gateway_name
    directory = stack.directory / "dev-billing"
    directory.mkdir(exist_ok=True)
    client = stack.client
    model = [o for o in maas_samples.models(stack.settings, stack.model_url, stack.incluster_model_url or "")
             if o["metadata"]["name"] in (maas_samples.EXTERNAL_MODEL, "provider-key")]  # llm/gpt-x, as in dev
    for obj in model:
        await client.apply(obj, field_manager="e2e-operator")
    stop = asyncio.Event()
    running = await start_billing(_DevStack(stack.api, directory, _Database(usage_url(stack.local))),
                                  str(stack.kubeconfig), gw_ns, gw_name, stop)
    try:
        yield
    finally:
        stop.set()
        await running.wait()
        for obj in [*samples.billing_samples(gw_ns, gw_name, datetime.now(UTC)), *samples.payment_secrets(gw_ns),
                    *reversed(model)]:
            group, _, version = obj["apiVersion"].rpartition("/")
            with contextlib.suppress(NotFound):
                await client.delete(GroupVersionKind(group, version, obj["kind"]), obj["metadata"]["name"],
                                    obj["metadata"]["namespace"])


async def test_a_call_becomes_a_charge_and_a_low_balance_a_credited_reload(dev_billing: None, world: World) -> None:
    stack = world.stack
    gw_ns = stack.settings.gateway_namespace
    custom = k8s.CustomObjectsApi(stack.api)

    async def get(plural: str, name: str) -> dict[str, Any]:
        return dict(await custom.get_namespaced_custom_object(GROUP, VERSION, gw_ns, plural, name))

    try:
        await get("billingconnectors", samples.DEV_CONNECTOR)
    except k8s.ApiException as exc:
        if exc.status != 404:
            raise
        pytest.skip(f"no BillingConnector {gw_ns}/{samples.DEV_CONNECTOR}: not a `maasctl dev` with its billing "
                    "samples and stripe-mock (hack/e2e-dev.sh)")

    async def status() -> dict[str, Any]:
        return dict((await get("tenantaccounts", samples.PAYING_TENANT)).get("status") or {})

    async def book_active() -> bool:
        return ((await get("pricebooks", "pb-launch")).get("status") or {}).get("state") == "Active"

    await eventually(book_active, 120)  # a minute after the dev stack started

    async def settled() -> bool:
        st = await status()
        return st.get("state") == "Active" and "pendingReloadIntentID" not in st

    await eventually(settled, 60, describe=lambda: "ten-acme is not Active without a reload in flight")
    before = await status()
    balance0, spent0 = Decimal(before["balance"]), Decimal(before.get("mtdSpend") or "0")

    # The user: a subscription of organization acme (ten-acme's) to the sample model, and an API key for it.
    sub = world.name("acme")
    model = {"name": maas_samples.EXTERNAL_MODEL, "namespace": maas_samples.MODEL_NAMESPACE}
    policy = world.auth_policy(world.name("ap"), [], users=("alice",))
    policy["spec"]["modelRefs"] = [model]
    subscription = world.subscription(sub, {}, users=("alice",), organization="acme")
    subscription["spec"]["modelRefs"] = [{**model, "tokenRateLimits": [{"limit": 100000, "window": "1m"}]}]
    await world.apply(policy, subscription)
    await world.wait_active(sub)
    key = (await world.mint("alice", subscription=sub))["key"]
    url = f"/{maas_samples.MODEL_NAMESPACE}/{maas_samples.EXTERNAL_MODEL}/v1/chat/completions"
    served = 0

    async def call() -> int:
        nonlocal served
        async with httpx.AsyncClient(base_url=stack.gateway_url, timeout=30, verify=default_tls()) as http:
            resp = await http.post(url, headers={"Authorization": f"Bearer {key}"}, json={
                "model": maas_samples.EXTERNAL_MODEL, "messages": [{"role": "user", "content": "hello"}]})
        served += resp.status_code == 200
        return resp.status_code

    async def serving() -> bool:
        return await call() == 200

    await eventually(serving, 60, interval=1.0)  # the gateway enforces the new subscription a moment later
    price = Decimal(samples.GPT_X_CALL)
    threshold = Decimal(samples.RELOAD_THRESHOLD)
    while balance0 - served * price >= threshold:  # until the balance is below the threshold: a reload is due
        assert await call() == 200
    calls = served

    # Each call is one charge of the sample price; the balance below the threshold was reloaded (once or more,
    # each reload exactly the sample amount) and the confirmed payment credited, with no reload left in flight.
    reload = Decimal(samples.RELOAD_AMOUNT)
    seen: dict[str, Any] = {}

    async def charged_and_reloaded() -> bool:
        st = seen["status"] = await status()
        spent = Decimal(st.get("mtdSpend") or "0") - spent0
        credited = Decimal(st["balance"]) - balance0 + calls * price
        return (spent == calls * price and credited > 0 and credited % reload == 0
                and "pendingReloadIntentID" not in st and st.get("state") == "Active"
                and Decimal(st["balance"]) >= threshold)

    await eventually(charged_and_reloaded, 120, describe=lambda: f"{calls} call(s) at {price}: {seen}")
    events = await k8s.CoreV1Api(stack.api).list_namespaced_event(
        gw_ns, field_selector=f"involvedObject.name={samples.PAYING_TENANT}")
    notes = [e.message or "" for e in events.items if e.reason == "ReloadRequested"]
    assert any(f"reload of {samples.RELOAD_AMOUNT} USD requested" in n for n in notes), notes

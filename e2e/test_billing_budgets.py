"""The budget journey over real HTTP: a tenant's project (its API keys labelled `project=<p>`) has spent part of its
BudgetPolicy's cap when the policy is set; the budget Throttles the project's keys at once (they share one lowered
token limit through the gateway: 429 when it is used up) and, as the project keeps spending, Freezes them (403
naming the budget). The tenant's other key is served throughout. The budget counts only the project's keys'
spend, as the ledger records it per key. `maasctl billing run` is its own process, rating maas-api's usage
database into its own ledger."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest
from kubernetes_asyncio import client as k8s

from e2e.billing_operator import (
    BILLING,
    billing_operator,
    chargeable_from,
    ledger_url,
    org_subscription,
    tenant_objects,
)
from e2e.conftest import Need, World, eventually
from e2e.target import Target
from maasctl.billing.api.budget import BudgetPeriod
from maasctl.billing.ledger import Ledger
from maasctl.billing.rules import budget
from maasctl.testenv.controlplane import ManagedProcess

GROUP, VERSION = "billing.opendatahub.io", "v1alpha1"
# Starts its own billing operator on the local stack's databases; a cluster someone else runs has its own.
pytestmark = pytest.mark.local_stack
CALL = Decimal("0.001")  # 10 prompt + 5 completion tokens (the test model) at 50 and 100 per million
CAP = Decimal("0.15")
PER_WINDOW = budget.throttled_tokens_per_minute(10_000) // 15  # throttled calls a minute (a Plan of 10,000 tokens)


@pytest.fixture(scope="module")
async def budget_billing(stack: Target) -> AsyncIterator[ManagedProcess]:
    async with billing_operator(stack, "billing-budgets") as proc:
        yield proc


def message(resp: httpx.Response) -> str:
    try:
        return str(resp.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return resp.text


async def test_a_project_budget_throttles_then_freezes_its_keys_while_the_tenants_other_keys_work(
        budget_billing: ManagedProcess, world: World) -> None:
    world.require(Need.LOCAL_STACK)
    stack = world.stack
    local = stack.local
    assert local is not None
    gw_ns = stack.settings.gateway_namespace
    org, sub_name, project = world.name("helix"), world.name("helix-sub"), world.name("rag")
    plan_name, tenant_name, book_name = world.name("budget"), world.name("ten-helix"), world.name("pb")
    budget_name = world.name("rag-budget")
    tenant_key = f"{gw_ns}/{tenant_name}"
    await org_subscription(world, sub_name, org)
    rag = await world.mint("alice", subscription=sub_name, labels={"project": project, "team": "ml"})
    rag2 = await world.mint("alice", subscription=sub_name, labels={"project": project})
    plain = await world.mint("alice", subscription=sub_name, labels={"project": "web"})
    for key in (rag, rag2, plain):
        await world.wait_enforced("gpt", key["key"])

    # The journey needs one Monthly period: never start within minutes of a month's end.
    month_end = budget.period_bounds(BudgetPeriod.MONTHLY, datetime.now(UTC))[1]
    if month_end - datetime.now(UTC) < timedelta(minutes=5):
        await asyncio.sleep((month_end - datetime.now(UTC)).total_seconds() + 1)
    effective = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    book_spec = {"currency": "USD", "effectiveFrom": effective.strftime("%Y-%m-%dT%H:%M:%SZ"), "noticeDays": 0,
                 "skus": [{"sku": "gpt", "unit": "per-1M-tokens",
                           "rates": {"prompt_tokens": "50", "completion_tokens": "100"}}]}
    objects = tenant_objects(world, book=book_name, plan=plan_name, tenant=tenant_name, org=org,
                             book_spec=book_spec, limits={"tokensPerMinute": 10_000}, billing_mode="ShowbackOnly")
    policy = {"apiVersion": BILLING, "kind": "BudgetPolicy", "metadata": {"name": budget_name, "namespace": gw_ns},
              "spec": {"tenantRef": {"name": tenant_name}, "selector": {"keyLabels": {"project": project}},
                       "caps": [{"amount": str(CAP), "period": "Monthly", "thresholds": [
                           {"pct": 10, "action": "Notify"}, {"pct": 20, "action": "Throttle"},
                           {"pct": 100, "action": "Freeze"}]}]}}
    await world.apply(*objects)
    custom = k8s.CustomObjectsApi(stack.api)
    ledger = Ledger.from_url(ledger_url(local))

    async def status() -> dict[str, Any]:
        obj = await custom.get_namespaced_custom_object(GROUP, VERSION, gw_ns, "budgetpolicies", budget_name)
        return obj.get("status") or {}  # type: ignore[no-any-return]

    async def in_force() -> str | None:
        fired = [c for c in (await status()).get("conditions") or () if c.get("type") == "ThresholdFired"]
        return str(fired[0].get("reason")) if fired else None

    seen: dict[str, Any] = {"spend": None, "refused": []}

    async def spent(want: Decimal) -> bool:
        seen["spend"] = await ledger.spend(tenant_key, effective)
        return bool(seen["spend"] == want)

    def spend_report() -> str:
        calls = seen["spend"] / CALL if seen["spend"] is not None else None
        return f"the ledger holds {seen['spend']} ({calls} calls); calls refused and retried: {seen['refused']}"

    async def served(credential: str) -> bool:
        return (await world.chat("gpt", credential)).status_code == 200

    async def spend_one_call(credential: str) -> None:
        """One answered call. The Plan and price book were applied a moment ago: a call the gateway refuses
        while it loads them is retried (a refused call is not charged, so the spend below stays exact); a
        refusal that lasts fails with what the gateway said."""
        for _ in range(40):
            resp = await world.chat("gpt", credential)
            if resp.status_code == 200:
                return
            seen["refused"].append(f"{resp.status_code} {resp.text[:120]}")
            await asyncio.sleep(0.25)
        raise AssertionError(f"gateway keeps answering {resp.status_code}: {resp.text[:500]}")

    try:
        await chargeable_from(world, tenant_name, effective)
        # The project spends 32 calls' worth (past 20 % of the cap), the other key 5, before any budget exists.
        for _ in range(16):
            await spend_one_call(rag["key"])
            await spend_one_call(rag2["key"])
        for _ in range(5):
            await spend_one_call(plain["key"])
        await eventually(lambda: spent(37 * CALL), 60, describe=spend_report)

        # The budget is set: it counts the project's keys only, and Throttles them at once (Notify too).
        await world.apply(policy)

        async def throttled() -> bool:
            return await in_force() == "Throttled"

        await eventually(throttled, 60)
        assert (await status())["currentSpend"] == "0.032000"
        assert [f["pct"] for f in (await status())["firedThresholds"]] == [10, 20]

        # Through the gateway: the project's keys share one throttled minute; the other key is served.
        calls, refused = 0, None
        for i in range(4 * PER_WINDOW):
            resp = await world.chat("gpt", (rag if i % 2 else rag2)["key"])
            if resp.status_code == 429:
                refused = resp
                break
            assert resp.status_code == 200, resp.text
            calls += 1
            if i % 10 == 0:
                assert await served(plain["key"])
            await asyncio.sleep(0.1)  # the gateway picks the new limit up a moment later
        assert refused is not None, f"{calls} calls, none throttled"
        assert calls >= PER_WINDOW - 5, calls  # about a minute's throttled tokens went through first
        assert await served(plain["key"])
        assert await in_force() == "Throttled"

        # The project keeps spending as the throttled window allows, until its cap is reached: Frozen, 403 naming
        # the budget, for both of its keys; the other key is still served.
        frozen: httpx.Response | None = None
        deadline = asyncio.get_running_loop().time() + 200
        while frozen is None:
            assert asyncio.get_running_loop().time() < deadline, f"not frozen; budget status {await status()}"
            resp = await world.chat("gpt", rag["key"])
            if resp.status_code == 403:
                frozen = resp
            elif resp.status_code == 429:
                await asyncio.sleep(1)  # the throttled minute is used up
            else:
                assert resp.status_code == 200, resp.text
                await asyncio.sleep(0.1)
        text = f"billing budget {gw_ns}/{budget_name} of tenant {tenant_name} has frozen this API key"
        assert text in message(frozen), frozen.text
        refused2 = await world.chat("gpt", rag2["key"])
        assert refused2.status_code == 403 and text in message(refused2), refused2.text
        assert await served(plain["key"])
        final = await status()
        assert [f["pct"] for f in final["firedThresholds"]] == [10, 20, 100]
        assert Decimal(final["currentSpend"]) >= CAP

        # The ledger's per-key spend: the budget's spend is the project's keys', not the tenant's.
        by_key = await ledger.spend_by_key(tenant_key, effective, datetime.now(UTC) + timedelta(days=1))
        project_spend = by_key.get(rag["id"], Decimal(0)) + by_key.get(rag2["id"], Decimal(0))
        assert by_key.get(plain["id"], Decimal(0)) >= 5 * CALL
        assert project_spend >= CAP and project_spend == sum(by_key.values()) - by_key[plain["id"]]
    finally:
        await ledger.close()
        for plural, name in (("budgetpolicies", budget_name), ("tenantaccounts", tenant_name),
                             ("plans", plan_name), ("pricebooks", book_name)):
            await custom.delete_namespaced_custom_object(GROUP, VERSION, gw_ns, plural, name)

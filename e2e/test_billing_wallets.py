"""The wallet journey over real HTTP: a Prepaid tenant with a small balance calls a model through the gateway
until its wallet is exhausted and it is refused (403, naming the tenant and the fix); an operator credits the
wallet with `maasctl billing ledger credit`; calls succeed again. Then the ledger, the TenantAccount status and
maas-api's usage records agree to the last micro-unit. `maasctl billing run` is its own process, rating
maas-api's usage database into its own ledger."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest
from kubernetes_asyncio import client as k8s

from e2e.billing_operator import (
    billing_operator,
    chargeable_from,
    ledger_url,
    org_subscription,
    tenant_objects,
    usage_url,
    wait_allowance,
)
from e2e.conftest import Need, World, eventually
from e2e.target import Target
from maasctl.billing import money
from maasctl.billing.api import PriceBookSpec
from maasctl.billing.controller.rater import usage_of
from maasctl.billing.controller.usage_source import UsageReader
from maasctl.billing.ledger import Ledger, credit
from maasctl.billing.rules.rating import Book, RatedLine, rate
from maasctl.dataplane.body import prepare_body
from maasctl.dataplane.charge import request_bound
from maasctl.localstack import LocalStack
from maasctl.testenv.controlplane import ManagedProcess
from maasctl.testenv.redis import RedisServer, start_redis
from maasctl.tls import default_tls

# Starts its own billing operator on the local stack's databases; a cluster someone else runs has its own.
pytestmark = pytest.mark.local_stack
GROUP, VERSION = "billing.opendatahub.io", "v1alpha1"


@pytest.fixture(scope="module")
async def wallet_billing(stack: Target) -> AsyncIterator[ManagedProcess]:
    """`maasctl billing run` with a ledger and maas-api's usage database, ready before the journey."""
    async with billing_operator(stack, "billing-wallets") as proc:
        yield proc


async def ledger_cli(stack: LocalStack, *args: str) -> str:
    if args[0] in ("credit", "adjust"):  # a manual entry is checked against the TenantAccounts of the cluster
        args = (*args, f"--kubeconfig={stack.kubeconfig}")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "maasctl.cli", "billing", "ledger", f"--ledger-url={ledger_url(stack)}", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_a_prepaid_tenant_is_frozen_when_its_money_runs_out_and_a_credit_restores_it(
        wallet_billing: ManagedProcess, world: World) -> None:
    world.require(Need.LOCAL_STACK)
    stack = world.stack
    local = stack.local
    assert local is not None
    gw_ns = stack.settings.gateway_namespace
    org, sub_name = world.name("helix"), world.name("helix-sub")
    plan_name, tenant_name, book_name = world.name("wallet"), world.name("ten-helix"), world.name("pb")
    tenant_key = f"{gw_ns}/{tenant_name}"
    await org_subscription(world, sub_name, org)
    key = (await world.mint("alice", subscription=sub_name))["key"]
    await world.wait_enforced("gpt", key)

    # 10 prompt + 5 completion tokens a call (the test model) at 1000 and 2000 per million: 0.02 a call.
    effective = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    book_spec = {"currency": "USD", "effectiveFrom": effective.strftime("%Y-%m-%dT%H:%M:%SZ"), "noticeDays": 0,
                 "skus": [{"sku": "gpt", "unit": "per-1M-tokens",
                           "rates": {"prompt_tokens": "1000", "completion_tokens": "2000"}}]}
    objects = tenant_objects(world, book=book_name, plan=plan_name, tenant=tenant_name, org=org,
                             book_spec=book_spec, limits={"requestsPerMinute": 1000}, billing_mode="Prepaid")
    await world.apply(*objects)
    custom = k8s.CustomObjectsApi(stack.api)

    async def tenant() -> dict[str, Any]:
        return await custom.get_namespaced_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, gw_ns, "tenantaccounts", tenant_name)

    async def in_state(*states: str) -> bool:
        return (await tenant()).get("status", {}).get("state") in states

    try:
        await chargeable_from(world, tenant_name, effective)
        out = await ledger_cli(local, "credit", "--tenant", tenant_key, "--amount", "0.05", "--reason",
                               "trial credit", "--id", f"trial-{world.suffix}", "--actor", "e2e-operator")
        assert "balance of" in out and "0.050000" in out
        await eventually(lambda: in_state("Active"), 60)
        await wait_allowance(world, key)

        # Call until refused: the request that crosses zero completes, the tenant is Frozen, the next is 403.
        # While the rater has not charged what was served, the wallet's allowance limit answers 429 once the
        # unrated calls could have used the balance (at the highest token price): never more than that is served.
        statuses: list[int] = []
        refused: httpx.Response | None = None
        for _ in range(400):
            resp = await world.chat("gpt", key)
            statuses.append(resp.status_code)
            if resp.status_code not in (200, 429):
                refused = resp
                break
            await asyncio.sleep(0.25)
        assert refused is not None and refused.status_code == 403, statuses
        assert set(statuses[:-1]) <= {200, 429}, statuses
        assert statuses.count(200) == 3, statuses  # 0.05 pays for 2 calls at 0.02; the third crosses zero
        message = refused.json()["error"]["message"] if "error" in refused.text else refused.text
        assert f"billing tenant {tenant_name} (organization {org}) is Frozen" in message, refused.text
        assert "credit" in message
        obj = await tenant()
        assert obj["status"]["state"] == "Frozen" and Decimal(obj["status"]["balance"]) < 0

        # The operator credits the wallet: calls succeed again.
        await ledger_cli(local, "credit", "--tenant", tenant_key, "--amount", "5", "--reason", "top-up",
                         "--id", f"topup-{world.suffix}", "--actor", "e2e-operator")

        async def served() -> bool:
            return (await world.chat("gpt", key)).status_code == 200

        await eventually(served, 60)
        for _ in range(3):
            assert (await world.chat("gpt", key)).status_code == 200

        # Ledger, status and usage agree to the last micro-unit (once the last calls are rated).
        ledger = Ledger.from_url(ledger_url(local))
        reader = UsageReader.from_url(usage_url(local))
        try:
            spec = PriceBookSpec.model_validate(book_spec)
            # The organization's records since the book is in force (earlier ones are reported as unpriced);
            # refused requests are recorded too and cost nothing. The gateway delivers records every 2 s.
            served_calls = statuses.count(200) + 4

            async def delivered() -> list[Any]:
                rows = [r for r in await reader.page(None, 100_000) if r.organization_id == org and r.ts >= effective]
                return rows if sum(r.status == 200 for r in rows) >= served_calls else []

            mine = await _eventually_value(delivered)
            expected = Decimal(0)
            for row in mine:
                line = rate(usage_of(row), Book(book_name, 1, spec))
                assert isinstance(line, RatedLine)
                expected += line.amount
            assert expected == Decimal("0.02") * sum(r.status == 200 for r in mine)

            async def settled() -> bool:
                if await ledger.count(tenant_key) != len(mine) + 2:  # every call charged, and two credits
                    return False
                status = (await tenant()).get("status", {})
                return bool(status.get("balance") == money.fmt(money.quantize(Decimal("5.05") - expected)))

            await eventually(settled, 60)
            balance = await ledger.balance(tenant_key)
            assert balance == Decimal("5.05") - expected
            assert await ledger.spend(tenant_key, datetime(2000, 1, 1, tzinfo=UTC)) == expected
            assert await ledger.verify() == []
            status = (await tenant())["status"]
            assert status["state"] == "Active" and Decimal(status["balance"]) == balance
            assert Decimal(status["mtdSpend"]) == expected
            shown = await ledger_cli(local, "show", "--tenant", tenant_key)
            assert f"balance {balance}" in shown and "top-up, by e2e-operator" in shown
        finally:
            await reader.close()
            await ledger.close()
    finally:
        for plural, name in (("tenantaccounts", tenant_name), ("plans", plan_name), ("pricebooks", book_name)):
            await custom.delete_namespaced_custom_object(GROUP, VERSION, gw_ns, plural, name)


async def _eventually_value(check: Any, timeout: float = 60, describe: Callable[[], str] = lambda: "") -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while not (value := await check()):
        assert asyncio.get_running_loop().time() < deadline, f"not reached within {timeout:g}s: {describe()}"
        await asyncio.sleep(0.2)
    return value


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = start_redis()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("store", ["in-process", "redis"])
async def test_a_concurrent_burst_at_a_high_price_overspends_by_at_most_one_request(
        store: str, wallet_billing: ManagedProcess, world: World, redis_server: RedisServer) -> None:
    """The review's case over HTTP: a 1.00 USD wallet, grace 0, a SKU at 0.02 a token, and 200 concurrent calls
    the moment it is funded (the rater cannot keep up). The ledger ends at most one request's bound below zero
    (it ended at -108.80 with a headroom of 8,192 tokens), on the stack's gateway (counters in process) and on
    a replica whose counters are in Redis."""
    world.require(Need.LOCAL_STACK)
    local = world.stack.local
    assert local is not None
    gw_ns = world.stack.settings.gateway_namespace
    org, sub_name = world.name("burst"), world.name("burst-sub")
    plan_name, tenant_name, book_name = world.name("burst"), world.name("ten-burst"), world.name("pb-burst")
    tenant_key = f"{gw_ns}/{tenant_name}"
    await org_subscription(world, sub_name, org)
    key = str((await world.mint("alice", subscription=sub_name))["key"])
    await world.wait_enforced("gpt", key)
    gateway = world.stack.gateway_url
    replica = world.name("burst-gw")
    if store == "redis":
        gateway = await local.add_gateway(replica, redis_server.url)
    effective = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    price = Decimal("0.02")
    spec = {"currency": "USD", "effectiveFrom": effective.strftime("%Y-%m-%dT%H:%M:%SZ"), "noticeDays": 0,
            "skus": [{"sku": "gpt", "unit": "per-1M-tokens",
                      "rates": {"prompt_tokens": "20000", "completion_tokens": "20000"}}]}
    await world.apply(*tenant_objects(world, book=book_name, plan=plan_name, tenant=tenant_name, org=org,
                                      book_spec=spec, limits={"requestsPerMinute": 100_000}, billing_mode="Prepaid"))
    custom = k8s.CustomObjectsApi(world.stack.api)
    ledger = Ledger.from_url(ledger_url(local))
    payload = {"model": "gpt-x", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 5}
    bound = request_bound(prepare_body(json.dumps(payload).encode()))
    try:
        await chargeable_from(world, tenant_name, effective)
        await ledger.post([credit(f"burst-{world.suffix}-{store}", tenant_key, datetime.now(UTC), Decimal("1.00"),
                                  reason="trial", actor="e2e")])

        await wait_allowance(world, key, gateway)

        async def call(http: httpx.AsyncClient) -> int:
            r = await http.post(f"/{world.namespace}/gpt/v1/chat/completions", json=payload,
                                headers={"Authorization": f"Bearer {key}"})
            return r.status_code

        async with httpx.AsyncClient(base_url=gateway, timeout=60,
                                     limits=httpx.Limits(max_connections=200), verify=default_tls()) as http:
            statuses = await asyncio.gather(*(call(http) for _ in range(200)))
        served = statuses.count(200)
        assert served >= 1 and set(statuses) <= {200, 429, 403}, statuses

        reader = UsageReader.from_url(usage_url(local))
        try:
            async def delivered() -> list[Any]:  # maas-api has every served call's record
                rows = [r for r in await reader.page(None, 100_000) if r.organization_id == org and r.ts >= effective]
                return rows if sum(r.status == 200 for r in rows) >= served else []

            rows = await _eventually_value(delivered)
        finally:
            await reader.close()

        entries = {"held": 0}

        async def rated() -> Decimal | None:  # each of those records charged (the refused ones at 0), the credit
            entries["held"] = await ledger.count(tenant_key)
            return await ledger.balance(tenant_key) if entries["held"] >= len(rows) + 1 else None

        # The operator rates every 2 s; once in CI (both workers busy) the ledger was not complete after 60 s, and
        # the failure did not say how far it had got.
        balance = await _eventually_value(rated, 180, lambda: f"the ledger holds {entries['held']} entries of "
                                          f"{len(rows) + 1} ({len(rows)} records and the credit)")
        assert balance >= -(bound * price), (balance, served)  # at most the one request that crossed zero
        assert balance < Decimal("1.00")
    finally:
        await ledger.close()
        if store == "redis":
            proc = local.processes.pop(replica, None)
            if proc is not None:
                await asyncio.to_thread(proc.stop)
        for plural, name in (("tenantaccounts", tenant_name), ("plans", plan_name), ("pricebooks", book_name)):
            await custom.delete_namespaced_custom_object(GROUP, VERSION, gw_ns, plural, name)

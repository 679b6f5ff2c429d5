"""The wallet journey over real HTTP: a Prepaid tenant with a small balance calls a model through the gateway
until its wallet is exhausted and it is refused (403, naming the tenant and the fix); an operator credits the
wallet with `maasctl billing ledger credit`; calls succeed again. Then the ledger, the TenantAccount status and
maas-api's usage records agree to the last micro-unit. `maasctl billing run` is its own process, rating
maas-api's usage database into its own ledger."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest
from kubernetes_asyncio import client as k8s

from e2e.billing_setup import BILLING, book_and_plan, book_spec, organization_key, wait_probes
from e2e.conftest import Need, World, eventually
from e2e.target import Target
from maasctl.billing import money
from maasctl.billing.api import PriceBookSpec
from maasctl.billing.api.install import install_billing_crds
from maasctl.billing.ledger import Ledger
from maasctl.billing.rater import usage_of
from maasctl.billing.rating import Book, RatedLine, rate
from maasctl.billing.usage_source import UsageReader
from maasctl.localstack import LocalStack, maasctl_argv
from maasctl.testenv.controlplane import ManagedProcess, free_port

# Starts its own billing operator on the local stack's databases; a cluster someone else runs has its own.
pytestmark = pytest.mark.local_stack
GROUP, VERSION = "billing.opendatahub.io", "v1alpha1"


def usage_url(stack: LocalStack) -> str:
    return stack.options.database_url or f"sqlite+aiosqlite:///{stack.directory / 'maas-api.db'}"


def ledger_url(stack: LocalStack) -> str:
    return f"sqlite+aiosqlite:///{stack.directory / 'billing-ledger.db'}"


@pytest.fixture(scope="module")
async def wallet_billing(stack: Target) -> AsyncIterator[ManagedProcess]:
    """`maasctl billing run` with a ledger and maas-api's usage database, ready before the journey."""
    assert stack.local is not None, "local_stack journey"
    local = stack.local
    await install_billing_crds(stack.api)
    health = free_port()
    proc = ManagedProcess("billing-wallets", maasctl_argv(
        "billing", "run", f"--kubeconfig={stack.kubeconfig}", "--metrics-bind-address=0",
        f"--health-probe-bind-address=127.0.0.1:{health}", "--log-format=json",
        f"--leader-election-namespace={stack.settings.leader_election_namespace}",
        f"--ledger-url={ledger_url(local)}", f"--usage-database-url={usage_url(local)}",
        "--rate-interval-seconds=1"), stack.directory / "billing-wallets.log")
    proc.start()
    try:
        await wait_probes(proc, health)
        yield proc
    finally:
        await asyncio.to_thread(proc.stop)


async def ledger_cli(stack: LocalStack, *args: str) -> str:
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
    key = await organization_key(world, org, sub_name)

    # 10 prompt + 5 completion tokens a call (the test model) at 1000 and 2000 per million: 0.02 a call.
    effective = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    objects: list[dict[str, Any]] = [
        *book_and_plan(world, book_name, plan_name, effective),
        {"apiVersion": BILLING, "kind": "TenantAccount",
         "metadata": {"name": tenant_name, "namespace": gw_ns,
                      "labels": {"billing.opendatahub.io/organization-id": org}},
         "spec": {"displayName": "Helix", "planRef": {"name": plan_name}, "billingMode": "Prepaid",
                  "priceBookPin": book_name}},
    ]
    await world.apply(*objects)
    custom = k8s.CustomObjectsApi(stack.api)

    async def tenant() -> dict[str, Any]:
        return await custom.get_namespaced_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, gw_ns, "tenantaccounts", tenant_name)

    async def in_state(*states: str) -> bool:
        return (await tenant()).get("status", {}).get("state") in states

    try:
        await asyncio.sleep(max(0.0, (effective - datetime.now(UTC)).total_seconds() + 0.1))  # book in force
        out = await ledger_cli(local, "credit", "--tenant", tenant_key, "--amount", "0.05", "--reason",
                               "trial credit", "--id", f"trial-{world.suffix}", "--actor", "e2e-operator")
        assert "balance of" in out and "0.050000" in out
        await eventually(lambda: in_state("Active"), 60)

        # Call until refused: the request that crosses zero completes, the tenant is Frozen, the next is 403.
        statuses: list[int] = []
        refused: httpx.Response | None = None
        for _ in range(200):
            resp = await world.chat("gpt", key)
            statuses.append(resp.status_code)
            if resp.status_code != 200:
                refused = resp
                break
            await asyncio.sleep(0.25)
        assert refused is not None and refused.status_code == 403, statuses
        assert set(statuses[:-1]) == {200} and len(statuses) >= 4, statuses  # 0.05 pays for 3 calls at least
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
            spec = PriceBookSpec.model_validate(book_spec(effective))
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


async def _eventually_value(check: Any, timeout: float = 60) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while not (value := await check()):
        assert asyncio.get_running_loop().time() < deadline, "not reached"
        await asyncio.sleep(0.2)
    return value

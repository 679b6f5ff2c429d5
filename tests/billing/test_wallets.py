"""Wallets on the real control plane, the billing controller running as its ServiceAccount with a real
PostgreSQL ledger and maas-api's real usage tables: status mirrors the ledger, a Prepaid tenant whose balance
crosses zero is Frozen and its Plan's AuthPolicy denies it (and its Kueue ClusterQueue holds), a credit restores
it; unpriced usage and an edited mirror are reported as conditions."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.billing.api.kinds import TENANT_ACCOUNT
from maasctl.billing.ledger import Ledger, adjustment, credit
from maasctl.billing.rules.compile import FAIL_CLOSED_RULE
from maasctl.billing.rules.wallet import epoch_name, epoch_starts
from maasctl.maasapi import migrate
from maasctl.maasapi.store import make_engine
from maasctl.maasapi.usage.store import UsageEntry, UsageStore
from maasctl.runtime import Request
from maasctl.testenv import ControlPlane
from maasctl.testenv.postgres import PostgresServer

from .conftest import SETTINGS, Billing, RunningBilling, chargeable_from, eventually, start_billing, wait_event
from .test_plan_reconciler import AP, CQ, TRLP, Cluster, gateway

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
API = "billing.opendatahub.io/v1alpha1"


@dataclasses.dataclass
class Wallets:
    running: RunningBilling
    ledger: Ledger
    usage: UsageStore
    url: str


@pytest.fixture(scope="module")
async def wallets(billing_cluster: ControlPlane, billing_pg: PostgresServer) -> AsyncIterator[Wallets]:
    url = await billing_pg.acreate_database(f"w_{uuid.uuid4().hex[:10]}")
    engine = make_engine(url)
    await migrate.upgrade(engine)  # maas-api's schema: the usage records the rater reads
    settings = dataclasses.replace(SETTINGS, ledger_url=url, usage_database_url=url, rate_interval_seconds=1,
                                   wallet_resync_seconds=3600)  # a credit must not wait for the resync
    running = await start_billing(billing_cluster, settings)
    ledger = Ledger.from_url(url)
    await ledger.create_schema()
    try:
        yield Wallets(running, ledger, UsageStore(engine), url)
    finally:
        await running.stop()
        await ledger.close()
        await engine.dispose()


def objects(ns: str, org: str, effective: datetime) -> list[dict[str, Any]]:
    created = effective.strftime("%Y-%m-%dT%H:%M:%SZ")
    return [
        {"apiVersion": API, "kind": "PriceBook", "metadata": {"name": "pb", "namespace": ns},
         "spec": {"currency": "USD", "effectiveFrom": created, "noticeDays": 0, "skus": [
             {"sku": "llama", "unit": "per-1M-tokens",
              "rates": {"prompt_tokens": "2.50", "completion_tokens": "10.00"}}]}},
        {"apiVersion": API, "kind": "Plan", "metadata": {"name": "priority", "namespace": ns},
         "spec": {"limits": {"gpuQuota": 2}, "priceBookRef": "pb",
                  "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "demo"}}},
        {"apiVersion": API, "kind": "TenantAccount",
         "metadata": {"name": "ten-helix", "namespace": ns, "labels": {"billing.opendatahub.io/organization-id": org}},
         "spec": {"displayName": "Helix", "planRef": {"name": "priority"}, "billingMode": "Prepaid",
                  "priceBookPin": "pb", "gpuFreezeMode": "Preempt",
                  "gracePolicy": {"graceAmount": "0.000000", "warningThreshold": "0.500000"}}},
    ]


def usage(i: int, org: str, input_tokens: int, output_tokens: int, model: str = "team/llama") -> UsageEntry:
    return UsageEntry(id=f"w-{uuid.uuid4().hex[:12]}-{i}", ts=datetime.now(UTC), username="alice", key_id="k",
                      subscription="s/sub", organization_id=org, model=model, route="r", status=200, latency_ms=1.0,
                      streamed=False, input_tokens=input_tokens, cached_tokens=0, output_tokens=output_tokens,
                      reasoning_tokens=0, total_tokens=input_tokens + output_tokens,
                      charged_tokens=input_tokens + output_tokens)


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}


async def test_a_prepaid_wallet_freezes_and_unfreezes_through_the_plans_policies(
        wallets: Wallets, billing: Billing, kube: k8s.ApiClient, namespace: str) -> None:
    cluster = Cluster(kube)
    org = f"org-{uuid.uuid4().hex[:8]}"
    tenant_key = f"{namespace}/ten-helix"
    await cluster.create(("gateway.networking.k8s.io", "v1", "gateways"), gateway(namespace))
    effective = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)  # a book is in force from creation
    for obj in objects(namespace, org, effective):
        await billing.create(obj)
    await chargeable_from(billing, namespace, "ten-helix", effective)  # usage from then on is charged
    wallets.running.clock.set(datetime.now(UTC))

    async def status() -> dict[str, Any]:
        obj = await billing.get("TenantAccount", "ten-helix", namespace)
        assert obj is not None
        return obj

    # Never funded: Pending (not enforced). Usage is rated once the PriceBook is in force.
    await eventually(lambda: _state(status, "Pending"))

    async def book_active() -> bool:
        book = await billing.get("PriceBook", "pb", namespace)
        return (book or {}).get("status", {}).get("state") == "Active"

    await eventually(book_active)
    await wallets.ledger.post([credit("start", tenant_key, datetime.now(UTC), Decimal("1.00"), reason="trial",
                                      actor="test")])
    await wallets.usage.ingest([usage(1, org, 100_000, 10_000)], datetime.now(UTC))  # 0.25 + 0.10
    # (the credit alone shows first, through the ledger watch, as Active with 1.00)
    obj = await eventually(lambda: _state(status, "Active", balance="0.650000"))
    assert obj["status"]["balance"] == "0.650000" and obj["status"]["mtdSpend"] == "0.350000"
    assert obj["status"]["allowanceTokens"] == "65000"  # 0.65 at 10 per million (the highest token price)
    assert conditions(obj)["BalanceHealthy"]["status"] == "True"
    assert conditions(obj)["UsagePriced"]["status"] == "True"

    # The allowance becomes the tenant's TokenRateLimitPolicy limits, one per epoch (today and yesterday): what
    # was rated since the epoch began plus what the wallet still pays for at the highest token price.
    today, yesterday = (epoch_name(s) for s in epoch_starts(wallets.running.clock.now()))
    assert obj["status"]["allowanceLimits"] == [{"epoch": today, "tokens": 175_000},
                                                {"epoch": yesterday, "tokens": 175_000}]

    async def allowance_limit() -> int | None:
        trlp = await cluster.get(TRLP, "billing-plan-priority", namespace)
        limits = ((trlp or {}).get("spec") or {}).get("overrides", {}).get("limits", {})
        limit = limits.get(f"billing/{namespace}/priority/allowance/ten-helix/{today}")
        return int(limit["rates"][0]["limit"]) if limit else None

    async def capped() -> bool:  # no headroom: the cap is the money (100,000 while only the credit was seen)
        return await allowance_limit() == 110_000 + 65_000

    await eventually(capped)

    # Below the warning threshold: advisory only.
    await wallets.usage.ingest([usage(2, org, 100_000, 10_000)], datetime.now(UTC))
    obj = await eventually(lambda: _state(status, "Warning"))
    assert obj["status"]["balance"] == "0.300000"
    policy = await cluster.get(AP, "billing-plan-priority", namespace)
    assert policy is not None and set(policy["spec"]["overrides"]["rules"]["authorization"]) == {FAIL_CLOSED_RULE}

    # The request that crosses zero completes; the tenant is Frozen, its Plan's AuthPolicy denies it.
    await wallets.usage.ingest([usage(3, org, 100_000, 10_000)], datetime.now(UTC))
    obj = await eventually(lambda: _state(status, "Frozen"))
    assert obj["status"]["balance"] == "-0.050000" and obj["status"]["allowanceTokens"] == "0"
    assert conditions(obj)["BalanceHealthy"]["reason"] == "BalanceExhausted"
    await wait_event(kube, namespace, "ten-helix", "Frozen", "Warning")

    async def denied() -> dict[str, Any] | None:
        ap = await cluster.get(AP, "billing-plan-priority", namespace)
        rules = (ap or {}).get("spec", {}).get("overrides", {}).get("rules", {})
        return ap if f"billing-wallet-{namespace}-priority" in rules.get("authorization", {}) else None

    ap = await eventually(denied)
    rules = ap["spec"]["overrides"]["rules"]
    assert org in rules["authorization"][f"billing-wallet-{namespace}-priority"]["patternMatching"]["patterns"][0][
        "predicate"]
    message = rules["response"]["unauthorized"]["message"]["expression"]
    assert "billing tenant ten-helix" in message and "is Frozen" in message and "credited" in message

    async def held() -> bool:  # gpuFreezeMode Preempt: stop admitting and evict (Kueue HoldAndDrain)
        q = await cluster.get(CQ, f"billing-{namespace}-ten-helix")
        return q is not None and q["spec"].get("stopPolicy") == "HoldAndDrain"

    await eventually(held)

    # An operator credits the wallet: Active again, the deny rule and the stopPolicy are gone.
    # No usage now and the resync is an hour away: the ledger watch notices the credit (within about a second).
    await wallets.ledger.post([credit("topup", tenant_key, datetime.now(UTC), Decimal("10"), reason="top-up",
                                      actor="ops")])
    obj = await eventually(lambda: _state(status, "Active"))
    assert obj["status"]["balance"] == "9.950000"
    await eventually(lambda: _not(denied))

    async def released() -> bool:
        q = await cluster.get(CQ, f"billing-{namespace}-ten-helix")
        return q is not None and q["spec"].get("stopPolicy", "None") == "None"  # Kueue's default

    await eventually(released)
    assert await wallets.ledger.balance(tenant_key) == Decimal("9.95")
    assert await wallets.ledger.verify() == []

    # Usage no SKU prices is reported, not free.
    await wallets.usage.ingest([usage(4, org, 10, 10, model="team/mystery")], datetime.now(UTC))

    async def unpriced() -> dict[str, Any] | None:
        obj = await status()
        return obj if conditions(obj).get("UsagePriced", {}).get("status") == "False" else None

    obj = await eventually(unpriced)
    assert "no SKU of PriceBook pb prices model 'team/mystery'" in conditions(obj)["UsagePriced"]["message"]

    # Someone edits the mirror: reported as ReconcileDrift and rewritten from the ledger.
    await billing.patch("TenantAccount", "ten-helix", namespace, {"status": {"balance": "1000000.000000"}},
                        status=True)

    async def seen() -> bool:  # the controller's cache has the edit (else the wake-up reads the old status)
        cached = wallets.running.manager.cache.get(TENANT_ACCOUNT, "ten-helix", namespace)
        return cached is not None and cached["status"].get("balance") == "1000000.000000"

    await eventually(seen)
    _wake(wallets, namespace)

    async def drift() -> dict[str, Any] | None:
        obj = await status()
        assert conditions(obj).get("ReconcileDrift", {}).get("status") == "True", obj["status"]
        return obj

    obj = await eventually(drift)
    assert "1000000.000000" in conditions(obj)["ReconcileDrift"]["message"]
    assert obj["status"]["balance"] == "9.950000"


@pytest.mark.parametrize("how", ["cli", "adjustment"])
async def test_a_wallet_change_by_any_process_reaches_the_status_without_the_resync(
        how: str, wallets: Wallets, billing: Billing, kube: k8s.ApiClient, namespace: str,
        billing_cluster: ControlPlane) -> None:
    """`maasctl billing ledger credit` (its own process) or an entry another writer posts: no usage, the resync
    an hour away, and the tenant's status (so its Plan's policies and the gateway) follows within a second or
    so, through the ledger watch."""
    cluster = Cluster(kube)
    org = f"org-{uuid.uuid4().hex[:8]}"
    tenant_key = f"{namespace}/ten-helix"
    await cluster.create(("gateway.networking.k8s.io", "v1", "gateways"), gateway(namespace))
    effective = datetime.now(UTC).replace(microsecond=0)
    for obj in objects(namespace, org, effective):
        await billing.create(obj)

    async def status() -> dict[str, Any]:
        obj = await billing.get("TenantAccount", "ten-helix", namespace)
        assert obj is not None
        return obj

    await eventually(lambda: _state(status, "Pending"))
    if how == "cli":
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "maasctl.cli", "billing", "ledger", f"--ledger-url={wallets.url}", "credit",
            f"--kubeconfig={billing_cluster.kubeconfig}", "--tenant", tenant_key, "--amount", "2.50",
            "--reason", "trial", "--id", f"cli-{org}", "--actor", "ops",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
    else:
        await wallets.ledger.post([adjustment(f"adj-{org}", tenant_key, datetime.now(UTC), Decimal("2.50"),
                                              reason="goodwill", actor="ops")])
    obj = await eventually(lambda: _state(status, "Active"))
    assert obj["status"]["balance"] == "2.500000"


def _wake(wallets: Wallets, namespace: str) -> None:
    ctl = next(c for c in wallets.running.manager.controllers if c.name == "tenantaccount")
    ctl.queue.add(Request(namespace, "ten-helix"))


async def _state(status: Any, want: str, balance: str | None = None) -> dict[str, Any] | None:
    obj: dict[str, Any] = await status()
    got = obj.get("status") or {}
    return obj if got.get("state") == want and balance in (None, got.get("balance")) else None


async def _not(check: Any) -> bool:
    return (await check()) is None

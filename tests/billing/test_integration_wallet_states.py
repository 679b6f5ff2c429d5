"""Every TenantAccount state and status field on the real control plane: the billing controller as its
ServiceAccount, a real PostgreSQL ledger (its entries posted as any writer posts them), a ManualClock. Grace
(graceAmount > 0) is not enforced and Frozen below it is, `runwayDays` and `balanceObservedAt` follow the ledger and
the clock, Suspended lifts with its annotation while Closed is final, a ledger that cannot be read is
`BalanceStale` (the last balance kept), a Weekly budget's period ends on Monday and rolls over, and
`observedGeneration` follows each edited kind the billing controller owns."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import asyncpg
import pytest
from kubernetes_asyncio import client as k8s

from maasctl.billing.ledger import Ledger, credit
from maasctl.billing.ledger.entries import usage_charge
from maasctl.runtime import Request
from maasctl.testenv import ControlPlane
from maasctl.testenv.postgres import PostgresServer

from .conftest import SETTINGS, Billing, RunningBilling, eventually, start_billing, wait_event
from .test_plan_reconciler import AP, Cluster, gateway

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
API = "billing.opendatahub.io/v1alpha1"
# The controller's clock starts on a Wednesday noon after the books' creation (they are in force from creation):
# its Weekly period runs from MONDAY to NEXT_MONDAY (UTC).
_TODAY = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
T0 = _TODAY + timedelta(days=(2 - _TODAY.weekday()) % 7 + 7)
MONDAY = (T0 - timedelta(days=2)).replace(hour=0)
NEXT_MONDAY = MONDAY + timedelta(days=7)
CREATED = datetime.now(UTC).replace(microsecond=0)


@dataclasses.dataclass
class States:
    running: RunningBilling
    ledger: Ledger
    server: PostgresServer
    database: str


@pytest.fixture(scope="module")
async def states(billing_cluster: ControlPlane, billing_pg: PostgresServer) -> AsyncIterator[States]:
    database = f"s_{uuid.uuid4().hex[:10]}"
    url = await billing_pg.acreate_database(database)
    settings = dataclasses.replace(SETTINGS, ledger_url=url, wallet_resync_seconds=3600, budget_resync_seconds=1)
    running = await start_billing(billing_cluster, settings)
    running.clock.set(T0)
    ledger = Ledger.from_url(url)
    await ledger.create_schema()
    try:
        yield States(running, ledger, billing_pg, database)
    finally:
        await running.stop()
        await ledger.close()


def objects(ns: str, org: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": API, "kind": "PriceBook", "metadata": {"name": "pb", "namespace": ns},
         "spec": {"currency": "USD", "effectiveFrom": CREATED.strftime("%Y-%m-%dT%H:%M:%SZ"), "noticeDays": 0, "skus": [
             {"sku": "llama", "unit": "per-1M-tokens", "rates": {"prompt_tokens": "1.00"}}]}},
        {"apiVersion": API, "kind": "Plan", "metadata": {"name": "priority", "namespace": ns},
         "spec": {"limits": {"tokensPerMinute": 100000}, "priceBookRef": "pb",
                  "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "demo"}}},
        {"apiVersion": API, "kind": "TenantAccount",
         "metadata": {"name": "ten-helix", "namespace": ns, "labels": {"billing.opendatahub.io/organization-id": org}},
         "spec": {"displayName": "Helix", "planRef": {"name": "priority"}, "billingMode": "Prepaid",
                  "priceBookPin": "pb", "gracePolicy": {"graceAmount": "1.000000"}}},
    ]


def charge(tenant: str, amount: str, at: datetime) -> Any:
    return usage_charge(f"usage:{uuid.uuid4().hex}", tenant, at, Decimal(amount), currency="USD", tokens=1000,
                        details={"record": "test"})


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}


def rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_grace_runway_suspended_closed_and_a_stale_ledger(
        states: States, billing: Billing, kube: k8s.ApiClient, namespace: str) -> None:
    cluster = Cluster(kube)
    clock = states.running.clock
    clock.set(T0)
    org = f"org-{uuid.uuid4().hex[:8]}"
    tenant = f"{namespace}/ten-helix"
    await cluster.create(("gateway.networking.k8s.io", "v1", "gateways"), gateway(namespace))
    for obj in objects(namespace, org):
        await billing.create(obj)

    async def reached(state: str, balance: str | None = None) -> dict[str, Any] | None:
        obj = await billing.get("TenantAccount", "ten-helix", namespace)
        st = (obj or {}).get("status") or {}
        return obj if st.get("state") == state and balance in (None, st.get("balance")) else None

    async def denied() -> bool:
        ap = await cluster.get(AP, "billing-plan-priority", namespace)
        rules = (ap or {}).get("spec", {}).get("overrides", {}).get("rules", {})
        return f"billing-wallet-{namespace}-priority" in rules.get("authorization", {})

    async def allowed() -> bool:
        ap = await cluster.get(AP, "billing-plan-priority", namespace)
        return ap is not None and not await denied()

    # 3.50 credited, 1.75 spent over the last week: 1.75 left at 0.25 a day is 7 days of runway.
    await states.ledger.post([credit(f"c-{org}", tenant, T0 - timedelta(days=3), Decimal("3.50"), reason="trial",
                                     actor="test"),
                              charge(tenant, "1.75", T0 - timedelta(days=2))])
    obj = await eventually(lambda: reached("Active", "1.750000"))
    assert obj["status"]["runwayDays"] == "7.0"
    assert obj["status"]["balanceObservedAt"] == rfc3339(T0)
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"] == 1
    assert conditions(obj)["BalanceStale"]["status"] == "False"
    await eventually(allowed)

    # The clock moves: the next observation says when (the controller's clock, not the wall's).
    clock.set(T0 + timedelta(minutes=5))
    await states.ledger.post([charge(tenant, "2.25", T0 + timedelta(minutes=5))])  # 1.75 - 2.25 = -0.50
    obj = await eventually(lambda: reached("Grace", "-0.500000"))
    assert obj["status"]["balanceObservedAt"] == rfc3339(T0 + timedelta(minutes=5))
    assert obj["status"]["runwayDays"] == "0"  # nothing left at any spend
    health = conditions(obj)["BalanceHealthy"]
    assert (health["status"], health["reason"]) == ("False", "InGrace") and "1.000000" in health["message"]
    await wait_event(kube, namespace, "ten-helix", "Grace", "Normal")
    assert await allowed()  # Grace is not enforced

    # Below -graceAmount: Frozen, and the Plan's AuthPolicy denies the tenant.
    await states.ledger.post([charge(tenant, "0.60", T0 + timedelta(minutes=5))])
    await eventually(lambda: reached("Frozen", "-1.100000"))
    await eventually(denied)
    # The ledger cannot be read: within balance_stale_seconds (300) of the last read it is retried and named, not
    # stale; then BalanceStale. The last state, balance and time are kept throughout; a Frozen tenant stays denied.
    await _connections(states, allowed=False)
    try:
        clock.set(T0 + timedelta(minutes=7))

        async def stale_is(status: str, reason: str) -> dict[str, Any] | None:
            _wake(states, namespace)
            obj = await billing.get("TenantAccount", "ten-helix", namespace)
            c = conditions(obj or {}).get("BalanceStale", {})
            return obj if (c.get("status"), c.get("reason")) == (status, reason) else None

        obj = await eventually(lambda: stale_is("False", "LedgerRetrying"), 60)
        c = conditions(obj)["BalanceStale"]
        assert rfc3339(T0 + timedelta(minutes=7)) in c["message"], c["message"]  # when the read failed
        assert rfc3339(T0 + timedelta(minutes=10)) in c["message"], c["message"]  # when it becomes stale
        assert obj["status"]["state"] == "Frozen" and obj["status"]["balance"] == "-1.100000"
        assert await denied()

        clock.set(T0 + timedelta(minutes=11))
        obj = await eventually(lambda: stale_is("True", "LedgerUnavailable"), 60)
        c = conditions(obj)["BalanceStale"]
        assert c["reason"] == "LedgerUnavailable" and rfc3339(T0 + timedelta(minutes=5)) in c["message"]
        assert obj["status"]["state"] == "Frozen" and obj["status"]["balance"] == "-1.100000"
        assert obj["status"]["balanceObservedAt"] == rfc3339(T0 + timedelta(minutes=5))
        await asyncio.sleep(1)
        assert await denied()
    finally:
        await _connections(states, allowed=True)

    async def fresh() -> dict[str, Any] | None:
        _wake(states, namespace)
        obj = await billing.get("TenantAccount", "ten-helix", namespace)
        return obj if conditions(obj or {}).get("BalanceStale", {}).get("status") == "False" else None

    obj = await eventually(fresh, 60)
    assert obj["status"]["balanceObservedAt"] == rfc3339(T0 + timedelta(minutes=11))
    await states.ledger.post([credit(f"c2-{org}", tenant, T0, Decimal("10"), reason="top-up", actor="ops")])
    await eventually(lambda: reached("Active", "8.900000"))
    await eventually(allowed)

    # Suspended by an operator: enforced whatever the balance; lifting the annotation restores the state.
    await billing.patch("TenantAccount", "ten-helix", namespace,
                        {"metadata": {"annotations": {"billing.opendatahub.io/suspended": "fraud review"}}})
    obj = await eventually(lambda: reached("Suspended"))
    assert conditions(obj)["BalanceHealthy"]["reason"] == "SuspendedByOperator"
    assert "fraud review" in conditions(obj)["BalanceHealthy"]["message"]
    await wait_event(kube, namespace, "ten-helix", "Suspended", "Warning")
    await eventually(denied)
    await billing.patch("TenantAccount", "ten-helix", namespace,
                        {"metadata": {"annotations": {"billing.opendatahub.io/suspended": None}}})
    await eventually(lambda: reached("Active", "8.900000"))
    await eventually(allowed)

    # An edited spec: observedGeneration follows it.
    await billing.patch("TenantAccount", "ten-helix", namespace, {"spec": {"displayName": "Helix Biotech"}})

    async def observed() -> bool:
        obj = await billing.get("TenantAccount", "ten-helix", namespace)
        assert obj is not None
        return bool(obj["metadata"]["generation"] == 2 and obj["status"].get("observedGeneration") == 2
                    and all(c["observedGeneration"] == 2 for c in obj["status"]["conditions"]
                            if c["type"] in ("BalanceHealthy", "BalanceStale")))

    await eventually(observed)

    # Closed is final: removing the annotation does not reopen the account.
    await billing.patch("TenantAccount", "ten-helix", namespace,
                        {"metadata": {"annotations": {"billing.opendatahub.io/closed": "contract ended"}}})
    obj = await eventually(lambda: reached("Closed"))
    assert conditions(obj)["BalanceHealthy"]["reason"] == "AccountClosed"
    await eventually(denied)
    await billing.patch("TenantAccount", "ten-helix", namespace,
                        {"metadata": {"annotations": {"billing.opendatahub.io/closed": None}}})
    _wake(states, namespace)
    await asyncio.sleep(2)
    obj = await billing.get("TenantAccount", "ten-helix", namespace)
    assert obj is not None and obj["status"]["state"] == "Closed"
    assert await denied()


async def test_a_weekly_budget_ends_on_monday_and_rolls_over(
        states: States, billing: Billing, kube: k8s.ApiClient, namespace: str) -> None:
    clock = states.running.clock
    clock.set(T0)
    org = f"org-{uuid.uuid4().hex[:8]}"
    tenant = f"{namespace}/ten-helix"
    for obj in objects(namespace, org):
        await billing.create(obj)
    cap = {"amount": "2.00", "period": "Weekly", "thresholds": [{"pct": 50, "action": "Notify"}]}
    await billing.create({"apiVersion": API, "kind": "BudgetPolicy",
                          "metadata": {"name": "weekly", "namespace": namespace},
                          "spec": {"tenantRef": {"name": "ten-helix"}, "caps": [cap]}})

    async def budget(check: Any) -> dict[str, Any] | None:
        obj = await billing.get("BudgetPolicy", "weekly", namespace)
        st = (obj or {}).get("status") or {}
        return obj if st and check(st) else None

    monday = rfc3339(NEXT_MONDAY)
    obj = await eventually(lambda: budget(lambda st: st.get("capPeriodEnds")))
    assert obj["status"]["capPeriodEnds"] == [{"capIndex": 0, "periodEnd": monday}]
    # Spend on Monday morning counts (the week began then); spend of the Sunday before does not.
    await states.ledger.post([credit(f"c-{org}", tenant, T0 - timedelta(days=10), Decimal("5"), reason="trial",
                                     actor="test"),
                              charge(tenant, "0.70", MONDAY - timedelta(minutes=1)),
                              charge(tenant, "1.10", MONDAY)])
    obj = await eventually(lambda: budget(lambda st: st.get("firedThresholds")))
    assert obj["status"]["currentSpend"] == "1.100000"
    assert [(f["capIndex"], f["pct"]) for f in obj["status"]["firedThresholds"]] == [(0, 50)]
    assert conditions(obj)["ThresholdFired"]["status"] == "True"
    await wait_event(kube, namespace, "weekly", "BudgetNotify")

    # Sunday night is still this week; Monday 00:00 starts the next one: nothing fired, spend 0.
    clock.set(NEXT_MONDAY - timedelta(seconds=1))
    await asyncio.sleep(1.5)
    obj = await billing.get("BudgetPolicy", "weekly", namespace)
    assert obj is not None and obj["status"]["capPeriodEnds"][0]["periodEnd"] == monday
    assert obj["status"]["firedThresholds"]
    clock.set(NEXT_MONDAY + timedelta(seconds=1))
    obj = await eventually(lambda: budget(lambda st: st["capPeriodEnds"][0]["periodEnd"] == rfc3339(
        NEXT_MONDAY + timedelta(days=7))))
    assert not obj["status"].get("firedThresholds") and obj["status"]["currentSpend"] == "0.000000"
    assert conditions(obj)["WithinBudget"]["status"] == "True"

    # observedGeneration follows an edited budget (and conditions carry it).
    await billing.patch("BudgetPolicy", "weekly", namespace, {"spec": {"caps": [
        {"amount": "3.00", "period": "Weekly", "thresholds": [{"pct": 50, "action": "Notify"}]}]}})
    await eventually(lambda: budget(lambda st: st.get("observedGeneration") == 2 and all(
        c["observedGeneration"] == 2 for c in st["conditions"])))


async def test_observed_generation_follows_each_edited_kind(
        states: States, billing: Billing, kube: k8s.ApiClient, namespace: str) -> None:
    """PriceBook (Draft: still editable), Plan and Reservation; TenantAccount and BudgetPolicy are above,
    BillingConnector in tests/billing/connector/test_integration_sync.py."""
    states.running.clock.set(T0)
    await Cluster(kube).create(("gateway.networking.k8s.io", "v1", "gateways"), gateway(namespace))
    book, plan, tenant = objects(namespace, f"org-{uuid.uuid4().hex[:8]}")
    book["spec"]["effectiveFrom"] = rfc3339(T0 + timedelta(days=300))  # announced, not Active: its spec may change
    await billing.create(book)
    await billing.create(plan)
    await billing.create(tenant)
    await billing.create({"apiVersion": API, "kind": "Reservation", "metadata": {"name": "r1", "namespace": namespace},
                          "spec": {"tenantRef": "ten-helix", "sku": "h200", "count": 1, "geo": "us-east",
                                   "window": {"start": "2026-10-01T00:00:00Z", "end": "2026-10-31T23:59:59Z"},
                                   "class": "Preemptible", "monthlyPrice": "100"}})
    edits = {"PriceBook": ("pb", {"spec": {"noticeDays": 1}}),
             "Plan": ("priority", {"spec": {"limits": {"tokensPerMinute": 200000}}}),
             "Reservation": ("r1", {"spec": {"count": 2}})}

    async def observed(kind: str, name: str, generation: int) -> bool:
        obj = await billing.get(kind, name, namespace)
        st = (obj or {}).get("status") or {}
        return bool(obj and obj["metadata"]["generation"] == generation and st.get("observedGeneration") == generation
                    and all(c.get("observedGeneration") == generation for c in st.get("conditions") or ()))

    for kind, (name, _) in edits.items():
        await eventually(lambda kind=kind, name=name: observed(kind, name, 1))
    for kind, (name, patch) in edits.items():
        await billing.patch(kind, name, namespace, patch)
    for kind, (name, _) in edits.items():
        await eventually(lambda kind=kind, name=name: observed(kind, name, 2))


async def _connections(states: States, *, allowed: bool) -> None:
    """Let the ledger's database accept connections, or refuse them and end the open ones."""
    admin = await asyncpg.connect(states.server.dsn)
    try:
        await admin.execute(f'ALTER DATABASE "{states.database}" ALLOW_CONNECTIONS {"true" if allowed else "false"}')
        if not allowed:
            await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
                                states.database)
    finally:
        await admin.close()


def _wake(states: States, namespace: str) -> None:
    ctl = next(c for c in states.running.manager.controllers if c.name == "tenantaccount")
    ctl.queue.add(Request(namespace, "ten-helix"))

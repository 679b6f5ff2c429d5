"""BudgetPolicies on the real control plane, the billing controller running as its ServiceAccount with a real
PostgreSQL ledger and maas-api's real tables (usage records, API keys and their labels): a project's budget
counts only its keys' spend, Notify, Throttle and Freeze fire once each with their Events and become the Plan's
gateway objects, and the next period starts afresh. Two controllers racing for one firing: one notifies."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.api import crdgen
from maasctl.api._fields import cel_string
from maasctl.billing import money
from maasctl.billing.api import BudgetPolicy
from maasctl.billing.api.install import install_billing_crds
from maasctl.billing.api.pricebook import PriceBookSpec
from maasctl.billing.controller.rerate import rerate
from maasctl.billing.controller.usage_source import UsageReader
from maasctl.billing.ledger import Ledger
from maasctl.billing.ledger.budget_book import BudgetBook
from maasctl.billing.rules import budget
from maasctl.billing.rules.rating import Book
from maasctl.maasapi import migrate
from maasctl.maasapi.store import KeyRecord, KeyStore, make_engine
from maasctl.maasapi.usage.store import UsageEntry, UsageStore
from maasctl.testenv import ControlPlane
from maasctl.testenv.postgres import PostgresServer

from . import examples
from .conftest import (
    SETTINGS,
    Billing,
    RunningBilling,
    chargeable_from,
    events_for,
    eventually,
    start_billing,
    wait_event,
)
from .test_plan_reconciler import AP, TRLP, Cluster, gateway

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
API = "billing.opendatahub.io/v1alpha1"


@dataclasses.dataclass
class Budgets:
    running: RunningBilling
    ledger: Ledger
    usage: UsageStore
    keys: KeyStore


@pytest.fixture(scope="module")
async def budgets(billing_cluster: ControlPlane, billing_pg: PostgresServer) -> AsyncIterator[Budgets]:
    url = await billing_pg.acreate_database(f"b_{uuid.uuid4().hex[:10]}")
    engine = make_engine(url)
    await migrate.upgrade(engine)  # maas-api's schema: usage records and API keys with their labels
    settings = dataclasses.replace(SETTINGS, ledger_url=url, usage_database_url=url, rate_interval_seconds=1,
                                   budget_resync_seconds=30)
    running = await start_billing(billing_cluster, settings)
    ledger = Ledger.from_url(url)
    await ledger.create_schema()
    try:
        yield Budgets(running, ledger, UsageStore(engine), KeyStore(engine))
    finally:
        await running.stop()
        await ledger.close()
        await engine.dispose()


def objects(ns: str, org: str, effective: datetime) -> list[dict[str, Any]]:
    created = effective.strftime("%Y-%m-%dT%H:%M:%SZ")
    return [
        {"apiVersion": API, "kind": "PriceBook", "metadata": {"name": "pb", "namespace": ns},
         "spec": {"currency": "USD", "effectiveFrom": created, "noticeDays": 0, "skus": [
             {"sku": "llama", "unit": "per-1K-tokens", "rates": {"prompt_tokens": "0.01"}}]}},
        {"apiVersion": API, "kind": "Plan", "metadata": {"name": "priority", "namespace": ns},
         "spec": {"limits": {"tokensPerMinute": 50000}, "priceBookRef": "pb",
                  "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "demo"}}},
        {"apiVersion": API, "kind": "TenantAccount",
         "metadata": {"name": "ten-helix", "namespace": ns, "labels": {"billing.opendatahub.io/organization-id": org}},
         "spec": {"displayName": "Helix", "planRef": {"name": "priority"}, "billingMode": "ShowbackOnly",
                  "priceBookPin": "pb"}},
        {"apiVersion": API, "kind": "BudgetPolicy", "metadata": {"name": "rag", "namespace": ns},
         "spec": {"tenantRef": {"name": "ten-helix"}, "selector": {"keyLabels": {"project": "rag"}},
                  "caps": [{"amount": "1.00", "period": "Daily", "thresholds": [
                      {"pct": 50, "action": "Notify"}, {"pct": 80, "action": "Throttle"},
                      {"pct": 100, "action": "Freeze"}]}]}},
    ]


async def mint(store: KeyStore, key_id: str, labels: dict[str, str]) -> None:
    now = datetime.now(UTC)
    await store.insert(KeyRecord(id=key_id, key_hash="x", hash_algorithm="test", name=key_id, description="",
                                 owner="alice", groups=(), subscription_namespace="s", subscription_name="sub",
                                 ephemeral=False, created_at=now, expires_at=now + timedelta(days=1), labels=labels),
                       actor="test")


def usage(key_id: str, org: str, tokens: int, ts: datetime) -> UsageEntry:
    return UsageEntry(id=f"b-{uuid.uuid4().hex[:16]}", ts=ts, username="alice", key_id=key_id,
                      subscription="s/sub", organization_id=org, model="team/llama", route="r", status=200,
                      latency_ms=1.0, streamed=False, input_tokens=tokens, cached_tokens=0, output_tokens=0,
                      reasoning_tokens=0, total_tokens=tokens, charged_tokens=tokens)


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}


async def test_a_project_budget_notifies_throttles_freezes_and_rolls_over(
        budgets: Budgets, billing: Billing, kube: k8s.ApiClient, namespace: str) -> None:
    cluster = Cluster(kube)
    org = f"org-{uuid.uuid4().hex[:8]}"
    rag, rag2, plain = (f"{p}{uuid.uuid4().hex[:10]}" for p in ("rag", "rg2", "pln"))
    await mint(budgets.keys, rag, {"project": "rag", "team": "ml"})
    await mint(budgets.keys, rag2, {"project": "rag"})
    await mint(budgets.keys, plain, {"project": "other"})
    await cluster.create(("gateway.networking.k8s.io", "v1", "gateways"), gateway(namespace))
    effective = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    for obj in objects(namespace, org, effective):
        await billing.create(obj)
    await chargeable_from(billing, namespace, "ten-helix", effective)
    # The controller's clock stands still at `t0` (usage is recorded at t0) until the test moves it a day on.
    t0 = datetime.now(UTC).replace(microsecond=0)
    clock = budgets.running.clock
    clock.set(t0)
    day_end = t0.replace(hour=0, minute=0, second=0) + timedelta(days=1)

    async def status(want: str) -> dict[str, Any] | None:
        obj = await billing.get("BudgetPolicy", "rag", namespace)
        assert obj is not None
        fired = conditions(obj).get("ThresholdFired") or {}
        spend = (obj.get("status") or {}).get("currentSpend")
        assert fired.get("reason") == want, f"ThresholdFired {fired.get('reason')}, currentSpend {spend}"
        return obj

    obj = await eventually(lambda: status("NoneFired"))
    assert conditions(obj)["Evaluating"]["status"] == "True"
    assert conditions(obj)["WithinBudget"]["status"] == "True"
    assert obj["status"]["capPeriodEnds"] == [{"capIndex": 0, "periodEnd": day_end.strftime("%Y-%m-%dT%H:%M:%SZ")}]

    # Another key of the tenant spends a lot: not this budget's keys, nothing fires.
    await budgets.usage.ingest([usage(plain, org, 500_000, t0)], datetime.now(UTC))  # 5.00
    await budgets.usage.ingest([usage(rag, org, 60_000, t0)], datetime.now(UTC))  # 0.60: 60 %
    obj = await eventually(lambda: status("Notified"))
    assert obj["status"]["currentSpend"] == "0.600000"
    assert [(f["capIndex"], f["pct"]) for f in obj["status"]["firedThresholds"]] == [(0, 50)]
    assert conditions(obj)["WithinBudget"]["status"] == "False"

    # 85 %: Throttle (with its Notify); the Plan's TokenRateLimitPolicy gets the budget's limit.
    await budgets.usage.ingest([usage(rag2, org, 25_000, t0)], datetime.now(UTC))
    obj = await eventually(lambda: status("Throttled"))
    assert obj["status"]["currentSpend"] == "0.850000"

    async def throttle_limit() -> dict[str, Any] | None:
        trlp = await cluster.get(TRLP, "billing-plan-priority", namespace)
        limits = ((trlp or {}).get("spec") or {}).get("overrides", {}).get("limits", {})
        return limits.get(f"billing/{namespace}/priority/budget/rag")  # type: ignore[no-any-return]

    limit = await eventually(throttle_limit)
    assert limit["rates"] == [{"limit": budget.throttled_tokens_per_minute(50000), "window": "1m"}]
    assert any('auth.billing.keyLabels["project"] == "rag"' in w["predicate"] for w in limit["when"])

    # 100 %: Freeze; the Plan's AuthPolicy refuses the budget's keys with a 403 naming it.
    await budgets.usage.ingest([usage(rag, org, 15_000, t0)], datetime.now(UTC))
    obj = await eventually(lambda: status("Frozen"))
    assert obj["status"]["currentSpend"] == "1.000000"
    assert [f["pct"] for f in obj["status"]["firedThresholds"]] == [50, 80, 100]
    assert f"billing budget {namespace}/rag of tenant ten-helix" in conditions(obj)["ThresholdFired"]["message"]

    async def frozen_rule() -> dict[str, Any] | None:
        ap = await cluster.get(AP, "billing-plan-priority", namespace)
        rules = (ap or {}).get("spec", {}).get("overrides", {}).get("rules", {})
        return rules if f"billing-budget-{namespace}-rag" in rules.get("authorization", {}) else None

    rules = await eventually(frozen_rule)
    assert "billing-budget-frozen" in rules["response"]["unauthorized"]["headers"]["x-ext-auth-reason"]["expression"]
    assert await eventually(lambda: _not(throttle_limit))  # Freeze is the stronger action in force

    # More usage at the cap is counted (never free) and fires nothing again.
    await budgets.usage.ingest([usage(rag2, org, 1_000, t0)], datetime.now(UTC))
    async def counted() -> dict[str, Any] | None:
        obj = await billing.get("BudgetPolicy", "rag", namespace)
        return obj if (obj or {}).get("status", {}).get("currentSpend") == "1.010000" else None
    await eventually(counted)

    async def reasons() -> list[str]:
        return sorted(r for _, r, _ in await events_for(kube, namespace, "rag") if r.startswith("Budget"))

    await eventually(lambda: _equal(reasons, ["BudgetFreeze", "BudgetNotify", "BudgetNotify", "BudgetNotify",
                                              "BudgetThrottle"]))
    notes = [n for _, r, n in await events_for(kube, namespace, "rag") if r == "BudgetFreeze"]
    assert "reached 100%" in notes[0] and "ten-helix" in notes[0]

    # The next day: spend starts at zero, firings reset, the freeze lifts.
    clock.set(day_end + timedelta(hours=1))
    obj = await eventually(lambda: status("NoneFired"))
    assert obj["status"]["currentSpend"] == "0.000000" and obj["status"].get("firedThresholds", []) == []
    await eventually(lambda: _not(frozen_rule))
    assert sorted(await reasons()) == ["BudgetFreeze", "BudgetNotify", "BudgetNotify", "BudgetNotify",
                                       "BudgetThrottle"]  # nothing fired again

    # Yesterday's llama rate was half the right one: re-rated today (`maasctl billing rerate`), the correction
    # counts in today's spend, and the budget counts its own keys' part of it only (1.01, not the other key's 5.00).
    fixed = copy.deepcopy(objects(namespace, org, effective)[0])
    fixed["metadata"].update(name="pb-fixed", generation=1)
    fixed["spec"]["skus"][0]["rates"]["prompt_tokens"] = "0.02"
    book = Book("pb-fixed", 1, PriceBookSpec.model_validate(fixed["spec"]))
    reader = UsageReader(budgets.usage.engine)
    report = await rerate(budgets.ledger, reader, f"{namespace}/ten-helix", book, t0, day_end, reason="INC-45",
                          actor="alice", now=day_end + timedelta(minutes=30))
    assert report.delta == Decimal("6.01") and len(report.inserted) == 3  # one entry per key
    await billing.patch("BudgetPolicy", "rag", namespace, {"metadata": {"annotations": {"test/poke": "1"}}})
    obj = await eventually(lambda: status("Frozen"))
    assert obj["status"]["currentSpend"] == "1.010000"


async def test_a_budget_of_a_missing_tenant_is_not_evaluated(budgets: Budgets, billing: Billing,
                                                            namespace: str) -> None:
    caps = [{"amount": "1", "period": "Monthly", "thresholds": [{"pct": 100, "action": "Freeze"}]}]
    await billing.create({"apiVersion": API, "kind": "BudgetPolicy",
                          "metadata": {"name": "lost", "namespace": namespace},
                          "spec": {"tenantRef": {"name": "nobody"}, "caps": caps}})

    async def reported() -> dict[str, Any] | None:
        obj = await billing.get("BudgetPolicy", "lost", namespace)
        return ((conditions(obj or {}).get("Evaluating") or {}).get("reason") == "TenantNotFound" and obj) or None

    await eventually(reported)


async def test_racing_controllers_fire_a_threshold_once(budgets: Budgets) -> None:
    when = datetime(2026, 9, 1, tzinfo=UTC)
    key = budget.firing_key(f"race/{uuid.uuid4().hex[:8]}", 0, 100, when)
    book = BudgetBook(budgets.ledger.engine)
    results = await asyncio.gather(*(book.claim_firings("race/b", [key], when) for _ in range(8)))
    assert sum(len(won) for won, _ in results) == 1
    assert all(times[key] == when for _, times in results)


async def _not(check: Any) -> bool:
    return (await check()) is None


async def _equal(check: Any, want: Any) -> bool:
    return bool(await check() == want)


# -- what the controller cannot evaluate says so -----------------------------------------------------------

OLD_MONEY_PATTERN = r"^\d+(\.\d{1,6})?$"
OLD_MONEY_RULE = {"rule": f"self.matches({cel_string(OLD_MONEY_PATTERN)})", "message": "an amount"}


def _loosen(node: Any) -> None:
    """The money fields as an older release generated them: any number of digits, up to 32 characters."""
    if isinstance(node, dict):
        rules = node.get("x-kubernetes-validations") or ()
        if node.get("type") == "string" and any("[0-9]{1," in r.get("rule", "") for r in rules):
            node["maxLength"] = 32
            node["x-kubernetes-validations"] = [dict(OLD_MONEY_RULE)]
        for value in node.values():
            _loosen(value)
    elif isinstance(node, list):
        for value in node:
            _loosen(value)


def _budget_policy(namespace: str, name: str, tenant: str, amount: str) -> dict[str, Any]:
    cap = {"amount": amount, "period": "Monthly", "thresholds": [{"pct": 100, "action": "Freeze"}]}
    return {"apiVersion": API, "kind": "BudgetPolicy", "metadata": {"name": name, "namespace": namespace},
            "spec": {"tenantRef": {"name": tenant}, "caps": [cap]}}


@contextlib.asynccontextmanager
async def older_budget_crd(kube: k8s.ApiClient, billing: Billing, namespace: str) -> AsyncIterator[None]:
    """The BudgetPolicy CRD of an older release for the duration (objects stored meanwhile keep what it admitted),
    then this release's again. Each switch is waited for: a dry run of a 26-digit cap is admitted, then refused."""
    crd = copy.deepcopy(crdgen.crd(BudgetPolicy))  # never the generator's own object
    _loosen(crd["spec"]["versions"])
    ext = k8s.ApiextensionsV1Api(kube)
    probe = _budget_policy(namespace, "probe", "t", "1" * 26)

    async def admitted(want: bool = True) -> bool:
        try:
            await billing.create(probe, dry_run="All")
        except k8s.ApiException as exc:
            assert exc.status == 422, exc.body
            return not want
        return want

    await ext.patch_custom_resource_definition(crd["metadata"]["name"], crd, field_manager="maasctl", force=True,
                                               _content_type="application/apply-patch+yaml")
    try:
        await eventually(admitted)
        yield
    finally:
        await install_billing_crds(kube)
        await eventually(lambda: admitted(want=False))


async def test_a_cap_the_code_cannot_evaluate_gets_a_condition_and_an_event(
        budgets: Budgets, billing: Billing, kube: k8s.ApiClient, namespace: str) -> None:
    """Admission now refuses more than 24 digits; an object stored before (an older CRD) is reported, not skipped."""
    huge = "1" * 26
    async with older_budget_crd(kube, billing, namespace):
        await billing.create(_budget_policy(namespace, "huge", "ten-any", huge))
        await billing.create(_budget_policy(namespace, "huge-decimals", "ten-any", huge + ".5"))

    for name in ("huge", "huge-decimals"):
        async def reported(name: str = name) -> dict[str, Any] | None:
            obj = await billing.get("BudgetPolicy", name, namespace)
            evaluating = conditions(obj or {}).get("Evaluating") or {}
            return evaluating if evaluating.get("reason") == "InvalidAmount" else None

        evaluating = await eventually(reported)
        assert evaluating["status"] == "False"
        assert "caps" in evaluating["message"] and f"at most {money.MAX_DIGITS} digits" in evaluating["message"]
        note = await wait_event(kube, namespace, name, "InvalidAmount", "Warning")
        assert "cannot evaluate this BudgetPolicy" in note and "caps.amount" in note


async def test_a_status_an_older_crd_admitted_does_not_stop_evaluation(
        budgets: Budgets, billing: Billing, kube: k8s.ApiClient, namespace: str) -> None:
    """The controller rewrites the status it cannot read instead of giving up on the budget."""
    async with older_budget_crd(kube, billing, namespace):
        await billing.create(_budget_policy(namespace, "stale", "ten-later", "5"))

        async def waiting() -> bool:
            obj = await billing.get("BudgetPolicy", "stale", namespace)
            return (conditions(obj or {}).get("Evaluating") or {}).get("reason") == "TenantNotFound"

        await eventually(waiting)
        for spend in ("1" * 26, "1" * 30 + ".5"):
            await billing.patch("BudgetPolicy", "stale", namespace, {"status": {"currentSpend": spend}}, status=True)
    tenant = examples.example("tenant-showback", namespace)
    tenant["metadata"]["name"] = "ten-later"
    await billing.create(tenant)

    async def evaluated() -> dict[str, Any] | None:
        obj = await billing.get("BudgetPolicy", "stale", namespace)
        ok = (conditions(obj or {}).get("Evaluating") or {}).get("reason") == "SpendEvaluated"
        return obj if ok else None

    obj = await eventually(evaluated)
    assert obj["status"]["currentSpend"] == "0.000000"
    assert conditions(obj)["ThresholdFired"]["reason"] == "NoneFired"

"""Pass-through SKUs on the real control plane: the billing controller, as its ServiceAccount (RBAC: `get`
secrets only), reads the cost Secret a PriceBook names; the rater charges cost x (1 + markup) into a real
PostgreSQL ledger from maas-api's real usage tables; a changed Secret changes the rate of later records only; a
malformed or missing one is a CostDataValid=False condition and an Event on the PriceBook, its usage reported
unpriced (not free), and charged once the Secret is fixed."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from maasctl.billing.ledger import Ledger
from maasctl.billing.ledger.rating_book import RatingBook
from maasctl.maasapi import migrate
from maasctl.maasapi.store import make_engine
from maasctl.maasapi.usage.store import UsageEntry, UsageStore
from maasctl.testenv import ControlPlane
from maasctl.testenv.postgres import PostgresServer

from .conftest import SETTINGS, Billing, RunningBilling, chargeable_from, eventually, wait_event

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
API = "billing.opendatahub.io/v1alpha1"


@dataclasses.dataclass
class Env:
    running: RunningBilling
    ledger: Ledger
    usage: UsageStore


@pytest.fixture(scope="module")
async def env(billing_cluster: ControlPlane, billing_pg: PostgresServer) -> AsyncIterator[Env]:
    from .conftest import start_billing

    url = await billing_pg.acreate_database(f"pt_{uuid.uuid4().hex[:10]}")
    engine = make_engine(url)
    await migrate.upgrade(engine)  # maas-api's schema: the usage records the rater reads
    settings = dataclasses.replace(SETTINGS, ledger_url=url, usage_database_url=url, rate_interval_seconds=1)
    running = await start_billing(billing_cluster, settings)
    ledger = Ledger.from_url(url)
    await ledger.create_schema()
    try:
        yield Env(running, ledger, UsageStore(engine))
    finally:
        await running.stop()
        await ledger.close()
        await engine.dispose()


def objects(ns: str, org: str, effective: datetime) -> list[dict[str, Any]]:
    at = effective.strftime("%Y-%m-%dT%H:%M:%SZ")
    return [
        {"apiVersion": API, "kind": "PriceBook", "metadata": {"name": "pb", "namespace": ns},
         "spec": {"currency": "USD", "effectiveFrom": at, "noticeDays": 0, "skus": [
             {"sku": "gpt", "unit": "per-1M-tokens", "rates": {"prompt_tokens": "9.00", "completion_tokens": "9.00"},
              "passThrough": {"provider": "openai", "markupPct": "25", "costSecretRef": {"name": "openai-costs"}}}]}},
        {"apiVersion": API, "kind": "Plan", "metadata": {"name": "basic", "namespace": ns},
         "spec": {"limits": {}, "priceBookRef": "pb",
                  "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "demo"}}},
        {"apiVersion": API, "kind": "TenantAccount",
         "metadata": {"name": "ten", "namespace": ns, "labels": {"billing.opendatahub.io/organization-id": org}},
         "spec": {"displayName": "Ten", "planRef": {"name": "basic"}, "billingMode": "Prepaid",
                  "priceBookPin": "pb"}},
    ]


def usage(org: str) -> UsageEntry:
    return UsageEntry(id=f"pt-{uuid.uuid4().hex[:12]}", ts=datetime.now(UTC), username="alice", key_id="k",
                      subscription="s/sub", organization_id=org, model="team/gpt", route="r", status=200,
                      latency_ms=1.0, streamed=False, input_tokens=100_000, cached_tokens=0, output_tokens=10_000,
                      reasoning_tokens=0, total_tokens=110_000, charged_tokens=110_000)


def secret(name: str, data: dict[str, str]) -> k8s.V1Secret:
    return k8s.V1Secret(metadata=k8s.V1ObjectMeta(name=name), string_data=data)


async def test_a_pass_through_sku_charges_the_cost_plus_markup_and_follows_its_secret(
        env: Env, billing: Billing, kube: k8s.ApiClient, namespace: str) -> None:
    core = k8s.CoreV1Api(kube)
    org = f"org-{uuid.uuid4().hex[:8]}"
    tenant = f"{namespace}/ten"
    await core.create_namespaced_secret(namespace, secret("openai-costs", {"prompt_tokens": "2.00",
                                                                           "completion_tokens": "8.00"}))
    effective = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    for obj in objects(namespace, org, effective):
        await billing.create(obj)
    await chargeable_from(billing, namespace, "ten", effective)
    env.running.clock.set(datetime.now(UTC))

    async def cost_condition(status: str, contains: str = "") -> dict[str, Any] | None:
        book = await billing.get("PriceBook", "pb", namespace)
        for c in ((book or {}).get("status") or {}).get("conditions") or ():
            if c["type"] == "CostDataValid" and c["status"] == status and contains in c["message"]:
                return dict(c)
        return None

    async def charges() -> dict[str, Decimal]:
        return {e.key: -e.amount for e in await env.ledger.entries(tenant, kind="usage", limit=100)}

    first = await core.read_namespaced_secret("openai-costs", namespace)
    await eventually(lambda: cost_condition("True", f"resourceVersion {first.metadata.resource_version}"))

    # cost x (1 + 25%): (0.1M x 2.00 + 0.01M x 8.00) x 1.25 = 0.35
    one = usage(org)
    await env.usage.ingest([one], datetime.now(UTC))
    got = await eventually(lambda: _has(charges, f"usage:{one.id}"))
    assert got[f"usage:{one.id}"] == Decimal("0.35")
    entry = (await env.ledger.entries(tenant, kind="usage", limit=1))[0]
    assert entry.details["components"]["prompt_tokens"]["source"] == "passThrough:openai"
    assert Decimal(entry.details["components"]["prompt_tokens"]["rate"]) == Decimal("2.50")

    # The provider raises its prompt cost: later records only.
    changed = await core.patch_namespaced_secret("openai-costs", namespace, {"stringData": {"prompt_tokens": "4.00"}})
    await eventually(lambda: cost_condition("True", f"resourceVersion {changed.metadata.resource_version}"))
    two = usage(org)
    await env.usage.ingest([two], datetime.now(UTC))
    got = await eventually(lambda: _has(charges, f"usage:{two.id}"))
    assert got[f"usage:{two.id}"] == Decimal("0.60")  # (0.1 x 4 + 0.01 x 8) x 1.25
    assert got[f"usage:{one.id}"] == Decimal("0.35")

    # Malformed cost data: refused on the PriceBook, the usage reported unpriced, never charged at zero.
    await core.replace_namespaced_secret("openai-costs", namespace,
                                         secret("openai-costs", {"prompt_tokens": "four dollars"}))
    bad = await eventually(lambda: cost_condition("False"))
    assert bad["reason"] == "MalformedCostData" and "'prompt_tokens'" in bad["message"]
    assert "four dollars" not in bad["message"]
    note = await wait_event(kube, namespace, "pb", "InvalidCostData", "Warning")
    assert "openai-costs" in note and "four dollars" not in note
    three = usage(org)
    await env.usage.ingest([three], datetime.now(UTC))

    async def unpriced() -> str | None:
        count, items = await RatingBook(env.ledger.engine).unpriced(tenant)
        return items[0].reason if count == 1 and items[0].record_id == three.id else None

    reason = await eventually(unpriced)
    assert "openai-costs is missing or unreadable" in reason
    assert f"usage:{three.id}" not in await charges()

    async def usage_priced(want: str) -> bool:
        obj = await billing.get("TenantAccount", "ten", namespace)
        found = {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or ()}
        return found.get("UsagePriced", {}).get("status") == want

    await eventually(lambda: usage_priced("False"))

    # Fixed: the record left unpriced is charged at the cost now in force, once.
    await core.replace_namespaced_secret("openai-costs", namespace, secret(
        "openai-costs", {"prompt_tokens": "1.00", "completion_tokens": "8.00"}))
    got = await eventually(lambda: _has(charges, f"usage:{three.id}"))
    assert got[f"usage:{three.id}"] == Decimal("0.225")  # (0.1 x 1 + 0.01 x 8) x 1.25
    assert (await RatingBook(env.ledger.engine).unpriced(tenant))[0] == 0
    await eventually(lambda: usage_priced("True"))  # the tenant's report follows
    await eventually(lambda: cost_condition("True"))
    assert len(await charges()) == 3 and await env.ledger.verify() == []

    # Rates in another unit than the SKU's (key `unit`): refused, not charged 1000x too cheap.
    await core.replace_namespaced_secret("openai-costs", namespace, secret(
        "openai-costs", {"unit": "per-1K-tokens", "prompt_tokens": "0.001"}))
    unit = await eventually(lambda: cost_condition("False"))
    assert unit["reason"] == "UnitMismatch" and "gpt (per-1M-tokens)" in unit["message"]

    # Gone: SecretNotFound.
    await core.delete_namespaced_secret("openai-costs", namespace)
    gone = await eventually(lambda: cost_condition("False", "does not exist"))
    assert gone["reason"] == "SecretNotFound"


async def _has(charges: Any, key: str) -> dict[str, Decimal] | None:
    got: dict[str, Decimal] = await charges()
    return got if key in got else None


async def test_cost_secrets_are_read_by_name_as_the_service_account_and_refusal_is_reported(
        billing_cluster: ControlPlane, kube: k8s.ApiClient, namespace: str) -> None:
    """The reader on the API server: the billing-controller's token reads a named Secret; a ServiceAccount
    without `get secrets` gets SecretForbidden (its SKUs unpriced), not a crash; a Secret that does not exist,
    SecretNotFound; a reading that changes is reported once (the PriceBooks are enqueued)."""
    from maasctl.billing.controller.reconcilers.costs import ProviderCosts
    from maasctl.runtime import Client
    from tests.install.manifests import service_account_api

    from .conftest import billing_controller_api

    core = k8s.CoreV1Api(kube)
    await core.create_namespaced_secret(namespace, secret("costs", {"prompt_tokens": "2.00"}))
    await core.create_namespaced_service_account(namespace, k8s.V1ServiceAccount(
        metadata=k8s.V1ObjectMeta(name="nobody")))
    controller = await billing_controller_api(billing_cluster)
    nobody = await service_account_api(billing_cluster, namespace, "nobody")
    try:
        changes: list[tuple[str, str]] = []
        costs = ProviderCosts(Client(controller), on_change=lambda ns, n: changes.append((ns, n)))
        book = {"metadata": {"namespace": namespace, "name": "pb"},
                "spec": {"skus": [{"passThrough": {"costSecretRef": {"name": "costs"}}},
                                  {"passThrough": {"costSecretRef": {"name": "absent"}}}]}}
        await costs.refresh([book])
        assert costs.snapshot() == {namespace: {"costs": {"prompt_tokens": Decimal("2.00")}}}
        assert (await costs.read(namespace, "absent")).reason == "SecretNotFound"
        assert sorted(changes) == [(namespace, "absent"), (namespace, "costs")]
        await costs.refresh([book])
        assert len(changes) == 2  # the same reading: nothing to report
        await costs.refresh([])
        assert costs.snapshot() == {}  # no book names it: forgotten

        denied = await ProviderCosts(Client(nobody)).read(namespace, "costs")
        assert denied.reason == "SecretForbidden" and not denied.valid and "get secrets" in denied.message
    finally:
        await controller.close()
        await nobody.close()

"""Pricing policies on usage records the local gateway produced: client -> `maasctl gateway` (enforcing what
the real MaaS controller generated on the real control plane) -> a model; the gateway's usage records go to
the real maas-api ingestion endpoint (its SQLite database), the rater reads them from there and charges the
ledger. `providerFaultPolicy` decides what an upstream 5xx costs, `volumeTiers` discount a month that crosses a
threshold, a `committedUse` tier charges its monthly fee once and makes the included tokens free, and an
Invoiced tenant accrues a negative balance.

The gateway's two maas-api callbacks (key validation and subscription selection) are the gateway tests'
stand-in (`tests/gateway/conftest.py`); the usage path is maas-api's own."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes_asyncio import client as k8s
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from maasctl.billing.controller.rater import Rater
from maasctl.billing.controller.usage_source import UsageReader
from maasctl.billing.ledger import Ledger
from maasctl.billing.rules.catalog import COMMITTED_USE_ANNOTATION, build_catalog
from maasctl.gateway import Gateway, GatewaySettings, start_http
from maasctl.gateway.server import HttpServer
from maasctl.maasapi import migrate
from maasctl.maasapi.app import create_app
from maasctl.maasapi.auth import StaticAuthenticator
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import StaticSources
from maasctl.maasapi.store import KeyStore, make_engine
from maasctl.runtime import Client
from maasctl.runtime.connect import connect
from maasctl.testenv import ControlPlane
from maasctl.testmodel import ModelServerConfig
from maasctl.testmodel import create_app as model_app
from maasctl.tls import default_tls
from tests.billing.conftest import SETTINGS, Billing, start_billing
from tests.gateway.conftest import GATEWAY_TOKEN, UPSTREAM_KEY, MaasApiStandIn, serve_external_locally
from tests.reconcilers.conftest import (
    GATEWAY_NAME,
    GATEWAY_NS,
    SUB_NS,
    Objects,
    RunningController,
    eventually,
    maas_cluster,  # noqa: F401  (the fixture)
    start_controller,
)
from tests.reconcilers.test_core_flow import auth_policy, create_secret, external_model, model_ref, subscription

pytestmark = [pytest.mark.integration]
API = "billing.opendatahub.io/v1alpha1"
TENANT_NS = "billing-tenants"
CREATED = "2026-01-01T00:00:00Z"


def broken_upstream() -> Starlette:
    """A provider that fails after doing the work: 500, with the usage it spent (10 prompt + 5 completion)."""

    async def chat(request: Request) -> JSONResponse:
        if request.headers.get("authorization") != f"Bearer {UPSTREAM_KEY}":
            return JSONResponse({"error": {"message": "bad key"}}, 401)
        return JSONResponse({"error": {"message": "the model crashed", "type": "server_error"},
                             "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}, 500)

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@dataclass
class Stack:
    ns: str
    gateway_url: str
    stand_in: MaasApiStandIn
    usage_url: str  # maas-api's database, where the gateway's records land
    ledger: Ledger
    reader: UsageReader
    subs: dict[str, str]  # organization -> subscription

    def key(self, org: str) -> dict[str, str]:
        """An API key of `org`'s subscription (validated by the stand-in)."""
        token = f"sk-oai-{org}-{uuid.uuid4().hex[:8]}"
        self.stand_in.keys[token] = {"valid": True, "username": "alice", "keyId": f"key-{org}",
                                     "groups": [f"group-{org}"], "subscription": f"{SUB_NS}/{self.subs[org]}"}
        return {"Authorization": f"Bearer {token}"}


ORGS = ("warmup", "zero", "partial", "tiered", "committed", "invoiced")


@pytest.fixture(scope="module")
async def stack(maas_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory  # noqa: F811
                ) -> AsyncIterator[Stack]:
    ns = f"rate-{uuid.uuid4().hex[:8]}"
    api = await connect(str(maas_cluster.kubeconfig))
    objs = Objects(api)
    await k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    directory: Path = tmp_path_factory.mktemp("rating")
    usage_url = f"sqlite+aiosqlite:///{directory / 'maas-api.db'}"
    store = KeyStore(make_engine(usage_url))
    await migrate.upgrade(store.engine)
    maas_api = create_app(MaasApiSettings(gateway_tokens=(SecretStr(GATEWAY_TOKEN),)), StaticSources(),
                          StaticAuthenticator({}), store=store)
    servers: list[HttpServer] = []
    controller: RunningController | None = None
    gateway: Gateway | None = None
    ledger = Ledger.from_url(f"sqlite+aiosqlite:///{directory / 'ledger.db'}")
    await ledger.create_schema()
    reader = UsageReader.from_url(usage_url)
    try:
        async with contextlib.AsyncExitStack() as exits:
            await exits.enter_async_context(maas_api.router.lifespan_context(maas_api))
            controller = await start_controller(maas_cluster)
            stand_in = MaasApiStandIn(api)
            for app in (stand_in.app(), maas_api, model_app(ModelServerConfig(models=("gpt-x",),
                                                                                require_bearer=UPSTREAM_KEY)),
                        broken_upstream()):
                servers.append(await start_http(app))
            callbacks, usage, model, broken = (s.url for s in servers)
            # Two models: the test model, and a provider that fails with a 500.
            await create_secret(api, ns, "provider-key")
            for name, provider, url in (("gpt", "provider", model), ("flaky", "provider-flaky", broken)):
                await objs.create(external_model(ns, provider))
                await objs.create(model_ref(ns, name, "ExternalModel", provider))
                await serve_external_locally(api, ns, name, url)
            models = [(ns, "gpt"), (ns, "flaky")]
            await objs.create(auth_policy(f"ap-{ns}", models, [f"group-{o}" for o in ORGS]))
            subs = {}
            for org in ORGS:
                sub = subscription(f"{org}-{ns}", models, f"group-{org}", 10_000_000)
                sub["spec"]["organization"] = {"id": f"{org}-{ns}"}
                await objs.create(sub)
                subs[org] = sub["metadata"]["name"]
            settings = GatewaySettings(gateway_name=GATEWAY_NAME, gateway_namespace=GATEWAY_NS,
                                       maas_api_url=callbacks, usage_url=usage, maas_api_token=GATEWAY_TOKEN,
                                       usage_flush_seconds=0.1, token_review_ttl=5)
            gateway = Gateway(settings, Client(api))
            await gateway.start()
            front = await start_http(gateway)
            servers.append(front)

            async def enforced() -> bool:
                snap = gateway.state.snapshot() if gateway else None
                routes = [r for r in snap.table.rules if r.model in (f"{ns}/gpt", f"{ns}/flaky")] if snap else []
                return len({r.model for r in routes if r.backends and r.route_key in snap.auth}) == 2 \
                    if snap else False

            await eventually(enforced, timeout=60)
            ready = Stack(ns, front.url, stand_in, usage_url, ledger, reader, subs)
            # One call of an organization without a TenantAccount (never charged): the whole path works, and the
            # gateway's usage sender runs before the tests (it starts with the first record).
            assert (await call(ready, ready.key("warmup"))).status_code == 200
            await delivered(ready, "warmup", 1)
            yield ready
    finally:
        for server in reversed(servers):
            await server.stop()
        if gateway is not None:
            await gateway.stop()
        if controller is not None:
            await controller.stop()
        await reader.close()
        await ledger.close()
        await store.close()
        with contextlib.suppress(k8s.ApiException):
            await k8s.CoreV1Api(api).delete_namespace(ns)
        await api.close()


def billing_objects(stack: Stack, org: str, book: dict[str, Any], mode: str = "Prepaid",
                    annotations: dict[str, str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """A PriceBook (the test model's usage: 10 prompt + 5 completion tokens a call) and org's TenantAccount."""
    spec = {"currency": "USD", "effectiveFrom": CREATED, "noticeDays": 0,
            "skus": [{"sku": name, "unit": "per-1K-tokens", "rates": {"prompt_tokens": "1", "completion_tokens": "2"}}
                     for name in ("gpt", "flaky")], **book}
    meta: dict[str, Any] = {"name": f"ten-{org}", "namespace": TENANT_NS,
                            "labels": {"billing.opendatahub.io/organization-id": f"{org}-{stack.ns}"}}
    if annotations:
        meta["annotations"] = annotations
    return {"books": [{"apiVersion": API, "kind": "PriceBook", "spec": spec,
                       "metadata": {"name": f"pb-{org}", "namespace": TENANT_NS, "generation": 1,
                                    "creationTimestamp": CREATED}}],
            "plans": [],
            "tenants": [{"apiVersion": API, "kind": "TenantAccount", "metadata": meta,
                         "spec": {"displayName": org, "planRef": {"name": "none"}, "billingMode": mode,
                                  "priceBookPin": f"pb-{org}"}}]}


async def call(stack: Stack, headers: dict[str, str], model: str = "gpt", **body: Any) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30, verify=default_tls()) as http:
        return await http.post(f"{stack.gateway_url}/{stack.ns}/{model}/v1/chat/completions", headers=headers,
                               json={"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}], **body})


async def delivered(stack: Stack, org: str, n: int) -> list[Any]:
    """org's usage records once maas-api has stored `n` of them (the gateway batches every 0.1 s)."""
    async def stored() -> list[Any]:
        rows = [r for r in await stack.reader.page(None, 100_000) if r.organization_id == f"{org}-{stack.ns}"]
        return rows if len(rows) >= n else []

    rows: list[Any] = await eventually(stored, timeout=30)
    return rows


async def rate(stack: Stack, objects: dict[str, list[dict[str, Any]]]) -> None:
    catalog = build_catalog(**objects)
    await Rater(stack.reader, stack.ledger, lambda: catalog).run_once()


async def charges(stack: Stack, org: str) -> list[Any]:
    return await stack.ledger.entries(f"{TENANT_NS}/ten-{org}", limit=100)


@pytest.mark.parametrize(("org", "policy", "charged"), [("zero", "zero_charge", Decimal(0)),
                                                        ("partial", "bill_partial", Decimal("0.02"))])
async def test_an_upstream_5xx_is_charged_as_the_provider_fault_policy_says(
        stack: Stack, org: str, policy: str, charged: Decimal) -> None:
    key = stack.key(org)
    assert (await call(stack, key)).status_code == 200
    failed = await call(stack, key, model="flaky")
    assert failed.status_code == 500
    rows = await delivered(stack, org, 2)
    assert sorted(r.status for r in rows) == [200, 500]
    objects = billing_objects(stack, org, {"providerFaultPolicy": policy} if policy != "zero_charge" else {})
    await rate(stack, objects)
    lines = {e.details["record"]: e for e in await charges(stack, org)}
    fault = next(r for r in rows if r.status == 500)
    ok = next(r for r in rows if r.status == 200)
    assert lines[ok.id].details["amount"] == "0.020000"  # 10 x 1 + 5 x 2 per thousand
    assert Decimal(lines[fault.id].details["amount"]) == charged
    assert lines[fault.id].details["policy"] == f"providerFaultPolicy={policy}"
    assert await stack.ledger.balance(f"{TENANT_NS}/ten-{org}") == -(Decimal("0.02") + charged)
    assert await stack.ledger.verify() == []


async def test_a_month_crossing_a_volume_tier_is_discounted_from_the_crossing_on(stack: Stack) -> None:
    """Tiers at 30 and 45 tokens a month: calls 1-2 (0-29 before) full price, 3 (30) 10 % off, 4+ (45) 50 %."""
    key = stack.key("tiered")
    for _ in range(5):
        assert (await call(stack, key)).status_code == 200
    await delivered(stack, "tiered", 5)
    tiers = {"volumeTiers": [{"thresholdTokens": 30, "discountPct": "10"}, {"thresholdTokens": 45,
                                                                             "discountPct": "50"}]}
    await rate(stack, billing_objects(stack, "tiered", tiers))
    lines = sorted(await charges(stack, "tiered"), key=lambda e: e.id)
    assert [e.details["amount"] for e in lines] == ["0.020000", "0.020000", "0.018000", "0.010000", "0.010000"]
    assert [e.details.get("discountPct") for e in lines] == [None, None, "10", "50", "50"]
    assert await stack.ledger.balance(f"{TENANT_NS}/ten-tiered") == Decimal("-0.078")


async def test_a_committed_tier_charges_its_monthly_fee_once_and_includes_its_tokens(stack: Stack) -> None:
    """A 1 token/s tier includes a month's seconds in tokens: every call is inside it (free), the fee is due once
    for the month however many records are rated, in however many passes."""
    key = stack.key("committed")
    book = {"committedUse": [{"name": "starter", "tokensPerSecond": 1, "monthlyPrice": "99.50"}]}
    objects = billing_objects(stack, "committed", book, annotations={COMMITTED_USE_ANNOTATION: "starter"})
    for calls, total in ((2, 2), (1, 3)):  # two passes of the rater
        for _ in range(calls):
            assert (await call(stack, key)).status_code == 200
        await delivered(stack, "committed", total)
        await rate(stack, objects)
    entries = await charges(stack, "committed")
    fees = [e for e in entries if e.kind == "commitment"]
    usage = [e for e in entries if e.kind == "usage"]
    assert len(fees) == 1 and len(usage) == 3
    assert fees[0].key == f"commitment:{TENANT_NS}/ten-committed:starter:{datetime.now(UTC):%Y-%m}"
    assert all(e.details["amount"] == "0.000000" and e.details["committedTokens"] == 15 for e in usage)
    assert await stack.ledger.balance(f"{TENANT_NS}/ten-committed") == Decimal("-99.50")



async def test_an_invoiced_tenant_accrues_its_gateway_usage_and_stays_active(
        stack: Stack, billing_cluster: ControlPlane, billing: Billing, tmp_path: Path) -> None:
    """The billing controller as deployed: its rater reads maas-api's database, its ledger is its own; the
    Invoiced tenant's balance goes below zero by exactly what the gateway served, and it is never enforced."""
    settings = dataclasses.replace(SETTINGS, ledger_url=f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}",
                                   usage_database_url=stack.usage_url, rate_interval_seconds=1)
    running = await start_billing(billing_cluster, settings)
    try:
        # In force from creation on (effectiveFrom >= creation time + 0 days notice, and a loaded machine's API
        # server may take a while to create it), then priced.
        effective = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=4)
        objects = billing_objects(stack, "invoiced", {"effectiveFrom": effective.strftime("%Y-%m-%dT%H:%M:%SZ")},
                                  mode="Invoiced")
        for obj in (*objects["books"], *objects["tenants"]):
            meta = {k: v for k, v in obj["metadata"].items() if k not in ("generation", "creationTimestamp")}
            await billing.create({**obj, "metadata": {**meta, "namespace": stack.ns}})
        await asyncio.sleep((effective - datetime.now(UTC)).total_seconds() + 0.1)  # calls from now on are priced
        running.clock.set(datetime.now(UTC))
        key = stack.key("invoiced")
        for _ in range(3):
            assert (await call(stack, key)).status_code == 200

        async def accrued() -> dict[str, Any] | None:
            obj = await billing.get("TenantAccount", "ten-invoiced", stack.ns)
            st = (obj or {}).get("status") or {}
            return st if st.get("balance") == "-0.060000" else None

        st = await eventually(accrued, timeout=60)
        assert st["state"] == "Active" and st["mtdSpend"] == "0.060000" and "runwayDays" not in st
        healthy = next(c for c in st["conditions"] if c["type"] == "BalanceHealthy")
        assert (healthy["status"], healthy["reason"]) == ("True", "Invoiced")
        assert (await call(stack, key)).status_code == 200
    finally:
        await running.stop()

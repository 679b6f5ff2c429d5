"""Fixtures for the gateway integration tests: the session control plane with MaaS CRDs, the real controller,
a local test model, a running gateway, and a stand-in for the two maas-api gateway callbacks.

The stand-in lets tests register API keys directly (no database); it selects with the one rule set
(`contract.selection` over `contract.views` of the MaaSSubscriptions the API server holds), exactly as
maas-api does. TokenReview is always real.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from maasctl.contract.selection import select_subscription
from maasctl.contract.views import SubscriptionView, subscription_view
from maasctl.gateway import Gateway, GatewaySettings, start_http
from maasctl.gateway.server import HttpServer
from maasctl.gateway.usage import MemorySink
from maasctl.runtime import Client
from maasctl.runtime.connect import connect
from maasctl.testenv import ControlPlane
from maasctl.testmodel import ModelServerConfig, create_app
from tests.reconcilers.conftest import (  # noqa: F401  (fixtures re-exported for this package)
    GATEWAY_NAME,
    GATEWAY_NS,
    SETTINGS,
    SUB_NS,
    RunningController,
    maas_cluster,
    objs,
    start_controller,
)

UPSTREAM_KEY = "sk-upstream-secret"
GATEWAY_TOKEN = "gw-callback-token"
DEFAULT_GATEWAY = f"{GATEWAY_NS}/{GATEWAY_NAME}"


@pytest.fixture
async def controller(maas_cluster: ControlPlane) -> AsyncIterator[RunningController]:  # noqa: F811
    """The real controller, as its ServiceAccount with the install's RBAC (like tests/reconcilers)."""
    running = await start_controller(maas_cluster)
    try:
        yield running
    finally:
        await running.stop()


@dataclass
class MaasApiStandIn:
    """The two callbacks of the AuthPolicy contract plus a usage sink endpoint."""

    api: k8s.ApiClient
    keys: dict[str, dict[str, Any]] = field(default_factory=dict)
    usage: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0

    async def _subscriptions(self) -> list[SubscriptionView]:
        subs = await k8s.CustomObjectsApi(self.api).list_namespaced_custom_object(
            "maas.opendatahub.io", "v1alpha1", SUB_NS, "maassubscriptions")
        return [subscription_view(item) for item in subs["items"]]

    def _gateway_only(self, request: Request) -> JSONResponse | None:
        if request.headers.get("authorization") != f"Bearer {GATEWAY_TOKEN}":
            return JSONResponse({"error": {"code": "unauthenticated"}}, 401)
        return None

    async def validate(self, request: Request) -> JSONResponse:
        if (denied := self._gateway_only(request)) is not None:
            return denied
        self.calls += 1
        body = await request.json()
        return JSONResponse(self.keys.get(body["key"], {"valid": False}))

    async def select(self, request: Request) -> JSONResponse:
        if (denied := self._gateway_only(request)) is not None:
            return denied
        self.calls += 1
        body = await request.json()
        selection = select_subscription(
            await self._subscriptions(), body["username"], body["groups"], model=body.get("requestedModel"),
            requested=body.get("requestedSubscription"), bound=body.get("keySubscription"),
            default_namespace=SUB_NS, gateway=body.get("gateway") or DEFAULT_GATEWAY, default_gateway=DEFAULT_GATEWAY)
        sub = selection.subscription
        if sub is None:
            return JSONResponse({"error": str(selection.code), "message": selection.message})
        return JSONResponse({"name": sub.name, "namespace": sub.namespace, "organizationId": sub.organization_id})

    async def record_usage(self, request: Request) -> JSONResponse:
        if (denied := self._gateway_only(request)) is not None:
            return denied
        self.usage.extend((await request.json())["records"])
        return JSONResponse({"accepted": True}, 202)

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/internal/v1/api-keys/validate", self.validate, methods=["POST"]),
            Route("/internal/v1/subscriptions/select", self.select, methods=["POST"]),
            Route("/internal/v1/usage", self.record_usage, methods=["POST"]),
        ])


@dataclass
class Stack:
    gateway: Gateway
    url: str
    model_url: str
    maas_api: MaasApiStandIn
    sink: MemorySink


@pytest.fixture
async def stack(maas_cluster: ControlPlane) -> AsyncIterator[Stack]:  # noqa: F811
    """Test model + maas-api stand-in + gateway (HTTP on loopback), all in this event loop."""
    async with open_stack(maas_cluster) as s:
        yield s


@contextlib.asynccontextmanager
async def open_stack(cp: ControlPlane, **settings_overrides: Any) -> AsyncIterator[Stack]:
    """The stack of the `stack` fixture; `settings_overrides` are GatewaySettings fields (e.g. `redis_url`)."""
    api = await connect(str(cp.kubeconfig))
    servers: list[HttpServer] = []
    gateway: Gateway | None = None
    try:
        stand_in = MaasApiStandIn(api)
        servers.append(await start_http(stand_in.app()))
        model = create_app(ModelServerConfig(models=("gpt-x",), require_bearer=UPSTREAM_KEY))
        servers.append(await start_http(model))
        settings = GatewaySettings(gateway_name=GATEWAY_NAME, gateway_namespace=GATEWAY_NS,
                                   maas_api_url=servers[0].url, token_review_ttl=5, maas_api_token=GATEWAY_TOKEN,
                                   **settings_overrides)
        sink = MemorySink()
        gateway = Gateway(settings, Client(api), sink=sink)
        await gateway.start()
        servers.append(await start_http(gateway))
        yield Stack(gateway, servers[2].url, servers[1].url, stand_in, sink)
    finally:
        for server in reversed(servers):
            await server.stop()
        if gateway is not None:
            await gateway.stop()
        await api.close()

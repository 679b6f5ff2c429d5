"""The provider relay (payload.relay) is never an open proxy: without the processor's token, off its one path or
for a route without a provider plan it answers before anything is sent; with them it follows only the plan of
the named route (from the process's route table), sets each provider's own key, and no caller credential or
server-decided header reaches a provider. Real HTTP: the relay and the test model on uvicorn, aiohttp between."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp
import httpx
import pytest

from maasctl.builders.httproute import ExternalRouteInput, FallbackInput, RelayTarget, build_external_model_objects
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.contract.edge import forbidden_client_header
from maasctl.dataplane.failover import Breakers
from maasctl.gateway import GatewaySettings, start_http
from maasctl.gateway.providers import ProviderCaller, relay_token
from maasctl.gateway.routes import build_route_table
from maasctl.gateway.server import HttpServer
from maasctl.payload.relay import ProviderRelay
from maasctl.testmodel import ModelServerConfig, create_app
from maasctl.tls import default_tls

UPSTREAM = "sk-upstream-of-the-provider"
CALLER = "sk-oai-the-callers-own-key"
INSTALL_SECRET = "the-gateway-token-of-this-install"


@dataclass
class Relay:
    url: str
    model_url: str
    token: str


def _route_table(model_url: str) -> Any:
    host, port = model_url.removeprefix("http://").split(":")
    inp = ExternalRouteInput(
        model=ObjectRef("llm", "multi"), external_model="multi", host=host, port=int(port), tls=False,
        base_path="/fail/503/v1", gateway=GatewayRef("gw-ns", "gw"), credential_secret="first-key",
        target_model="test-model", provider="openai", relay=RelayTarget("127.0.0.1", 9005),
        fallbacks=(FallbackInput("backup", "openai", host, "test-model", port=int(port), tls=False,
                                 credential_secret="backup-key"),))
    single = ExternalRouteInput(model=ObjectRef("llm", "single"), external_model="single", host=host, port=int(port),
                                tls=False, gateway=GatewayRef("gw-ns", "gw"), target_model="test-model")
    objs = [*build_external_model_objects(inp), *build_external_model_objects(single)]
    services = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Service"}
    return build_route_table([o for o in objs if o["kind"] == "HTTPRoute"],
                             lambda ns, name: services.get(name), ("gw", "gw-ns"))


@pytest.fixture
async def relay() -> AsyncIterator[Relay]:
    model = await start_http(create_app(ModelServerConfig(require_bearer=UPSTREAM)))
    session = aiohttp.ClientSession(auto_decompress=False)
    keys = {"first-key": UPSTREAM, "backup-key": UPSTREAM}
    table = _route_table(model.url)
    token = relay_token(INSTALL_SECRET)
    plane = SimpleNamespace(
        settings=GatewaySettings(), pipeline=SimpleNamespace(relay_token=token),
        state=SimpleNamespace(snapshot=lambda: SimpleNamespace(table=table)),
        providers=ProviderCaller(lambda: session, lambda ns, secret, field: keys.get(secret), Breakers(),
                                 connect_timeout=5, scan_limit=1 << 20))
    server: HttpServer = await start_http(ProviderRelay(plane))
    try:
        yield Relay(server.url, model.url, token)
    finally:
        await server.stop()
        await session.close()
        await model.stop()


async def _seen(model_url: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(verify=default_tls()) as http:
        return list((await http.get(f"{model_url}/debug/requests")).json())


BODY = {"model": "multi", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("token", [None, "", "x", relay_token("another-install"), relay_token(None)],
                         ids=["absent", "empty", "short", "another-install", "another-process"])  # the last is
# random per process: ids keep the test's name the same on every xdist worker
async def test_without_the_processors_token_nothing_is_sent(relay: Relay, token: str | None) -> None:
    headers = {"x-maas-relay-route": "llm/maas-multi", **({"x-maas-relay-token": token} if token is not None else {})}
    async with httpx.AsyncClient(base_url=relay.url, verify=default_tls()) as http:
        resp = await http.post("/v1/chat/completions", json=BODY, headers=headers)
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "relay_forbidden"
    assert await _seen(relay.model_url) == []


@pytest.mark.parametrize(("method", "path", "route"), [
    ("POST", "/v1/completions", "llm/maas-multi"), ("GET", "/v1/chat/completions", "llm/maas-multi"),
    ("POST", "/v1/chat/completions/../embeddings", "llm/maas-multi"), ("POST", "/v1/chat/completions", ""),
    ("POST", "/v1/chat/completions", "llm/maas-single"),  # a route with one provider: no plan to follow
    ("POST", "/v1/chat/completions", "other/maas-multi"), ("POST", "/v1/chat/completions", "http://169.254.169.254"),
    # the model listing is the processor's answer (gateway.pipeline), never the relay's, nor a provider's
    ("GET", "/v1/models", "llm/maas-multi"), ("GET", "/llm/multi/v1/models", "llm/maas-multi"),
    ("POST", "/v1/models", "llm/maas-multi"),
])
async def test_only_a_planned_routes_chat_completions_are_relayed(relay: Relay, method: str, path: str,
                                                                  route: str) -> None:
    async with httpx.AsyncClient(base_url=relay.url, verify=default_tls()) as http:
        resp = await http.request(method, path, json=BODY,
                                  headers={"x-maas-relay-token": relay.token, "x-maas-relay-route": route})
    assert resp.status_code == 404
    assert await _seen(relay.model_url) == []


async def test_the_plan_is_followed_with_each_providers_key_and_nothing_of_the_callers(relay: Relay) -> None:
    headers = {"x-maas-relay-token": relay.token, "x-maas-relay-route": "llm/maas-multi",
               "authorization": f"Bearer {CALLER}", "x-api-key": CALLER, "api-key": CALLER, "cookie": f"s={CALLER}",
               "x-maas-identity": "{}", "x-maas-subscription": "premium", "x-gateway-destination-endpoint": "1.2.3.4",
               "x-request-id": "r-1"}
    async with httpx.AsyncClient(base_url=relay.url, verify=default_tls()) as http:
        resp = await http.post("/v1/chat/completions", json=BODY, headers=headers)
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-maas-provider"] == "backup" and resp.json()["object"] == "chat.completion"
    seen = await _seen(relay.model_url)
    assert [r["path"] for r in seen] == ["/fail/503/v1/chat/completions", "/v1/chat/completions"]
    assert seen[-1]["model"] == "test-model"  # the provider's model name
    for request in seen:
        sent = request["headers"]
        assert sent["authorization"] == f"Bearer {UPSTREAM}"
        assert CALLER not in str(sent) and relay.token not in str(sent)
        assert not [k for k in sent if k.startswith(("x-maas-", "x-gateway-")) or k in ("x-api-key", "api-key",
                                                                                        "cookie")]
        assert sent["x-request-id"] == "r-1"  # ordinary headers pass
    assert UPSTREAM not in str(resp.headers) and UPSTREAM not in resp.text


def test_a_client_can_never_send_the_relay_headers() -> None:
    for name in ("x-maas-relay-token", "X-MAAS-RELAY-TOKEN", "x_maas_relay_token", "x-maas-relay-route",
                 "x-maas-provider"):
        assert forbidden_client_header([name]) == name

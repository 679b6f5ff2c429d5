"""GET /v1/models: real loopback HTTP model endpoints probed with the caller's Authorization header."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from maasctl.contract.views import ModelRefView, SubscribedModel, SubscriptionView, Tier, model_ref_view
from maasctl.maasapi.app import create_app
from maasctl.maasapi.auth import StaticAuthenticator
from maasctl.maasapi.models import accessible, probe_url
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import StaticSources
from maasctl.maasapi.store import KeyStore
from tests.error_fields import error_code

from .conftest import NS, USERS, auth

LIM = (Tier(10, "1m"),)


class ModelServers:
    """One aiohttp server; each path prefix behaves like one model: ok / denied / 405 / slow / keyed."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None, str | None]] = []
        self.runner: web.AppRunner | None = None
        self.base = ""

    async def handle(self, request: web.Request) -> web.Response:
        model = request.match_info["model"]
        self.seen.append((model, request.headers.get("Authorization"), request.headers.get("X-MaaS-Subscription")))
        if model == "ok":
            return web.json_response({"object": "list", "data": [{"id": "ok"}]})
        if model == "denied":
            return web.json_response({"error": "no"}, status=401)
        if model == "noget":
            return web.Response(status=405)
        if model == "slow":
            await asyncio.sleep(5)
            return web.json_response({})
        if model == "alice-only":
            ok = request.headers.get("Authorization") == "Bearer alice-token"
            return web.json_response({}, status=200 if ok else 403)
        return web.Response(status=500)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/llm/{model}/v1/models", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def model_servers() -> AsyncIterator[ModelServers]:
    servers = ModelServers()
    await servers.start()
    try:
        yield servers
    finally:
        await servers.stop()


def catalogue(base: str) -> list[ModelRefView]:
    def m(name: str, phase: str = "Ready", endpoint: str | None = "default") -> ModelRefView:
        url = f"{base}/llm/{name}" if endpoint == "default" else endpoint
        return ModelRefView("llm", name, kind="LLMInferenceService", model_id=f"{name}-alias", endpoint=url,
                            phase=phase, created=1700000000)

    return [m("ok"), m("denied"), m("noget"), m("slow"), m("alice-only"), m("broken"),
            m("pending", phase="Pending"), m("other")]


def subscriptions() -> list[SubscriptionView]:
    refs = tuple(SubscribedModel("llm", n, LIM) for n in ("ok", "denied", "noget", "slow", "alice-only", "broken",
                                                   "pending"))
    return [
        SubscriptionView(NS, "premium", groups=frozenset(("premium-users",)), priority=5, phase="Active", models=refs),
        SubscriptionView(NS, "free", groups=frozenset(("free-users", "premium-users")), phase="Active",
                     models=(SubscribedModel("llm", "ok", LIM), SubscribedModel("llm", "alice-only", LIM))),
    ]


@pytest.fixture
async def models_client(store: KeyStore, model_servers: ModelServers) -> AsyncIterator[httpx.AsyncClient]:
    # room for a loaded CI machine (a probe of a healthy model that missed 0.5 s dropped it from the list); the
    # slow model answers after 5 s, well beyond both
    settings = MaasApiSettings(model_probe_timeout=1.5, models_deadline=3.0, gateway_origins=(model_servers.base,))
    sources = StaticSources(subscriptions(), catalogue(model_servers.base))
    app = create_app(settings, sources, StaticAuthenticator(USERS), store=store, model_source=sources)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://maas-api") as c:
        yield c


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_models_filtered_by_probe_with_callers_header(models_client: httpx.AsyncClient,
                                                            model_servers: ModelServers) -> None:
    start = time.monotonic()
    r = await models_client.get("/v1/models", headers=auth("alice"))
    elapsed = time.monotonic() - start
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
    body: dict[str, Any] = r.json()
    by_id = {m["id"]: m for m in body["data"]}
    # 2xx and 405 are included; 401/500/slow/Pending/not-in-subscription are not
    assert sorted(by_id) == ["alice-only-alias", "noget-alias", "ok-alias"]
    assert by_id["ok-alias"]["owned_by"] == "llm/ok" and by_id["ok-alias"]["object"] == "model"
    assert by_id["ok-alias"]["subscriptions"] == [{"name": "premium"}, {"name": "free"}]
    assert elapsed < 4.5, "a slow model (5 s) must not hold the list beyond the probe timeout / deadline"
    assert all(auth_header == "Bearer alice-token" for _, auth_header, _ in model_servers.seen)
    assert "pending" not in {m for m, _, _ in model_servers.seen}


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_models_subscription_header_and_api_key(models_client: httpx.AsyncClient,
                                                      model_servers: ModelServers) -> None:
    r = await models_client.get("/v1/models", headers={**auth("alice"), "X-MaaS-Subscription": "free"})
    assert sorted(m["id"] for m in r.json()["data"]) == ["alice-only-alias", "ok-alias"]
    assert {sub for _, _, sub in model_servers.seen} == {"free"}
    r = await models_client.get("/v1/models", headers={**auth("carol"), "X-MaaS-Subscription": "free"})
    assert r.status_code == 403 and error_code(r) == "subscription_not_found"
    assert r.json()["error"]["type"] == "permission_error"
    r = await models_client.get("/v1/models", headers=auth("carol"))
    assert r.json()["data"] == []
    key = (await models_client.post("/v1/api-keys", json={"name": "k", "subscription": "free"},
                                    headers=auth("alice"))).json()["key"]
    r = await models_client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
    # the key is sent as-is; "alice-only" refuses anything but alice's token
    assert [m["id"] for m in r.json()["data"]] == ["ok-alias"]
    for other in ("premium", "no-such-subscription", "free"):  # a key's binding wins over the header
        r = await models_client.get("/v1/models", headers={"Authorization": f"Bearer {key}",
                                                           "X-MaaS-Subscription": other})
        assert r.status_code == 200 and [m["id"] for m in r.json()["data"]] == ["ok-alias"], other
        assert [s["name"] for s in r.json()["data"][0]["subscriptions"]] == ["free"], other


def test_model_from_object_and_probe_url() -> None:
    m = model_ref_view({
        "metadata": {"name": "g", "namespace": "llm", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"modelRef": {"kind": "LLMInferenceService", "name": "g"}},
        "status": {"phase": "Ready", "endpoint": "https://gw/llm/g", "resolvedModelAlias": "granite"},
    })
    assert (m.key, m.model_id, m.kind, m.ready, m.created) == ("llm/g", "granite", "LLMInferenceService", True,
                                                               1767225600)
    assert not model_ref_view({"metadata": {"name": "x", "namespace": "n"}}).ready
    assert probe_url("https://gw/llm/g/") == "https://gw/llm/g/v1/models"
    assert probe_url("https://api.example.com/v1") == "https://api.example.com/v1/models"


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("configured_gateway", [True, False])
async def test_credentials_never_go_to_a_host_a_model_ref_names(
    store: KeyStore, model_servers: ModelServers, configured_gateway: bool
) -> None:
    """No SSRF with the caller's credentials: endpoints pointing elsewhere (endpointOverride, odd URL forms)
    are probed on the gateway origin, or, with no gateway configured, without the Authorization header."""
    attacker = ModelServers()
    await attacker.start()
    try:
        host_port = attacker.base.removeprefix("http://")
        hostile = [f"{attacker.base}/llm/ok", f"http://user:pw@{host_port}/llm/ok",
                   f"HTTP://{host_port.upper()}/llm/ok", f"{attacker.base}/llm/ok?x=1#frag"]
        models = [ModelRefView("llm", "ok", kind="ExternalModel", model_id="ok", endpoint=url, phase="Ready")
                  for url in hostile]
        origins = (model_servers.base,) if configured_gateway else ()
        settings = MaasApiSettings(model_probe_timeout=0.5, models_deadline=1.0, gateway_origins=origins)
        for model in models:
            sources = StaticSources(subscriptions(), [model])
            app = create_app(settings, sources, StaticAuthenticator(USERS), store=store, model_source=sources)
            async with app.router.lifespan_context(app), httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app), base_url="http://maas-api") as c:
                r = await c.get("/v1/models", headers=auth("alice"))
            assert r.status_code == 200
        assert all(credential is None for _, credential, _ in attacker.seen), attacker.seen
        if configured_gateway:
            assert attacker.seen == []  # probed on the gateway instead
            assert ("ok", "Bearer alice-token", None) in model_servers.seen
    finally:
        await attacker.stop()


@pytest.mark.parametrize("endpoint", ["http://exa mple.com/v1", "http://[::1/v1", "http://example.com:99999/v1",
                                      "http://\u00e9\u0301.example/v1", "http://example.com/\x00/v1"])
async def test_a_model_whose_url_cannot_be_sent_is_left_out_not_a_500(store: KeyStore, endpoint: str) -> None:
    """Without a configured gateway the probe goes where the endpoint says: a URL the HTTP client refuses leaves
    that model out of the list (it was a 500 for the whole list); the others are still listed."""
    good = ModelRefView("llm", "ok", kind="ExternalModel", model_id="ok", endpoint="http://127.0.0.1:1/v1",
                        phase="Ready")
    odd = ModelRefView("llm", "odd", kind="ExternalModel", model_id="odd", endpoint=endpoint, phase="Ready")

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": []})

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        listed = await accessible(http, [odd, good], {"authorization": "Bearer t"}, per_probe=1, deadline=2)
    assert good in listed


def test_probe_target() -> None:
    from maasctl.maasapi.models import probe_target

    gw = ("https://gw.example:8443",)
    assert probe_target("https://gw.example:8443/llm/m/v1", gw, "/llm/m") == (
        "https://gw.example:8443/llm/m/v1/models", True)
    assert probe_target("https://GW.example:8443/llm/m", gw, "/llm/m") == (
        "https://gw.example:8443/llm/m/v1/models", True)
    assert probe_target("https://evil.example/llm/m/v1", gw, "/llm/m") == (
        "https://gw.example:8443/llm/m/v1/models", True)
    assert probe_target("https://evil.example/steal", gw, "/llm/m") == ("https://gw.example:8443/llm/m/v1/models", True)
    assert probe_target("https://gw.example@evil.example/llm/m", gw, "/llm/m")[0].startswith("https://gw.example:8443/")
    assert probe_target("https://evil.example/llm/m/v1", (), "/llm/m") == (
        "https://evil.example/llm/m/v1/models", False)


GW_URL = "https://gw.example:8443"
OWN_PROBE = f"{GW_URL}/llm/m/v1/models"


@pytest.mark.parametrize("endpoint", [
    f"{GW_URL}/maas-api",  # maas-api's own /v1/models through the shipped HTTPRoute
    f"{GW_URL}/maas-api/v1",
    f"{GW_URL}/maas-api/",
    f"{GW_URL}",
    f"{GW_URL}/",
    f"{GW_URL}/llm/other",  # another model's route
    f"{GW_URL}/llm/m-other",  # a string prefix is not the route
    f"{GW_URL}/llm/mm/v1",
    f"{GW_URL}/LLM/M",
    f"{GW_URL}/llm/m/../../maas-api",
    f"{GW_URL}/llm/m/./../../maas-api/v1",
    f"{GW_URL}/llm/m/%2e%2e/%2E%2E/maas-api",
    f"{GW_URL}/llm/m/.%2e/.%2E/maas-api",
    f"{GW_URL}/llm/m/..%2f..%2fmaas-api",
    f"{GW_URL}/llm/m%2F..%2F..%2Fmaas-api",
    f"{GW_URL}/llm/m/%252e%252e/%252e%252e/maas-api",
    f"{GW_URL}/llm/m/..;/..;/maas-api",
    f"{GW_URL}/llm/m/..\\..\\maas-api",
    f"{GW_URL}/llm/m/%00/../../maas-api",
    f"{GW_URL}//maas-api",
    f"{GW_URL}/llm//m/../../maas-api",
    f"{GW_URL}/llm/m/..",
    f"{GW_URL}/maas-api?/llm/m",
    f"{GW_URL}/maas-api#/llm/m",
    f"{GW_URL}/maas-api/v1?x=/llm/m/v1",
    "https://user:pw@gw.example:8443/maas-api",
    "https://gw.example:8443@gw.example:8443/maas-api",
    "https://GW.EXAMPLE:8443/maas-api",
    "HTTPS://gw.example:8443/maas-api",
    "https://gw.example/llm/m/v1",  # another port: another origin
    "http://gw.example:8443/llm/m",  # another scheme
    "https://gw.example.:8443/maas-api",
    "https://evil.example/maas-api",
    "https://evil.example:8443/llm/m",
    "not a url",
    "",
])
def test_a_probe_on_the_gateway_goes_to_the_models_own_route_only(endpoint: str) -> None:
    """Whatever a model's endpoint says, the credentialed probe goes to the model's own gateway route: an
    endpoint that is not that route (maas-api, another model) or only looks like it (dot segments, encoded
    dots or slashes, `;`, backslashes, double slashes, `?`/`#`, user info, case, ports) is replaced by it."""
    from maasctl.maasapi.models import probe_target

    assert probe_target(endpoint, (GW_URL,), "/llm/m") == (OWN_PROBE, True)


@pytest.mark.parametrize(("endpoint", "probed"), [
    (f"{GW_URL}/llm/m", OWN_PROBE),
    (f"{GW_URL}/llm/m/", OWN_PROBE),
    (f"{GW_URL}/llm/m/v1", OWN_PROBE),
    (f"{GW_URL}/llm/m/v1/", OWN_PROBE),
    (f"{GW_URL}/llm/m/./v1", OWN_PROBE),
    (f"{GW_URL}/llm/m/x/../v1", OWN_PROBE),
    (f"{GW_URL}/llm/m/%76%31", OWN_PROBE),
    (f"{GW_URL}/llm/m/v1?api-version=1#top", OWN_PROBE),
    ("https://u:p@GW.Example:8443/llm/m/v1", OWN_PROBE),
    (f"{GW_URL}/llm/m/openai/v1", f"{GW_URL}/llm/m/openai/v1/models"),
    (f"{GW_URL}/llm/m//openai", f"{GW_URL}/llm/m/openai/v1/models"),
])
def test_a_probe_below_the_models_own_route_is_kept_in_canonical_form(endpoint: str, probed: str) -> None:
    from maasctl.maasapi.models import probe_target

    assert probe_target(endpoint, (GW_URL,), "/llm/m") == (probed, True)


@pytest.mark.parametrize(("origins", "endpoint", "probed"), [
    (("https://gw.example",), "https://gw.example:443/maas-api", "https://gw.example/llm/m/v1/models"),
    (("https://gw.example",), "https://GW.example:443/llm/m/v1", "https://gw.example/llm/m/v1/models"),
    (("http://gw.example:80/",), "http://gw.example/maas-api", "http://gw.example:80/llm/m/v1/models"),
    (("https://a.example", "https://b.example"), "https://b.example/llm/m/x", "https://b.example/llm/m/x/v1/models"),
    (("https://a.example", "https://b.example"), "https://b.example/maas-api", "https://b.example/llm/m/v1/models"),
    (("https://gw.example/base",), "https://gw.example/base/llm/m/v1", "https://gw.example/base/llm/m/v1/models"),
    (("https://gw.example/base",), "https://gw.example/llm/m/v1", "https://gw.example/base/llm/m/v1/models"),
])
def test_a_probe_uses_the_configured_gateway_url(origins: tuple[str, ...], endpoint: str, probed: str) -> None:
    from maasctl.maasapi.models import probe_target

    assert probe_target(endpoint, origins, "/llm/m") == (probed, True)


class LoopingGateway(httpx.AsyncBaseTransport):
    """The gateway as the manifests configure it: `/maas-api/v1/*` goes to maas-api's `/v1/*` (the shipped
    HTTPRoute), `/llm/granite/*` to a model that answers 200; every request is recorded."""

    def __init__(self) -> None:
        self.maas_api: httpx.AsyncBaseTransport | None = None
        self.paths: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.paths.append(path)
        if len(self.paths) > 20:
            return httpx.Response(503)  # the bug: stop the recursion instead of hanging the test
        if path.startswith("/maas-api/v1/") and self.maas_api is not None:
            inner = httpx.Request(request.method, "http://maas-api" + path.removeprefix("/maas-api"),
                                  headers=request.headers)
            return await self.maas_api.handle_async_request(inner)
        if path == "/llm/granite/v1/models":
            return httpx.Response(200, json={"object": "list", "data": []})
        return httpx.Response(404)


async def list_through_gateway(store: KeyStore, model: ModelRefView, subs: list[SubscriptionView]
                               ) -> tuple[httpx.Response, LoopingGateway]:
    gateway = LoopingGateway()
    settings = MaasApiSettings(model_probe_timeout=2.0, models_deadline=5.0, gateway_origins=("http://gw.example",))
    sources = StaticSources(subs, [model])
    app = create_app(settings, sources, StaticAuthenticator(USERS), store=store, model_source=sources,
                     probe_client=httpx.AsyncClient(transport=gateway))
    gateway.maas_api = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://maas-api") as c:
        return await c.get("/v1/models", headers=auth("alice")), gateway


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("endpoint", ["http://gw.example/maas-api", "http://gw.example/maas-api/v1",
                                      "http://gw.example/llm/granite/../../maas-api",
                                      "http://gw.example/llm/granite/%2e%2e/%2e%2e/maas-api"])
async def test_an_endpoint_override_cannot_make_v1_models_probe_itself(store: KeyStore, endpoint: str) -> None:
    """The review's finding: an `endpointOverride` naming maas-api on the gateway made one `/v1/models` call
    itself recursively (301 nested calls) and list the "model" as ready. Now the model's own route is probed,
    once."""
    model = ModelRefView("llm", "granite", kind="ExternalModel", target="granite", model_id="granite",
                         endpoint=endpoint, phase="Ready")
    r, gateway = await list_through_gateway(store, model, [
        SubscriptionView(NS, "premium", groups=frozenset(("premium-users",)), phase="Active",
                         models=(SubscribedModel("llm", "granite", LIM),))])
    assert r.status_code == 200, r.text
    assert gateway.paths == ["/llm/granite/v1/models"]
    assert [m["id"] for m in r.json()["data"]] == ["granite"]  # listed because its own route answered


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_probe_that_reaches_v1_models_is_answered_without_probing_again(store: KeyStore) -> None:
    """Defence in depth: a model whose own gateway route leads to maas-api (here a MaaSModelRef `v1` in a
    namespace `maas-api`) is probed once; maas-api recognises its own probe, answers 508 and probes nothing."""
    model = ModelRefView("maas-api", "v1", kind="ExternalModel", target="v1", model_id="v1",
                         endpoint="http://gw.example/maas-api/v1", phase="Ready")
    r, gateway = await list_through_gateway(store, model, [
        SubscriptionView(NS, "premium", groups=frozenset(("premium-users",)), phase="Active",
                         models=(SubscribedModel("maas-api", "v1", LIM),))])
    assert r.status_code == 200, r.text
    assert gateway.paths == ["/maas-api/v1/models"]
    assert r.json()["data"] == []

"""`GET <model path>/v1/models` on the route of a model whose provider has no OpenAI listing (a Messages provider,
several providers behind the relay): the data plane answers it itself, only after the route's generated AuthPolicy
admitted the caller, with OpenAI's list naming the published model - the same answer on both fronts (the
in-process pipeline, role `all`; the payload processor's post stream on Authorino's identity). maas-api's
`/v1/models` probes exactly that request with the caller's credential, so the model is listed for the callers
who may use it and for nobody else. Other methods and paths never get it; spellings of the same path get the
same AuthPolicy. No provider is called and nothing is recorded.

The generated route and AuthPolicy (builders), the real route table and AuthPolicy runtime; maas-api's callbacks
and the TokenReview answered in process (`tests.gateway.test_auth`). No control plane.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from maasctl.builders.authpolicy import AuthPolicyInput, AuthPolicySource, AuthSettings, build_auth_policy
from maasctl.builders.httproute import ExternalRouteInput, FallbackInput, RelayTarget, build_external_model_objects
from maasctl.builders.refs import GatewayRef, ObjectRef
from maasctl.contract import identity as ids
from maasctl.contract.errors import Refusal
from maasctl.gateway import GatewaySettings
from maasctl.gateway.auth import AuthPolicyRuntime
from maasctl.gateway.authpolicy import compile_auth_policy
from maasctl.gateway.pipeline import Pipeline
from maasctl.gateway.routes import build_route_table
from maasctl.gateway.state import Snapshot
from maasctl.gateway.usage import MemorySink
from maasctl.payload.adapter import ProcessorStages
from tests.gateway.test_auth import Callbacks, review

PATH = b"/llm/gpt-4o/v1/models"
ALICE = ("authorization", "Bearer sk-oai-good")  # premium-users: granted
BOB = ("authorization", "Bearer tok-bob")  # free-users: a valid token the model's MaaSAuthPolicy does not name
SINGLE = ExternalRouteInput(model=ObjectRef("llm", "gpt-4o"), external_model="claude", host="api.provider.test",
                            gateway=GatewayRef("gw-ns", "gw"), credential_secret="provider-key",
                            target_model="provider-model-name", provider="anthropic")
MESSAGES = replace(SINGLE, api_format="messages")
SEVERAL = replace(SINGLE, provider="openai", relay=RelayTarget("maas-payload-processor.opendatahub.svc", 9005),
                  fallbacks=(FallbackInput("backup", "anthropic", "api.backup.test", "backup-model-name",
                                           api_format="messages", credential_secret="backup-key"),))
ANSWERED = [pytest.param(MESSAGES, id="messages"), pytest.param(SEVERAL, id="several-providers")]


@dataclass
class Front:
    pipeline: Pipeline
    sink: MemorySink
    listing: bytes | None  # the answer the route's listing rule carries

    def exchange(self, method: str, path: bytes, *headers: tuple[str, str], query: str = "") -> Any:
        return self.pipeline.exchange(method, path, query, [("host", "gw"), *headers])

    async def all(self, method: str, path: bytes, *headers: tuple[str, str], query: str = "") -> Refusal | None:
        """The in-process gateway's head stages (role `all`)."""
        return await self.pipeline.request_head(self.exchange(method, path, *headers, query=query), "all")

    async def processor(self, method: str, path: bytes, *headers: tuple[str, str]) -> Refusal | None:
        """Envoy's side (route, Authorino), then the processor's post stream on what Authorino injected."""
        envoy = self.exchange(method, path, *headers)
        refusal = await self.pipeline.request_head(envoy, "envoy")
        if refusal is not None:
            return refusal
        injected = [(k.lower(), v) for k, v in envoy.outcome.headers.items()]
        stages = ProcessorStages(self.pipeline)
        fx = stages.exchange(method, path, "", [("host", "gw"), *headers, *injected], "http")
        return await stages.request_head(fx, "post")


async def _front(inp: ExternalRouteInput, http: httpx.AsyncClient, *, with_policy: bool = True,
                 open_routes: bool = False) -> Front:
    service, route = build_external_model_objects(inp)
    route["metadata"]["creationTimestamp"] = "2026-01-02T03:04:05Z"
    table = build_route_table([route], lambda ns, name: service, ("gw", "gw-ns"))
    policy = build_auth_policy(
        AuthPolicyInput(ObjectRef("llm", "gpt-4o"), ObjectRef("llm", "maas-gpt-4o"),
                        (AuthPolicySource(ObjectRef("models-as-a-service", "p"), groups=("premium-users",)),)),
        AuthSettings("http://maas-api.test:8080", cache_ttl_seconds=30))
    assert policy is not None
    policy["metadata"] |= {"uid": "u", "generation": 1}
    snap = Snapshot(0, table, auth={"llm/maas-gpt-4o": compile_auth_policy(policy)} if with_policy else {})
    sink = MemorySink()
    plane = SimpleNamespace(settings=GatewaySettings(gateway_name="gw", gateway_namespace="gw-ns",
                                                     serve_routes_without_auth_policy=open_routes),
                            state=SimpleNamespace(snapshot=lambda: snap), sink=sink,
                            auth=AuthPolicyRuntime(http, review, callback_secret="gw"))
    listing = next((r.listing for r in table.rules if r.listing is not None), None)
    return Front(Pipeline(plane), sink, listing)  # type: ignore[arg-type]


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.MockTransport(Callbacks())) as client:
        yield client


@pytest.mark.parametrize("inp", ANSWERED)
async def test_a_granted_caller_gets_the_published_model_on_both_fronts(inp: ExternalRouteInput,
                                                                      http: httpx.AsyncClient) -> None:
    front = await _front(inp, http)
    assert front.listing is not None
    for answer in (await front.all("GET", PATH, ALICE), await front.processor("GET", PATH, ALICE)):
        assert answer is not None and (answer.status, answer.code) == (200, "model_listing")
        assert answer.body == front.listing and dict(answer.headers) == {"cache-control": "no-store"}
    listed = json.loads(front.listing)
    assert [m["id"] for m in listed["data"]] == ["claude"] and listed["data"][0]["owned_by"] == "llm/gpt-4o"
    assert not {"provider-model-name", "backup-model-name", "provider-key", "backup-key"} & set(str(listed).split("'"))
    assert front.sink.records == []  # nothing reserved or recorded


@pytest.mark.parametrize("inp", ANSWERED)
@pytest.mark.parametrize(("headers", "status"), [
    pytest.param((BOB,), 403, id="not-granted"), pytest.param((), 401, id="no-credential"),
    pytest.param((("authorization", "Bearer sk-oai-revoked"),), 403, id="refused-key"),
    pytest.param((("authorization", "Bearer unknown-token"),), 401, id="refused-token"),
    pytest.param((ALICE, ("x-maas-username", "admin")), 403, id="identity-header"),
])
async def test_a_caller_the_policy_refuses_never_gets_it(inp: ExternalRouteInput, http: httpx.AsyncClient,
                                                         headers: tuple[tuple[str, str], ...], status: int) -> None:
    front = await _front(inp, http)
    for answer in (await front.all("GET", PATH, *headers), await front.processor("GET", PATH, *headers)):
        assert answer is not None and answer.status == status and answer.body != front.listing


@pytest.mark.parametrize("inp", ANSWERED)
async def test_the_processor_answers_nothing_without_authorinos_identity(inp: ExternalRouteInput,
                                                                       http: httpx.AsyncClient) -> None:
    front = await _front(inp, http)
    stages = ProcessorStages(front.pipeline)
    for injected in ((), ((ids.HEADER, "e30"),)):  # none, or not one Authorino would write
        fx = stages.exchange("GET", PATH, "", [("host", "gw"), ALICE, *injected], "http")
        answer = await stages.request_head(fx, "post")
        assert answer is not None and answer.status == 403 and answer.code in ("identity_missing", "identity_invalid")
    # the pipeline's own processor role: an exchange whose identity was not adopted is no admitted caller
    answer = await front.pipeline.request_head(front.exchange("GET", PATH, ALICE), "processor")
    assert answer is not None and (answer.status, answer.code) == (403, "identity_missing")


@pytest.mark.parametrize("inp", ANSWERED)
@pytest.mark.parametrize(("open_routes", "status"), [(False, 403), (True, 200)])
async def test_a_route_without_an_auth_policy_is_answered_only_where_it_is_served(
        inp: ExternalRouteInput, http: httpx.AsyncClient, open_routes: bool, status: int) -> None:
    """No AuthPolicy: 403 `no_auth_policy`, unless the operator opened such routes (then every request on them is
    served, and so is the listing)."""
    front = await _front(inp, http, with_policy=False, open_routes=open_routes)
    for answer in (await front.all("GET", PATH), await front.processor("GET", PATH)):
        assert answer is not None and answer.status == status


async def test_a_single_openai_compatible_provider_answers_its_own_listing(http: httpx.AsyncClient) -> None:
    front = await _front(replace(SINGLE, provider="openai"), http)
    assert front.listing is None
    ex = front.exchange("GET", PATH, ALICE)
    assert await front.pipeline.request_head(ex, "all") is None  # on to the provider, under its base path
    assert ex.match.rule.path_type == "PathPrefix" and ex.match.upstream_path == "/v1/models"


@pytest.mark.parametrize("inp", ANSWERED)
@pytest.mark.parametrize(("path", "query"), [
    pytest.param(b"/llm/gpt-4o/v1/%6dodels", "", id="escaped-letter"),
    pytest.param(b"/llm/gpt-4o/v1//models", "", id="double-slash"),
    pytest.param(b"/llm/gpt-4o/v1/./models", "", id="dot-segment"),
    pytest.param(b"/llm/gpt-4o/v1/chat/../models", "", id="dot-dot-segment"),
    pytest.param(PATH, "x=/chat/completions", id="query"),
])
async def test_spellings_of_the_same_path_go_through_the_same_policy(
        inp: ExternalRouteInput, http: httpx.AsyncClient, path: bytes, query: str) -> None:
    front = await _front(inp, http)
    granted = await front.all("GET", path, ALICE, query=query)
    assert granted is not None and granted.status == 200 and granted.body == front.listing
    refused = await front.all("GET", path, BOB, query=query)
    assert refused is not None and refused.status == 403


@pytest.mark.parametrize("inp", ANSWERED)
@pytest.mark.parametrize(("method", "path", "status"), [
    pytest.param("POST", PATH, 404, id="post"), pytest.param("PUT", PATH, 404, id="put"),
    pytest.param("DELETE", PATH, 404, id="delete"), pytest.param("PATCH", PATH, 404, id="patch"),
    pytest.param("HEAD", PATH, 404, id="head"), pytest.param("OPTIONS", PATH, 404, id="options"),
    pytest.param("GET", PATH + b"/", 404, id="trailing-slash"),
    pytest.param("GET", PATH + b"/provider-model-name", 404, id="one-model"),
    pytest.param("GET", b"/llm/gpt-4o/v1/Models", 404, id="case"),
    pytest.param("GET", b"/llm/gpt-4o/models", 404, id="no-version"),
    pytest.param("GET", PATH + b"%2f..%2fchat%2fcompletions", 400, id="escaped-slash"),
    pytest.param("GET", PATH + b"%00", 400, id="nul"),
    pytest.param("GET", PATH + b"%5c..", 400, id="escaped-backslash"),
    pytest.param("GET", PATH + b"/..%2fchat/completions", 400, id="escaped-slash-after-dot-dot"),
])
async def test_nothing_else_gets_the_listing(inp: ExternalRouteInput, http: httpx.AsyncClient, method: str,
                                            path: bytes, status: int) -> None:
    front = await _front(inp, http)
    for answer in (await front.all(method, path, ALICE), await front.processor(method, path, ALICE)):
        assert answer is not None and answer.status == status and answer.body != front.listing


@pytest.mark.parametrize("inp", ANSWERED)
async def test_a_path_that_resolves_elsewhere_is_that_paths_request(inp: ExternalRouteInput,
                                                                   http: httpx.AsyncClient) -> None:
    """`<model path>/v1/models/../chat/completions` is the chat completions path: a GET there is no listing, and
    its empty body is no chat completion (refused by the Messages translation; the relay's attempts refuse it
    too: `gateway.providers`)."""
    front = await _front(inp, http)
    ex = front.exchange("GET", PATH + b"/../chat/completions", ALICE)
    assert await front.pipeline.request_head(ex, "all") is None
    assert ex.path == "/llm/gpt-4o/v1/chat/completions" and ex.match.rule.listing is None
    body = await front.pipeline.request_body(ex, b"", "all")
    if inp.api_format == "messages":
        assert body is not None and (body.status, body.code) == (400, "invalid_body")
    else:
        assert ex.match.rule.providers is not None and ex.match.upstream_path == "/v1/chat/completions"

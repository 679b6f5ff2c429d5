"""Holes at the edge, each as a class with several variants, against the real local stack over HTTP:
deny by default, one canonical path, the header contract, the query string, hardening limits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from e2e.conftest import World, eventually

from maasctl.gateway.config import LOCAL_URL_ANNOTATION
from maasctl.reconcilers.kinds import MAAS_AUTH_POLICY, MAAS_MODEL_REF
from maasctl.tls import default_tls
from tests.security.helpers import backend_log, backend_seq, raw_request


async def _model_ready(world: World, name: str) -> None:
    async def ready() -> bool:
        obj = await world.client.get(MAAS_MODEL_REF, name, world.namespace)
        return bool((obj.get("status") or {}).get("phase") == "Ready")

    await eventually(ready)


async def served_model(world: World, limit: int = 100_000) -> str:
    """A published external model that alice may call with a key; returns the key."""
    await world.apply(*world.external_model("gpt"))
    sub = world.name("s")
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], users=("alice",)),
                      world.subscription(sub, {"gpt": [(limit, "1m")]}, users=("alice",)))
    await world.wait_active(sub)
    key = str((await world.mint("alice", subscription=sub))["key"])
    await world.wait_enforced("gpt", key)
    return key


async def test_a_model_no_auth_policy_names_is_denied_to_everyone(world: World) -> None:
    """Closed by default: publishing a model does not open it; removing its last MaaSAuthPolicy closes it."""
    await world.apply(*world.external_model("gpt"))
    sub = world.name("s")
    await world.apply(world.subscription(sub, {"gpt": [(100_000, "1m")]}, users=("alice", "bob")))
    await world.wait_active(sub)
    await _model_ready(world, "gpt")
    key = str((await world.mint("alice", subscription=sub))["key"])
    before = await backend_seq(world)
    # the MaaS answers (issue 37): 401 only without a credential anyone accepts, 403 for every credential
    callers = {"anonymous": (None, 401), "garbage": ("not-a-token", 401), "forged key": ("sk-oai-forged_x", 403),
               "alice's token": (world.token("alice"), 403), "alice's key": (key, 403),
               "carol's token": (world.token("carol"), 403)}
    for who, (credential, status) in callers.items():
        async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=30, verify=default_tls()) as http:
            headers = {"Authorization": f"Bearer {credential}"} if credential else {}
            r = await http.post(f"/{world.namespace}/gpt/v1/chat/completions", headers=headers,
                                json={"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == status, (who, r.status_code, r.text)
    assert await backend_seq(world) == before  # nothing reached the provider, its key never injected

    ap = world.name("ap")
    await world.apply(world.auth_policy(ap, ["gpt"], users=("alice",)))
    await world.wait_enforced("gpt", key)  # the test can pass: alice is let in once a policy names her
    await world.client.delete(MAAS_AUTH_POLICY, ap, world.sub_ns())

    async def closed_again() -> bool:
        return (await world.chat("gpt", key)).status_code == 403

    await eventually(closed_again)


@pytest.mark.parametrize(
    ("suffix", "canonical"),
    [("v1/./chat/completions", "/v1/chat/completions"), ("v1//chat///completions", "/v1/chat/completions"),
     ("v1/models/../chat/completions", "/v1/chat/completions"), ("v1/%63hat/completions", "/v1/chat/completions")],
)
async def test_the_backend_receives_exactly_the_path_the_gateway_matched(
    world: World, suffix: str, canonical: str
) -> None:
    key = await served_model(world)
    status, body = await raw_request(world, "POST", f"/{world.namespace}/gpt/{suffix}",
                                     [("Authorization", f"Bearer {key}"), ("Content-Type", "application/json")],
                                     json.dumps({"model": "gpt-x", "messages": []}).encode())
    assert status == 200, body
    assert (await backend_log(world))[-1]["path"] == canonical


@pytest.mark.parametrize(
    "suffix",
    ["v1/chat%2Fcompletions", "v1/%2e%2e%2f%2e%2e%2fadmin", "v1/..%2f..%2fadmin", "v1/chat/completions%00",
     "v1/%5c..%5cadmin", "v1/%252e%252e/admin", "../../../etc/passwd", "v1/chat/completions%0a"],
)
async def test_ambiguous_paths_are_refused_before_anything_else(world: World, suffix: str) -> None:
    key = await served_model(world)
    before = await backend_seq(world)
    status, body = await raw_request(world, "POST", f"/{world.namespace}/gpt/{suffix}",
                                     [("Authorization", f"Bearer {key}")])
    assert status in (400, 404), body  # 404 only when the canonical path matches no route at all
    assert await backend_seq(world) == before


@pytest.mark.parametrize("query", ["x=/v1/models", "/v1/models", "a=1&b=%2Fv1%2Fmodels", "v1/models=1"])
async def test_the_query_string_cannot_make_a_completion_look_like_an_unmetered_listing(
    world: World, query: str
) -> None:
    key = await served_model(world, limit=20)  # wait_enforced spent 15 tokens already
    url = f"/{world.namespace}/gpt/v1/chat/completions?{query}"
    async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=30, verify=default_tls()) as http:
        body = {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}
        statuses = [(await http.post(url, json=body, headers={"Authorization": f"Bearer {key}"})).status_code
                    for _ in range(4)]
    # Counted, a minute's window holds at most two of these 15-token calls (each is checked before it is counted:
    # 15 < 20 is served, 30 is not), and the window's boundary falls between two of them at most once: a 429 comes
    # by the fourth call. Had the query string exempted them, all four would be served.
    assert statuses[0] == 200 and 429 in statuses, statuses


@pytest.mark.parametrize(
    "header",
    ["X-MaaS-Username", "x-maas-group", "X_MAAS_KEY_ID", "Impersonate-User", "impersonate-group",
     "X-Remote-User", "X-Forwarded-User", "x-forwarded-email", "X-Auth-Request-User",
     "x-llm-d-inference-objective", "X_LLM_D_INFERENCE_OBJECTIVE"],
)
async def test_headers_the_gateway_decides_are_refused(world: World, header: str) -> None:
    key = await served_model(world)
    before = await backend_seq(world)
    r = await world.chat("gpt", key, headers={header: "admin"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_header"
    assert await backend_seq(world) == before


SCHEDULER_HEADERS = [
    "x-gateway-inference-objective", "X-Gateway-Inference-Objective", "x_gateway_inference_objective",
    "x-gateway-inference-fairness-id", "X-GATEWAY-INFERENCE-FAIRNESS-ID", "x-gateway-destination-endpoint",
    "x-gateway-destination-endpoint-subset", "x-gateway-model-name-rewrite", "x-gateway-inference-request-cost",
    "x-gateway-not-yet-invented", "x-llm-d-inference-objective", "X-Llm-D-Inference-Objective", "x-llm-d-other",
    "x-prefiller-host-port", "x-encoder-hosts-ports", "x-data-parallel-host-port", "x-slo-ttft-ms",
    "x-slo-tpot-ms", "x-original-path", "x-forwarded-path",
]


async def test_no_header_an_inference_scheduler_reads_is_taken_from_a_client(world: World) -> None:
    """Behind an endpoint picker the objective, fairness bucket, destination pod, prefill peer, SLOs and path
    are what the scheduler places a request by: a caller sending any spelling of any of them is refused with
    403 before anything reaches a backend, on a key and on a token, streamed or not."""
    key = await served_model(world)
    before = await backend_seq(world)
    for header in SCHEDULER_HEADERS:
        for credential in (key, world.token("alice")):
            for extra in ({}, {"stream": True}):
                r = await world.chat("gpt", credential, headers={header: "premium-objective"}, **extra)
                assert r.status_code == 403, (header, r.status_code, r.text)
                assert r.json()["error"]["code"] == "forbidden_header", header
    assert await backend_seq(world) == before
    served = await world.chat("gpt", key, headers={"x-session-token": "abc", "x-request-id": "r-1"})
    assert served.status_code == 200, served.text
    seen = {k.lower(): v for k, v in (await backend_log(world))[-1]["headers"].items()}
    assert seen.get("x-session-token") == "abc"
    assert not [k for k in seen if k.startswith(("x-gateway-", "x-llm-d-", "x-slo-"))], seen


async def test_the_provider_never_sees_the_callers_credentials_cookies_or_identity(world: World) -> None:
    key = await served_model(world)
    r = await world.chat("gpt", key, headers={"Cookie": "session=secret", "X-Api-Key": "caller-key",
                                              "Proxy-Authorization": "Basic abc", "Api-Key": "also-caller"})
    assert r.status_code == 200
    seen = (await backend_log(world))[-1]
    headers = {k.lower(): v for k, v in seen["headers"].items()}
    assert headers["authorization"] == f"Bearer {world.stack.options.upstream_key}"
    for name in ("cookie", "x-api-key", "proxy-authorization", "api-key"):
        assert name not in headers, name
    assert key not in json.dumps(seen)


async def test_hardening_limits_hold_at_the_gateway_and_maas_api(world: World) -> None:
    key = await served_model(world)
    many = [(f"X-Pad-{i}", "x") for i in range(150)]
    for base in (world.stack.gateway_url, world.stack.api_url):
        async with httpx.AsyncClient(base_url=base, timeout=30, verify=default_tls()) as http:
            r = await http.get("/v1/models", headers=[("Authorization", f"Bearer {key}"), *many])
        assert r.status_code == 431, base
    deep = b'{"model":"gpt-x","messages":' + b"[" * 5000 + b"]" * 5000 + b"}"
    async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=30, verify=default_tls()) as http:
        r = await http.post(f"/{world.namespace}/gpt/v1/chat/completions", content=deep,
                            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_body"




def _array(depth: int) -> bytes:
    chat = b'{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"stream":true}'
    return b"[" * depth + chat + b"]" * depth


NOT_AN_OBJECT = [_array(1), _array(2), _array(64), _array(129), _array(3000), b"  \r\n" + _array(1), b"[]",
                 b'"{\\"model\\":\\"gpt-x\\"}"', b"1", b"-0.5e3", b"true", b"null", b"NaN", b"\n Infinity",
                 _array(1) + b" trailing"]
CONTENT_TYPES = [None, "application/json", "application/json; charset=utf-8", "APPLICATION/JSON;charset=latin-1",
                 "application/vnd.openai+json", "text/plain", "application/octet-stream"]


async def _served_under_its_own_name(world: World) -> str:
    """An ExternalModel the provider knows by the same name (`targetModel` = its name: nothing to rename, so the
    gateway has no rename forcing it to read the body) published as `plain`; alice's key for it."""
    ns = world.namespace
    provider = [obj for obj in world.external_model("plain") if obj["kind"] != "ExternalModel"]
    external = {"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "ExternalModel",
                "metadata": {"name": "gpt-x", "namespace": ns},
                "spec": {"provider": "openai", "endpoint": f"{world.stack.model_url}/v1", "targetModel": "gpt-x",
                         "credentialRef": {"name": "provider-key"}}}
    for obj in provider:
        if obj["kind"] == "MaaSModelRef":
            obj["spec"]["modelRef"]["name"] = "gpt-x"
    await world.apply(*provider, external)
    sub = world.name("p")
    await world.apply(world.auth_policy(world.name("pap"), ["plain"], users=("alice",)),
                      world.subscription(sub, {"plain": [(100_000, "1m")]}, users=("alice",)))
    await world.wait_active(sub)
    key = str((await world.mint("alice", subscription=sub))["key"])
    await world.wait_enforced("plain", key)
    return key


@pytest.mark.parametrize("renamed", [False, True], ids=["same-name-upstream", "renamed-upstream"])
async def test_every_json_value_is_read_or_refused_never_forwarded_unread(world: World, renamed: bool) -> None:
    """A top-level JSON array (at any depth), a JSON scalar, JSON after whitespace, under any Content-Type or
    none, is refused with 400 and never reaches the provider with the provider's key; so is a non-JSON body
    whose Content-Type reads as JSON. An object under any of those Content-Types is read and served. Both on a
    route whose provider knows the model by its published name and on one that renames it."""
    key = await served_model(world) if renamed else await _served_under_its_own_name(world)
    model = "gpt" if renamed else "plain"
    before = await backend_seq(world)
    target = f"/{world.namespace}/{model}/v1/chat/completions"
    for body in NOT_AN_OBJECT:
        for content_type in CONTENT_TYPES:
            headers = [("Authorization", f"Bearer {key}")] + ([("Content-Type", content_type)] if content_type else [])
            status, answer = await raw_request(world, "POST", target, headers, body)
            assert status == 400, (body[:40], content_type, status, answer[:200])
            assert json.loads(answer)["error"]["code"] == "invalid_body"
    for content_type in CONTENT_TYPES[:5]:
        headers = [("Authorization", f"Bearer {key}")] + ([("Content-Type", content_type)] if content_type else [])
        status, answer = await raw_request(world, "POST", target, headers, b"model=gpt-x&stream=true")
        assert status == 400, (content_type, status)
    assert await backend_seq(world) == before  # nothing reached the provider
    for content_type in CONTENT_TYPES:
        headers = [("Authorization", f"Bearer {key}")] + ([("Content-Type", content_type)] if content_type else [])
        status, answer = await raw_request(world, "POST", target, headers, b" \n" + _array(1)[1:-1])
        assert status == 200, (content_type, status, answer[:200])
    assert await backend_seq(world) == before + len(CONTENT_TYPES)


MAAS_API_MANIFESTS = Path(__file__).resolve().parents[2] / "manifests" / "base" / "maas-api"


def _shipped_maas_api_route(world: World) -> list[dict[str, Any]]:
    """The shipped maas-api HTTPRoute and AuthPolicy as they are, moved to the journey's namespace and under
    `/<namespace>` (so journeys never share a path), with maas-api's Service pointed at the local maas-api."""
    ns, prefix = world.namespace, f"/{world.namespace}"
    route = yaml.safe_load((MAAS_API_MANIFESTS / "httproute.yaml").read_text())
    policy = yaml.safe_load((MAAS_API_MANIFESTS / "authpolicy.yaml").read_text())
    route["metadata"]["namespace"] = policy["metadata"]["namespace"] = ns
    route["spec"]["parentRefs"] = [{"name": world.stack.settings.gateway_name,
                                    "namespace": world.stack.settings.gateway_namespace}]
    for rule in route["spec"]["rules"]:
        for match in rule["matches"]:
            match["path"]["value"] = prefix + match["path"]["value"]
    policy = json.loads(json.dumps(policy).replace('"/maas-api/health', f'"{prefix}/maas-api/health'))
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "maas-api", "namespace": ns,
                            "annotations": {LOCAL_URL_ANNOTATION: world.stack.api_url}},
               "spec": {"ports": [{"name": "http", "port": 8080}], "selector": {"app": "maas-api"}}}
    return [service, route, policy]


async def test_maas_api_through_the_gateway_gets_the_callers_credentials(world: World) -> None:
    """The shipped maas-api route through the local gateway: maas-api authenticates every caller itself, so an
    API key (in Authorization or x-api-key) and a Kubernetes token reach it and are answered 200, exactly as
    on Envoy; a model route of the same gateway still never forwards them."""
    key = await served_model(world)
    await world.apply(*_shipped_maas_api_route(world))
    base = f"/{world.namespace}/maas-api"

    async def routed() -> bool:
        async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=10, verify=default_tls()) as http:
            return (await http.get(f"{base}/health")).status_code == 200

    await eventually(routed)
    callers = {"key": {"Authorization": f"Bearer {key}"}, "x-api-key": {"X-Api-Key": key},
               "token": {"Authorization": f"Bearer {world.token('alice')}"}}
    async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=30, verify=default_tls()) as http:
        for who, headers in callers.items():
            r = await http.get(f"{base}/v1/models", headers=headers)
            assert r.status_code == 200, (who, r.status_code, r.text)
            assert any(m["owned_by"] == f"{world.namespace}/gpt" for m in r.json()["data"]), (who, r.text)
        listed = await http.get(f"{base}/v1/api-keys", headers=callers["token"])
        assert listed.status_code == 200, listed.text
        assert (await http.get(f"{base}/v1/models")).status_code == 401
    r = await world.chat("gpt", key)
    assert r.status_code == 200
    seen = {k.lower(): v for k, v in (await backend_log(world))[-1]["headers"].items()}
    assert seen["authorization"] == f"Bearer {world.stack.options.upstream_key}" and key not in json.dumps(seen)

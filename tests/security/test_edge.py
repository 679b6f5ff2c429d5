"""Holes at the edge, each as a class with several variants, against the real local stack over HTTP:
deny by default, one canonical path, the header contract, the query string, hardening limits."""

from __future__ import annotations

import json

import httpx
import pytest
from e2e.conftest import World, eventually

from maasctl.reconcilers.kinds import MAAS_AUTH_POLICY, MAAS_MODEL_REF
from tests.security.helpers import backend_log, raw_request


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
    before = len(await backend_log(world))
    callers = {"anonymous": None, "garbage": "not-a-token", "forged key": "sk-oai-forged_x",
               "alice's token": world.token("alice"), "alice's key": key, "carol's token": world.token("carol")}
    for who, credential in callers.items():
        async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=30) as http:
            headers = {"Authorization": f"Bearer {credential}"} if credential else {}
            r = await http.post(f"/{world.namespace}/gpt/v1/chat/completions", headers=headers,
                                json={"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code in (401, 403), (who, r.status_code, r.text)
    assert len(await backend_log(world)) == before  # nothing reached the provider, its key never injected

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
    before = len(await backend_log(world))
    status, body = await raw_request(world, "POST", f"/{world.namespace}/gpt/{suffix}",
                                     [("Authorization", f"Bearer {key}")])
    assert status in (400, 404), body  # 404 only when the canonical path matches no route at all
    assert len(await backend_log(world)) == before


@pytest.mark.parametrize("query", ["x=/v1/models", "/v1/models", "a=1&b=%2Fv1%2Fmodels", "v1/models=1"])
async def test_the_query_string_cannot_make_a_completion_look_like_an_unmetered_listing(
    world: World, query: str
) -> None:
    key = await served_model(world, limit=20)  # wait_enforced spent 15 tokens already
    url = f"/{world.namespace}/gpt/v1/chat/completions?{query}"
    async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=30) as http:
        body = {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}
        first = await http.post(url, json=body, headers={"Authorization": f"Bearer {key}"})
        second = await http.post(url, json=body, headers={"Authorization": f"Bearer {key}"})
    assert first.status_code == 200  # 15 <= 20: served, and counted (30)
    assert second.status_code == 429  # the query string did not exempt the first one


@pytest.mark.parametrize(
    "header",
    ["X-MaaS-Username", "x-maas-group", "X_MAAS_KEY_ID", "Impersonate-User", "impersonate-group",
     "X-Remote-User", "X-Forwarded-User", "x-forwarded-email", "X-Auth-Request-User",
     "x-llm-d-inference-objective", "X_LLM_D_INFERENCE_OBJECTIVE"],
)
async def test_headers_the_gateway_decides_are_refused(world: World, header: str) -> None:
    key = await served_model(world)
    before = len(await backend_log(world))
    r = await world.chat("gpt", key, headers={header: "admin"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "forbidden_header"
    assert len(await backend_log(world)) == before


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
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            r = await http.get("/v1/models", headers=[("Authorization", f"Bearer {key}"), *many])
        assert r.status_code == 431, base
    deep = b'{"model":"gpt-x","messages":' + b"[" * 5000 + b"]" * 5000 + b"}"
    async with httpx.AsyncClient(base_url=world.stack.gateway_url, timeout=30) as http:
        r = await http.post(f"/{world.namespace}/gpt/v1/chat/completions", content=deep,
                            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_body"



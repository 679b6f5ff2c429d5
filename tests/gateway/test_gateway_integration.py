"""The local data plane on the real control plane, enforcing what the real controller generated.

Every request goes over loopback HTTP: client -> gateway -> test model; TokenReview goes to the real
API server; the AuthPolicy and TokenRateLimitPolicy are the controller's output, read through informers.
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import httpx
from aiohttp import web
from kubernetes_asyncio import client as k8s

from maasctl.gateway import SimulateRequest, format_report, simulate, simulate_remote
from maasctl.gateway.usage import HttpBatchSink
from maasctl.testenv import ControlPlane
from maasctl.tls import default_tls
from tests.gateway.conftest import UPSTREAM_KEY, Stack, serve_external_locally
from tests.reconcilers.conftest import SUB_NS, Objects, RunningController, eventually
from tests.reconcilers.test_core_flow import auth_policy, publish_external, subscription, uid

PER_CALL = 15  # the test model's usage: 10 prompt + 5 completion tokens


async def publish(objs: Objects, kube: k8s.ApiClient, stack: Stack, ns: str, limit: int,
                  name: str = "gpt") -> tuple[str, str]:
    """An external model served by the local test model, an auth policy for premium+free users, a premium
    subscription limited to `limit` tokens/min and a free one with a large limit. Returns (premium, free).
    `name` is the model's (unique per session when a test routes by name on the one base URL)."""
    await publish_external(objs, kube, ns, name)
    await serve_external_locally(kube, ns, name, stack.model_url)
    premium, free, ap = f"premium-{uid()}", f"free-{uid()}", f"ap-{uid()}"
    await objs.create(auth_policy(ap, [(ns, name)], ["premium-users", "free-users"]))
    await objs.create(subscription(premium, [(ns, name)], "premium-users", limit, ("1m", "1h")))
    await objs.create(subscription(free, [(ns, name)], "free-users", 100000))

    async def enforced() -> bool:
        snap = stack.gateway.state.snapshot()
        route = next((r for r in snap.table.rules if r.model == f"{ns}/{name}"), None)
        limits = snap.limits.get(route.route_key) if route else None
        return bool(route and route.backends and route.route_key in snap.auth and limits is not None
                    and len(getattr(limits, "limits", ())) == 2)

    await assert_token_review_stored(objs, ns, name)
    await eventually(enforced, timeout=60)
    return premium, free


async def assert_token_review_stored(objs: Objects, ns: str, name: str = "gpt") -> None:
    """The generated policy's `kubernetesTokenReview: {}` must reach the server: an empty map selects the
    method, so the controller must not drop it before applying."""

    async def policy() -> dict[str, Any] | None:
        return await objs.get("AuthPolicy", ns, f"maas-auth-{name}")

    ap = await eventually(policy)
    assert "kubernetesTokenReview" in ap["spec"]["rules"]["authentication"]["kubernetes-tokens"]


def chat(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-x", "messages": [{"role": "user", "content": text}], **extra}


async def test_key_journey_limits_headers_and_simulate(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str,
    stack: Stack, maas_cluster: ControlPlane,
) -> None:
    premium, free = await publish(objs, kube, stack, namespace, limit=2 * PER_CALL)
    stack.maas_api.keys["sk-oai-alice-1"] = {"valid": True, "username": "alice", "keyId": "key-a",
                                             "groups": ["premium-users", "system:authenticated"],
                                             "subscription": f"{SUB_NS}/{premium}"}
    stack.maas_api.keys["sk-oai-dave-1"] = {"valid": True, "username": "dave", "keyId": "key-d",
                                            "groups": ["premium-users"], "subscription": f"{SUB_NS}/{premium}"}
    url = f"{stack.url}/{namespace}/gpt/v1/chat/completions"
    alice = {"Authorization": "Bearer sk-oai-alice-1"}
    async with httpx.AsyncClient(timeout=30, verify=default_tls()) as http:
        first = await http.post(url, json=chat("hello"), headers=alice)
        assert first.status_code == 200, first.text
        assert first.json()["choices"][0]["message"]["content"] == "echo: hello"

        # The backend saw the provider key and only the server-resolved subscription header.
        seen = (await http.get(f"{stack.model_url}/debug/requests")).json()[-1]["headers"]
        assert seen["authorization"] == f"Bearer {UPSTREAM_KEY}"
        assert {k for k in seen if k.startswith("x-maas-")} == {"x-maas-subscription"}
        assert seen["x-maas-subscription"] == premium
        assert "sk-oai-alice-1" not in json.dumps(seen)

        # A client-sent identity header is refused before anything reaches the model.
        spoof = await http.post(url, json=chat(), headers={**alice, "X-MaaS-Username": "admin"})
        assert spoof.status_code == 403 and spoof.json()["error"]["code"] == "forbidden_header"
        unknown = await http.post(url, json=chat(), headers={"Authorization": "Bearer sk-oai-unknown"})
        assert unknown.status_code == 403
        assert (await http.post(url, json=chat())).status_code == 401

        # 2 x 15 = 30 tokens: not over yet (the crossing request is served), then 45 > 30 -> 429.
        assert (await http.post(url, json=chat(), headers=alice)).status_code == 200
        assert (await http.post(url, json=chat(), headers=alice)).status_code == 200
        calls_before = len((await http.get(f"{stack.model_url}/debug/requests")).json())
        limited = await http.post(url, json=chat(), headers=alice)
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert len((await http.get(f"{stack.model_url}/debug/requests")).json()) == calls_before  # never reached

        # Another user of the same subscription has an independent counter.
        dave = await http.post(url, json=chat(), headers={"Authorization": "Bearer sk-oai-dave-1"})
        assert dave.status_code == 200

        # A Kubernetes token (real TokenReview): bob is a free user with his own subscription.
        bob = {"Authorization": f"Bearer {maas_cluster.users['bob'].token}"}
        assert (await http.post(url, json=chat(), headers=bob)).status_code == 200
        seen = (await http.get(f"{stack.model_url}/debug/requests")).json()[-1]["headers"]
        assert seen["x-maas-subscription"] == free
        assert maas_cluster.users["bob"].token not in json.dumps(seen)
        # carol is in no allowed group.
        carol = {"Authorization": f"Bearer {maas_cluster.users['carol'].token}"}
        assert (await http.post(url, json=chat(), headers=carol)).status_code == 403

    report = await simulate(stack.gateway, SimulateRequest(model=f"{namespace}/gpt", key="sk-oai-alice-1"))
    assert report.status == 429 and report.subscription == f"{SUB_NS}/{premium}"
    minute = next(item for item in report.limits if item["window"] == "1m")
    assert (minute["used"], minute["remaining"], minute["over"]) == (45, 0, True)
    remote = await simulate_remote(stack.url, SimulateRequest(model=f"{namespace}/gpt", key="sk-oai-alice-1"))
    assert remote.status == 429 and "rate limited" in remote.verdict and "1m" in format_report(remote)
    carol_report = await simulate(stack.gateway, SimulateRequest(model=f"{namespace}/gpt", user="carol",
                                                                 groups=("system:authenticated",)))
    assert carol_report.status == 403 and "allowed-subjects" in carol_report.verdict

    await eventually(lambda: _records(stack, 5))  # alice x3, dave, bob: denials are not records
    records = [r for r in stack.sink.records if r.user == "alice"]
    assert {(r.key_id, r.subscription, r.model, r.total_tokens, r.input_tokens, r.status) for r in records} == {
        ("key-a", f"{SUB_NS}/{premium}", f"{namespace}/gpt", 15, 10, 200)}
    assert len(records) == 3


async def _records(stack: Stack, n: int) -> bool:
    return len(stack.sink.records) >= n


async def test_streaming_is_charged_with_and_without_include_usage(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str,
    stack: Stack, maas_cluster: ControlPlane,
) -> None:
    premium, _ = await publish(objs, kube, stack, namespace, limit=10 * PER_CALL)
    alice = {"Authorization": f"Bearer {maas_cluster.users['alice'].token}"}
    url = f"{stack.url}/{namespace}/gpt/v1/chat/completions"

    async def used() -> int:
        report = await simulate(stack.gateway, SimulateRequest(model=f"{namespace}/gpt", user="alice",
                                                               groups=("premium-users",)))
        assert report.subscription == f"{SUB_NS}/{premium}", report
        return int(next(item for item in report.limits if item["window"] == "1m")["used"])

    async with httpx.AsyncClient(timeout=30, verify=default_tls()) as http:
        async with http.stream("POST", url, json=chat("a b c", stream=True), headers=alice) as response:
            assert response.status_code == 200
            body = b"".join([chunk async for chunk in response.aiter_bytes()])
        assert b"echo:" in body and b'"usage"' not in body and body.rstrip().endswith(b"data: [DONE]")
        upstream = (await http.get(f"{stack.model_url}/debug/requests")).json()[-1]
        assert upstream["path"] == "/v1/chat/completions"
        await eventually(lambda: _equals(used, PER_CALL))

        asked = chat("x", stream=True, stream_options={"include_usage": True})
        async with http.stream("POST", url, json=asked, headers=alice) as response:
            body = b"".join([chunk async for chunk in response.aiter_bytes()])
        assert b'"total_tokens": 15' in body or b'"total_tokens":15' in body
        await eventually(lambda: _equals(used, 2 * PER_CALL))
    streamed = [r for r in stack.sink.records if r.streamed]
    assert [r.total_tokens for r in streamed] == [15, 15]


async def _equals(fn: Any, expected: int) -> bool:
    value = await fn()
    assert value == expected, value
    return True


async def test_requests_are_refused_while_usage_records_cannot_be_kept(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str,
    stack: Stack, maas_cluster: ControlPlane,
) -> None:
    """maas-api unreachable long enough to fill the usage buffer: the gateway answers 503 and calls no model,
    instead of serving requests it could not bill (deny, never free)."""
    await publish(objs, kube, stack, namespace, limit=100 * PER_CALL)
    alice = {"Authorization": f"Bearer {maas_cluster.users['alice'].token}"}
    url = f"{stack.url}/{namespace}/gpt/v1/chat/completions"
    with socket.socket() as s:  # a port nobody listens on: every delivery fails and records stay buffered
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    memory = stack.gateway.sink
    async with httpx.AsyncClient(timeout=30, verify=default_tls()) as http:
        stack.gateway.sink = HttpBatchSink(dead, http, batch_size=1, flush_interval=3600, max_buffer=10,
                                           close_timeout=0.1)
        try:
            served = [(await http.post(url, json=chat(), headers=alice)).status_code for _ in range(9)]
            assert served == [200] * 9  # the buffer's high-water mark is 9 of 10
            calls = len((await http.get(f"{stack.model_url}/debug/requests")).json())
            for variant in (chat(), chat(stream=True), chat("other", max_tokens=1)):
                refused = await http.post(url, json=variant, headers=alice)
                assert refused.status_code == 503 and refused.json()["error"]["code"] == "metering_unavailable"
                assert refused.headers["retry-after"]
            assert len((await http.get(f"{stack.model_url}/debug/requests")).json()) == calls  # no model call
        finally:
            await stack.gateway.sink.aclose()
            stack.gateway.sink = memory


async def test_the_edge_takes_the_client_address_and_scheme_from_the_connection(stack: Stack) -> None:
    """The gateway is the edge: `X-Forwarded-For` / `X-Forwarded-Proto` from a caller are claims, not facts.
    The loopback-only admin endpoint still sees the real (loopback) peer whatever the caller says it is, and
    what the request path sees (`request.scheme` of the CEL activation, the client address) stays what the
    connection is: a caller must not pick the scheme or address a policy's condition tests."""
    claims = [{"X-Forwarded-For": "203.0.113.7"}, {"X-Forwarded-For": "203.0.113.7, 127.0.0.1"},
              {"X-Forwarded-For": "2001:db8::1"}, {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https"},
              {"X-Forwarded-Proto": "HTTPS"}, {"X-Forwarded-Proto": "wss"}]
    seen: list[tuple[str, str]] = []
    proxy = stack.gateway._proxy

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        seen.append((scope["scheme"], scope["client"][0]))
        await proxy(scope, receive, send)

    stack.gateway._proxy = recording  # type: ignore[method-assign]
    try:
        async with httpx.AsyncClient(base_url=stack.url, timeout=30, verify=default_tls()) as http:
            for claim in claims:
                r = await http.post("/_gateway/simulate", json={"model": "nowhere/none", "key": "sk-oai-x"},
                                    headers=claim)
                assert r.status_code == 200, (claim, r.text)
                await http.post("/any-ns/any/v1/chat/completions", json=chat(), headers=claim)
    finally:
        stack.gateway._proxy = proxy  # type: ignore[method-assign]
    assert seen == [("http", "127.0.0.1")] * len(claims)


async def test_a_client_that_leaves_a_stream_is_settled_as_a_disconnect_and_the_upstream_stops(
    controller: RunningController, objs: Objects, kube: k8s.ApiClient, namespace: str, stack: Stack,
) -> None:
    """The answer is cut at the client's departure: the record says `client_disconnect` (what
    `clientDisconnectPolicy` prices), not `complete` with the tokens of an answer nobody received, and the
    gateway stops reading the provider instead of draining it."""
    sent: list[int] = []

    async def slow_stream(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await out.prepare(request)
        for i in range(100):
            chunk = {"id": "c", "object": "chat.completion.chunk", "model": "gpt-x",
                     "choices": [{"index": 0, "delta": {"content": f"w{i} "}}]}
            await out.write(f"data: {json.dumps(chunk)}\n\n".encode())
            sent.append(i)
            await asyncio.sleep(0.05)
        usage = {"prompt_tokens": 10, "completion_tokens": 100, "total_tokens": 110}
        await out.write(f'data: {json.dumps({"choices": [], "usage": usage})}\n\ndata: [DONE]\n\n'.encode())
        return out

    app = web.Application()
    app.router.add_post("/v1/chat/completions", slow_stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        premium, _ = await publish(objs, kube, stack, namespace, limit=100000)
        await serve_external_locally(kube, namespace, "gpt", f"http://127.0.0.1:{port}")

        async def repointed() -> bool:
            snap = stack.gateway.state.snapshot()
            return any(b.base_url.endswith(f":{port}") for r in snap.table.rules if r.model == f"{namespace}/gpt"
                       for b in r.backends)

        await eventually(repointed, timeout=30)
        stack.maas_api.keys["sk-oai-alice-1"] = {"valid": True, "username": "alice", "keyId": "key-a",
                                                 "groups": ["premium-users"], "subscription": f"{SUB_NS}/{premium}"}
        url = f"{stack.url}/{namespace}/gpt/v1/chat/completions"
        async with httpx.AsyncClient(timeout=30, verify=default_tls()) as http, http.stream(
                "POST", url, json=chat(stream=True), headers={"Authorization": "Bearer sk-oai-alice-1"}) as answer:
            assert answer.status_code == 200
            async for _ in answer.aiter_bytes():
                break  # the client reads the first chunk and leaves

        async def settled() -> bool:
            return bool(stack.sink.records)

        await eventually(settled, timeout=10)
        record = stack.sink.records[-1]
        assert record.termination == "client_disconnect", record
        await asyncio.sleep(0.5)
        assert len(sent) < 50  # the provider was not drained to the end (100 chunks, 5 s)
    finally:
        await runner.cleanup()

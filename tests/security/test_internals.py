"""maas-api's internals stay internal, no SSRF with a caller's credentials, outages are 503s, and one rule
chooses the subscription — against the real local stack over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
from aiohttp import web
from e2e.conftest import MAAS, World, eventually

from maasctl.reconcilers.kinds import MAAS_MODEL_REF
from maasctl.tls import default_tls
from tests.error_fields import error_code
from tests.security.helpers import backend_seq
from tests.security.test_edge import served_model


@pytest.mark.parametrize("credential", [None, "garbage", "user-token", "api-key", "admin-token"])
async def test_internal_endpoints_refuse_everyone_but_the_gateway(world: World, credential: str | None) -> None:
    key = await served_model(world)
    tokens = {"garbage": "garbage", "user-token": world.token("alice"), "api-key": key,
              "admin-token": world.stack.admin_token_file.read_text().strip() if world.stack.admin_token_file
              else ""}
    headers = {"Authorization": f"Bearer {tokens[credential]}"} if credential else {}
    sub = f"{world.sub_ns()}/{world.name('s')}"
    async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=30, verify=default_tls()) as http:
        for path, body in (("/internal/v1/api-keys/validate", {"key": key}),
                           ("/internal/v1/subscriptions/select", {"username": "alice", "groups": []}),
                           ("/internal/v1/usage", {"records": []})):
            r = await http.post(path, json=body, headers=headers)
            assert r.status_code == 401, (path, r.text)
            assert "alice" not in r.text and key not in r.text
        revoke = await http.delete(f"/internal/v1/subscriptions/{sub}/api-keys", headers=headers)
        # only the cleanup identity (for a subscription being deleted) or a MaaS admin may revoke
        assert revoke.status_code == (200 if credential == "admin-token" else 401 if credential in (
            None, "garbage") else 403), revoke.text
    if credential != "admin-token":
        assert (await world.chat("gpt", key)).status_code == 200  # nothing was revoked
    else:  # the admin revoked the subscription's keys: refused within a second or so (the AuthPolicy cache)

        async def refused() -> bool:
            return (await world.chat("gpt", key)).status_code == 403

        await eventually(refused, timeout=10)


@contextlib.asynccontextmanager
async def attacker() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """A host someone put in a MaaSModelRef: records every request it gets."""
    seen: list[dict[str, str]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({"object": "list", "data": []})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def test_models_listing_never_sends_credentials_to_a_host_a_model_ref_names(world: World) -> None:
    key = await served_model(world)
    async with attacker() as (evil, seen):
        # (URLs with user info are refused at admission already)
        for target in (f"{evil}/steal", f"{evil.replace('127.0.0.1', 'localhost')}/v1"):
            await world.apply({"apiVersion": MAAS, "kind": "MaaSModelRef",
                               "metadata": {"name": "gpt", "namespace": world.namespace},
                               "spec": {"modelRef": {"kind": "ExternalModel", "name": "provider"},
                                        "endpointOverride": target}})

            async def advertised(target: str = target) -> bool:
                obj = await world.client.get(MAAS_MODEL_REF, "gpt", world.namespace)
                return bool((obj.get("status") or {}).get("endpoint") == target)

            await eventually(advertised)
            for credential in (key, world.token("alice")):
                async with httpx.AsyncClient(base_url=world.stack.api_url, timeout=30, verify=default_tls()) as http:
                    r = await http.get("/v1/models", headers={"Authorization": f"Bearer {credential}"})
                assert r.status_code == 200
                # probed on the gateway (with the caller's credentials) instead of the advertised host
                assert f"{world.namespace}/gpt" in [m["owned_by"] for m in r.json()["data"]], r.text
        assert all("Authorization" not in h and "authorization" not in h for h in seen), seen


async def test_a_tie_at_the_top_is_a_403_naming_the_candidates_and_priority_serves_tokens(world: World) -> None:
    await world.apply(*world.external_model("gpt"))
    a, b, low = world.name("a"), world.name("b"), world.name("low")
    await world.apply(world.auth_policy(world.name("ap"), ["gpt"], users=("alice",)),
                      world.subscription(a, {"gpt": [(100_000, "1m")]}, users=("alice",), priority=3),
                      world.subscription(b, {"gpt": [(100_000, "1m")]}, users=("alice",), priority=3),
                      world.subscription(low, {"gpt": [(100_000, "1m")]}, users=("alice",), priority=1))
    await world.wait_active(a, b, low)
    token = world.token("alice")

    async def tie() -> httpx.Response | None:
        r = await world.chat("gpt", token)
        return r if r.status_code == 403 and "several subscriptions" in r.text else None

    await eventually(lambda: _truthy(tie()))
    r = await world.chat("gpt", token)
    assert a in r.text and b in r.text and low not in r.text
    assert r.headers.get("x-ext-auth-reason") == "multiple_subscriptions"
    assert (await world.chat("gpt", token, headers={"X-MaaS-Subscription": low})).status_code == 200
    minted = await world.mint("alice", subscription=b)
    assert (await world.chat("gpt", minted["key"])).status_code == 200  # a key is bound: no ambiguity


async def _truthy(value: object) -> bool:
    return bool(await value)  # type: ignore[misc]


@pytest.mark.restarts_shared_processes
async def test_when_maas_api_is_down_callers_get_a_503_not_a_403_and_nothing_passes(world: World) -> None:
    key = await served_model(world)
    before = await backend_seq(world)
    assert world.stack.local is not None
    api = world.stack.local.processes["maas-api"]
    await asyncio.to_thread(api.stop)
    try:
        await asyncio.sleep(1.5)  # past the 1 s decision cache of the generated AuthPolicy
        for credential in (key, world.token("alice")):
            r = await world.chat("gpt", credential)
            assert r.status_code == 503 and error_code(r) == "auth_unavailable", r.text
        assert await backend_seq(world) == before
    finally:
        api.start()

        async def healthy() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                async with httpx.AsyncClient(timeout=2, verify=default_tls()) as http:
                    return (await http.get(f"{world.stack.api_url}/health")).status_code == 200
            return False

        await eventually(healthy)
    await world.wait_enforced("gpt", key)


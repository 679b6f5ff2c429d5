"""The gateway's auth decision cache against the real maas-api (SQLite and PostgreSQL): concurrent misses
share one validation (single flight), a busy key is refreshed ahead of expiry, and a revoked key stops
working within the policy's cache TTL (1 s) whatever the refreshes did. The gateway's clock is controlled
by the test, so "within 1 s" is checked exactly instead of timed."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from maasctl.builders.authpolicy import AuthPolicyInput, AuthPolicySource, AuthSettings, build_auth_policy
from maasctl.builders.refs import ObjectRef
from maasctl.gateway.auth import AuthPolicyRuntime
from maasctl.gateway.authpolicy import CompiledAuthPolicy, RequestInfo, compile_auth_policy
from maasctl.maasapi.app import create_app
from maasctl.maasapi.auth import StaticAuthenticator
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import StaticSources
from maasctl.maasapi.store import KeyStore

from .conftest import GATEWAY_TOKEN, USERS, Clock, auth


class GatewayClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Api:
    """maas-api in process, with the paths of the requests it served counted."""

    def __init__(self, client: httpx.AsyncClient, calls: Counter[str]) -> None:
        self.client, self.calls = client, calls

    async def mint(self) -> dict[str, Any]:
        r = await self.client.post("/v1/api-keys", json={"name": "k"}, headers=auth("alice"))
        assert r.status_code == 201, r.text
        data: dict[str, Any] = r.json()
        return data

    async def revoke(self, key: dict[str, Any]) -> None:
        r = await self.client.delete(f"/v1/api-keys/{key['id']}", headers=auth("alice"))
        assert r.status_code == 200, r.text

    @property
    def validations(self) -> int:
        return self.calls["/internal/v1/api-keys/validate"]


@pytest.fixture
async def api(store: KeyStore, settings: MaasApiSettings, subscription_source: StaticSources,
              clock: Clock) -> AsyncIterator[Api]:
    app = create_app(settings, subscription_source, StaticAuthenticator(USERS, admins=["admin"]), store=store)
    calls: Counter[str] = Counter()

    async def count(request: httpx.Request) -> None:
        calls[request.url.path] += 1

    async with app.router.lifespan_context(app):
        app.state.maasapi.service.clock = clock
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://maas-api",
                                     event_hooks={"request": [count]}) as client:
            yield Api(client, calls)


def policy() -> CompiledAuthPolicy:
    obj = build_auth_policy(
        AuthPolicyInput(ObjectRef("llm", "granite"), ObjectRef("llm", "granite"),
                        (AuthPolicySource(ObjectRef("models-as-a-service", "p"), groups=("premium-users",)),)),
        AuthSettings("http://maas-api", cache_ttl_seconds=1))
    assert obj is not None
    obj["metadata"] |= {"uid": "u", "generation": 1}
    return compile_auth_policy(obj)


def request(key: dict[str, Any]) -> RequestInfo:
    return RequestInfo("POST", "/llm/granite/v1/chat/completions", "gw", {"authorization": f"Bearer {key['key']}"})


def runtime(api: Api, clock: GatewayClock) -> AuthPolicyRuntime:
    return AuthPolicyRuntime(api.client, review_nothing, callback_base="http://maas-api",
                             callback_secret=GATEWAY_TOKEN, clock=clock)


async def review_nothing(token: str, audiences: tuple[str, ...]) -> None:
    return None


async def test_concurrent_misses_of_one_key_share_one_validation(api: Api) -> None:
    rt, p = runtime(api, GatewayClock()), policy()
    key = await api.mint()
    outcomes = await asyncio.gather(*(rt.check(p, request(key)) for _ in range(40)))
    assert all(o.allowed for o in outcomes), outcomes[0].reason
    assert api.validations == 1 and rt.shared_misses == 39


async def test_a_revoked_key_stops_working_within_the_cache_ttl_with_refreshes_ahead_of_expiry(api: Api) -> None:
    clock, p = GatewayClock(), policy()
    rt = runtime(api, clock)
    start = clock.now

    # A busy key: checked at 0.8 s the decision is still served and refreshed in the background.
    key = await api.mint()
    assert (await rt.check(p, request(key))).allowed and api.validations == 1
    clock.now = start + 0.8
    assert (await rt.check(p, request(key))).allowed
    await rt.settle()
    assert rt.refreshes == 1 and api.validations == 2  # the refresh asked maas-api again (no stale metadata)
    clock.now = start + 1.5  # past the first decision's TTL: the refreshed one (read at 0.8 s) serves
    assert (await rt.check(p, request(key))).allowed and api.validations == 2

    # Revoked at 1.5 s: the decision read at 0.8 s may serve until 1.8 s, never later.
    await api.revoke(key)
    clock.now = start + 1.7
    assert (await rt.check(p, request(key))).allowed  # within the TTL of data read before the revocation
    await rt.settle()  # 1.7 s is past the refresh point (0.8 + 0.75): the refresh sees the revocation
    assert rt.refreshes == 2
    assert (await rt.check(p, request(key))).status == 403  # dropped at once, before 1.8 s

    # A key nobody uses in the refresh window: the first check at exactly revocation + TTL is denied.
    other = await api.mint()
    clock.now = start + 10
    assert (await rt.check(p, request(other))).allowed
    await api.revoke(other)
    clock.now = start + 10.6  # before the refresh point: served from the cache
    assert (await rt.check(p, request(other))).allowed
    clock.now = start + 11  # the decision's data was read at 10 s
    denied = await rt.check(p, request(other))
    assert (denied.allowed, denied.status) == (False, 403)


async def test_concurrent_checks_around_a_revocation_never_pass_after_the_ttl(api: Api) -> None:
    """Many requests at each step, refreshes running in between: every check made 1 s or more after the
    revocation is denied."""
    clock, p = GatewayClock(), policy()
    rt = runtime(api, clock)
    start = clock.now
    key = await api.mint()
    revoked_at: float | None = None
    for step in range(30):
        clock.now = start + step * 0.1
        if step == 12:
            await api.revoke(key)
            revoked_at = clock.now
        outcomes = await asyncio.gather(*(rt.check(p, request(key)) for _ in range(8)))
        if revoked_at is not None and clock.now >= revoked_at + 1:
            assert not any(o.allowed for o in outcomes), f"allowed {clock.now - revoked_at:.1f}s after revocation"
    assert rt.refreshes >= 1

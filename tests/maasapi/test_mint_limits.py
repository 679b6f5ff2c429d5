"""Per-user limits on minting API keys (a cap on active keys, a rate per minute), over HTTP on SQLite and
PostgreSQL: 429 in maas-api's error shape with a Retry-After that says when a mint succeeds, nothing stored for
a refused mint, other users unaffected, and concurrent mints (on PostgreSQL through two replicas) never passing
the limit together."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from maasctl.maasapi.app import create_app
from maasctl.maasapi.auth import StaticAuthenticator
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import StaticSources
from maasctl.maasapi.store import KeyStore, make_engine
from tests.error_fields import error_message

from .conftest import GATEWAY_TOKEN, USERS, Clock, auth, sample_subscriptions
from .test_api import counts


def limited(max_active: int = 100, per_minute: int = 100) -> MaasApiSettings:
    return MaasApiSettings(gateway_tokens=(SecretStr(GATEWAY_TOKEN),), max_active_keys_per_user=max_active,
                           key_mints_per_minute=per_minute)


@asynccontextmanager
async def api(store: KeyStore, settings: MaasApiSettings, clock: Clock) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, StaticSources(sample_subscriptions()), StaticAuthenticator(USERS, admins=["admin"]),
                     store=store)
    async with app.router.lifespan_context(app):
        app.state.maasapi.service.clock = clock
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://maas-api") as c:
            yield c


async def mint(client: httpx.AsyncClient, user: str = "alice", **body: Any) -> httpx.Response:
    return await client.post("/v1/api-keys", json={"name": "k", **body}, headers=auth(user))


def refused(r: httpx.Response, code: str) -> int:
    """Assert a 429 in the one error shape; return its Retry-After."""
    assert r.status_code == 429, r.text
    assert r.json() == {"error": error_message(r), "code": code, "type": "rate_limit_error"}  # the keys envelope
    return int(r.headers["retry-after"])


async def test_the_active_key_cap_refuses_with_the_time_until_a_key_expires(store: KeyStore, clock: Clock) -> None:
    async with api(store, limited(max_active=3), clock) as client:
        kept = [await mint(client, expiresIn=e) for e in ("2h", "1h", "3h")]
        assert [r.status_code for r in kept] == [201, 201, 201]
        before = await counts(store)
        for body in ({}, {"ephemeral": True}, {"expiresIn": "1d"}):  # any kind of key: refused alike
            assert refused(await mint(client, **body), "too_many_keys") == 3600  # the 1h key frees a slot
        assert await counts(store) == before  # nothing half-stored: no row, label or audit event
        assert (await mint(client, "bob")).status_code == 201  # per user: bob is not alice
        clock.advance(timedelta(minutes=59, seconds=30))
        assert refused(await mint(client), "too_many_keys") == 30
        clock.advance(timedelta(seconds=30))  # the 1h key expired: one slot
        assert (await mint(client)).status_code == 201
        assert refused(await mint(client), "too_many_keys") > 0
        revoked = await client.delete(f"/v1/api-keys/{kept[0].json()['id']}", headers=auth("alice"))
        assert revoked.status_code == 200  # revoking frees a slot at once
        assert (await mint(client)).status_code == 201


async def test_the_mint_rate_counts_revoked_keys_and_says_when_to_retry(store: KeyStore, clock: Clock) -> None:
    async with api(store, limited(per_minute=3), clock) as client:
        made = [await mint(client) for _ in range(3)]
        assert [r.status_code for r in made] == [201, 201, 201]
        for r in made:  # revoking does not give the rate back: mint-and-revoke cannot loop
            assert (await client.delete(f"/v1/api-keys/{r.json()['id']}", headers=auth("alice"))).status_code == 200
        assert refused(await mint(client), "key_mint_rate_limited") == 60
        assert (await mint(client, "bob")).status_code == 201
        clock.advance(timedelta(seconds=45))
        assert refused(await mint(client, ephemeral=True), "key_mint_rate_limited") == 15
        clock.advance(timedelta(seconds=15))  # the first three are a minute old
        assert (await mint(client)).status_code == 201
        clock.advance(timedelta(seconds=10))
        assert [(await mint(client)).status_code for _ in range(3)] == [201, 201, 429]


async def test_concurrent_mints_never_pass_the_cap_together(store: KeyStore, clock: Clock) -> None:
    async with api(store, limited(max_active=5, per_minute=1000), clock) as client:
        statuses = sorted(r.status_code for r in await asyncio.gather(*(mint(client) for _ in range(25))))
        assert statuses == [201] * 5 + [429] * 20
        listed = (await client.get("/v1/api-keys", headers=auth("alice"))).json()["data"]
        assert len(listed) == 5


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
async def test_two_replicas_share_the_limits(db_url: str, clock: Clock) -> None:
    """Each replica has its own store and connection pool: only the database can serialize their counts."""
    async def replicas(stack: AsyncExitStack, settings: MaasApiSettings) -> list[httpx.AsyncClient]:
        out = []
        for _ in range(2):
            st = KeyStore(make_engine(db_url))
            stack.push_async_callback(st.close)
            out.append(await stack.enter_async_context(api(st, settings, clock)))
        return out

    async with AsyncExitStack() as stack:
        a, b = await replicas(stack, limited(max_active=6, per_minute=1000))
        outcomes = await asyncio.gather(*(mint((a, b)[i % 2]) for i in range(30)))
        assert sorted(r.status_code for r in outcomes) == [201] * 6 + [429] * 24
    async with AsyncExitStack() as stack:
        a, b = await replicas(stack, limited(max_active=1000, per_minute=4))
        outcomes = await asyncio.gather(*(mint((a, b)[i % 2], "bob") for i in range(12)))
        assert sorted(r.status_code for r in outcomes) == [201] * 4 + [429] * 8
        assert {r.headers.get("retry-after") for r in outcomes if r.status_code == 429} == {"60"}


def test_the_limits_are_flags_with_environment_fallbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    from maasctl.cli import build_parser

    defaults = build_parser().parse_args(["api"])
    assert (defaults.max_active_keys_per_user, defaults.key_mints_per_minute) == (100, 30)
    assert (MaasApiSettings().max_active_keys_per_user, MaasApiSettings().key_mints_per_minute) == (100, 30)
    monkeypatch.setenv("MAASCTL_MAX_ACTIVE_KEYS_PER_USER", "7")
    monkeypatch.setenv("MAASCTL_KEY_MINTS_PER_MINUTE", "2")
    env = build_parser().parse_args(["api"])
    assert (env.max_active_keys_per_user, env.key_mints_per_minute) == (7, 2)
    flags = build_parser().parse_args(["api", "--max-active-keys-per-user=9", "--key-mints-per-minute=4"])
    assert (flags.max_active_keys_per_user, flags.key_mints_per_minute) == (9, 4)
    with pytest.raises(ValueError):
        MaasApiSettings(key_mints_per_minute=0)

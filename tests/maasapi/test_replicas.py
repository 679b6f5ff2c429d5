"""Two maas-api replicas (separate apps, engines and pools) on one PostgreSQL database."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from pydantic import SecretStr

from maasctl.maasapi import migrate
from maasctl.maasapi.app import create_app
from maasctl.maasapi.auth import StaticAuthenticator
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import StaticSources
from maasctl.maasapi.store import make_engine
from maasctl.testenv.controlplane import free_port
from maasctl.testenv.postgres import PostgresServer
from maasctl.tls import default_tls

from .conftest import GATEWAY_TOKEN, GW, USERS, auth, sample_subscriptions


@pytest.fixture
async def replicas(pg_server: PostgresServer) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    url = await pg_server.acreate_database(f"r_{uuid.uuid4().hex[:12]}")
    settings = MaasApiSettings(database_url=url, gateway_tokens=(SecretStr(GATEWAY_TOKEN),))
    apps = [create_app(settings, StaticSources(sample_subscriptions()),
                       StaticAuthenticator(USERS, admins=["admin"])) for _ in range(2)]
    async with apps[0].router.lifespan_context(apps[0]), apps[1].router.lifespan_context(apps[1]):
        # both ran migrations at startup against the same database; the advisory lock serialised them
        clients = [httpx.AsyncClient(transport=httpx.ASGITransport(app=a), base_url="http://r") for a in apps]
        try:
            yield clients[0], clients[1]
        finally:
            for c in clients:
                await c.aclose()


async def test_concurrent_startup_migrates_once(pg_server: PostgresServer) -> None:
    url = await pg_server.acreate_database(f"m_{uuid.uuid4().hex[:12]}")
    settings = MaasApiSettings(database_url=url)
    apps = [create_app(settings, StaticSources(), StaticAuthenticator({})) for _ in range(3)]

    async def start(app: object) -> None:
        async with app.router.lifespan_context(app):  # type: ignore[attr-defined]
            pass

    await asyncio.gather(*(start(a) for a in apps))  # a race would fail with "relation already exists"
    engine = make_engine(url)
    try:
        assert await migrate.current_revision(engine) == migrate.head_revision()
    finally:
        await engine.dispose()


async def test_revocation_through_one_replica_is_seen_by_the_other_within_1s(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    a, b = replicas
    created = (await a.post("/v1/api-keys", json={"name": "k"}, headers=auth("alice"))).json()
    key = {"key": created["key"]}
    assert (await b.post("/internal/v1/api-keys/validate", json=key, headers=GW)).json()["valid"]
    r = await a.delete(f"/v1/api-keys/{created['id']}", headers=auth("alice"))
    assert r.status_code == 200
    revoked_at = time.monotonic()
    while True:
        v = (await b.post("/internal/v1/api-keys/validate", json=key, headers=GW)).json()
        if not v["valid"]:
            break
        assert time.monotonic() - revoked_at < 1.0, "replica b still accepts the revoked key after 1 s"
        await asyncio.sleep(0.01)
    assert v["reason"] == "revoked"
    assert time.monotonic() - revoked_at < 1.0
    # and the key no longer authenticates API calls on b either
    r = await b.get("/v1/subscriptions", headers={"Authorization": f"Bearer {created['key']}"})
    assert r.status_code == 401


CHILD = """
import sys, uvicorn
from maasctl.maasapi.app import create_app
from maasctl.maasapi.auth import Identity, StaticAuthenticator
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.contract.views import SubscribedModel, SubscriptionView, Tier
from maasctl.maasapi.sources import StaticSources
from pydantic import SecretStr
subs = StaticSources([SubscriptionView("models-as-a-service", "s", users=frozenset(("alice",)), phase="Active")])
authn = StaticAuthenticator({"alice-token": Identity("alice", ())})
app = create_app(MaasApiSettings(database_url=sys.argv[1], gateway_tokens=(SecretStr("gw-test-token"),)), subs,
                 authn)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
"""


async def test_two_uvicorn_processes_on_one_database(pg_server: PostgresServer) -> None:
    """Real processes (own interpreters, pools and event loops): revoke via one, rejected by the other."""
    import sys

    url = await pg_server.acreate_database(f"p_{uuid.uuid4().hex[:12]}")
    ports = [free_port(), free_port()]
    procs = [await asyncio.create_subprocess_exec(sys.executable, "-c", CHILD, url, str(p)) for p in ports]
    try:
        async with httpx.AsyncClient(timeout=5, verify=default_tls()) as http:
            bases = [f"http://127.0.0.1:{p}" for p in ports]
            for base, proc in zip(bases, procs, strict=True):
                deadline = time.monotonic() + 90  # an interpreter importing maasctl on a loaded machine
                while True:
                    assert proc.returncode is None, f"{base} exited {proc.returncode}"
                    try:
                        if (await http.get(f"{base}/health")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    assert time.monotonic() < deadline, f"{base} did not start in 90 s"
                    await asyncio.sleep(0.05)
            a, b = bases
            created = (await http.post(f"{a}/v1/api-keys", json={"name": "k"}, headers=auth("alice"))).json()
            key = {"key": created["key"]}
            assert (await http.post(f"{b}/internal/v1/api-keys/validate", json=key, headers=GW)).json()["valid"]
            assert (await http.delete(f"{a}/v1/api-keys/{created['id']}", headers=auth("alice"))).status_code == 200
            revoked_at = time.monotonic()
            while (await http.post(f"{b}/internal/v1/api-keys/validate", json=key, headers=GW)).json()["valid"]:
                assert time.monotonic() - revoked_at < 1.0, "process b still accepts the revoked key after 1 s"
                await asyncio.sleep(0.01)
            assert time.monotonic() - revoked_at < 1.0
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            await asyncio.wait_for(p.wait(), 10)

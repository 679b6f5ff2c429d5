"""maas-api fixtures: every store/API test runs on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from maasctl.contract.views import SubscribedModel, SubscriptionView, Tier
from maasctl.maasapi import migrate
from maasctl.maasapi.app import create_app
from maasctl.maasapi.auth import Identity, StaticAuthenticator
from maasctl.maasapi.settings import MaasApiSettings
from maasctl.maasapi.sources import StaticSources
from maasctl.maasapi.store import KeyStore, make_engine
from maasctl.testenv.postgres import PostgresServer, start_postgres

NS = "models-as-a-service"
GATEWAY_TOKEN = "gw-test-token"
GW = {"Authorization": f"Bearer {GATEWAY_TOKEN}"}  # the gateway's credential on /internal/v1/*


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL cluster per session (Debian binaries, or testcontainers on request)."""
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
async def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database URL per test (file SQLite, or a new database on the session server)."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'maas-api.db'}"
    server: PostgresServer = request.getfixturevalue("pg_server")
    return await server.acreate_database(f"t_{uuid.uuid4().hex[:12]}")


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[KeyStore]:
    st = KeyStore(make_engine(db_url))
    await migrate.upgrade(st.engine)
    try:
        yield st
    finally:
        await st.close()


class Clock:
    """A controllable clock (starts at the real time, moves only when told)."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


USERS = {
    "alice-token": Identity("alice", ("premium-users", "system:authenticated")),
    "bob-token": Identity("bob", ("free-users", "system:authenticated")),
    "carol-token": Identity("carol", ("system:authenticated",)),
    "admin-token": Identity("admin", ("platform-admins", "system:authenticated")),
}


def auth(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {user}-token"}


def sample_subscriptions() -> list[SubscriptionView]:
    lim = (Tier(1000, "1m"),)
    return [
        SubscriptionView(NS, "premium", groups=frozenset(("premium-users",)), priority=10, phase="Active",
                     models=(SubscribedModel("llm", "granite", (Tier(50000, "1m"),)),
                                 SubscribedModel("llm", "llama", lim))),
        SubscriptionView(NS, "free", groups=frozenset(("free-users", "premium-users")), priority=0, phase="Active",
                     models=(SubscribedModel("llm", "granite", lim),)),
        SubscriptionView(NS, "everyone", groups=frozenset(("*",)), priority=-5, phase="Active",
                     models=(SubscribedModel("llm", "tiny", lim),)),
        SubscriptionView(NS, "broken", users=frozenset(("bob",)), priority=100, phase="Failed",
                     models=(SubscribedModel("llm", "granite", lim),)),
        SubscriptionView(NS, "tie-a", groups=frozenset(("tie-a",)), priority=7, phase="Active",
                         models=(SubscribedModel("llm", "granite", lim),)),
        SubscriptionView(NS, "tie-b", groups=frozenset(("tie-b",)), priority=7, phase="Active",
                         models=(SubscribedModel("llm", "granite", lim),)),
        SubscriptionView("other-ns", "bobs", users=frozenset(("bob",)), priority=1, phase="Active",
                     models=(SubscribedModel("llm", "llama", lim),)),
    ]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def settings() -> MaasApiSettings:
    return MaasApiSettings(max_body_bytes=4096, max_expiration=timedelta(days=90),
                           gateway_tokens=(SecretStr(GATEWAY_TOKEN),))


@pytest.fixture
def subscription_source() -> StaticSources:
    return StaticSources(sample_subscriptions())


AppFactory = Callable[..., FastAPI]


@pytest.fixture
async def client(
    store: KeyStore, settings: MaasApiSettings, subscription_source: StaticSources, clock: Clock,
) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process client for an app on the parametrized database with the static authenticator."""
    app = create_app(settings, subscription_source, StaticAuthenticator(USERS, admins=["admin"]), store=store)
    async with app.router.lifespan_context(app):
        app.state.maasapi.service.clock = clock
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://maas-api") as c:
            yield c

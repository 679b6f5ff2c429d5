"""Sessions, the same contract on both backends: this process's memory and a real Redis server (what the
console's replicas share). Cookies are signed, ids rotate at sign-in, expiry is enforced on read, the bounds
evict only within their pool, a write never resurrects a dropped session, concurrent requests keep each
other's fields, and the store holds neither a session id nor a credential in the clear."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import pytest

from maasctl.console.redis_sessions import PREFIX, RedisBackend
from maasctl.console.sessions import Bounds, Identity, MemoryBackend, Session, SessionBackend, SessionStore
from maasctl.testenv.redis import RedisServer

Factory = Callable[..., SessionStore]


@pytest.fixture(params=["memory", "redis"])
async def make(request: pytest.FixtureRequest, redis_server: RedisServer) -> AsyncIterator[Factory]:
    """`make(secret, clock=..., **bounds)`: stores over one backend (several replicas share a Redis)."""
    opened: list[SessionBackend] = []
    server = redis_server if request.param == "redis" else None
    if server is not None:
        flush = RedisBackend(server.url)
        await flush._redis.flushdb()
        await flush.close()
    shared: dict[Bounds, SessionBackend] = {}

    def factory(secret: str = "secret", clock: Callable[[], float] = time.time, **bounds: float) -> SessionStore:
        b = Bounds(**bounds)  # type: ignore[arg-type]
        if b not in shared:
            shared[b] = RedisBackend(server.url, b) if server is not None else MemoryBackend(b)
            opened.append(shared[b])
        return SessionStore(shared[b], secret, b, clock=clock)

    yield factory
    for backend in opened:
        await backend.close()


async def stored(store: SessionStore, session: Session) -> Session:
    await store.persist(session)
    return session


async def test_sessions_are_signed_rotated_and_expire(make: Factory) -> None:
    clock = [time.time()]
    store = make(clock=lambda: clock[0], signed_in_ttl=60)
    anon = await stored(store, store.new())
    cookie = store.cookie_value(anon)
    found = await store.load(cookie)
    assert found is not None and found.sid == anon.sid and found.csrf == anon.csrf
    assert await store.load(anon.sid) is None and await store.load(cookie[:-2] + "xx") is None
    assert await store.load("." + cookie.split(".")[1]) is None
    assert await make("another").load(cookie) is None  # signed with another key
    signed_in = await stored(store, store.signed_in(Identity("alice", (), "the-credential", expires_at=clock[0] + 30)))
    await store.drop(anon)
    assert signed_in.sid != anon.sid and signed_in.csrf != anon.csrf and await store.load(cookie) is None
    again = await store.load(store.cookie_value(signed_in))
    assert again is not None and again.identity == signed_in.identity
    clock[0] += 31  # the credential expired before the session did (no refresh token)
    assert await store.load(store.cookie_value(signed_in)) is None
    assert "the-credential" not in repr(signed_in) + repr(signed_in.identity)  # never in a log line or traceback
    assert signed_in.sid not in repr(signed_in)


async def test_a_refresh_token_outlives_the_id_token_but_not_the_session(make: Factory) -> None:
    clock = [time.time()]
    store = make(clock=lambda: clock[0], signed_in_ttl=3600)
    identity = Identity("oidc:dave", ("g",), "id-token", via="oidc", expires_at=clock[0] + 300,
                        issued_at=clock[0], refresh_token="refresh")
    session = await stored(store, store.signed_in(identity))
    assert not identity.due_for_refresh(clock[0]) and identity.due_for_refresh(clock[0] + 241)
    clock[0] += 600  # the ID token expired: the session lives on, to be renewed
    loaded = await store.load(store.cookie_value(session))
    assert loaded is not None and loaded.identity is not None and loaded.identity.due_for_refresh(clock[0])
    clock[0] += 3000
    assert await store.load(store.cookie_value(session)) is None  # 8 hours (here one) from sign-in, at most


async def test_the_store_holds_no_session_id_and_no_credential(make: Factory, request: pytest.FixtureRequest) -> None:
    store = make()
    session = store.signed_in(Identity("alice", ("premium-users",), "the-credential-XYZ", refresh_token="refresh-ABC"))
    session.put_once("minted", "sk-once-123")
    await store.persist(session)
    dump = b""
    if isinstance(store.backend, RedisBackend):
        r = store.backend._redis
        for key in await r.keys("*"):
            dump += key + b"".join(k + v for k, v in (await r.hgetall(key)).items()) if await r.type(key) == b"hash" \
                else key + b"".join(m for m in await r.zrange(key, 0, -1))
    else:
        assert isinstance(store.backend, MemoryBackend)
        dump = b"".join(k.encode() + b"".join(v.values()) for k, v in store.backend._records.items())
    assert dump
    for secret in (session.sid, session.csrf, "the-credential-XYZ", "refresh-ABC", "sk-once-123", "alice",
                   "premium-users"):
        assert secret.encode() not in dump, secret


async def test_replicas_share_sessions_and_a_sign_out_ends_it_everywhere(make: Factory) -> None:
    a, b = make(), make()  # two replicas: the same secret and backend
    session = await stored(a, a.signed_in(Identity("alice", (), "tok")))
    cookie = a.cookie_value(session)
    on_b = await b.load(cookie)
    assert on_b is not None and on_b.identity is not None and on_b.identity.username == "alice"
    on_b.flash("ok", "saved on b")
    await b.persist(on_b)
    on_a = await a.load(cookie)
    assert on_a is not None and on_a.take_flashes() == [("ok", "saved on b")]
    await b.drop(on_b)  # sign-out on b
    on_a.flash("ok", "a request on a that was in flight")
    await a.persist(on_a)  # ... never brings the session back
    assert await a.load(cookie) is None and await b.load(cookie) is None


async def test_concurrent_requests_keep_each_others_fields(make: Factory) -> None:
    """A renewal stored by one request is not overwritten by another request's stale copy."""
    store = make()
    session = await stored(store, store.signed_in(Identity("alice", (), "old", refresh_token="r1")))
    cookie = store.cookie_value(session)
    first, second = await store.load(cookie), await store.load(cookie)
    assert first is not None and second is not None and first.identity is not None
    first.identity = replace(first.identity, credential="new", refresh_token="r2")
    await store.persist(first)
    second.flash("ok", "a message")
    await store.persist(second)
    final = await store.load(cookie)
    assert final is not None and final.identity is not None
    assert (final.identity.credential, final.identity.refresh_token) == ("new", "r2")
    assert final.flashes == [("ok", "a message")]


async def test_the_refresh_lock_is_exclusive(make: Factory) -> None:
    a, b = make(), make()
    session = await stored(a, a.signed_in(Identity("alice", (), "tok")))
    order: list[str] = []

    async def hold(store: SessionStore, name: str) -> None:
        async with store.lock(session):
            order.append(f"{name}+")
            await asyncio.sleep(0.1)
            order.append(f"{name}-")

    await asyncio.gather(hold(a, "a"), hold(b, "b"))
    assert order in (["a+", "a-", "b+", "b-"], ["b+", "b-", "a+", "a-"])


async def test_a_record_sealed_with_another_secret_is_refused(make: Factory) -> None:
    store, other = make("one"), make("two")
    session = await stored(store, store.signed_in(Identity("alice", (), "tok")))
    # `other` signs the same id: its cookie is valid for it, but the stored record was sealed with `one`.
    assert await other.load(other.cookie_value(session)) is None


async def test_anonymous_sessions_never_evict_a_signed_in_one(make: Factory) -> None:
    store = make(max_signed_in=5, max_anonymous=10)
    admin = await stored(store, store.signed_in(Identity("admin", ("maas-admins",), "tok")))
    for _ in range(200):  # cookie-less GET /signin, again and again
        await store.persist(store.new())
    assert await store.load(store.cookie_value(admin)) is not None
    if isinstance(store.backend, RedisBackend):
        assert await store.backend._redis.zcard(PREFIX + "anon") == 10
    else:
        assert isinstance(store.backend, MemoryBackend) and len(store.backend) == 11


async def test_anonymous_sessions_expire_after_their_ttl_and_evict_each_other(make: Factory) -> None:
    clock = [time.time()]
    store = make(clock=lambda: clock[0], anonymous_ttl=600, max_anonymous=2)
    first = await stored(store, store.new())
    clock[0] += 1  # (a frozen clock would make every use equally recent)
    second = await stored(store, store.new())
    clock[0] += 1
    await store.load(store.cookie_value(first))
    clock[0] += 1
    await store.persist(store.new())  # the least recently used anonymous session goes: second
    assert await store.load(store.cookie_value(second)) is None
    assert await store.load(store.cookie_value(first)) is not None
    clock[0] += 601
    assert await store.load(store.cookie_value(first)) is None
    signed_in = await stored(store, store.signed_in(Identity("alice", (), "t")))
    assert signed_in.expires == clock[0] + 8 * 3600  # the long TTL starts at sign-in
    clock[0] += 601
    assert await store.load(store.cookie_value(signed_in)) is not None


async def test_one_users_sign_ins_evict_only_that_users_oldest_sessions(make: Factory) -> None:
    store = make(max_signed_in=100, max_per_user=20)
    bob = store.cookie_value(await stored(store, store.signed_in(Identity("bob", (), "b"))))
    alice = [store.cookie_value(await stored(store, store.signed_in(Identity("alice", (), "a")))) for _ in range(25)]
    assert [await store.load(c) is not None for c in alice] == [False] * 5 + [True] * 20
    assert await store.load(bob) is not None
    last = await store.load(alice[-1])
    assert last is not None
    await store.drop(last)
    await stored(store, store.signed_in(Identity("alice", (), "a")))
    assert all([await store.load(c) is not None for c in alice[5:-1]])  # a freed slot is reused: nobody else goes


async def test_signed_in_sessions_stay_within_the_global_bound(make: Factory) -> None:
    store = make(max_signed_in=3, max_anonymous=2)
    cookies = [store.cookie_value(await stored(store, store.signed_in(Identity(f"user{i}", (), "t"))))
               for i in range(5)]
    for _ in range(4):
        await store.persist(store.new())
    assert [await store.load(c) is not None for c in cookies] == [False, False, True, True, True]
    if isinstance(store.backend, RedisBackend):
        r = store.backend._redis
        assert await r.zcard(PREFIX + "signed") == 3 and await r.zcard(PREFIX + "anon") == 2
        assert len(await r.keys(PREFIX + "s:*")) == 5
        assert len(await r.keys(PREFIX + "u:*")) == 3  # the evicted users' index entries went with them


async def test_without_its_store_the_console_answers_503_never_a_page() -> None:
    """Redis down: every page is 503 (no page served without its session, no 500), readiness says so,
    liveness does not (a restart would not bring Redis back)."""
    import httpx

    from maasctl.console.app import create_app
    from maasctl.console.kube import ClusterAccess, Kube
    from maasctl.console.maasapi_client import MaasApi
    from maasctl.console.settings import ConsoleSettings
    from maasctl.testenv.controlplane import free_port

    kube, maasapi = Kube(ClusterAccess("https://127.0.0.1:1", False)), MaasApi("http://127.0.0.1:1")
    backend = RedisBackend(f"redis://127.0.0.1:{free_port()}/0")  # nobody listens there
    app = create_app(ConsoleSettings(session_secret="s"), kube, maasapi, backend=backend)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://console") as client:
            assert (await client.get("/healthz")).status_code == 200
            assert (await client.get("/readyz")).status_code == 503
            for path in ("/signin", "/no-such-page"):  # pages that start an anonymous session
                resp = await client.get(path)
                assert resp.status_code == 503 and "session store" in resp.text, path
                assert "set-cookie" not in resp.headers
            signed = SessionStore(backend, "s")
            resp = await client.get("/keys", cookies={"maas_console_session": signed.cookie_value(signed.new())})
            assert resp.status_code == 503  # a signed cookie: its session cannot be read
    finally:
        await backend.close()
        await kube.close()
        await maasapi.close()


async def test_a_renewal_that_cannot_take_the_lock_answers_503_and_keeps_the_session() -> None:
    """Another replica holds the refresh lock for too long (or Redis went away meanwhile): the page is 503,
    never a 500, and the session is still there for the next request."""
    from contextlib import asynccontextmanager

    import httpx

    from maasctl.console.app import create_app
    from maasctl.console.kube import ClusterAccess, Kube
    from maasctl.console.maasapi_client import MaasApi
    from maasctl.console.oidc import OidcClient
    from maasctl.console.sessions import StoreUnavailable
    from maasctl.console.settings import ConsoleSettings, OidcSettings

    class Busy(MemoryBackend):
        @asynccontextmanager
        async def lock(self, key: str) -> AsyncIterator[None]:
            raise StoreUnavailable("the session is being renewed elsewhere: try again")
            yield  # pragma: no cover

    backend = Busy()
    oidc = OidcClient(OidcSettings(issuer="https://idp.invalid", client_id="c", client_secret="s"), "http://c/cb")
    kube, maasapi = Kube(ClusterAccess("https://127.0.0.1:1", False)), MaasApi("http://127.0.0.1:1")
    app = create_app(ConsoleSettings(session_secret="s"), kube, maasapi, oidc, backend=backend)
    store = SessionStore(backend, "s")
    now = time.time()
    session = await stored(store, store.signed_in(Identity("oidc:dave", (), "id", via="oidc", expires_at=now + 5,
                                                           issued_at=now - 55, refresh_token="r")))
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://console") as client:
            resp = await client.get("/keys", cookies={"maas_console_session": store.cookie_value(session)})
            assert resp.status_code == 503 and "could not be renewed" in resp.text
        assert await store.load(store.cookie_value(session)) is not None
    finally:
        await oidc.close()
        await kube.close()
        await maasapi.close()

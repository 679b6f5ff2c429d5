"""Token rate limits: fixed windows, reservations, every rate, per-counter isolation; counters in process and
in a real Redis server (shared by several gateway replicas)."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from maasctl.builders.refs import ObjectRef
from maasctl.builders.trlp import RateTier, SubscriptionLimits, TokenRateLimitInput, build_token_rate_limit_policy
from maasctl.contract.usage import DEFAULT_COMPLETION_CEILING
from maasctl.dataplane.body import prepare_body
from maasctl.dataplane.charge import request_bound
from maasctl.gateway.counters import MemoryCounterStore, RedisCounterStore, _redis_key
from maasctl.gateway.ratelimit import RateDenial, Reservation, TokenRateLimiter, compile_token_rate_limit_policy
from maasctl.testenv.redis import RedisServer

MODEL = ObjectRef("team", "m")
SUB = ObjectRef("models-as-a-service", "free")
KEY = "models-as-a-service/free@team/m"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def policy(tiers: tuple[RateTier, ...] = (RateTier(100, "1m"), RateTier(250, "1h")), unlimited: bool = False) -> Any:
    obj = build_token_rate_limit_policy(TokenRateLimitInput(
        MODEL, ObjectRef("team", "route"), (SubscriptionLimits(SUB, tiers, unlimited),)))
    assert obj is not None
    obj["metadata"] |= {"uid": "u1", "generation": 1}
    return compile_token_rate_limit_policy(obj)


def activation(user: str, key: str = KEY, path: str = "/team/m/v1/chat/completions") -> dict[str, Any]:
    request = {"path": path, "url_path": path.split("?", 1)[0]}
    return {"request": request, "auth": {"identity": {"userid": user, "selected_subscription_key": key}}}


async def served(limiter: TokenRateLimiter, applied: Any, tokens: int, estimate: int = 1) -> bool:
    """One request: reserve, then settle with what it used; False when refused."""
    got = await limiter.reserve(applied, estimate)
    if isinstance(got, RateDenial):
        return False
    await limiter.settle(got, applied, tokens)
    return True


async def test_request_over_the_limit_is_refused_and_the_window_resets() -> None:
    clock = Clock()
    limiter = TokenRateLimiter(MemoryCounterStore(clock))
    p = policy()
    applied = limiter.applicable(p, "team/route", activation("alice"))
    assert [a.counter_values for a in applied] == [("alice",)]
    assert await served(limiter, applied, 60)
    assert await served(limiter, applied, 60)  # 60 < 100: there was room, the crossing request is served
    denial = await limiter.check(applied)
    assert denial is not None and (denial.limit, denial.window) == (100, "1m") and denial.retry_after == 60
    assert not await served(limiter, applied, 1)
    bob = limiter.applicable(p, "team/route", activation("bob"))
    assert await limiter.check(bob) is None  # independent counter per user
    clock.now += 61
    assert await limiter.check(applied) is None  # minute window reset
    assert await served(limiter, applied, 100)
    clock.now += 61
    assert await served(limiter, applied, 100)  # hour: 320 used of 250
    clock.now += 61
    denial = await limiter.check(applied)
    assert denial is not None and denial.window == "1h"
    states = {s.window: s for s in await limiter.states(applied)}
    assert states["1h"].used == 320 and states["1h"].remaining == 0 and states["1h"].over
    assert states["1m"].used == 0 and states["1m"].resets_in is None


async def test_in_flight_reservations_are_seen_by_other_requests() -> None:
    limiter = TokenRateLimiter(MemoryCounterStore(Clock()))
    applied = limiter.applicable(policy((RateTier(100, "1m"),)), "r", activation("alice"))
    held = [await limiter.reserve(applied, 30) for _ in range(4)]
    assert [isinstance(h, Reservation) for h in held] == [True, True, True, True]  # 0, 30, 60, 90 <= 100
    assert isinstance(await limiter.reserve(applied, 30), RateDenial)  # 120 reserved: no room
    state = (await limiter.states(applied))[0]
    assert (state.used, state.reserved) == (0, 120)
    for h in held:
        assert isinstance(h, Reservation)
        await limiter.settle(h, applied, 10)  # they used less than reserved: the room comes back
    state = (await limiter.states(applied))[0]
    assert (state.used, state.reserved) == (40, 0)
    assert isinstance(await limiter.reserve(applied, 30), Reservation)


async def test_limits_apply_only_to_their_subscription_and_not_to_model_listing() -> None:
    limiter = TokenRateLimiter(MemoryCounterStore(Clock()))
    p = policy()
    assert limiter.applicable(p, "r", activation("alice", key="other/sub@team/m")) == []
    assert limiter.applicable(p, "r", activation("alice", path="/team/m/v1/models")) == []
    assert limiter.applicable(p, "r", activation("alice", path="/team/m/v1/chat/completions?x=/v1/models")) != []
    assert limiter.applicable(p, "r", {"request": {"path": "/x", "url_path": "/x"}, "auth": {}}) == []


async def test_unlimited_subscription_applies_but_never_refuses() -> None:
    limiter = TokenRateLimiter(MemoryCounterStore(Clock()))
    p = policy((), unlimited=True)
    applied = limiter.applicable(p, "r", activation("alice"))
    assert len(applied) == 1 and applied[0].limit.rates == ()
    assert await served(limiter, applied, 10**9)
    assert await limiter.check(applied) is None


async def test_sub_second_windows_are_not_enforced_like_kuadrant_truncation() -> None:
    obj = {"metadata": {"name": "p", "namespace": "n"},
           "spec": {"limits": {"l": {"rates": [{"limit": 1, "window": "500ms"}],
                                     "counters": [{"expression": "auth.identity.userid"}]}}}}
    p = compile_token_rate_limit_policy(obj)
    limiter = TokenRateLimiter(MemoryCounterStore(Clock()))
    applied = limiter.applicable(p, "r", activation("a"))
    assert await served(limiter, applied, 50)
    assert await limiter.check(applied) is None


async def test_the_reservation_is_the_requests_own_bound_at_most_the_smallest_limit() -> None:
    limiter = TokenRateLimiter(MemoryCounterStore(Clock()))
    applied = limiter.applicable(policy((RateTier(10_000, "1m"), RateTier(50_000, "1h"))), "r", activation("alice"))
    assert limiter.estimate(applied, 4_120) == 4_120
    assert limiter.estimate(applied, 90_000) == 10_001  # a request larger than the limit still fits an empty window
    assert limiter.estimate(applied, 10_000) == 10_000
    assert limiter.estimate(applied, 0) == 1
    for _ in range(30):  # small requests teach it nothing: no caller can lower what the next ones reserve
        assert await served(limiter, applied, 15, limiter.estimate(applied, 20))
    assert limiter.estimate(applied, 4_120) == 4_120


@pytest.mark.parametrize(("body", "bound"), [
    ({"max_tokens": 4000}, 4000), ({"max_tokens": 4000, "n": 3}, 12_000), ({}, DEFAULT_COMPLETION_CEILING),
    ({"n": 2}, 2 * DEFAULT_COMPLETION_CEILING), ({"max_completion_tokens": "30000"}, 30_000),
])
async def test_a_burst_of_long_requests_cannot_pass_a_limit(body: dict[str, Any], bound: int) -> None:
    """The review's case: a 1,000-token limit, 30 small requests first (the old learned average fell to ~5),
    then 500 concurrent requests that each may generate `bound` tokens: while they run, what is reserved never
    lets the window be overrun by more than the one request an empty window admits."""
    limiter = TokenRateLimiter(MemoryCounterStore(Clock()))
    applied = limiter.applicable(policy((RateTier(1_000, "1h"),)), "r", activation("alice"))
    for _ in range(30):
        small = prepare_body(b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}')
        assert await served(limiter, applied, 5, limiter.estimate(applied, request_bound(small)))
    prepared = prepare_body(json.dumps({"messages": [{"role": "user", "content": "hi"}], **body}).encode())
    assert request_bound(prepared) >= bound
    held = [await limiter.reserve(applied, limiter.estimate(applied, request_bound(prepared))) for _ in range(500)]
    admitted = [h for h in held if isinstance(h, Reservation)]
    assert len(admitted) == 1
    for h in admitted:
        await limiter.settle(h, applied, request_bound(prepared))
    assert (await limiter.states(applied))[0].used <= 150 + request_bound(prepared)


@pytest.fixture
async def redis_url(redis_server: RedisServer) -> AsyncIterator[str]:
    store = RedisCounterStore(redis_server.url)
    await store.clear()
    await store.aclose()
    yield redis_server.url


async def test_redis_counters_behave_like_the_in_process_ones(redis_url: str) -> None:
    limiter = TokenRateLimiter(RedisCounterStore(redis_url))
    try:
        applied = limiter.applicable(policy((RateTier(100, "1m"),)), "r", activation("alice"))
        held = [await limiter.reserve(applied, 30) for _ in range(4)]
        assert all(isinstance(h, Reservation) for h in held)
        denial = await limiter.reserve(applied, 30)
        assert isinstance(denial, RateDenial) and denial.limit == 100
        for h in held:
            assert isinstance(h, Reservation)
            await limiter.settle(h, applied, 10)
        state = (await limiter.states(applied))[0]
        assert (state.used, state.reserved) == (40, 0) and 0 < (state.resets_in or 0) <= 60
    finally:
        await limiter.store.aclose()


async def test_a_reservation_that_outlived_its_key_leaves_no_debt_in_redis(redis_url: str) -> None:
    """A request longer than its window plus the grace settles after its reservation key expired: the settle
    must not leave a negative reservation without TTL, which would hide later reservations (every request of a
    burst admitted)."""
    limiter = TokenRateLimiter(RedisCounterStore(redis_url))
    try:
        applied = limiter.applicable(policy((RateTier(1_000, "1m"),)), "r", activation("alice"))
        long_one = await limiter.reserve(applied, 50_000)
        assert isinstance(long_one, Reservation)
        store = limiter.store
        assert isinstance(store, RedisCounterStore)
        reserved_key = _redis_key("maasctl:rl:", long_one.slots[0].key) + ":r"
        await store._redis.delete(reserved_key)  # as if it expired while the request ran
        await limiter.settle(long_one, applied, 10)
        assert await store._redis.get(reserved_key) is None
        burst = [await limiter.reserve(applied, 100) for _ in range(200)]  # in flight together
        assert sum(isinstance(b, Reservation) for b in burst) == 10  # 10 + 10 x 100 > 1,000: the 11th is refused
    finally:
        await limiter.store.aclose()


@pytest.mark.parametrize("concurrency", [10, 50, 100])
async def test_two_replicas_sharing_redis_overshoot_by_at_most_one_request(redis_url: str, concurrency: int) -> None:
    """The concurrency hole: a burst against a 100-token window, served by two gateway replicas at once."""
    replicas = [TokenRateLimiter(RedisCounterStore(redis_url)) for _ in range(2)]
    per_request = 15
    try:
        applied = [r.applicable(policy((RateTier(100, "1m"),)), "r", activation("alice")) for r in replicas]
        async def one(i: int) -> bool:
            replica, a = replicas[i % 2], applied[i % 2]
            got = await replica.reserve(a, replica.estimate(a, per_request))  # a request that states its bound
            if isinstance(got, RateDenial):
                return False
            await asyncio.sleep(random.uniform(0.001, 0.02))  # the model answers meanwhile
            await replica.settle(got, a, per_request)
            return True

        results = await asyncio.gather(*(one(i) for i in range(concurrency)))
        used = (await replicas[0].states(applied[0]))[0].used
        assert used == per_request * sum(results)
        assert used <= 100 + per_request, f"{concurrency} concurrent requests charged {used} of 100"
        assert any(not ok for ok in results)  # the burst was refused once the window was full
    finally:
        for r in replicas:
            await r.store.aclose()

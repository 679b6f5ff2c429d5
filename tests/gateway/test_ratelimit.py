"""Token rate limits: fixed windows, check-before/charge-after, every rate, per-counter isolation."""

from __future__ import annotations

from typing import Any

from maasctl.builders.refs import ObjectRef
from maasctl.builders.trlp import RateTier, SubscriptionLimits, TokenRateLimitInput, build_token_rate_limit_policy
from maasctl.gateway.ratelimit import CounterStore, TokenRateLimiter, compile_token_rate_limit_policy

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


def test_request_over_the_limit_is_refused_and_the_window_resets() -> None:
    clock = Clock()
    limiter = TokenRateLimiter(CounterStore(clock))
    p = policy()
    applied = limiter.applicable(p, "team/route", activation("alice"))
    assert [a.counter_values for a in applied] == [("alice",)]
    assert limiter.check(applied) is None
    limiter.report(applied, 60)
    assert limiter.check(applied) is None  # 60 <= 100: the crossing request is still served
    limiter.report(applied, 60)
    denial = limiter.check(applied)
    assert denial is not None and denial.window == "1m" and denial.used == 120 and 1 <= denial.retry_after <= 60
    bob = limiter.applicable(p, "team/route", activation("bob"))
    assert limiter.check(bob) is None  # independent counter per user
    clock.now += 61
    assert limiter.check(applied) is None  # minute window reset
    limiter.report(applied, 100)
    limiter.report(applied, 100)
    # minute: 200 > 100; hour: 320 > 250 - both windows over, the first reported
    assert limiter.check(applied) is not None
    clock.now += 61
    denial = limiter.check(applied)
    assert denial is not None and denial.window == "1h"  # the hour tier is enforced too
    states = {s.window: s for s in limiter.states(applied)}
    assert states["1h"].used == 320 and states["1h"].remaining == 0 and states["1h"].over
    assert states["1m"].used == 0 and states["1m"].resets_in is None


def test_limits_apply_only_to_their_subscription_and_not_to_model_listing() -> None:
    limiter = TokenRateLimiter(CounterStore(Clock()))
    p = policy()
    assert limiter.applicable(p, "r", activation("alice", key="other/sub@team/m")) == []
    assert limiter.applicable(p, "r", activation("alice", path="/team/m/v1/models")) == []
    assert limiter.applicable(p, "r", {"request": {"path": "/x"}, "auth": {}}) == []  # no identity: no counter


def test_unlimited_subscription_applies_but_never_refuses() -> None:
    limiter = TokenRateLimiter(CounterStore(Clock()))
    p = policy((), unlimited=True)
    applied = limiter.applicable(p, "r", activation("alice"))
    assert len(applied) == 1 and applied[0].limit.rates == ()
    limiter.report(applied, 10**9)
    assert limiter.check(applied) is None


def test_sub_second_windows_are_not_enforced_like_kuadrant_truncation() -> None:
    obj = {"metadata": {"name": "p", "namespace": "n"},
           "spec": {"limits": {"l": {"rates": [{"limit": 1, "window": "500ms"}],
                                     "counters": [{"expression": "auth.identity.userid"}]}}}}
    p = compile_token_rate_limit_policy(obj)
    limiter = TokenRateLimiter(CounterStore(Clock()))
    applied = limiter.applicable(p, "r", activation("a"))
    limiter.report(applied, 50)
    assert limiter.check(applied) is None
